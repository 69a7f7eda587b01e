//! The global-log driver: one thread that owns the [`GlobalLogNode`] and its raft-engine store, feeds it peer
//! messages, commands and ticks, and carries out its outputs in the order the core requires — immediate messages
//! first, then the applied effects of chosen values, then the batch written and synced, then the messages that
//! depended on it.
//!
//! A thread rather than a tokio task: raft-engine writes block, and the group commit they provide (several inputs
//! drained before one sync) needs exactly one writer.

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use paxsql_admin_sql::{Metrics, PaxosRoundPart};
use paxsql_global_log::{Applied, GlobalLogConfig, GlobalLogError, GlobalLogNode, MemberAddress, PeerMessage, ReadyIo};
use paxsql_paxos::{Instance, Membership, MessageBody, NodeId, Role, Storage, StorageError, Value};
use paxsql_paxos_store::RaftEngineStorage;
use tokio::sync::{broadcast, oneshot, watch};

/// Receives every applied effect synchronously, in log order, before anything else learns of it (the global
/// binlog that replicas are served from is fed this way, so it can never miss a transaction).
pub trait AppliedSink: Send {
    fn apply(&mut self, effect: &Applied);

    /// Makes everything applied so far durable. Called before the Paxos log drops instances (a compaction), so
    /// that what a crash may take from the sink is always still in the log to replay. An error keeps the
    /// instances: the compaction waits for the next snapshot.
    fn persist(&mut self) -> Result<(), String>;
}

/// How the driver reaches other members. Must never block: drop instead (Paxos retransmits).
pub trait Outbox: Send {
    fn send(&mut self, msg: PeerMessage);

    /// Where `node` is reached from now on (an address recorded in the log). An address that cannot be used is
    /// reported and ignored: the member stays unreachable until a usable one is recorded.
    fn set_address(&mut self, node: NodeId, peer: &str);
}

/// What can be asked of the driver.
pub enum Input {
    Peer(PeerMessage),
    ProposeBinlog {
        domain_id: u32,
        server_id: u32,
        first_seq: u64,
        last_seq: u64,
        events: Vec<u8>,
        reply: oneshot::Sender<Result<(), GlobalLogError>>,
    },
    /// One part of a transaction too large for one log entry ([`GlobalLogNode::propose_binlog_part`]).
    ProposeBinlogPart {
        domain_id: u32,
        server_id: u32,
        seq: u64,
        offset: u64,
        last: bool,
        bytes: Vec<u8>,
        reply: oneshot::Sender<Result<(), GlobalLogError>>,
    },
    ChangeMembership {
        next: Membership,
        reply: oneshot::Sender<Result<(), GlobalLogError>>,
    },
    /// Record where a member (or member-to-be) is reached ([`GlobalLogNode::record_member`]).
    RecordMember {
        node: NodeId,
        address: MemberAddress,
        reply: oneshot::Sender<Result<(), GlobalLogError>>,
    },
    /// Progress of the local database (candidate preference).
    SetProgress(u64),
    /// Whether the local database can serve as master (candidacy).
    SetEligible(bool),
    /// Give up the master role (the local database failed), naming a successor ([`GlobalLogNode::hand_over`]).
    HandOver,
    /// An operator's switchover, once the local database is drained ([`GlobalLogNode::switch_over`]): the
    /// successor named in the log, or why not (the term goes on).
    SwitchOver {
        to: Option<NodeId>,
        reply: oneshot::Sender<Result<NodeId, GlobalLogError>>,
    },
    Shutdown,
}

/// A glance at the node, republished after every step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStatus {
    pub node_id: NodeId,
    pub role: String,
    pub master_id: NodeId,
    pub master_version: u64,
    pub holds_lease: bool,
    /// Local monotonic ms until which the lease is held (valid while `holds_lease`).
    pub lease_until_ms: u64,
    /// The same deadline in wall-clock ms since the Unix epoch (0 while the lease is not held).
    pub lease_until_unix_ms: u64,
    /// The master's lease is valid as far as this node knows (see `GlobalLogNode::master_lease_seen`).
    pub master_lease_seen: bool,
    pub applied: u64,
    /// The first instance this node's Paxos log still holds (everything before is compacted into a snapshot): a
    /// member behind it is rebuilt from a snapshot.
    pub log_first_held: u64,
    pub last_seq: Option<u64>,
    /// The global log's last GTID, `domain-server-seq` (empty before the first transaction).
    pub last_gtid: String,
    pub members: Vec<NodeId>,
    /// Addresses recorded in the log (members added after it began, or moved).
    pub addresses: Vec<(NodeId, MemberAddress)>,
    pub promised: String,
    /// Instances this node proposed as leader that are not chosen yet.
    pub proposals_in_flight: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("global log storage: {0} (the node stops: its in-memory state may be ahead of its disk)")]
    Storage(#[from] StorageError),
}

