//! The crate's one error type.

use std::net::SocketAddr;

use thiserror::Error;

/// What can go wrong in the admin SQL port or the metrics endpoint. Errors of one client connection end that
/// connection only, never the server.
#[derive(Debug, Error)]
pub enum AdminError {
    /// A configuration value is unusable.
    #[error("invalid admin configuration: {field}: {reason}")]
    InvalidConfig { field: &'static str, reason: String },

    /// Binding a listening socket failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },

    /// A client packet is not valid (framing, size limit, or login fields).
    #[error("bad client packet: {0}")]
    BadPacket(#[from] paxsql_mysql_wire::WireError),

    /// The client did not finish logging in within the time allowed.
    #[error("login not completed within {seconds} s")]
    LoginTimeout { seconds: u64 },

    /// The client asked for TLS, which the admin port does not offer.
    #[error("client requested TLS, which the admin port does not offer")]
    TlsRequested,

    /// The client left in the middle of the login (after the TLS handshake, before its login packet).
    #[error("admin session ended during login")]
    SessionGone,

    /// Socket IO failed (the peer vanished, reset, ...).
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}
