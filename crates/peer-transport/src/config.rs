use std::path::PathBuf;
use std::time::Duration;

use paxsql_paxos::NodeId;

use crate::auth::{validate_cluster_id, ClusterSecret};
use crate::TransportError;

/// Settings shared by the [`PeerServer`](crate::PeerServer) and the [`PeerClient`](crate::PeerClient) of one node.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransportConfig {
    /// This node's id; non-zero. Incoming messages addressed to another node are dropped.
    pub node_id: NodeId,
    /// Name of the cluster; every member uses the same one. ASCII letters, digits and `-_.:`.
    pub cluster_id: String,
    /// Shared secret every member presents on every call; at least 16 visible ASCII bytes. Never logged.
    pub cluster_secret: ClusterSecret,
    /// Mutual TLS for both directions. Absent: plaintext, where the secret crosses the network in clear.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Decoded incoming messages buffered for the node; when full, new ones are dropped and counted.
    #[serde(default = "defaults::inbox_capacity")]
    pub inbox_capacity: usize,
    /// Outgoing messages buffered per peer; when full, the oldest is dropped and counted.
    #[serde(default = "defaults::send_queue_capacity")]
    pub send_queue_capacity: usize,
    /// Largest encoded message accepted or sent (catch-up batches are the big ones).
    #[serde(default = "defaults::max_message_bytes")]
    pub max_message_bytes: usize,
    /// First reconnect delay after a failed connection or stream; doubles up to `reconnect_backoff_max_ms`.
    #[serde(default = "defaults::reconnect_backoff_min_ms")]
    pub reconnect_backoff_min_ms: u64,
    /// Longest reconnect delay.
    #[serde(default = "defaults::reconnect_backoff_max_ms")]
    pub reconnect_backoff_max_ms: u64,
    /// TCP (and TLS) connect timeout.
    #[serde(default = "defaults::connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Keepalive interval: an idle link sends an empty frame this often; data a peer leaves unacknowledged for two
    /// intervals ends the link (the sender reconnects), a link silent for three is dropped by its receiver; also the
    /// HTTP/2 keepalive of admin calls.
    #[serde(default = "defaults::keepalive_ms")]
    pub keepalive_ms: u64,
    /// Source address of outgoing peer connections (normally the address the node listens on), so that a
    /// network filter can tell the nodes apart; `None` lets the kernel choose.
    #[serde(default)]
    pub local_address: Option<std::net::IpAddr>,
}

/// Mutual TLS: each node presents `cert`/`key` and accepts only peers whose certificate chains to
/// `ca`; a member's certificate must name it ([`member_name`](crate::identity::member_name)).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain of this node (used as server and as client certificate).
    pub cert: PathBuf,
    /// PEM private key for `cert`.
    pub key: PathBuf,
    /// PEM CA certificate(s) that sign every member's certificate.
    pub ca: PathBuf,
}

mod defaults {
    pub fn inbox_capacity() -> usize {
        4096
    }
    pub fn send_queue_capacity() -> usize {
        4096
    }
    pub fn max_message_bytes() -> usize {
        64 << 20
    }
    pub fn reconnect_backoff_min_ms() -> u64 {
        50
    }
    pub fn reconnect_backoff_max_ms() -> u64 {
        5_000
    }
    pub fn connect_timeout_ms() -> u64 {
        2_000
    }
    pub fn keepalive_ms() -> u64 {
        2_000
    }
}

impl TransportConfig {
    /// A plaintext configuration with default limits.
    pub fn new(node_id: NodeId, cluster_id: impl Into<String>, cluster_secret: ClusterSecret) -> Self {
        TransportConfig {
            node_id,
            cluster_id: cluster_id.into(),
            cluster_secret,
            tls: None,
            inbox_capacity: defaults::inbox_capacity(),
            send_queue_capacity: defaults::send_queue_capacity(),
            max_message_bytes: defaults::max_message_bytes(),
            reconnect_backoff_min_ms: defaults::reconnect_backoff_min_ms(),
            reconnect_backoff_max_ms: defaults::reconnect_backoff_max_ms(),
            connect_timeout_ms: defaults::connect_timeout_ms(),
            keepalive_ms: defaults::keepalive_ms(),
            local_address: None,
        }
    }

