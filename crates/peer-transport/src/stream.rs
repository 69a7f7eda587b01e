//! A connection on one of the peer port's own protocols (a relay or a link) from either end, how a member dials
//! one, and the reply that accepts or refuses what it asked for.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use paxsql_paxos::NodeId;
use prost::Message as _;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::TcpStream;

use crate::auth::{AuthFailure, ClusterAuth};
use crate::frame::{put_frame, read_frame};
use crate::identity::PeerIdentity;
use crate::pb;

/// Bound on a reply's frame: a flag and a reason.
const REPLY_MAX: usize = 4096;

/// A relay or a link, from either end: plaintext, or TLS as the dialler or as the peer port.
pub enum PortStream {
    Plain(TcpStream),
    Dialled(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    Accepted(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl PortStream {
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            PortStream::Plain(s) => s,
            PortStream::Dialled(s) => s.get_ref().0,
            PortStream::Accepted(s) => s.get_ref().0,
        }
    }

    /// Whether the bytes are encrypted on the wire.
    pub fn is_tls(&self) -> bool {
        !matches!(self, PortStream::Plain(_))
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

impl std::fmt::Debug for PortStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self {
            PortStream::Plain(_) => "plain",
            PortStream::Dialled(_) => "tls-dialled",
            PortStream::Accepted(_) => "tls-accepted",
        };
        f.debug_struct("PortStream").field("kind", &kind).field("peer", &self.tcp().peer_addr().ok()).finish()
    }
}

impl AsyncRead for PortStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PortStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            PortStream::Dialled(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            PortStream::Accepted(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for PortStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            PortStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            PortStream::Dialled(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            PortStream::Accepted(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PortStream::Plain(s) => Pin::new(s).poll_flush(cx),
            PortStream::Dialled(s) => Pin::new(s.as_mut()).poll_flush(cx),
            PortStream::Accepted(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PortStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            PortStream::Dialled(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            PortStream::Accepted(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Dials member `node`'s peer port at `addr`: TCP from `local` (the node's own address, as all its traffic, so that
/// a network filter tells the nodes apart by it), no Nagle (small messages must not wait), then TLS naming the
/// member if `tls` is given.
pub(crate) async fn dial(
    tls: Option<&tokio_rustls::TlsConnector>,
    local: Option<IpAddr>,
    node: NodeId,
    addr: SocketAddr,
) -> io::Result<PortStream> {
    let tcp = match local {
        None => TcpStream::connect(addr).await?,
        Some(ip) => {
            let socket =
                if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
            socket.bind(SocketAddr::new(ip, 0))?;
            socket.connect(addr).await?
        }
    };
    tcp.set_nodelay(true)?;
    match tls {
        None => Ok(PortStream::Plain(tcp)),
        Some(connector) => {
            let name = rustls::pki_types::ServerName::try_from(crate::identity::member_name(node))
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
            Ok(PortStream::Dialled(Box::new(connector.connect(name, tcp).await?)))
        }
    }
}

/// Answers an opening: yes, or no and why.
pub(crate) async fn reply(stream: &mut PortStream, accepted: bool, detail: &str) -> io::Result<()> {
    let detail: String = detail.chars().take(REPLY_MAX / 8).collect();
    let mut out = Vec::new();
    put_frame(&mut out, &pb::OpenReply { accepted, detail }.encode_to_vec());
    stream.write_all(&out).await?;
    stream.flush().await
}

/// Answers no to an opening that did not pass, and closes.
pub(crate) async fn refuse(mut stream: PortStream, detail: &str) {
    if reply(&mut stream, false, detail).await.is_ok() {
        let _ = stream.shutdown().await;
    }
}

/// The dialler's side of an opening: `magic` and the `opening` frame in one write, then the reply. `Err` is a
/// broken stream or an undecodable reply (as an `io::Error`); `Ok(Err(detail))` is a refusal.
pub(crate) async fn open(
    stream: &mut PortStream,
    magic: &[u8; 8],
    opening: &impl prost::Message,
) -> io::Result<Result<(), String>> {
    let mut first = magic.to_vec();
    put_frame(&mut first, &opening.encode_to_vec());
    stream.write_all(&first).await?;
    stream.flush().await?;
    read_reply(stream).await
}

async fn read_reply(stream: &mut PortStream) -> io::Result<Result<(), String>> {
    let frame = read_frame(stream, REPLY_MAX).await?;
    let reply = pb::OpenReply::decode(frame)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("undecodable reply: {e}")))?;
    Ok(if reply.accepted { Ok(()) } else { Err(reply.detail) })
}

/// The accepting side of an opening (a link's or a relay's, `what`), on a connection the peer port classified by
/// its ALPN (TLS) or, on a plaintext one, by `magic` (then already read: `magic_read`). `identity`: what the client
/// certificate names (TLS) — only a member may open either. Returns the opening's frame and the certified member;
/// errors are for the log and the refusal.
pub(crate) async fn read_opening(
    stream: &mut PortStream,
    what: &str,
    magic: &[u8; 8],
    magic_read: bool,
    identity: Option<PeerIdentity>,
    max: usize,
) -> Result<(Bytes, Option<NodeId>), String> {
    let member = match identity {
        None => None,
        Some(PeerIdentity::Member(id)) => Some(id),
        Some(PeerIdentity::Other) => return Err("the client certificate names no single member".into()),
    };
    if !magic_read {
        let mut first = [0u8; 8];
        stream.read_exact(&mut first).await.map_err(|e| format!("no {what} magic: {e}"))?;
        if &first != magic {
            return Err(format!("not a {what} (wrong magic)"));
        }
    }
    let frame = read_frame(stream, max).await.map_err(|e| format!("no {what} opening: {e}"))?;
    Ok((frame, member))
}

/// An opening's credentials checked; the error names the failed check and carries no secret.
pub(crate) fn check_credentials(auth: &ClusterAuth, cluster_id: &str, secret: &str) -> Result<(), String> {
    auth.check_values(Some(cluster_id.as_bytes()), Some(secret.as_bytes())).map_err(|f| match f {
        // The peer's own claim, which tells an operator which cluster's member dialled the wrong address.
        AuthFailure::ClusterIdMismatch { got } => format!("cluster id mismatch (the dialler is of {got:?})"),
        other => other.check().to_string(),
    })
}
