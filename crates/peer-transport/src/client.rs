//! Sending side: one [`PeerSender`] per destination keeps a link ([`crate::link`]) open and reconnects with
//! exponential backoff. [`PeerClient`] routes messages to them by destination node.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use paxsql_global_log::PeerMessage;
use paxsql_paxos::NodeId;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tonic::transport::Endpoint;
use tracing::Instrument;

use crate::auth::ClusterAuth;
use crate::link::LinkSender;
use crate::{TlsConfig, TransportConfig, TransportError};

/// Counters of one [`PeerSender`].
#[derive(Debug, Default)]
pub struct SenderStats {
    /// Messages given to [`PeerSender::send`].
    pub queued: AtomicU64,
    /// Messages taken from the queue into an open link (they may still be lost if the link breaks).
    pub sent: AtomicU64,
    /// Messages dropped because their encoding exceeds `max_message_bytes`.
    pub dropped_too_large: AtomicU64,
    /// Messages dropped because the queue was full (the oldest one goes).
    pub dropped_queue_full: AtomicU64,
    /// Links opened.
    pub connects: AtomicU64,
    /// Attempts to open a link that failed (connection, TLS, timeout).
    pub connect_failures: AtomicU64,
    /// Links the peer refused (wrong cluster id or secret on one side, a certificate of another member).
    pub rejected: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Bounded FIFO that drops its oldest entry when full: under overload the newest Paxos state (latest commit
/// point, newest accepts) is the most useful, and whatever is dropped gets retransmitted.
pub(crate) struct SendQueue {
    items: Mutex<VecDeque<PeerMessage>>,
    capacity: usize,
    /// One consumer (the link), so `notify_one`'s stored permit closes the check-then-wait race.
    ready: Notify,
}

impl SendQueue {
    /// Returns whether an old message had to be dropped.
    fn push(&self, msg: PeerMessage) -> bool {
        let dropped = {
            let mut items = self.items.lock().expect("send queue lock poisoned");
            let dropped = if items.len() >= self.capacity { items.pop_front().is_some() } else { false };
            items.push_back(msg);
            dropped
        };
        self.ready.notify_one();
        dropped
    }

    /// The oldest message, once there is one. Cancel-safe: a message is taken only when the call returns it.
    pub(crate) async fn pop(&self) -> PeerMessage {
        loop {
            if let Some(msg) = self.try_pop() {
                return msg;
            }
            self.ready.notified().await;
        }
    }

    pub(crate) fn try_pop(&self) -> Option<PeerMessage> {
        self.items.lock().expect("send queue lock poisoned").pop_front()
    }

    fn len(&self) -> usize {
        self.items.lock().expect("send queue lock poisoned").len()
    }
}

/// The outgoing path to one peer. [`PeerSender::send`] never blocks and never fails; delivery is best effort.
/// Dropping the sender stops its background task.
pub struct PeerSender {
    to: NodeId,
    endpoint: String,
    queue: Arc<SendQueue>,
    stats: Arc<SenderStats>,
    connected: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl PeerSender {
    /// Starts the connection task for node `to` at `endpoint` (`host:port`, or a full `http://` / `https://` URI
    /// whose scheme matches whether TLS is configured). Must be called inside a tokio runtime.
    pub fn spawn(cfg: &TransportConfig, to: NodeId, endpoint: &str) -> Result<PeerSender, TransportError> {
        cfg.validate()?;
        let auth = ClusterAuth::new(&cfg.cluster_id, &cfg.cluster_secret)?;
        let ep = build_endpoint(cfg, to, endpoint)?;
        let (host, port) = crate::link::host_and_port(&ep).ok_or_else(|| TransportError::InvalidEndpoint {
            node: to,
            endpoint: endpoint.to_string(),
            reason: "no host or port".into(),
        })?;
        let queue = Arc::new(SendQueue {
            items: Mutex::new(VecDeque::new()),
            capacity: cfg.send_queue_capacity,
            ready: Notify::new(),
        });
        let stats = Arc::new(SenderStats::default());
        let connected = Arc::new(AtomicBool::new(false));
        let link = LinkSender {
            to,
            from: cfg.node_id,
            host,
            port,
            auth,
            tls: crate::tls::connector(cfg, crate::link::LINK_ALPN)?,
            local_address: cfg.local_address,
            queue: queue.clone(),
            stats: stats.clone(),
            connected: connected.clone(),
            max_message_bytes: cfg.max_message_bytes,
            keepalive: Duration::from_millis(cfg.keepalive_ms),
            connect_timeout: Duration::from_millis(cfg.connect_timeout_ms),
            backoff_min: cfg.backoff_min(),
            backoff_max: cfg.backoff_max(),
        };
        let span = tracing::info_span!("peer_sender", node = cfg.node_id, to, endpoint = %endpoint);
        let task = tokio::spawn(link.run().instrument(span));
        Ok(PeerSender { to, endpoint: endpoint.to_string(), queue, stats, connected, task })
    }

    /// Queues `msg` for the peer; if the queue is full, the oldest queued message is dropped and counted.
    pub fn send(&self, msg: PeerMessage) {
        bump(&self.stats.queued);
        if self.queue.push(msg) {
            bump(&self.stats.dropped_queue_full);
        }
    }

    pub fn to(&self) -> NodeId {
        self.to
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Whether a link to the peer is currently open.
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// The flag behind [`PeerSender::is_connected`], for a status reader that outlives the borrow.
    pub fn connected_flag(&self) -> Arc<AtomicBool> {
        self.connected.clone()
    }

    /// Messages waiting in the queue.
    pub fn queued_len(&self) -> usize {
        self.queue.len()
    }

    pub fn stats(&self) -> &SenderStats {
        &self.stats
    }
}

impl Drop for PeerSender {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `endpoint` checked as a peer address (its scheme must say whether TLS is on).
fn build_endpoint(cfg: &TransportConfig, to: NodeId, endpoint: &str) -> Result<Endpoint, TransportError> {
    peer_endpoint(cfg.tls.as_ref(), Some(to), endpoint)
}

/// An endpoint for calls to a node's peer port at `address` (`host:port`, or a URI whose scheme matches whether
/// `tls` is given): the one way every caller — peer links, the admin clients of nodes and tools — reaches a node.
/// With TLS the caller presents its own certificate, and the server must prove it is member `server` (its
/// certificate names [`member_name`](crate::identity::member_name)`(server)`), or, with `server` unknown, that
/// its certificate carries the host of `address`.
pub fn peer_endpoint(
    tls: Option<&TlsConfig>,
    server: Option<NodeId>,
    address: &str,
) -> Result<Endpoint, TransportError> {
    let invalid = |reason: String| TransportError::InvalidEndpoint {
        node: server.unwrap_or(0),
        endpoint: address.to_string(),
        reason,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let uri = match address.split_once("://") {
        Some((given, _)) if given != scheme => {
            return Err(invalid(format!(
                "scheme must be {scheme} (TLS is {})",
                if tls.is_some() { "on" } else { "off" }
            )))
        }
        Some(_) => address.to_string(),
        None => format!("{scheme}://{address}"),
    };
    let ep = Endpoint::from_shared(uri).map_err(|e| invalid(e.to_string()))?;
    if ep.uri().port_u16().is_none() {
        return Err(invalid("no port".into()));
    }
    match tls {
        None => Ok(ep),
        Some(tls) => client_tls(ep, tls, server),
    }
}

fn client_tls(ep: Endpoint, tls: &TlsConfig, server: Option<NodeId>) -> Result<Endpoint, TransportError> {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    let m = tls.load()?;
    let mut c =
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(m.ca)).identity(Identity::from_pem(m.cert, m.key));
    if let Some(id) = server {
        c = c.domain_name(crate::identity::member_name(id));
    }
    Ok(ep.tls_config(c)?)
}

/// Routes outgoing messages to one [`PeerSender`] per peer, by [`PeerMessage::to`].
pub struct PeerClient {
    cfg: TransportConfig,
    senders: BTreeMap<NodeId, PeerSender>,
    unroutable: AtomicU64,
}

impl PeerClient {
    /// Validates `cfg` (including the TLS files). No peers yet: add them with [`PeerClient::set_peer`].
    pub fn new(cfg: &TransportConfig) -> Result<PeerClient, TransportError> {
        cfg.validate()?;
        Ok(PeerClient { cfg: cfg.clone(), senders: BTreeMap::new(), unroutable: AtomicU64::new(0) })
    }

    /// Sets the endpoint of node `node`, (re)starting its sender if the endpoint changed. Inside a tokio runtime.
    pub fn set_peer(&mut self, node: NodeId, endpoint: &str) -> Result<(), TransportError> {
        if node == 0 || node == self.cfg.node_id {
            return Err(TransportError::InvalidEndpoint {
                node,
                endpoint: endpoint.to_string(),
                reason: "peer id must be non-zero and not this node's own".into(),
            });
        }
        if self.senders.get(&node).is_some_and(|s| s.endpoint() == endpoint) {
            return Ok(());
        }
        let sender = PeerSender::spawn(&self.cfg, node, endpoint)?;
        self.senders.insert(node, sender);
        Ok(())
    }

    /// Stops sending to `node`; queued messages are dropped.
    pub fn remove_peer(&mut self, node: NodeId) {
        self.senders.remove(&node);
    }

    /// Queues `msg` for `msg.to()`. Never blocks. Messages for an unknown node are dropped and counted.
    pub fn send(&self, msg: PeerMessage) {
        match self.senders.get(&msg.to()) {
            Some(sender) => sender.send(msg),
            None => {
                self.unroutable.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(node = self.cfg.node_id, to = msg.to(), "no endpoint for node, message dropped");
            }
        }
    }

    pub fn sender(&self, node: NodeId) -> Option<&PeerSender> {
        self.senders.get(&node)
    }

    /// Every configured peer, by node id.
    pub fn peers(&self) -> impl Iterator<Item = &PeerSender> {
        self.senders.values()
    }

    /// Messages dropped because no endpoint was configured for their destination.
    pub fn unroutable(&self) -> u64 {
        self.unroutable.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(to: NodeId, progress: u64) -> PeerMessage {
        PeerMessage::Status { from: 1, to, progress, chosen_up_to: 0 }
    }

    #[test]
    fn queue_drops_oldest_when_full() {
        let q = SendQueue { items: Mutex::new(VecDeque::new()), capacity: 3, ready: Notify::new() };
        let dropped: Vec<bool> = (0..5).map(|i| q.push(status(2, i))).collect();
        assert_eq!(dropped, [false, false, false, true, true]);
        let left: Vec<PeerMessage> = q.items.lock().unwrap().drain(..).collect();
        assert_eq!(left, vec![status(2, 2), status(2, 3), status(2, 4)]);
    }

    #[test]
    fn endpoint_scheme_must_match_tls() {
        let cfg = TransportConfig::new(1, "c1", crate::ClusterSecret::new("0123456789abcdef"));
        assert!(build_endpoint(&cfg, 2, "127.0.0.1:7100").is_ok());
        assert!(build_endpoint(&cfg, 2, "http://127.0.0.1:7100").is_ok());
        assert!(matches!(
            build_endpoint(&cfg, 2, "https://127.0.0.1:7100"),
            Err(TransportError::InvalidEndpoint { node: 2, .. })
        ));
        assert!(build_endpoint(&cfg, 2, "127.0.0.1").is_err());
        assert!(build_endpoint(&cfg, 2, "not a uri").is_err());
    }
}
