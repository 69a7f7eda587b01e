//! The relay: how a member's proxy reaches the master's mariadbd through the master's peer port.
//!
//! A client's read-write connection that arrives at a node which is not the master must reach the master's
//! mariadbd. Dialling that mariadbd directly would put logins, queries and results on the network in plaintext
//! (the proxy ends the client's TLS, docs/ARCHITECTURE.md §7) and would need a mariadbd listening beyond loopback.
//! Instead the proxy opens a relay to the master's node: the same peer port, the same credentials (mutual TLS with
//! member certificates, cluster id and secret) as the Paxos traffic. The TLS application protocol
//! [`RELAY_ALPN`] — or, without TLS, the 8-byte magic `PXRELAY1` where HTTP/2 sends its preface — tells a relay
//! from gRPC and from links.
//!
//! The dialler sends the magic and then one frame (u32 big-endian length, protobuf `RelayOpen`): the cluster
//! credentials, the master term it routes to, the client's address. The master's node answers with one frame
//! (`OpenReply`): accepted only if its mariadbd serves that very term — the master's own node is never stale
//! about that, the dialler's route can be — and from then on the stream is the MySQL connection, starting with
//! mariadbd's greeting.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use paxsql_paxos::NodeId;
use prost::Message as _;

use crate::auth::ClusterAuth;
use crate::identity::PeerIdentity;
use crate::stream::PortStream;
use crate::{pb, TransportConfig, TransportError};

pub use crate::tls::RELAY_ALPN;

/// What a relay sends first. Its length is that of the HTTP/2 preface's first word and space (`PRI * HT`), which is
/// what a plaintext peer port reads before it decides.
pub(crate) const MAGIC: [u8; 8] = *b"PXRELAY1";
/// Bound on a relay's opening: credentials and two addresses.
const FRAME_MAX: usize = 4096;

/// What a dialling proxy asks of the master's node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayRequest {
    /// The term the dialler's route names; the relay is accepted only while the master's mariadbd serves it.
    pub master_version: u64,
    /// The application client's address, for the PROXY header mariadbd receives.
    pub client: SocketAddr,
    /// The proxy port the client reached (the PROXY header's destination).
    pub proxy: SocketAddr,
}

/// Why a relay could not be opened. Carries no secret.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("relay to node {node} at {addr}: {source}")]
    Io {
        node: NodeId,
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("relay to node {node} at {addr}: timed out after {ms} ms")]
    TimedOut { node: NodeId, addr: SocketAddr, ms: u128 },
    /// The master's node answered and said no (it does not serve the term, its mariadbd is down, …).
    #[error("node {node} refused the relay: {detail}")]
    Refused { node: NodeId, detail: String },
}

/// Opens relays to other members' peer ports with this node's credentials.
pub struct RelayDialer {
    auth: ClusterAuth,
    tls: Option<tokio_rustls::TlsConnector>,
    local_address: Option<std::net::IpAddr>,
}

impl std::fmt::Debug for RelayDialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayDialer").field("tls", &self.tls.is_some()).finish_non_exhaustive()
    }
}

impl RelayDialer {
    /// Reads the TLS material of `cfg` (the member certificate presented as client certificate).
    pub fn new(cfg: &TransportConfig) -> Result<RelayDialer, TransportError> {
        cfg.validate()?;
        let auth = ClusterAuth::new(&cfg.cluster_id, &cfg.cluster_secret)?;
        let tls = crate::tls::connector(cfg, RELAY_ALPN)?;
        Ok(RelayDialer { auth, tls, local_address: cfg.local_address })
    }

    /// Opens a relay to member `node` at its peer address `addr` and asks for `request`; returns the stream once
    /// the master's node accepted, with mariadbd's greeting the next thing to read. Bounded by `timeout` as a whole.
    pub async fn dial(
        &self,
        node: NodeId,
        addr: SocketAddr,
        request: &RelayRequest,
        timeout: Duration,
    ) -> Result<PortStream, RelayError> {
        match tokio::time::timeout(timeout, self.dial_within(node, addr, request)).await {
            Ok(r) => r,
            Err(_) => Err(RelayError::TimedOut { node, addr, ms: timeout.as_millis() }),
        }
    }

    async fn dial_within(
        &self,
        node: NodeId,
        addr: SocketAddr,
        request: &RelayRequest,
    ) -> Result<PortStream, RelayError> {
        let io_err = |source| RelayError::Io { node, addr, source };
        let mut stream =
            crate::stream::dial(self.tls.as_ref(), self.local_address, node, addr).await.map_err(io_err)?;
        let open = pb::RelayOpen {
            cluster_id: self.auth.cluster_id().to_string(),
            cluster_secret: self.auth.secret().to_string(),
            master_version: request.master_version,
            client_addr: request.client.to_string(),
            proxy_addr: request.proxy.to_string(),
        };
        if let Err(detail) = crate::stream::open(&mut stream, &MAGIC, &open).await.map_err(io_err)? {
            return Err(RelayError::Refused { node, detail });
        }
        Ok(stream)
    }
}

/// A relay the peer port accepted: credentials checked, request read. The receiver answers it with
/// [`IncomingRelay::accept`] or [`IncomingRelay::refuse`].
#[derive(Debug)]
pub struct IncomingRelay {
    pub request: RelayRequest,
    /// The member the dialler's certificate names (TLS); `None` on a plaintext peer port.
    pub member: Option<NodeId>,
    pub remote: SocketAddr,
    stream: PortStream,
}

impl IncomingRelay {
    pub(crate) fn new(request: RelayRequest, member: Option<NodeId>, remote: SocketAddr, stream: PortStream) -> Self {
        IncomingRelay { request, member, remote, stream }
    }

    /// Tells the dialler yes; the returned stream is then the client's MySQL connection.
    pub async fn accept(mut self) -> io::Result<PortStream> {
        crate::stream::reply(&mut self.stream, true, "").await?;
        Ok(self.stream)
    }

    /// Tells the dialler no and why, and closes.
    pub async fn refuse(self, detail: &str) {
        crate::stream::refuse(self.stream, detail).await;
    }
}

/// Reads and checks what a dialler sends first, on a connection the peer port classified as a relay (after the TLS
/// handshake, or on a plaintext one after its magic). `identity`: what the client certificate names (TLS) — only a
/// member may relay. Returns the request and the certified member; errors are for the log and the refusal, and
/// carry no secret.
pub(crate) async fn read_request(
    stream: &mut PortStream,
    auth: &ClusterAuth,
    identity: Option<PeerIdentity>,
    magic_read: bool,
) -> Result<(RelayRequest, Option<NodeId>), String> {
    let (frame, member) = crate::stream::read_opening(stream, "relay", &MAGIC, magic_read, identity, FRAME_MAX).await?;
    let open = pb::RelayOpen::decode(frame).map_err(|e| format!("undecodable relay request: {e}"))?;
    crate::stream::check_credentials(auth, &open.cluster_id, &open.cluster_secret)?;
    let parse = |what: &str, s: &str| s.parse::<SocketAddr>().map_err(|_| format!("relay request: bad {what} {s:?}"));
    let request = RelayRequest {
        master_version: open.master_version,
        client: parse("client address", &open.client_addr)?,
        proxy: parse("proxy address", &open.proxy_addr)?,
    };
    Ok((request, member))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_magic_is_as_long_as_what_a_plaintext_port_reads_first() {
        assert_eq!(MAGIC.len(), b"PRI * HT".len());
        assert_ne!(&MAGIC, b"PRI * HT");
    }
}
