//! Links: how one member's Paxos messages reach another.
//!
//! A link is one connection on the peer port, opened by the sending member: TLS with the application protocol
//! [`LINK_ALPN`] (or, on a plaintext port, the 8-byte magic `PXPAXOS1`), the magic and a `LinkOpen` frame with the
//! cluster credentials and the sender's id, an `OpenReply`; then `PeerEnvelope` frames one way for as long as the
//! connection lives. The sender's task writes whatever its queue holds in one write; the receiving task hands each
//! message to the node as it reads it. Links replaced a gRPC client stream, whose HTTP/2 layer put two more task
//! hand-offs and its own framing and flow control on both legs of every Paxos round (bench/RESULTS.md, "Peer
//! links").
//!
//! A link that stops carrying is noticed from both ends: the sender writes a keepalive (an empty frame) after
//! `keepalive_ms` without a message and the kernel gives up on data unacknowledged for twice that
//! (`TCP_USER_TIMEOUT`), so the sender reconnects; the receiver drops a link silent for three keepalive intervals.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use paxsql_global_log::PeerMessage;
use paxsql_paxos::NodeId;
use prost::Message as _;
use tokio::io::{AsyncWriteExt as _, BufReader};
use tokio::sync::watch;

use crate::auth::ClusterAuth;
use crate::client::{bump, SendQueue, SenderStats};
use crate::convert::{open_envelope, seal_envelope};
use crate::frame::{put_len, read_frame_within};
use crate::identity::PeerIdentity;
use crate::server::{InboxKind, ServerStats};
use crate::stream::PortStream;
use crate::{pb, TransportError};

pub use crate::tls::LINK_ALPN;

/// What a link's dialler sends first, as long as what a plaintext peer port reads before it decides.
pub(crate) const MAGIC: [u8; 8] = *b"PXPAXOS1";
/// Bound on a link's opening: credentials and an id.
const OPEN_MAX: usize = 4096;
/// A write gathers queued messages up to about this many bytes.
const BATCH_BYTES: usize = 256 << 10;
/// Read buffer of a receiving link: many small messages per read.
const READ_BUFFER: usize = 64 << 10;

/// The sending half: one task per peer, from [`PeerSender`](crate::PeerSender).
pub(crate) struct LinkSender {
    pub(crate) to: NodeId,
    pub(crate) from: NodeId,
    /// `host:port` of the peer's port, resolved at every connection attempt (a name may move).
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) auth: ClusterAuth,
    pub(crate) tls: Option<tokio_rustls::TlsConnector>,
    pub(crate) local_address: Option<std::net::IpAddr>,
    pub(crate) queue: Arc<SendQueue>,
    pub(crate) stats: Arc<SenderStats>,
    pub(crate) connected: Arc<AtomicBool>,
    pub(crate) max_message_bytes: usize,
    pub(crate) keepalive: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) backoff_min: Duration,
    pub(crate) backoff_max: Duration,
}

enum OpenError {
    Io(io::Error),
    /// The peer answered no: wrong credentials on one side.
    Refused(String),
}

impl LinkSender {
    pub(crate) async fn run(self) {
        let mut backoff = self.backoff_min;
        let mut failures_in_a_row = 0u32;
        loop {
            let opened = tokio::time::timeout(self.connect_timeout, self.open()).await;
            match opened {
                Ok(Ok(stream)) => {
                    bump(&self.stats.connects);
                    failures_in_a_row = 0;
                    self.connected.store(true, Ordering::Relaxed);
                    tracing::debug!("link open");
                    let since = Instant::now();
                    let ended = self.carry(stream).await;
                    self.connected.store(false, Ordering::Relaxed);
                    tracing::info!(error = %ended, "link broke");
                    // A link that lived a while was working: reconnect at once and start backoff over.
                    if since.elapsed() >= Duration::from_secs(1) {
                        backoff = self.backoff_min;
                        continue;
                    }
                }
                Ok(Err(OpenError::Refused(detail))) => {
                    bump(&self.stats.rejected);
                    tracing::error!(
                        reason = %detail,
                        "peer refused our link: check cluster_id and cluster_secret on both nodes"
                    );
                }
                Ok(Err(OpenError::Io(e))) => self.connect_failed(&mut failures_in_a_row, &e.to_string()),
                Err(_) => self.connect_failed(
                    &mut failures_in_a_row,
                    &format!("no link within {} ms", self.connect_timeout.as_millis()),
                ),
            }
            tokio::time::sleep(jitter(backoff)).await;
            backoff = (backoff * 2).min(self.backoff_max);
        }
    }

