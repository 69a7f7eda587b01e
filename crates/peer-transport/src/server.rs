//! The peer port, bound to exactly one configured address: it tells links ([`crate::link`]), relays
//! ([`crate::relay`]) and gRPC (the admin API, served by tonic) apart and hands each to its server.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use paxsql_global_log::PeerMessage;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tonic::transport::Server;
use tracing::Instrument;

use crate::auth::ClusterAuth;
use crate::client::bump;
use crate::identity::{identify, PeerIdentity};
use crate::link::{Receiving, LINK_ALPN};
use crate::relay::{IncomingRelay, RELAY_ALPN};
use crate::stream::PortStream;
use crate::{TransportConfig, TransportError};

/// Counters of a [`PeerServer`] since it started.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Links opened with valid credentials.
    pub streams_accepted: AtomicU64,
    /// Links and relays refused (wrong or missing cluster id or secret; with TLS, a certificate that names no
    /// single member, or another member than the link's sender), and failed TLS handshakes.
    pub calls_rejected: AtomicU64,
    /// Envelopes read from accepted links.
    pub received: AtomicU64,
    /// Messages handed to the inbox.
    pub delivered: AtomicU64,
    /// Envelopes that did not decode or failed the envelope checks.
    pub malformed: AtomicU64,
    /// Messages addressed to another node.
    pub misaddressed: AtomicU64,
    /// Messages whose `from` is not the member the sender's certificate names (TLS only): dropped.
    pub forged: AtomicU64,
    /// Messages dropped because the inbox was full.
    pub dropped_inbox_full: AtomicU64,
    /// Relays whose request was read and handed to the node.
    pub relays: AtomicU64,
}

/// A running peer server. Messages arrive, decoded and in per-sender order, on the receiver returned by
/// [`PeerServer::bind`]. Dropping the `PeerServer` stops it; [`PeerServer::shutdown`] also waits for the end.
pub struct PeerServer {
    local_addr: SocketAddr,
    stats: Arc<ServerStats>,
    /// `true` (or dropped) = stop: ends the server and every open link and relay.
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
    relays: Option<mpsc::Receiver<IncomingRelay>>,
}

/// What [`Inbox::deliver`] did with a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    Delivered,
    /// Dropped: the receiver is behind (Paxos retransmits).
    Full,
    /// The receiver is gone: the node is stopping.
    Closed,
}

/// Where the messages a peer server receives go, called on the link's own task: it must never block.
pub type Inbox = Arc<dyn Fn(PeerMessage) -> Delivery + Send + Sync>;

/// A channel the caller reads ([`PeerServer::bind_serving`]), or a function that hands each message straight to
/// its consumer ([`PeerServer::bind_into`]): one task hand-off less on every Paxos message.
pub(crate) enum InboxKind {
    Channel(mpsc::Sender<PeerMessage>),
    Direct(Inbox),
}

impl InboxKind {
    pub(crate) fn deliver(&self, msg: PeerMessage) -> Delivery {
        match self {
            InboxKind::Channel(tx) => match tx.try_send(msg) {
                Ok(()) => Delivery::Delivered,
                Err(mpsc::error::TrySendError::Full(_)) => Delivery::Full,
                Err(mpsc::error::TrySendError::Closed(_)) => Delivery::Closed,
            },
            InboxKind::Direct(f) => f(msg),
        }
    }

    pub(crate) async fn closed(&self) {
        match self {
            InboxKind::Channel(tx) => tx.closed().await,
            // Seen at the next delivery.
            InboxKind::Direct(_) => std::future::pending().await,
        }
    }
}

/// What the peer port serves besides links.
#[derive(Default)]
pub struct PeerPortServices {
    /// More gRPC services (e.g. the `Admin` service, wrapped with [`ClusterAuth::interceptor`]).
    pub routes: Option<tonic::service::Routes>,
    /// Accept relays ([`crate::relay`]) and hand them out through [`PeerServer::take_relays`]. Without it a relay
    /// is refused at once ("this node relays no connections").
    pub relays: bool,
}

