use std::net::SocketAddr;

/// Errors of the proxy crate.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The configuration cannot work; the text says which field and why.
    #[error("invalid proxy config: {0}")]
    InvalidConfig(String),
    /// A listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// A backend mariadbd did not accept the connection (or the PROXY header) within `connect_timeout`.
    #[error("cannot reach mariadbd at {backend} within {timeout_ms} ms: {detail}")]
    BackendUnreachable { backend: String, timeout_ms: u128, detail: String },
    /// Bytes that should be a PROXY v1 header are not one.
    #[error("malformed PROXY v1 header at byte {offset}: {what}")]
    MalformedProxyHeader { what: &'static str, offset: usize },
}