    fn connect_failed(&self, failures_in_a_row: &mut u32, error: &str) {
        bump(&self.stats.connect_failures);
        *failures_in_a_row += 1;
        // The first failure is news; the rest of an outage is noise.
        if *failures_in_a_row == 1 {
            tracing::warn!(error, "cannot open a link to the peer; retrying with backoff");
        } else {
            tracing::debug!(error, failures_in_a_row = *failures_in_a_row, "still cannot open a link");
        }
    }

    async fn open(&self) -> Result<PortStream, OpenError> {
        let addr =
            tokio::net::lookup_host((self.host.as_str(), self.port)).await.map_err(OpenError::Io)?.next().ok_or_else(
                || OpenError::Io(io::Error::new(io::ErrorKind::NotFound, "the name resolves to nothing")),
            )?;
        let mut stream =
            crate::stream::dial(self.tls.as_ref(), self.local_address, self.to, addr).await.map_err(OpenError::Io)?;
        // Data the peer's kernel does not acknowledge within two keepalive intervals ends the link (a partition, a
        // frozen host): writes fail and the sender reconnects instead of filling the socket buffer for minutes.
        socket2::SockRef::from(stream.tcp()).set_tcp_user_timeout(Some(self.keepalive * 2)).map_err(OpenError::Io)?;
        let open = pb::LinkOpen {
            cluster_id: self.auth.cluster_id().to_string(),
            cluster_secret: self.auth.secret().to_string(),
            from: self.from,
            keepalive_ms: u64::try_from(self.keepalive.as_millis()).unwrap_or(u64::MAX),
        };
        let reply = crate::stream::open(&mut stream, &MAGIC, &open).await.map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                // A build from before links closes a connection it cannot read as HTTP/2 or a relay.
                OpenError::Io(io::Error::new(
                    e.kind(),
                    "the peer closed the link unanswered (a paxsql from before links?)",
                ))
            } else {
                OpenError::Io(e)
            }
        })?;
        match reply {
            Ok(()) => Ok(stream),
            Err(detail) => Err(OpenError::Refused(detail)),
        }
    }

    /// Writes queued messages until the link breaks; returns why it did.
    async fn carry(&self, mut stream: PortStream) -> io::Error {
        let mut buf = Vec::with_capacity(BATCH_BYTES);
        loop {
            buf.clear();
            match tokio::time::timeout(self.keepalive, self.queue.pop()).await {
                Ok(first) => {
                    self.encode(&first, &mut buf);
                    while buf.len() < BATCH_BYTES {
                        let Some(next) = self.queue.try_pop() else { break };
                        self.encode(&next, &mut buf);
                    }
                }
                Err(_) => put_len(&mut buf, 0),
            }
            if buf.is_empty() {
                continue;
            }
            if let Err(e) = async {
                stream.write_all(&buf).await?;
                stream.flush().await
            }
            .await
            {
                return e;
            }
            // A catch-up batch must not keep its buffer for the life of the link.
            if buf.capacity() > 4 * BATCH_BYTES {
                buf = Vec::with_capacity(BATCH_BYTES);
            }
        }
    }

    fn encode(&self, msg: &PeerMessage, out: &mut Vec<u8>) {
        bump(&self.stats.sent);
        if msg.to() != self.to {
            tracing::warn!(msg_to = msg.to(), "message queued to the wrong peer sender; sending anyway");
        }
        let env = seal_envelope(self.auth.cluster_id(), msg);
        let len = env.encoded_len();
        if len > self.max_message_bytes {
            bump(&self.stats.dropped_too_large);
            tracing::warn!(
                bytes = len,
                limit = self.max_message_bytes,
                "message larger than max_message_bytes dropped"
            );
            return;
        }
        put_len(out, len);
        // A Vec grows as needed: encoding into it cannot run out of room, so the frame is always whole.
        let _ = env.encode(out);
    }
}

/// Up to 50% less than `d`, so that peers that lost each other at the same moment do not retry in lockstep.
fn jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |t| t.subsec_nanos());
    d - d.mul_f64(f64::from(nanos % 1000) / 2000.0)
}

/// Reads and checks a link's opening, on a connection the peer port classified as a link (after the TLS handshake,
/// or on a plaintext one after its magic). `identity`: what the client certificate names (TLS): only a member may
/// open a link, and only for itself. Returns the opening and the certified member; errors are for the log and the
/// refusal, and carry no secret.
pub(crate) async fn read_open(
    stream: &mut PortStream,
    auth: &ClusterAuth,
    identity: Option<PeerIdentity>,
    magic_read: bool,
) -> Result<(pb::LinkOpen, Option<NodeId>), String> {
    let (frame, member) = crate::stream::read_opening(stream, "link", &MAGIC, magic_read, identity, OPEN_MAX).await?;
    let open = pb::LinkOpen::decode(frame).map_err(|e| format!("undecodable link opening: {e}"))?;
    crate::stream::check_credentials(auth, &open.cluster_id, &open.cluster_secret)?;
    if let Some(id) = member {
        if id != open.from {
            return Err(format!("the client certificate names member {id}, the link says it is from {}", open.from));
        }
    }
    Ok((open, member))
}