/// Relays accepted and not yet taken by the node; more are refused ("busy") rather than left waiting.
const RELAY_QUEUE: usize = 128;
/// Bound on a new connection's TLS handshake, or its first bytes on a plaintext port, and a relay's or a link's
/// opening.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl PeerServer {
    /// Validates `cfg`, binds `addr` (and only it: `0.0.0.0` must be asked for explicitly) and starts serving.
    /// Port 0 picks a free port; see [`PeerServer::local_addr`]. Must be called inside a tokio runtime.
    pub async fn bind(
        addr: SocketAddr,
        cfg: &TransportConfig,
    ) -> Result<(PeerServer, mpsc::Receiver<PeerMessage>), TransportError> {
        Self::bind_serving(addr, cfg, PeerPortServices::default()).await
    }

    /// [`PeerServer::bind`], also serving `also` on the same address.
    pub async fn bind_serving(
        addr: SocketAddr,
        cfg: &TransportConfig,
        also: PeerPortServices,
    ) -> Result<(PeerServer, mpsc::Receiver<PeerMessage>), TransportError> {
        let (inbox, rx) = mpsc::channel(cfg.inbox_capacity);
        let server = Self::start(addr, cfg, also, InboxKind::Channel(inbox)).await?;
        Ok((server, rx))
    }

    /// [`PeerServer::bind_serving`], handing each message to `inbox` on the task that received it instead of
    /// through a channel.
    pub async fn bind_into(
        addr: SocketAddr,
        cfg: &TransportConfig,
        also: PeerPortServices,
        inbox: Inbox,
    ) -> Result<PeerServer, TransportError> {
        Self::start(addr, cfg, also, InboxKind::Direct(inbox)).await
    }

    async fn start(
        addr: SocketAddr,
        cfg: &TransportConfig,
        also: PeerPortServices,
        inbox: InboxKind,
    ) -> Result<PeerServer, TransportError> {
        cfg.validate()?;
        let auth = ClusterAuth::new(&cfg.cluster_id, &cfg.cluster_secret)?;
        let acceptor = match &cfg.tls {
            Some(tls) => {
                let config = crate::tls::server_config(&tls.load()?, tls)?;
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
            }
            None => None,
        };
        let listener =
            tokio::net::TcpListener::bind(addr).await.map_err(|source| TransportError::Bind { addr, source })?;
        let local_addr = listener.local_addr().map_err(|source| TransportError::Bind { addr, source })?;

        let stats = Arc::new(ServerStats::default());
        let (stop, stop_rx) = watch::channel(false);
        let receiving = Arc::new(Receiving {
            node_id: cfg.node_id,
            cluster_id: cfg.cluster_id.clone(),
            inbox,
            stats: stats.clone(),
            max_message_bytes: cfg.max_message_bytes,
            keepalive: Duration::from_millis(cfg.keepalive_ms),
        });

        let keepalive = Duration::from_millis(cfg.keepalive_ms);
        let router = Server::builder()
            .http2_keepalive_interval(Some(keepalive))
            .http2_keepalive_timeout(Some(keepalive))
            .add_routes(also.routes.unwrap_or_default());
        let (relay_tx, relays) = if also.relays {
            let (tx, rx) = mpsc::channel(RELAY_QUEUE);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let port = PortSide { auth, stats: stats.clone(), relays: relay_tx, receiving, stop: stop_rx.clone() };

        let tls = cfg.tls.is_some();
        let span = tracing::info_span!("peer_server", node = cfg.node_id, addr = %local_addr);
        let shutdown = async move {
            let mut stop_rx = stop_rx;
            let _ = stop_rx.wait_for(|stop| *stop).await;
        };
        let task = tokio::spawn(
            async move {
                tracing::info!(tls, "peer server listening");
                // One accepting task classifies connections; tonic serves the gRPC ones it is handed.
                let res = match acceptor {
                    Some(acceptor) => {
                        let incoming = handed_over(|grpc| port.accept_tls(listener, acceptor, grpc));
                        router.serve_with_incoming_shutdown(incoming, shutdown).await
                    }
                    None => {
                        let incoming = handed_over(|grpc| port.accept_plain(listener, grpc));
                        router.serve_with_incoming_shutdown(incoming, shutdown).await
                    }
                };
                match &res {
                    Ok(()) => tracing::info!("peer server stopped"),
                    Err(e) => tracing::error!(error = %e, "peer server failed"),
                }
                res
            }
            .instrument(span),
        );
        Ok(PeerServer { local_addr, stats, stop, task: Some(task), relays })
    }

    /// The relays this port accepted ([`PeerPortServices::relays`]), once: the node answers each.
    pub fn take_relays(&mut self) -> Option<mpsc::Receiver<IncomingRelay>> {
        self.relays.take()
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The counters; a clone of the `Arc` outlives the borrow (for a metrics task).
    pub fn stats(&self) -> &Arc<ServerStats> {
        &self.stats
    }

    /// Stops accepting, ends open streams and waits for the server task.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            // Streams end at once on `stop`; bound the wait for the connections to close anyway.
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), task).await.is_err() {
                abort.abort();
            }
        }
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The accepting side of the peer port: tells links, relays and gRPC connections apart and hands each to its
/// server.
struct PortSide {
    auth: ClusterAuth,
    stats: Arc<ServerStats>,
    relays: Option<mpsc::Sender<IncomingRelay>>,
    receiving: Arc<Receiving>,
    stop: watch::Receiver<bool>,
}