/// Handles to a running driver.
pub struct DriverHandle {
    pub inbox: SyncSender<Input>,
    pub status: watch::Receiver<NodeStatus>,
    pub applied: broadcast::Sender<Applied>,
    pub thread: std::thread::JoinHandle<Result<(), DriverError>>,
}

/// Milliseconds on a monotonic clock that starts at 1 when the process does.
pub struct MonotonicClock {
    start: Instant,
    /// Wall-clock ms since the Unix epoch at `start`, to show a local deadline to people and tools.
    start_unix_ms: u64,
}

impl MonotonicClock {
    pub fn new() -> Self {
        let start_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        MonotonicClock { start: Instant::now(), start_unix_ms }
    }
    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64 + 1
    }
    /// A local time as wall-clock ms since the Unix epoch (by the wall clock at process start: a later wall-clock
    /// step does not move it, so it is only for display and for tools on the same machine).
    pub fn to_unix_ms(&self, local_ms: u64) -> u64 {
        self.start_unix_ms + local_ms.saturating_sub(1)
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

const TICK: Duration = Duration::from_millis(10);
/// Inputs taken before one sync: the group commit.
const MAX_INPUTS_PER_SYNC: usize = 256;

/// Recovers the node from its store and starts the driver thread.
pub fn start(
    cfg: GlobalLogConfig,
    mut store: RaftEngineStorage,
    mut outbox: Box<dyn Outbox>,
    mut sink: Box<dyn AppliedSink>,
    metrics: Metrics,
) -> Result<DriverHandle, DriverError> {
    let clock = MonotonicClock::new();
    let recovered = store.recover()?;
    let mut pages =
        ChosenPages { store: &store, next: recovered.first_chosen, page: Vec::new().into_iter(), error: None };
    let node = GlobalLogNode::restore(cfg, recovered, &mut pages, clock.now_ms(), &mut |effect| sink.apply(effect));
    if let Some(e) = pages.error {
        return Err(e.into());
    }
    let (inbox, rx) = std::sync::mpsc::sync_channel(65_536);
    let (status_tx, status) = watch::channel(NodeStatus::default());
    let (applied, _) = broadcast::channel(65_536);
    // Members recorded in the log before this start: the config names only the initial ones.
    for (id, address) in &node.state().addresses {
        if *id != node.id() {
            outbox.set_address(*id, &address.peer);
        }
    }
    let mut d = Driver {
        node,
        store,
        outbox,
        sink,
        clock,
        status: status_tx,
        applied: applied.clone(),
        loopback: Vec::new(),
        rounds: RoundClock { metrics, sent: BTreeMap::new(), taken: BTreeMap::new() },
    };
    let thread = std::thread::Builder::new()
        .name("paxsql-global-log".into())
        .spawn(move || d.run(rx))
        .map_err(|e| DriverError::Storage(StorageError::Io(format!("cannot start driver thread: {e}"))))?;
    Ok(DriverHandle { inbox, status, applied, thread })
}

/// Bytes of chosen values read from the store at once while a restart replays the retained log: what the replay
/// holds in memory, whatever the length of the log.
const RESTORE_PAGE_BYTES: usize = 8 << 20;

/// The retained chosen log, read from the store a page at a time. A read error ends the iteration and is kept.
struct ChosenPages<'a> {
    store: &'a RaftEngineStorage,
    next: Instance,
    page: std::vec::IntoIter<(Instance, Value)>,
    error: Option<StorageError>,
}

impl Iterator for ChosenPages<'_> {
    type Item = (Instance, Value);

    fn next(&mut self) -> Option<(Instance, Value)> {
        if let Some(entry) = self.page.next() {
            self.next = entry.0 + 1;
            return Some(entry);
        }
        if self.error.is_some() {
            return None;
        }
        match self.store.chosen(self.next, usize::MAX, RESTORE_PAGE_BYTES) {
            Ok(page) if page.is_empty() => None,
            Ok(page) => {
                self.page = page.into_iter();
                self.next()
            }
            Err(e) => {
                self.error = Some(e);
                None
            }
        }
    }
}