    /// Checks every setting, and that the TLS files exist and parse as far as can be told without a handshake.
    pub fn validate(&self) -> Result<(), TransportError> {
        let bad = |field, reason: &str| Err(TransportError::InvalidConfig { field, reason: reason.to_string() });
        if self.node_id == 0 {
            return bad("node_id", "0 is reserved for \"nobody\"");
        }
        validate_cluster_id(&self.cluster_id)?;
        self.cluster_secret.validate()?;
        if self.inbox_capacity == 0 {
            return bad("inbox_capacity", "must be at least 1");
        }
        if self.send_queue_capacity == 0 {
            return bad("send_queue_capacity", "must be at least 1");
        }
        if self.max_message_bytes < 1024 {
            return bad("max_message_bytes", "must be at least 1024");
        }
        if self.reconnect_backoff_min_ms == 0 || self.reconnect_backoff_min_ms > self.reconnect_backoff_max_ms {
            return bad("reconnect_backoff_min_ms", "must be non-zero and at most reconnect_backoff_max_ms");
        }
        if self.connect_timeout_ms == 0 {
            return bad("connect_timeout_ms", "must be non-zero");
        }
        if self.keepalive_ms == 0 {
            return bad("keepalive_ms", "must be non-zero");
        }
        if let Some(tls) = &self.tls {
            let own = tls.load()?;
            // A node holding another member's certificate would be refused by every peer: say so at start.
            let named = crate::identity::identify_pem(&own.cert);
            if named != crate::identity::PeerIdentity::Member(self.node_id) {
                return Err(TransportError::InvalidConfig {
                    field: "tls.cert",
                    reason: format!(
                        "{} does not certify this node: it must name {} (and no other member) in its subject \
                         alternative names; found {named:?}",
                        tls.cert.display(),
                        crate::identity::member_name(self.node_id)
                    ),
                });
            }
        }
        Ok(())
    }

    pub(crate) fn backoff_min(&self) -> Duration {
        Duration::from_millis(self.reconnect_backoff_min_ms)
    }
    pub(crate) fn backoff_max(&self) -> Duration {
        Duration::from_millis(self.reconnect_backoff_max_ms)
    }
}

/// PEM material read from the files of a [`TlsConfig`].
pub(crate) struct TlsMaterial {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    pub ca: Vec<u8>,
}

impl TlsConfig {
    pub(crate) fn load(&self) -> Result<TlsMaterial, TransportError> {
        let read = |what, path: &PathBuf| {
            let bytes =
                std::fs::read(path).map_err(|source| TransportError::TlsFile { what, path: path.clone(), source })?;
            if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
                return Err(TransportError::TlsFile {
                    what,
                    path: path.clone(),
                    source: std::io::Error::new(std::io::ErrorKind::InvalidData, "no PEM block in file"),
                });
            }
            Ok(bytes)
        };
        Ok(TlsMaterial {
            cert: read("certificate", &self.cert)?,
            key: read("private key", &self.key)?,
            ca: read("CA", &self.ca)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_catches_bad_settings() {
        let ok = TransportConfig::new(1, "c1", ClusterSecret::new("0123456789abcdef"));
        ok.validate().unwrap();
        let mut c = ok.clone();
        c.node_id = 0;
        assert!(c.validate().is_err());
        let mut c = ok.clone();
        c.send_queue_capacity = 0;
        assert!(c.validate().is_err());
        let mut c = ok.clone();
        c.reconnect_backoff_min_ms = 10_000;
        assert!(c.validate().is_err());
        let mut c = ok.clone();
        c.tls = Some(TlsConfig {
            cert: "/nonexistent/cert.pem".into(),
            key: "/nonexistent/key.pem".into(),
            ca: "/nonexistent/ca.pem".into(),
        });
        let err = c.validate().unwrap_err();
        assert!(matches!(err, TransportError::TlsFile { what: "certificate", .. }), "{err}");
        assert!(!format!("{c:?}").contains("0123456789abcdef"));
    }
}
