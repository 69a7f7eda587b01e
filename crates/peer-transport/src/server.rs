//! Receiving side: a tonic server for the `Peer` service, bound to exactly one configured address.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use paxsql_global_log::PeerMessage;
use paxsql_paxos::NodeId;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use crate::auth::ClusterAuth;
use crate::convert::open_envelope;
use crate::identity::{caller, PeerIdentity};
use crate::pb;
use crate::{TransportConfig, TransportError};

/// Counters of a [`PeerServer`] since it started.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Send streams opened with valid credentials.
    pub streams_accepted: AtomicU64,
    /// Calls refused with `Unauthenticated` (wrong or missing cluster id or secret) or, with TLS, `PermissionDenied`
    /// (a certificate that names no single member opened a `Send` stream).
    pub calls_rejected: AtomicU64,
    /// Envelopes read from accepted streams.
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
}

impl ServerStats {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// A running peer server. Messages arrive, decoded and in per-sender order, on the receiver returned by
/// [`PeerServer::bind`]. Dropping the `PeerServer` stops it; [`PeerServer::shutdown`] also waits for the end.
pub struct PeerServer {
    local_addr: SocketAddr,
    stats: Arc<ServerStats>,
    /// `true` (or dropped) = stop: ends the server and every open stream. A graceful HTTP/2 shutdown alone would
    /// wait forever, because `Send` streams never end on their own.
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
}

struct PeerService {
    node_id: NodeId,
    /// With TLS, a stream's messages must come from the member its client certificate names.
    tls: bool,
    auth: ClusterAuth,
    inbox: mpsc::Sender<PeerMessage>,
    stats: Arc<ServerStats>,
    stop: watch::Receiver<bool>,
}

impl PeerServer {
    /// Validates `cfg`, binds `addr` (and only it: `0.0.0.0` must be asked for explicitly) and starts serving.
    /// Port 0 picks a free port; see [`PeerServer::local_addr`]. Must be called inside a tokio runtime.
    pub async fn bind(
        addr: SocketAddr,
        cfg: &TransportConfig,
    ) -> Result<(PeerServer, mpsc::Receiver<PeerMessage>), TransportError> {
        Self::bind_with_routes(addr, cfg, None).await
    }

    /// [`PeerServer::bind`], also serving `extra` (e.g. the `Admin` service, wrapped with
    /// [`ClusterAuth::interceptor`]) on the same address.
    pub async fn bind_with_routes(
        addr: SocketAddr,
        cfg: &TransportConfig,
        extra: Option<tonic::service::Routes>,
    ) -> Result<(PeerServer, mpsc::Receiver<PeerMessage>), TransportError> {
        cfg.validate()?;
        let auth = ClusterAuth::new(&cfg.cluster_id, &cfg.cluster_secret)?;
        let listener =
            tokio::net::TcpListener::bind(addr).await.map_err(|source| TransportError::Bind { addr, source })?;
        let local_addr = listener.local_addr().map_err(|source| TransportError::Bind { addr, source })?;
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));

        let (inbox, rx) = mpsc::channel(cfg.inbox_capacity);
        let stats = Arc::new(ServerStats::default());
        let (stop, stop_rx) = watch::channel(false);
        let service = PeerService {
            node_id: cfg.node_id,
            tls: cfg.tls.is_some(),
            auth,
            inbox,
            stats: stats.clone(),
            stop: stop_rx.clone(),
        };
        let peer = pb::peer_server::PeerServer::new(service)
            .max_decoding_message_size(cfg.max_message_bytes)
            .max_encoding_message_size(cfg.max_message_bytes);

        let keepalive = Duration::from_millis(cfg.keepalive_ms);
        let mut builder =
            Server::builder().http2_keepalive_interval(Some(keepalive)).http2_keepalive_timeout(Some(keepalive));
        if let Some(tls) = &cfg.tls {
            builder = with_tls(builder, tls)?;
        }
        let router = match extra {
            Some(routes) => builder.add_routes(routes).add_service(peer),
            None => builder.add_service(peer),
        };