/// Sends an input to the driver without blocking; a full inbox drops it (peer traffic is retransmitted).
pub fn offer(inbox: &SyncSender<Input>, input: Input) -> bool {
    match inbox.try_send(input) {
        Ok(()) => true,
        Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => false,
    }
}

struct Driver {
    node: GlobalLogNode,
    store: RaftEngineStorage,
    outbox: Box<dyn Outbox>,
    sink: Box<dyn AppliedSink>,
    clock: MonotonicClock,
    status: watch::Sender<NodeStatus>,
    applied: broadcast::Sender<Applied>,
    /// Messages addressed to this node itself, delivered without the network.
    loopback: Vec<PeerMessage>,
    rounds: RoundClock,
}

/// Times the parts of Paxos rounds that only the driver sees (`paxsql_paxos_round_seconds`): when an Accept left
/// for the peers and its first Accepted came back (leader), when an Accept was taken and its Accepted left (every
/// member), how long each store write took.
struct RoundClock {
    metrics: Metrics,
    /// Leader: instance → when its Accept was first handed to the links.
    sent: BTreeMap<Instance, Instant>,
    /// Member: instance → when an Accept for it was taken from the inbox.
    taken: BTreeMap<Instance, Instant>,
}

/// Entries of either map beyond which the oldest are forgotten (rounds a leader change left unanswered).
const ROUNDS_TRACKED: usize = 4096;

impl RoundClock {
    /// A message taken from the inbox.
    fn taken(&mut self, m: &PeerMessage) {
        let PeerMessage::Paxos(m) = m else { return };
        match m.body {
            MessageBody::Accepted { instance, .. } => {
                if let Some(at) = self.sent.remove(&instance) {
                    self.metrics.record_paxos_round(PaxosRoundPart::PeerRoundTrip, at.elapsed());
                }
            }
            MessageBody::Accept { instance, .. } => {
                self.taken.entry(instance).or_insert_with(Instant::now);
                forget_oldest(&mut self.taken);
            }
            _ => {}
        }
    }

    /// A message handed to the links.
    fn sent(&mut self, m: &PeerMessage) {
        let PeerMessage::Paxos(m) = m else { return };
        match m.body {
            MessageBody::Accept { instance, .. } => {
                self.sent.entry(instance).or_insert_with(Instant::now);
                forget_oldest(&mut self.sent);
            }
            MessageBody::Accepted { instance, .. } => {
                if let Some(at) = self.taken.remove(&instance) {
                    self.metrics.record_paxos_round(PaxosRoundPart::AcceptService, at.elapsed());
                }
            }
            _ => {}
        }
    }
}

fn forget_oldest(m: &mut BTreeMap<Instance, Instant>) {
    while m.len() > ROUNDS_TRACKED {
        m.pop_first();
    }
}

