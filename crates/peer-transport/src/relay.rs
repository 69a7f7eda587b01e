//! The relay: how a member's proxy reaches the master's mariadbd through the master's peer port.
//!
//! A client's read-write connection that arrives at a node which is not the master must reach the master's
//! mariadbd. Dialling that mariadbd directly would put logins, queries and results on the network in plaintext
//! (the proxy ends the client's TLS, docs/ARCHITECTURE.md §7) and would need a mariadbd listening beyond loopback.
//! Instead the proxy opens a relay to the master's node: the same peer port, the same credentials (mutual TLS with
//! member certificates, cluster id and secret) as the Paxos traffic. The TLS application protocol
//! [`RELAY_ALPN`] — or, without TLS, the 8-byte magic `PXRELAY1` where HTTP/2 sends its preface — tells a relay
//! from gRPC.
//!
//! The dialler sends the magic and then one frame (u32 big-endian length, protobuf `RelayOpen`): the cluster
//! credentials, the master term it routes to, the client's address. The master's node answers with one frame
//! (`RelayReply`): accepted only if its mariadbd serves that very term — the master's own node is never stale
//! about that, the dialler's route can be — and from then on the stream is the MySQL connection, starting with
//! mariadbd's greeting.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use paxsql_paxos::NodeId;
use prost::Message as _;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::TcpStream;

use crate::auth::ClusterAuth;
use crate::identity::PeerIdentity;
use crate::{pb, TransportConfig, TransportError};

pub use crate::tls::RELAY_ALPN;

/// What a relay sends first. Its length is that of the HTTP/2 preface's first word and space (`PRI * HT`), which is
/// what a plaintext peer port reads before it decides.
pub(crate) const MAGIC: [u8; 8] = *b"PXRELAY1";
/// Bound on either frame: credentials and two addresses.
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
    #[error("relay to node {node} at {addr}: {detail}")]
    Protocol { node: NodeId, addr: SocketAddr, detail: String },
}