        let tls = cfg.tls.is_some();
        let span = tracing::info_span!("peer_server", node = cfg.node_id, addr = %local_addr);
        let task = tokio::spawn(
            async move {
                tracing::info!(tls, "peer server listening");
                let res = router
                    .serve_with_incoming_shutdown(incoming, async move {
                        let mut stop_rx = stop_rx;
                        let _ = stop_rx.wait_for(|stop| *stop).await;
                    })
                    .await;
                match &res {
                    Ok(()) => tracing::info!("peer server stopped"),
                    Err(e) => tracing::error!(error = %e, "peer server failed"),
                }
                res
            }
            .instrument(span),
        );
        Ok((PeerServer { local_addr, stats, stop, task: Some(task) }, rx))
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

#[cfg(feature = "tls")]
fn with_tls(builder: Server, tls: &crate::TlsConfig) -> Result<Server, TransportError> {
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    let m = tls.load()?;
    // `client_ca_root` makes the client certificate mandatory: mutual TLS.
    let c =
        ServerTlsConfig::new().identity(Identity::from_pem(m.cert, m.key)).client_ca_root(Certificate::from_pem(m.ca));
    Ok(builder.tls_config(c)?)
}

#[cfg(not(feature = "tls"))]
fn with_tls(_: Server, _: &crate::TlsConfig) -> Result<Server, TransportError> {
    Err(TransportError::TlsNotBuilt)
}

#[tonic::async_trait]
impl pb::peer_server::Peer for PeerService {
    async fn send(&self, req: Request<Streaming<pb::PeerEnvelope>>) -> Result<Response<pb::SendAck>, Status> {
        let remote = req.remote_addr();
        if let Err(status) = self.auth.check_request(&req) {
            ServerStats::bump(&self.stats.calls_rejected);
            return Err(status);
        }
        let member = if self.tls {
            match caller(&req) {
                Some(PeerIdentity::Member(id)) => Some(id),
                _ => {
                    ServerStats::bump(&self.stats.calls_rejected);
                    tracing::warn!(?remote, "rejected peer stream: the client certificate names no single member");
                    return Err(Status::permission_denied("client certificate names no single member"));
                }
            }
        } else {
            None
        };
        ServerStats::bump(&self.stats.streams_accepted);
        let span = tracing::info_span!("peer_stream", node = self.node_id, remote = ?remote, member);
        self.receive(req.into_inner(), member).instrument(span).await
    }
}

impl PeerService {
    /// `member`: the sender's certified node id (TLS), which every message's `from` must equal.
    async fn receive(
        &self,
        mut stream: Streaming<pb::PeerEnvelope>,
        member: Option<NodeId>,
    ) -> Result<Response<pb::SendAck>, Status> {
        tracing::debug!("peer stream opened");
        let (mut received, mut dropped) = (0u64, 0u64);
        let mut sender: Option<NodeId> = None;
        let mut stop = self.stop.clone();
        loop {
            let next = tokio::select! {
                next = stream.message() => next,
                _ = stop.wait_for(|stop| *stop) => {
                    tracing::debug!(?sender, "server stopping, ending peer stream");
                    return Err(Status::unavailable("peer server is shutting down"));
                }
                () = self.inbox.closed() => {
                    return Err(Status::unavailable("node is shutting down"));
                }
            };
            let env = match next {
                Ok(Some(env)) => env,
                Ok(None) => break,
                Err(status) => {
                    // The sender went away or sent bytes that are not an envelope; either way the stream is over.
                    tracing::debug!(?sender, %status, "peer stream ended");
                    return Err(status);
                }
            };
            received += 1;
            ServerStats::bump(&self.stats.received);
            let msg = match open_envelope(env, self.auth.cluster_id()) {
                Ok(msg) => msg,
                Err(e) => {
                    dropped += 1;
                    ServerStats::bump(&self.stats.malformed);
                    tracing::warn!(?sender, error = %e, "dropped malformed peer message");
                    continue;
                }
            };
            if sender != Some(msg.from()) {
                tracing::debug!(from = msg.from(), "peer stream carries messages from node {}", msg.from());
                sender = Some(msg.from());
            }
            if member.is_some_and(|id| id != msg.from()) {
                dropped += 1;
                ServerStats::bump(&self.stats.forged);
                tracing::warn!(from = msg.from(), ?member, "dropped message whose sender is not the certified member");
                continue;
            }
            if msg.to() != self.node_id {
                dropped += 1;
                ServerStats::bump(&self.stats.misaddressed);
                tracing::warn!(from = msg.from(), to = msg.to(), "dropped message addressed to another node");
                continue;
            }
            match self.inbox.try_send(msg) {
                Ok(()) => ServerStats::bump(&self.stats.delivered),
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // Paxos retransmits; blocking here would only move the backlog into HTTP/2 buffers.
                    dropped += 1;
                    ServerStats::bump(&self.stats.dropped_inbox_full);
                    tracing::trace!("inbox full, dropped message");
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    return Err(Status::unavailable("node is shutting down"));
                }
            }
        }
        tracing::debug!(?sender, received, dropped, "peer stream closed by sender");
        Ok(Response::new(pb::SendAck { received, dropped }))
    }
}