impl Driver {
    fn run(&mut self, rx: Receiver<Input>) -> Result<(), DriverError> {
        let span = tracing::info_span!("global_log", node = self.node.id());
        let _enter = span.enter();
        let mut next_tick = Instant::now();
        loop {
            let timeout = next_tick.saturating_duration_since(Instant::now());
            match rx.recv_timeout(timeout) {
                Ok(input) => {
                    if !self.handle(input) {
                        return Ok(());
                    }
                    for _ in 0..MAX_INPUTS_PER_SYNC {
                        match rx.try_recv() {
                            Ok(input) => {
                                if !self.handle(input) {
                                    return Ok(());
                                }
                            }
                            Err(_) => break,
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
            if Instant::now() >= next_tick {
                self.node.tick(self.clock.now_ms());
                next_tick = Instant::now() + TICK;
            }
            self.process_ready()?;
        }
    }

    /// Returns false on shutdown.
    fn handle(&mut self, input: Input) -> bool {
        let now = self.clock.now_ms();
        match input {
            Input::Peer(m) => {
                self.rounds.taken(&m);
                self.node.step(m, now)
            }
            Input::ProposeBinlog { domain_id, server_id, first_seq, last_seq, events, reply } => {
                self.node.tick(now);
                let _ = reply.send(self.node.propose_binlog(domain_id, server_id, first_seq, last_seq, events.into()));
            }
            Input::ProposeBinlogPart { domain_id, server_id, seq, offset, last, bytes, reply } => {
                self.node.tick(now);
                let _ =
                    reply.send(self.node.propose_binlog_part(domain_id, server_id, seq, offset, last, bytes.into()));
            }
            Input::ChangeMembership { next, reply } => {
                self.node.tick(now);
                let result = self.node.change_membership(next.clone());
                match &result {
                    Ok(()) => tracing::info!(members = ?next.members, "proposing a membership change"),
                    Err(e) => tracing::warn!(members = ?next.members, error = %e, "membership change refused"),
                }
                let _ = reply.send(result);
            }
            Input::RecordMember { node, address, reply } => {
                self.node.tick(now);
                let _ = reply.send(self.node.record_member(node, address.peer, address.mariadb));
            }
            Input::SetProgress(p) => self.node.set_progress(p),
            Input::SetEligible(e) => self.node.set_eligible(e),
            Input::HandOver => match self.node.hand_over() {
                Some(successor) => tracing::warn!(successor, "handing the master role over"),
                None => tracing::warn!("resigning the master role (no live successor to hand it to)"),
            },
            Input::SwitchOver { to, reply } => {
                self.node.tick(now);
                let result = self.node.switch_over(to);
                match &result {
                    Ok(successor) => tracing::info!(successor, "switchover: handing the master role over"),
                    Err(e) => tracing::warn!(error = %e, "switchover refused"),
                }
                let _ = reply.send(result);
            }
            Input::Shutdown => return false,
        }
        true
    }

    fn process_ready(&mut self) -> Result<(), DriverError> {
        // Self-addressed messages can produce more output; a few rounds settle them.
        for _ in 0..8 {
            let ready = self.node.take_ready();
            if let Some(why) = &ready.term_given_up {
                tracing::error!(%why, "giving up the master term: its waiting commits are never acknowledged");
            }
            if let Some(first) = ready.rebuild_required {
                tracing::warn!(
                    first_held = first,
                    "this member is behind the cluster's compacted log: asking the members for a snapshot"
                );
            }
            let Driver { node, store, outbox, sink, applied, loopback, rounds, .. } = self;
            let mut io =
                DriverIo { me: node.id(), paxos: &node.config().paxos, store, outbox, sink, applied, loopback, rounds };
            ready.carry_out(&mut io)?;
            if self.loopback.is_empty() {
                break;
            }
            let now = self.clock.now_ms();
            for m in std::mem::take(&mut self.loopback) {
                self.node.step(m, now);
            }
        }
        self.publish_status();
        Ok(())
    }

    fn publish_status(&self) {
        let now = self.clock.now_ms();
        let st = self.node.state();
        let status = NodeStatus {
            node_id: self.node.id(),
            role: match (self.node.holds_lease(now), self.node.paxos().role()) {
                (true, _) => "master".into(),
                (false, Role::Candidate) => "candidate".into(),
                (false, _) => "replica".into(),
            },
            master_id: st.master_id,
            master_version: st.master_version,
            holds_lease: self.node.holds_lease(now),
            lease_until_ms: self.node.lease_until(),
            lease_until_unix_ms: if self.node.holds_lease(now) {
                self.clock.to_unix_ms(self.node.lease_until())
            } else {
                0
            },
            master_lease_seen: self.node.master_lease_seen(now),
            applied: st.applied,
            log_first_held: self.node.paxos().first_held(),
            last_seq: st.last_gtid.map(|g| g.seq_no),
            last_gtid: st
                .last_gtid
                .map(|g| format!("{}-{}-{}", g.domain_id, g.server_id, g.seq_no))
                .unwrap_or_default(),
            members: st.membership.members.iter().copied().collect(),
            addresses: st.addresses.iter().map(|(n, a)| (*n, a.clone())).collect(),
            promised: self.node.paxos().promised().to_string(),
            proposals_in_flight: self.node.paxos().pending().0 as u64,
        };
        self.status.send_if_modified(|s| {
            if *s == status {
                false
            } else {
                *s = status;
                true
            }
        });
    }
}

/// How the driver carries out a node's output ([`paxsql_global_log::ReadyIo`], whose `carry_out` fixes the order):
/// peers through the outbox, itself through the loopback, effects to the served binlog and the subscribers, the
/// batch synced to the store.
struct DriverIo<'a> {
    me: NodeId,
    paxos: &'a paxsql_paxos::Config,
    store: &'a mut RaftEngineStorage,
    outbox: &'a mut Box<dyn Outbox>,
    sink: &'a mut Box<dyn AppliedSink>,
    applied: &'a broadcast::Sender<Applied>,
    loopback: &'a mut Vec<PeerMessage>,
    rounds: &'a mut RoundClock,
}

impl ReadyIo for DriverIo<'_> {
    type Error = DriverError;

    fn send(&mut self, m: PeerMessage) {
        if m.to() == self.me {
            self.loopback.push(m);
        } else {
            self.rounds.sent(&m);
            self.outbox.send(m);
        }
    }

    fn applied(&mut self, effect: Applied) -> Result<(), DriverError> {
        log_effect(&effect);
        if let Applied::MemberRecorded { node, address, .. } = &effect {
            if *node != self.me {
                self.outbox.set_address(*node, &address.peer);
            }
        }
        self.sink.apply(&effect);
        let _ = self.applied.send(effect);
        Ok(())
    }

    fn catch_up(&mut self, read: paxsql_paxos::CatchUpRead) -> Result<(), DriverError> {
        match read.answer(self.me, &*self.store, self.paxos) {
            Ok(m) => {
                if let paxsql_paxos::MessageBody::CatchUp { entries, .. } = &m.body {
                    tracing::info!(
                        to = read.to,
                        from = read.from_instance,
                        entries = entries.len(),
                        "catching a member up from the store"
                    );
                }
                self.send(PeerMessage::Paxos(m));
            }
            // The member asks again after its retransmit interval.
            Err(e) => tracing::warn!(to = read.to, from = read.from_instance, error = %e, "cannot read a catch-up"),
        }
        Ok(())
    }

    fn persist(&mut self, mut batch: paxsql_paxos::WriteBatch, after: Vec<PeerMessage>) -> Result<(), DriverError> {
        if let Some(s) = &batch.snapshot {
            tracing::debug!(last_included = s.last_included, "compacting the global log");
            // The served binlog is re-filled from the Paxos log's replay after a crash: it must be synced before
            // the log forgets what it covers.
            if let Err(e) = self.sink.persist() {
                // Keeping instances the core considers compacted is safe: a restart replays more than needed.
                tracing::error!(error = %e, "the served binlog cannot be synced: the global log keeps its instances");
                batch.snapshot = None;
            }
        }
        if !batch.is_empty() {
            // Chosen entries alone skip the fsync (`WriteBatch::needs_sync` says why that is safe): one fewer
            // per round on every member, and the driver thread free for the next input sooner.
            let sync = batch.needs_sync() || !after.is_empty();
            let started = Instant::now();
            self.store.write(&batch, sync)?;
            let part = if sync { PaxosRoundPart::StoreWriteSynced } else { PaxosRoundPart::StoreWriteUnsynced };
            self.rounds.metrics.record_paxos_round(part, started.elapsed());
        }
        for m in after {
            self.send(m);
        }
        Ok(())
    }
}

fn log_effect(effect: &Applied) {
    match effect {
        Applied::MasterChanged { master, master_version, instance, .. } => {
            tracing::info!(master, master_version, instance, "master changed");
        }
        Applied::MembershipChanged { membership, instance } => {
            tracing::info!(members = ?membership.members, instance, "membership changed");
        }
        Applied::MemberRecorded { node, address, instance } => {
            tracing::info!(node, peer = %address.peer, mariadb = %address.mariadb, instance, "member address recorded");
        }
        Applied::Restored { instance, last_gtid } => {
            let last_gtid = last_gtid.map(|g| format!("{}-{}-{}", g.domain_id, g.server_id, g.seq_no));
            tracing::warn!(
                instance,
                ?last_gtid,
                "installed a member's snapshot: the global log goes on from there; a local database behind it is \
                 rebuilt from a member"
            );
        }
        Applied::Rejected { kind, reason, instance, .. } if *kind != "renew_lease" => {
            tracing::debug!(kind, ?reason, instance, "command rejected");
        }
        _ => {}
    }
}

/// Hands an input to the driver without blocking the runtime; waits while the inbox is full (back-pressure on
/// the capture, which is what makes MariaDB's committers wait).
pub(crate) async fn send_input(inbox: &SyncSender<Input>, mut input: Input) -> Result<(), ()> {
    loop {
        match inbox.try_send(input) {
            Ok(()) => return Ok(()),
            Err(std::sync::mpsc::TrySendError::Full(back)) => {
                input = back;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => return Err(()),
        }
    }
}
