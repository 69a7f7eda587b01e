use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::{ProxyError, ServerTls};

/// How forwarded bytes are moved between client and server sockets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ForwardMode {
    /// `splice(2)` through a kernel pipe per direction: the bytes never enter user space.
    #[default]
    Splice,
    /// `tokio::io::copy_bidirectional` with 64 KiB buffers (for comparison, or where splice is unavailable).
    Copy,
}

/// Where a backend mariadbd takes connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    Tcp(SocketAddr),
    /// Its unix socket. A paxsql node reaches its own mariadbd this way: a replica's mariadbd refuses every TCP
    /// login (`require_secure_transport`), so that no account, however privileged, writes into it from the network.
    Unix(PathBuf),
    /// Another member's mariadbd, through that member's relay on its peer port `addr` (see [`crate::relay`]):
    /// TLS and member credentials on the wire, the term checked by the master's own node. Needs
    /// [`ProxyConfig::relay`].
    Relay {
        node_id: u64,
        addr: SocketAddr,
    },
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Tcp(addr) => write!(f, "{addr}"),
            Backend::Unix(path) => write!(f, "{}", path.display()),
            Backend::Relay { node_id, addr } => write!(f, "node {node_id} (relay at {addr})"),
        }
    }
}

/// Proxy settings. The node fills it from its own config file.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// Read-write port: forwards to the current master's mariadbd (see [`crate::Route`]). `None`: no RW port.
    pub rw_listen: Option<SocketAddr>,
    /// Read-only port: forwards to `local_backend`. `None`: no RO port.
    pub ro_listen: Option<SocketAddr>,
    /// This node's mariadbd (a read-only replica unless this node is the master).
    pub local_backend: Backend,
    /// How long a new RW connection waits for a master when none is known, or while the known master refuses
    /// connections (its mariadbd died and its lease has not run out yet), before it gets an ERR packet.
    pub hold_during_election: Duration,
    /// Bound on connecting to a backend and sending it the PROXY header.
    pub connect_timeout: Duration,
    /// Send a PROXY protocol v1 header to the backend first. The backend must list this node's address in
    /// `proxy_protocol_networks`, or it rejects the connection.
    pub proxy_protocol: bool,
    /// Connections forwarded or waiting at once, both ports together; more get ERR 1040 at once.
    pub max_connections: usize,
    /// How bytes are forwarded.
    pub forward_mode: ForwardMode,
    /// The certificate both ports offer to clients; `None`: no TLS, and a client asking for it is refused.
    pub tls: Option<ServerTls>,
    /// Refuse clients that do not ask for TLS (needs `tls`).
    pub tls_required: bool,
    /// How [`Backend::Relay`] routes are reached: this node's member credentials. `None`: such a route is
    /// unreachable (the client is held, then refused).
    pub relay: Option<std::sync::Arc<paxsql_peer_transport::RelayDialer>>,
    /// User names of the accounts the node runs its mariadbd with (admin, replication): statements through
    /// either port that would change them, or write the privilege tables, are refused
    /// ([`crate::statement::judge`]). Empty: no account is protected.
    pub node_accounts: std::collections::BTreeSet<String>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            rw_listen: None,
            ro_listen: None,
            local_backend: Backend::Tcp(SocketAddr::from(([127, 0, 0, 1], 3306))),
            hold_during_election: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            proxy_protocol: false,
            max_connections: 4096,
            forward_mode: ForwardMode::Splice,
            tls: None,
            tls_required: false,
            relay: None,
            node_accounts: Default::default(),
        }
    }
}

impl ProxyConfig {
    /// Checks what would make the proxy useless or hang.
    pub fn validate(&self) -> Result<(), ProxyError> {
        let invalid = |s: &str| Err(ProxyError::InvalidConfig(s.to_string()));
        if self.rw_listen.is_none() && self.ro_listen.is_none() {
            return invalid("neither rw_listen nor ro_listen is set");
        }
        if self.connect_timeout.is_zero() {
            return invalid("connect_timeout must be > 0");
        }
        if self.max_connections == 0 || self.max_connections > u32::MAX as usize {
            return invalid("max_connections must be in 1..=4294967295");
        }
        if self.tls_required && self.tls.is_none() {
            return invalid("tls_required is set but no certificate is configured");
        }
        if self.rw_listen.is_some() && self.rw_listen == self.ro_listen && self.rw_listen.is_some_and(|a| a.port() != 0)
        {
            return invalid("rw_listen and ro_listen are the same address");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_catches_useless_configs() {
        let rw = Some("127.0.0.1:31000".parse().unwrap());
        assert!(ProxyConfig::default().validate().is_err());
        assert!(ProxyConfig { rw_listen: rw, ..Default::default() }.validate().is_ok());
        assert!(ProxyConfig { rw_listen: rw, ro_listen: rw, ..Default::default() }.validate().is_err());
        assert!(ProxyConfig { rw_listen: rw, max_connections: 0, ..Default::default() }.validate().is_err());
        assert!(ProxyConfig { rw_listen: rw, connect_timeout: Duration::ZERO, ..Default::default() }
            .validate()
            .is_err());
    }
}