/// The receiving half's settings, shared by every link the port accepts.
pub(crate) struct Receiving {
    pub(crate) node_id: NodeId,
    pub(crate) cluster_id: String,
    pub(crate) inbox: InboxKind,
    pub(crate) stats: Arc<ServerStats>,
    pub(crate) max_message_bytes: usize,
    /// This node's keepalive interval; a link silent (not even a keepalive, nor a byte of a frame under way) for
    /// three of them, or of its sender's if longer, is dropped.
    pub(crate) keepalive: Duration,
}

/// The longest keepalive a sender may announce that a receiver honours: a silent link is dropped within a minute.
const KEEPALIVE_HONOURED: Duration = Duration::from_secs(20);

impl Receiving {
    /// Reads one accepted link's messages and hands them to the inbox until it ends, the port stops or the node
    /// does. `member`: the sender's certified id (TLS), which every message's `from` must equal.
    /// `keepalive`: the interval the sender announced.
    pub(crate) async fn receive(
        &self,
        stream: PortStream,
        member: Option<NodeId>,
        keepalive: Duration,
        mut stop: watch::Receiver<bool>,
    ) {
        let silence_limit = self.keepalive.max(keepalive.min(KEEPALIVE_HONOURED)) * 3;
        let mut reader = BufReader::with_capacity(READ_BUFFER, stream);
        let (mut received, mut dropped) = (0u64, 0u64);
        let ended = loop {
            let frame = tokio::select! {
                frame = read_frame_within(&mut reader, self.max_message_bytes, silence_limit) => frame,
                _ = stop.wait_for(|stop| *stop) => break "the peer server is stopping".to_string(),
                () = self.inbox.closed() => break "the node is stopping".to_string(),
            };
            let frame = match frame {
                Ok(frame) => frame,
                Err(e) => break e.to_string(),
            };
            if frame.is_empty() {
                continue;
            }
            received += 1;
            bump(&self.stats.received);
            match self.admit(frame, member) {
                Some(msg) => match self.inbox.deliver(msg) {
                    crate::Delivery::Delivered => bump(&self.stats.delivered),
                    crate::Delivery::Full => {
                        // Paxos retransmits; blocking here would only move the backlog into the socket buffers.
                        dropped += 1;
                        bump(&self.stats.dropped_inbox_full);
                        tracing::trace!("inbox full, dropped message");
                    }
                    crate::Delivery::Closed => break "the node is stopping".to_string(),
                },
                None => dropped += 1,
            }
        };
        tracing::debug!(received, dropped, why = %ended, "link closed");
    }

    /// The message in `frame` if it decodes, belongs to this cluster, comes from the certified member and is for
    /// this node; otherwise counted and logged.
    fn admit(&self, frame: bytes::Bytes, member: Option<NodeId>) -> Option<PeerMessage> {
        let opened = pb::PeerEnvelope::decode(frame)
            .map_err(TransportError::from)
            .and_then(|env| open_envelope(env, &self.cluster_id));
        let msg = match opened {
            Ok(msg) => msg,
            Err(e) => {
                bump(&self.stats.malformed);
                tracing::warn!(error = %e, "dropped malformed peer message");
                return None;
            }
        };
        if member.is_some_and(|id| id != msg.from()) {
            bump(&self.stats.forged);
            tracing::warn!(from = msg.from(), ?member, "dropped message whose sender is not the certified member");
            return None;
        }
        if msg.to() != self.node_id {
            bump(&self.stats.misaddressed);
            tracing::warn!(from = msg.from(), to = msg.to(), "dropped message addressed to another node");
            return None;
        }
        Some(msg)
    }
}

/// Where a link dials: the host and port of a peer's endpoint (`host:port`, or a URI whose scheme says whether TLS
/// is on).
pub(crate) fn host_and_port(endpoint: &tonic::transport::Endpoint) -> Option<(String, u16)> {
    let uri = endpoint.uri();
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']').to_string();
    Some((host, uri.port_u16()?))
}

// A plaintext port reads as many bytes as a relay's magic before it knows what a connection is.
const _: () = assert!(MAGIC.len() == crate::relay::MAGIC.len());