/// A relay connection, from either end: plaintext, or TLS as the dialler or as the peer port.
pub enum RelayStream {
    Plain(TcpStream),
    Dialled(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    Accepted(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl RelayStream {
    fn tcp(&self) -> &TcpStream {
        match self {
            RelayStream::Plain(s) => s,
            RelayStream::Dialled(s) => s.get_ref().0,
            RelayStream::Accepted(s) => s.get_ref().0,
        }
    }

    /// Whether the bytes are encrypted on the wire.
    pub fn is_tls(&self) -> bool {
        !matches!(self, RelayStream::Plain(_))
    }

    /// Closes with a reset: what is still queued for the other end is dropped, not delivered. A connection cut
    /// because its master lost the term must not carry a statement sent a moment earlier to that master.
    pub fn abort(self) {
        // tokio deprecates SO_LINGER because a non-zero linger blocks in close(); a zero linger never blocks.
        #[allow(deprecated)]
        let _ = self.tcp().set_linger(Some(Duration::ZERO));
        drop(self);
    }
}

impl std::fmt::Debug for RelayStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self {
            RelayStream::Plain(_) => "plain",
            RelayStream::Dialled(_) => "tls-dialled",
            RelayStream::Accepted(_) => "tls-accepted",
        };
        f.debug_struct("RelayStream").field("kind", &kind).field("peer", &self.tcp().peer_addr().ok()).finish()
    }
}

impl AsyncRead for RelayStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            RelayStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            RelayStream::Dialled(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            RelayStream::Accepted(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for RelayStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            RelayStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            RelayStream::Dialled(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            RelayStream::Accepted(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            RelayStream::Plain(s) => Pin::new(s).poll_flush(cx),
            RelayStream::Dialled(s) => Pin::new(s.as_mut()).poll_flush(cx),
            RelayStream::Accepted(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            RelayStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            RelayStream::Dialled(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            RelayStream::Accepted(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
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
        let tls = match &cfg.tls {
            None => None,
            Some(tls) => {
                let m = tls.load()?;
                let mut config = crate::tls::client_config(&m, tls)?;
                config.alpn_protocols = vec![RELAY_ALPN.to_vec()];
                Some(tokio_rustls::TlsConnector::from(Arc::new(config)))
            }
        };
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
    ) -> Result<RelayStream, RelayError> {
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
    ) -> Result<RelayStream, RelayError> {
        let io_err = |source| RelayError::Io { node, addr, source };
        let tcp = self.connect(addr).await.map_err(io_err)?;
        // Queries and results are small packets; Nagle would hold them back.
        tcp.set_nodelay(true).map_err(io_err)?;
        let mut stream = match &self.tls {
            None => RelayStream::Plain(tcp),
            Some(connector) => {
                let name = rustls::pki_types::ServerName::try_from(crate::identity::member_name(node))
                    .map_err(|e| RelayError::Protocol { node, addr, detail: e.to_string() })?;
                RelayStream::Dialled(Box::new(connector.connect(name, tcp).await.map_err(io_err)?))
            }
        };
        let open = pb::RelayOpen {
            cluster_id: self.auth.cluster_id().to_string(),
            cluster_secret: self.auth.secret().to_string(),
            master_version: request.master_version,
            client_addr: request.client.to_string(),
            proxy_addr: request.proxy.to_string(),
        };
        let mut first = MAGIC.to_vec();
        put_frame(&mut first, &open.encode_to_vec());
        stream.write_all(&first).await.map_err(io_err)?;
        stream.flush().await.map_err(io_err)?;
        let reply = read_frame(&mut stream).await.map_err(io_err)?;
        let reply = pb::RelayReply::decode(reply.as_slice()).map_err(|e| RelayError::Protocol {
            node,
            addr,
            detail: format!("undecodable reply: {e}"),
        })?;
        if !reply.accepted {
            return Err(RelayError::Refused { node, detail: reply.detail });
        }
        Ok(stream)
    }

    async fn connect(&self, addr: SocketAddr) -> io::Result<TcpStream> {
        let Some(ip) = self.local_address else { return TcpStream::connect(addr).await };
        // From the node's own address, as its Paxos traffic: a network filter tells the nodes apart by it.
        let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        socket.bind(SocketAddr::new(ip, 0))?;
        socket.connect(addr).await
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
    stream: RelayStream,
}

impl IncomingRelay {
    pub(crate) fn new(request: RelayRequest, member: Option<NodeId>, remote: SocketAddr, stream: RelayStream) -> Self {
        IncomingRelay { request, member, remote, stream }
    }

    /// Tells the dialler yes; the returned stream is then the client's MySQL connection.
    pub async fn accept(mut self) -> io::Result<RelayStream> {
        write_reply(&mut self.stream, true, "").await?;
        Ok(self.stream)
    }

    /// Tells the dialler no and why, and closes.
    pub async fn refuse(self, detail: &str) {
        refuse(self.stream, detail).await;
    }
}

async fn write_reply(stream: &mut RelayStream, accepted: bool, detail: &str) -> io::Result<()> {
    let detail: String = detail.chars().take(FRAME_MAX / 8).collect();
    let mut out = Vec::new();
    put_frame(&mut out, &pb::RelayReply { accepted, detail }.encode_to_vec());
    stream.write_all(&out).await?;
    stream.flush().await
}

/// Reads and checks what a dialler sends first, on a connection the peer port classified as a relay (after the TLS
/// handshake, or on a plaintext one after its magic). `identity`: what the client certificate names (TLS) — only a
/// member may relay. Returns the request and the certified member; errors are for the log and the refusal, and
/// carry no secret.
pub(crate) async fn read_request(
    stream: &mut RelayStream,
    auth: &ClusterAuth,
    identity: Option<PeerIdentity>,
    magic_read: bool,
) -> Result<(RelayRequest, Option<NodeId>), String> {
    let member = match identity {
        None => None,
        Some(PeerIdentity::Member(id)) => Some(id),
        Some(PeerIdentity::Other) => return Err("the client certificate names no single member".into()),
    };
    if !magic_read {
        let mut magic = [0u8; 8];
        stream.read_exact(&mut magic).await.map_err(|e| format!("no relay magic: {e}"))?;
        if magic != MAGIC {
            return Err("not a relay (wrong magic)".into());
        }
    }
    let frame = read_frame(stream).await.map_err(|e| format!("no relay request: {e}"))?;
    let open = pb::RelayOpen::decode(frame.as_slice()).map_err(|e| format!("undecodable relay request: {e}"))?;
    auth.check_values(Some(open.cluster_id.as_bytes()), Some(open.cluster_secret.as_bytes()))
        .map_err(|f| f.check().to_string())?;
    let parse = |what: &str, s: &str| s.parse::<SocketAddr>().map_err(|_| format!("relay request: bad {what} {s:?}"));
    let request = RelayRequest {
        master_version: open.master_version,
        client: parse("client address", &open.client_addr)?,
        proxy: parse("proxy address", &open.proxy_addr)?,
    };
    Ok((request, member))
}

/// Answers no to a relay whose request did not pass, and closes.
pub(crate) async fn refuse(mut stream: RelayStream, detail: &str) {
    if write_reply(&mut stream, false, detail).await.is_ok() {
        let _ = stream.shutdown().await;
    }
}

fn put_frame(out: &mut Vec<u8>, body: &[u8]) {
    // Frames are built from bounded fields; FRAME_MAX is checked on the reading side.
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(body);
}

async fn read_frame<R: AsyncRead + Unpin>(stream: &mut R) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > FRAME_MAX {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a {len}-byte relay frame")));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).await?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_oversized_ones_are_refused() {
        let mut out = Vec::new();
        put_frame(&mut out, b"hello");
        assert_eq!(read_frame(&mut out.as_slice()).await.unwrap(), b"hello");
        let mut big = Vec::new();
        put_frame(&mut big, &vec![0u8; FRAME_MAX + 1]);
        assert_eq!(read_frame(&mut big.as_slice()).await.unwrap_err().kind(), io::ErrorKind::InvalidData);
        let short = [0u8, 0, 0, 9, 1, 2];
        assert_eq!(read_frame(&mut &short[..]).await.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn the_magic_is_as_long_as_what_a_plaintext_port_reads_first() {
        assert_eq!(MAGIC.len(), b"PRI * HT".len());
        assert_ne!(&MAGIC, b"PRI * HT");
    }
}