/// gRPC connections waiting for tonic to take them.
const GRPC_QUEUE: usize = 128;

/// Spawns `accept` with the sending end of a queue and returns the queue as the stream of connections tonic serves.
fn handed_over<IO, F>(
    accept: impl FnOnce(mpsc::Sender<Result<IO, std::io::Error>>) -> F,
) -> impl futures_util::Stream<Item = Result<IO, std::io::Error>>
where
    IO: Send + 'static,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let (grpc, mut queue) = mpsc::channel(GRPC_QUEUE);
    tokio::spawn(accept(grpc).in_current_span());
    futures_util::stream::poll_fn(move |cx| queue.poll_recv(cx))
}

/// One accepted TCP connection at a time; each is classified in its own task so a slow handshake holds no other.
async fn accept_each(
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
    mut each: impl FnMut(TcpStream, SocketAddr),
) {
    let mut backoff = Duration::from_millis(10);
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((tcp, remote)) => {
                backoff = Duration::from_millis(10);
                let _ = tcp.set_nodelay(true);
                each(tcp, remote);
            }
            Err(e) => {
                // EMFILE and the like: back off rather than spin.
                tracing::warn!(error = %e, "peer port accept failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

impl PortSide {
    async fn accept_tls(
        self,
        listener: TcpListener,
        acceptor: tokio_rustls::TlsAcceptor,
        grpc: mpsc::Sender<Result<tokio_rustls::server::TlsStream<TcpStream>, std::io::Error>>,
    ) {
        let side = Arc::new(self);
        accept_each(listener, side.stop.clone(), |tcp, remote| {
            let (side, acceptor, grpc) = (side.clone(), acceptor.clone(), grpc.clone());
            tokio::spawn(
                async move {
                    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            bump(&side.stats.calls_rejected);
                            tracing::warn!(%remote, error = %e, "peer port: TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    };
                    let alpn = tls.get_ref().1.alpn_protocol();
                    if alpn == Some(LINK_ALPN) || alpn == Some(RELAY_ALPN) {
                        let identity = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| identify(c));
                        let identity = Some(identity.unwrap_or(PeerIdentity::Other));
                        let link = alpn == Some(LINK_ALPN);
                        let stream = PortStream::Accepted(Box::new(tls));
                        if link {
                            side.link(stream, identity, false, remote).await;
                        } else {
                            side.relay(stream, identity, false, remote).await;
                        }
                    } else {
                        let _ = grpc.send(Ok(tls)).await;
                    }
                }
                .in_current_span(),
            );
        })
        .await;
    }

    async fn accept_plain(self, listener: TcpListener, grpc: mpsc::Sender<Result<Sniffed, std::io::Error>>) {
        let side = Arc::new(self);
        accept_each(listener, side.stop.clone(), |mut tcp, remote| {
            let (side, grpc) = (side.clone(), grpc.clone());
            tokio::spawn(
                async move {
                    // HTTP/2 opens with its preface, a link or a relay with its magic: eight bytes tell them apart.
                    let mut first = [0u8; 8];
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tcp.read_exact(&mut first)).await {
                        Ok(Ok(_)) => {}
                        _ => return,
                    }
                    if first == crate::link::MAGIC {
                        side.link(PortStream::Plain(tcp), None, true, remote).await;
                    } else if first == crate::relay::MAGIC {
                        side.relay(PortStream::Plain(tcp), None, true, remote).await;
                    } else {
                        let _ = grpc.send(Ok(Sniffed { first, read: 0, tcp })).await;
                    }
                }
                .in_current_span(),
            );
        })
        .await;
    }

    /// Reads a link's opening, answers it and receives its messages until it ends; or answers no.
    async fn link(&self, mut stream: PortStream, identity: Option<PeerIdentity>, magic_read: bool, remote: SocketAddr) {
        let read = crate::link::read_open(&mut stream, &self.auth, identity, magic_read);
        let (open, member) = match tokio::time::timeout(HANDSHAKE_TIMEOUT, read).await {
            Ok(Ok(read)) => read,
            Ok(Err(why)) => {
                bump(&self.stats.calls_rejected);
                tracing::warn!(peer = %remote, "rejected peer link: {why}");
                crate::stream::refuse(stream, &why).await;
                return;
            }
            Err(_) => return,
        };
        if crate::stream::reply(&mut stream, true, "").await.is_err() {
            return;
        }
        bump(&self.stats.streams_accepted);
        let span = tracing::info_span!("peer_link", node = self.receiving.node_id, %remote, from = open.from);
        tracing::debug!(parent: &span, ?member, keepalive_ms = open.keepalive_ms, "link opened");
        let keepalive = Duration::from_millis(open.keepalive_ms);
        self.receiving.receive(stream, member, keepalive, self.stop.clone()).instrument(span).await;
    }

    /// Reads a relay's request and hands it to the node, or answers no.
    async fn relay(
        &self,
        mut stream: PortStream,
        identity: Option<PeerIdentity>,
        magic_read: bool,
        remote: SocketAddr,
    ) {
        let read = crate::relay::read_request(&mut stream, &self.auth, identity, magic_read);
        let (request, member) = match tokio::time::timeout(HANDSHAKE_TIMEOUT, read).await {
            Ok(Ok(read)) => read,
            Ok(Err(why)) => {
                bump(&self.stats.calls_rejected);
                tracing::warn!(%remote, why, "refused a relay");
                crate::stream::refuse(stream, &why).await;
                return;
            }
            Err(_) => return,
        };
        let incoming = IncomingRelay::new(request, member, remote, stream);
        let Some(relays) = &self.relays else {
            incoming.refuse("this node relays no connections").await;
            return;
        };
        match relays.try_send(incoming) {
            Ok(()) => bump(&self.stats.relays),
            Err(mpsc::error::TrySendError::Full(incoming)) => {
                tracing::warn!(%remote, "refused a relay: too many waiting");
                incoming.refuse("busy: too many relays waiting").await;
            }
            Err(mpsc::error::TrySendError::Closed(incoming)) => incoming.refuse("the node is shutting down").await,
        }
    }
}

/// A plaintext gRPC connection whose first eight bytes were read to tell it from a relay; they are read again
/// first.
struct Sniffed {
    first: [u8; 8],
    read: usize,
    tcp: TcpStream,
}

impl Connected for Sniffed {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.tcp.connect_info()
    }
}

impl AsyncRead for Sniffed {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.read < this.first.len() {
            let n = (this.first.len() - this.read).min(buf.remaining());
            buf.put_slice(&this.first[this.read..this.read + n]);
            this.read += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Sniffed {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}
