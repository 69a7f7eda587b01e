use std::net::SocketAddr;
use std::path::PathBuf;

use paxsql_paxos::NodeId;

/// Everything that can go wrong in the peer transport: decoding what a peer sent, loading configuration, binding.
///
/// Nothing here ever contains the cluster secret.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The bytes are not a protobuf message of the expected type.
    #[error("protobuf decode failed: {0}")]
    Protobuf(#[from] prost::DecodeError),
    /// A required sub-message or oneof case is absent.
    #[error("required field {what} is missing")]
    MissingField { what: &'static str },
    /// A Paxos value's bytes are not a valid `Value::encode()` output.
    #[error("{what} is not a valid Paxos value: {source}")]
    BadValue {
        what: &'static str,
        #[source]
        source: paxsql_paxos::DecodeError,
    },
    /// The envelope's `from` and the message's sender differ.
    #[error("envelope is from node {envelope} but carries a message from node {message}")]
    SenderMismatch { envelope: NodeId, message: NodeId },
    /// The envelope belongs to another cluster.
    #[error("envelope is for cluster {got:?}, this node is in cluster {expected:?}")]
    ClusterMismatch { expected: String, got: String },

    /// Configuration that cannot work; `field` names the offending setting.
    #[error("invalid transport configuration: {field}: {reason}")]
    InvalidConfig { field: &'static str, reason: String },
    /// A TLS certificate, key or CA file could not be read.
    #[error("cannot read TLS {what} file {}: {source}", path.display())]
    TlsFile {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A peer endpoint is not a usable `host:port` or URI.
    #[error("invalid endpoint {endpoint:?} for node {node}: {reason}")]
    InvalidEndpoint { node: NodeId, endpoint: String, reason: String },
    /// The server could not bind its configured address.
    #[error("cannot bind peer server to {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// tonic refused the transport setup (for example TLS material it cannot parse).
    #[error("transport setup failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}
