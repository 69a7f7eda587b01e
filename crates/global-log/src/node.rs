//! [`GlobalLogNode`]: the Paxos core plus the replicated state machine plus this node's view of the master lease.
//! This is what the binlog server runs and what the simulator drives: pure, with time passed in.
//!
//! Lease rule (docs/ARCHITECTURE.md §5): the master holds its lease until `proposed_at + lease_ms` on its own monotonic clock,
//! counted from when it proposed the renewal (or the change) that was then applied successfully. Every other
//! member notes the local time at which it applied the latest renewal and stands for election only once
//! `lease_ms + max_clock_drift_ms` (plus a stagger for members that applied less) have passed since. A candidate's
//! `ChangeMaster` compares and sets the lease sequence, which every renewal bumps, so a candidate that has not
//! seen the newest renewal cannot win.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use paxsql_paxos::{
    CatchUpRead, Instance, Membership, Message, NodeId, PaxosNode, ProposeError, RecoveredState, Role, Snapshot, Value,
    WriteBatch,
};

use crate::command::Command;
use crate::state::{Applied, ReplicatedState};

#[derive(Clone, Debug)]
pub struct GlobalLogConfig {
    pub paxos: paxsql_paxos::Config,
    /// The group's membership at instance 1.
    pub initial_membership: Membership,
    /// Other nodes this one has an address for (its config's): status goes to them as well as to the members, so
    /// that a node that is no member yet — or whose log still names members that are gone — reaches the group.
    pub contacts: BTreeSet<NodeId>,
    /// How long a master holds its lease after proposing a renewal.
    pub lease_ms: u64,
    /// How far two members' clocks may drift apart over one lease; a candidate waits this much longer.
    pub max_clock_drift_ms: u64,
    /// How often the master renews (a third of the lease by default).
    pub renew_interval_ms: u64,
    /// Extra wait per member that has applied more than this one, so the most up-to-date member stands first.
    pub stand_stagger_ms: u64,
    /// How often a member tells the others how far it has applied.
    pub status_interval_ms: u64,
    /// A campaign (phase 1 plus the master change) that has not succeeded after this long is abandoned.
    pub campaign_timeout_ms: u64,
    /// Keep this many chosen instances behind the newest snapshot for lagging members to catch up from.
    pub snapshot_every: u64,
    /// Seeds the jitter of election back-off.
    pub seed: u64,
    /// The largest binlog transaction one log entry carries: one value must fit in one peer message. A larger
    /// one is refused at once ([`GlobalLogError::TransactionTooLarge`]) instead of breaking every peer stream it is
    /// sent on until the lease runs out.
    pub max_value_bytes: usize,
}

/// What a peer message carries beside one value (ballots, instance numbers, framing): the room a value leaves.
pub const VALUE_MESSAGE_MARGIN: usize = 64 << 10;

impl GlobalLogConfig {
    /// Defaults sized for a LAN (docs/ARCHITECTURE.md §5: lease about 1.5 s, renewed every lease/3).
    pub fn lan(id: NodeId, initial_membership: Membership) -> Self {
        GlobalLogConfig {
            paxos: paxsql_paxos::Config::new(id),
            initial_membership,
            contacts: BTreeSet::new(),
            lease_ms: 1500,
            max_clock_drift_ms: 300,
            renew_interval_ms: 500,
            stand_stagger_ms: 200,
            status_interval_ms: 100,
            campaign_timeout_ms: 1500,
            snapshot_every: 10_000,
            seed: id,
            max_value_bytes: (16 << 20) - VALUE_MESSAGE_MARGIN,
        }
    }

    /// The largest clock rate error (as a fraction, e.g. 0.05 for 5%) under which the lease stays safe: the master
    /// may measure `lease_ms` as up to `lease/(1-r)` real time, a candidate `lease+drift` as little as
    /// `(lease+drift)/(1+r)`.
    pub fn max_safe_clock_rate_error(&self) -> f64 {
        let (l, d) = (self.lease_ms as f64, self.max_clock_drift_ms as f64);
        d / (2.0 * l + d)
    }
}

/// What travels between members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerMessage {
    Paxos(Message),
    /// How far the sender's database has applied (candidate preference) and its last chosen instance
    /// (anti-entropy: a member that is behind asks it for the difference).
    Status {
        from: NodeId,
        to: NodeId,
        progress: u64,
        chosen_up_to: Instance,
    },
    /// The sender is behind the compacted log (it got `CatchUpGone`) and asks for a snapshot to restart from.
    SnapshotRequest {
        from: NodeId,
        to: NodeId,
    },
    /// The sender's state machine at its last applied instance: master, lease, last GTID, membership (no binlog:
    /// the database comes from a rebuild, the transactions after it from the sender's log).
    SnapshotReply {
        from: NodeId,
        to: NodeId,
        snapshot: Snapshot,
    },
}

impl PeerMessage {
    pub fn to(&self) -> NodeId {
        match self {
            PeerMessage::Paxos(m) => m.to,
            PeerMessage::Status { to, .. }
            | PeerMessage::SnapshotRequest { to, .. }
            | PeerMessage::SnapshotReply { to, .. } => *to,
        }
    }
    pub fn from(&self) -> NodeId {
        match self {
            PeerMessage::Paxos(m) => m.from,
            PeerMessage::Status { from, .. }
            | PeerMessage::SnapshotRequest { from, .. }
            | PeerMessage::SnapshotReply { from, .. } => *from,
        }
    }
}

/// Drained by [`GlobalLogNode::take_ready`]; same contract as [`paxsql_paxos::Ready`].
#[derive(Debug, Default)]
pub struct NodeReady {
    pub batch: WriteBatch,
    pub messages: Vec<PeerMessage>,
    pub after_persist: Vec<PeerMessage>,
    /// Newly chosen values in order (already applied to the state machine).
    pub chosen: Vec<(Instance, Value)>,
    /// Effects of applying them, in order.
    pub applied: Vec<Applied>,
    pub rebuild_required: Option<Instance>,
    /// Catch-ups to answer from storage (see [`paxsql_paxos::Ready::catch_up_reads`]).
    pub catch_up_reads: Vec<CatchUpRead>,
    /// Why this node gave up its master term on its own in this round, if it did.
    pub term_given_up: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobalLogError {
    #[error("this node is not the master (master is {master})")]
    NotMaster { master: NodeId },
    #[error("this node's master lease has expired")]
    LeaseExpired,
    #[error(
        "binlog transaction {domain_id}-{server_id}-{seq} is {bytes} bytes, more than one log entry carries \
         ({limit} bytes); it is not acknowledged"
    )]
    TransactionTooLarge { domain_id: u32, server_id: u32, seq: u64, bytes: usize, limit: usize },
    #[error("no member can take the master role over: {0}")]
    NoSuccessor(String),
    #[error(transparent)]
    Propose(#[from] ProposeError),
}

#[derive(Debug)]
pub struct GlobalLogNode {
    cfg: GlobalLogConfig,
    paxos: PaxosNode,
    state: ReplicatedState,
    now: u64,
    /// Local time at which this node last applied a master change or renewal of someone else's term.
    last_renewal_seen: u64,
    /// A term this incarnation won: only then does it renew and hold a lease.
    my_term: Option<u64>,
    lease_until: u64,
    next_renew_at: u64,
    /// `proposed_at_ms` of our own pending `ChangeMaster`.
    change_master_pending: Option<u64>,
    standing_since: Option<u64>,
    backoff_until: u64,
    /// Each peer's last status: its database's progress, and the local time it arrived (a successor must be alive).
    peers: BTreeMap<NodeId, PeerSeen>,
    progress_override: Option<u64>,
    /// Whether this member's database can serve as master now (false while it is down or being rebuilt).
    eligible: bool,
    last_status_sent: Option<u64>,
    /// A copy of the state taken at a snapshot point, used to compact once the log has moved on.
    pending_snapshot: Option<ReplicatedState>,
    rng: u64,
    /// Behind the compacted log: the first instance members still hold, and when we last asked for a snapshot.
    snapshot_wanted: Option<(Instance, Option<u64>)>,
    /// Messages this layer sends on its own (snapshot requests and replies), drained with the next ready.
    outgoing: Vec<PeerMessage>,
    /// Set by a snapshot install, reported first in the next ready.
    restored: Option<Applied>,
    /// Non-members that sent us their status and get ours back.
    status_replies: BTreeSet<NodeId>,
    /// `proposed_at_ms` of this incarnation's recent `ChangeMaster` proposals.
    own_change_proposals: std::collections::VecDeque<u64>,
    /// This term's binlog proposals not applied yet, in proposal order: (`proposed_at_ms`, last seq_no, offset of a
    /// part or 0).
    own_appends: std::collections::VecDeque<(u64, u64, u64)>,
    /// While a transaction's parts arrive ([`ReplicatedState::open`]), the state before the instance of its first
    /// part: what a snapshot for another member holds then.
    before_open: Option<ReplicatedState>,
    /// Set when this node gives up its term on its own; drained by [`Self::take_ready`].
    term_given_up: Option<String>,
    /// When this node proposed to hand its term over; it keeps its Paxos leadership until that is chosen.
    handing_over_since: Option<u64>,
}

impl GlobalLogNode {
    /// A member with an empty log, starting at local time `now`.
    pub fn new(cfg: GlobalLogConfig, now: u64) -> Self {
        Self::restore(cfg, RecoveredState { first_chosen: 1, ..Default::default() }, Vec::new(), now, &mut |_| {})
    }

    /// A member restarting from its storage (see [`PaxosNode::restore`]). The effects of replaying the retained
    /// log (binlog transactions to serve again, the master, ...) go to `on_replayed` as they are produced: `chosen`
    /// may be read page by page, so a restart never holds the whole retained log.
    pub fn restore(
        cfg: GlobalLogConfig,
        recovered: RecoveredState,
        chosen: impl IntoIterator<Item = (Instance, Value)>,
        now: u64,
        on_replayed: &mut dyn FnMut(&Applied),
    ) -> Self {
        let snapshot =
            recovered.snapshot.as_ref().and_then(|s| ReplicatedState::decode_snapshot(&s.data, s.membership.clone()));
        if let Some(st) = &snapshot {
            on_replayed(&Applied::Restored { instance: st.applied, last_gtid: st.last_gtid });
        }
        let mut state = snapshot.unwrap_or_else(|| ReplicatedState::new(cfg.initial_membership.clone()));
        let mut before_open = None;
        let mut effects = Vec::new();
        let chosen = chosen.into_iter().inspect(|(i, v)| {
            if *i == state.applied + 1 {
                apply_keeping_before_open(&mut state, &mut before_open, *i, v, &mut effects);
                for e in effects.drain(..) {
                    on_replayed(&e);
                }
            }
        });
        let paxos = PaxosNode::restore(cfg.paxos.clone(), cfg.initial_membership.clone(), recovered, chosen);
        let rng = cfg.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ cfg.paxos.id ^ 0x5851_F42D_4C95_7F2D;
        GlobalLogNode {
            cfg,
            paxos,
            state,
            now,
            // After a restart we cannot know when the last renewal was seen: assume just now.
            last_renewal_seen: now,
            my_term: None,
            lease_until: 0,
            next_renew_at: 0,
            change_master_pending: None,
            standing_since: None,
            backoff_until: 0,
            peers: BTreeMap::new(),
            progress_override: None,
            eligible: true,
            last_status_sent: None,
            pending_snapshot: None,
            rng: rng | 1,
            snapshot_wanted: None,
            outgoing: Vec::new(),
            restored: None,
            own_change_proposals: std::collections::VecDeque::new(),
            own_appends: std::collections::VecDeque::new(),
            before_open,
            term_given_up: None,
            handing_over_since: None,
            status_replies: BTreeSet::new(),
        }
    }

    // ----- introspection -----

    pub fn id(&self) -> NodeId {
        self.cfg.paxos.id
    }
    pub fn state(&self) -> &ReplicatedState {
        &self.state
    }
    pub fn paxos(&self) -> &PaxosNode {
        &self.paxos
    }
    pub fn config(&self) -> &GlobalLogConfig {
        &self.cfg
    }
    /// Whether this node holds the master lease at local time `now`: only then may it serve as master.
    pub fn holds_lease(&self, now: u64) -> bool {
        self.state.master_id == self.id() && self.my_term == Some(self.state.master_version) && now < self.lease_until
    }
    /// The master term this node is serving, if it holds the lease at `now`.
    pub fn master_term(&self, now: u64) -> Option<u64> {
        self.holds_lease(now).then_some(self.state.master_version)
    }
    /// Local time until which the lease is held (meaningful only while [`Self::holds_lease`]).
    /// Whether, as far as this member can tell, the current master still holds its lease: this member holds it,
    /// or applied the master's last renewal less than a lease ago. Its proxy routes writes only while this holds.
    pub fn master_lease_seen(&self, now: u64) -> bool {
        self.state.master_id != 0 && (self.holds_lease(now) || now < self.last_renewal_seen + self.cfg.lease_ms)
    }

    pub fn lease_until(&self) -> u64 {
        self.lease_until
    }

    // ----- inputs -----

    /// Sets how far this node's database has applied the global log (the real measure of candidate preference);
    /// by default the applied instance is used.
    pub fn set_progress(&mut self, progress: u64) {
        self.progress_override = Some(progress);
    }

    /// Whether this member may stand for master. A member whose database is down, diverged or being rebuilt would
    /// win a lease it cannot use and keep the cluster without a master for a whole lease; it still votes and
    /// applies the log.
    pub fn set_eligible(&mut self, eligible: bool) {
        self.eligible = eligible;
    }

    pub fn tick(&mut self, now: u64) {
        self.now = self.now.max(now);
        self.paxos.tick(self.now);
    }

    pub fn step(&mut self, msg: PeerMessage, now: u64) {
        self.now = self.now.max(now);
        match msg {
            PeerMessage::Paxos(m) => self.paxos.step(m),
            PeerMessage::Status { from, progress, chosen_up_to, .. } => {
                self.peers.insert(from, PeerSeen { progress, at: self.now });
                self.paxos.observe_peer_chosen(from, chosen_up_to);
                // A node we do not count as a member gets no status from us otherwise: answer, so that it can
                // catch up, see that it was removed and stop campaigning.
                if !self.state.membership.contains(from) {
                    self.status_replies.insert(from);
                }
            }
            PeerMessage::SnapshotRequest { from, .. } => {
                // Only members, and only a state that has applied something: an empty one rebuilds nobody.
                if self.state.membership.contains(from) && self.state.applied > 0 {
                    let snapshot = self.snapshot();
                    self.outgoing.push(PeerMessage::SnapshotReply { from: self.id(), to: from, snapshot });
                }
            }
            PeerMessage::SnapshotReply { snapshot, .. } => {
                let Some((first_held, _)) = self.snapshot_wanted else { return };
                // The sender's log goes on from its snapshot; one that ends before what the members hold would
                // leave the same gap.
                if snapshot.last_included + 1 >= first_held && self.install_snapshot(snapshot) {
                    self.snapshot_wanted = None;
                }
            }
        }
    }

    /// Proposes binlog transactions `first_seq..=last_seq`. Only the master holding its lease may; the caller
    /// acknowledges them to MariaDB only once they show up as [`Applied::BinlogAppended`] for its term.
    ///
    /// A proposal can be lost without an error (the Paxos core drops its queue when its leadership is contested,
    /// and phase 1 may fill an instance in flight with a no-op), and the master's transactions can never be
    /// renumbered (MariaDB holds them at their GTIDs, waiting): this node then gives its term up (see
    /// [`Self::on_applied`]), so that its waiting commits are never acknowledged and another term takes over.
    pub fn propose_binlog(
        &mut self,
        domain_id: u32,
        server_id: u32,
        first_seq: u64,
        last_seq: u64,
        events: Bytes,
    ) -> Result<(), GlobalLogError> {
        let master_version = self.require_master()?;
        self.fits_one_entry(domain_id, server_id, first_seq, events.len())?;
        let cmd = Command::AppendBinlog { master_version, domain_id, server_id, first_seq, last_seq, events };
        self.paxos.propose(cmd.encode())?;
        self.own_appends.push_back((self.now, last_seq, 0));
        Ok(())
    }

    fn fits_one_entry(&self, domain_id: u32, server_id: u32, seq: u64, bytes: usize) -> Result<(), GlobalLogError> {
        if bytes > self.cfg.max_value_bytes {
            let limit = self.cfg.max_value_bytes;
            return Err(GlobalLogError::TransactionTooLarge { domain_id, server_id, seq, bytes, limit });
        }
        Ok(())
    }

    /// Proposes one part of binlog transaction `seq`, too large for one log entry: its raw events from byte `offset`
    /// on (see [`Command::AppendBinlogPart`]). The master acknowledges the transaction only once the part flagged
    /// `last` comes back as [`Applied::BinlogPartAppended`] for its term. A part the log refuses (or loses) ends the
    /// term as for a whole transaction.
    pub fn propose_binlog_part(
        &mut self,
        domain_id: u32,
        server_id: u32,
        seq: u64,
        offset: u64,
        last: bool,
        bytes: Bytes,
    ) -> Result<(), GlobalLogError> {
        let master_version = self.require_master()?;
        self.fits_one_entry(domain_id, server_id, seq, bytes.len())?;
        let cmd = Command::AppendBinlogPart { master_version, domain_id, server_id, seq, offset, last, bytes };
        self.paxos.propose(cmd.encode())?;
        self.own_appends.push_back((self.now, seq, offset));
        Ok(())
    }

    /// Adds or removes one member, through the log.
    pub fn change_membership(&mut self, next: Membership) -> Result<(), GlobalLogError> {
        self.require_master()?;
        self.paxos.propose_membership(next)?;
        Ok(())
    }

    /// Records where `node` is reached, through the log, so that every member (and every member restarted or added
    /// later) connects to it. Recording an address changes no quorum; only the master may propose it.
    pub fn record_member(&mut self, node: NodeId, peer: String, mariadb: String) -> Result<(), GlobalLogError> {
        self.require_master()?;
        let cmd = Command::RecordMember { node, peer, mariadb };
        self.paxos.propose(cmd.encode())?;
        Ok(())
    }

    /// Gives up the master role: stops renewing, so another member takes over once the lease runs out.
    pub fn resign(&mut self) {
        self.stop_serving();
        self.paxos.step_down();
    }

    /// Ends this node's term and lease at once. It then stands back longer than any healthy member has to wait, so
    /// one of them takes over: a node gives its term up because its database failed, and should not win the next
    /// election with the same database.
    fn stop_serving(&mut self) {
        self.my_term = None;
        self.own_appends.clear();
        self.lease_until = 0;
        self.backoff_until = self.now + 2 * (self.cfg.lease_ms + self.cfg.max_clock_drift_ms);
    }

    /// Gives up the master role and names the most caught-up live member its successor, through the log, so that
    /// it takes over at once instead of after this lease runs out (plus the drift every candidate waits). The
    /// caller has stopped serving already (its database is dead or demoted). Without a live peer, or when the
    /// proposal cannot be made, this is [`Self::resign`]. A successor that cannot serve ignores the hand-over, and
    /// the others stand for election as after any change of master.
    pub fn hand_over(&mut self) -> Option<NodeId> {
        match self.propose_hand_over(None) {
            Ok(successor) => Some(successor),
            Err(_) => {
                self.resign();
                None
            }
        }
    }

    /// An operator's switchover: hands the master role to `to` (or to the most caught-up live member) through
    /// the log, as [`Self::hand_over`] does, while this master is healthy. The caller has drained its database
    /// first (no commit waits for an ACK and everything written is in the log), so the successor, once it has
    /// applied the log, holds everything the old master acknowledged. A refusal changes nothing: this node keeps
    /// its term and its lease.
    pub fn switch_over(&mut self, to: Option<NodeId>) -> Result<NodeId, GlobalLogError> {
        if let Some(to) = to {
            if to == self.id() {
                return Err(GlobalLogError::NoSuccessor(format!("node {to} is the master already")));
            }
            if !self.state.membership.contains(to) {
                return Err(GlobalLogError::NoSuccessor(format!("node {to} is not a member")));
            }
        }
        self.propose_hand_over(to)
    }

    /// Proposes the hand-over to `to` (or the most caught-up member whose status is fresh) and stops serving.
    fn propose_hand_over(&mut self, to: Option<NodeId>) -> Result<NodeId, GlobalLogError> {
        let master_version = self.require_master()?;
        let me = self.id();
        let fresh = 5 * self.cfg.status_interval_ms.max(1);
        let successor = self
            .state
            .membership
            .members
            .iter()
            .copied()
            .filter(|m| *m != me && to.is_none_or(|to| to == *m))
            .filter_map(|m| self.peers.get(&m).filter(|p| self.now.saturating_sub(p.at) <= fresh).map(|p| (m, p)))
            .max_by_key(|(m, p)| (p.progress, std::cmp::Reverse(*m)))
            .map(|(m, _)| m);
        let Some(successor) = successor else {
            return Err(GlobalLogError::NoSuccessor(match to {
                Some(to) => format!("no status from node {to} in the last {fresh} ms"),
                None => format!("no other member sent its status in the last {fresh} ms"),
            }));
        };
        let cmd = Command::HandOver { master_version, new_master: successor };
        self.paxos.propose(cmd.encode())?;
        // Serve no more, from now on; but stay the Paxos leader until the hand-over is chosen (stepping down
        // drops the queue it waits in).
        self.stop_serving();
        self.handing_over_since = Some(self.now);
        Ok(successor)
    }

    /// The state at the last applied instance, as a snapshot a lagging member can be rebuilt from — or, while a
    /// transaction's parts arrive, the state before its first part: the member then learns the parts from the log.
    pub fn snapshot(&self) -> Snapshot {
        let state = self.before_open.as_ref().unwrap_or(&self.state);
        Snapshot { last_included: state.applied, membership: state.membership.clone(), data: state.encode_snapshot() }
    }

    /// Rebuilds this member from a healthy member's snapshot (after [`NodeReady::rebuild_required`]).
    pub fn install_snapshot(&mut self, snapshot: Snapshot) -> bool {
        let Some(state) = ReplicatedState::decode_snapshot(&snapshot.data, snapshot.membership.clone()) else {
            return false;
        };
        if state.applied <= self.state.applied {
            return false;
        }
        self.paxos.install_snapshot(snapshot);
        self.restored = Some(Applied::Restored { instance: state.applied, last_gtid: state.last_gtid });
        self.state = state;
        self.before_open = None;
        self.my_term = None;
        self.last_renewal_seen = self.now;
        true
    }

    fn require_master(&self) -> Result<u64, GlobalLogError> {
        if self.state.master_id != self.id() || self.my_term != Some(self.state.master_version) {
            return Err(GlobalLogError::NotMaster { master: self.state.master_id });
        }
        if !self.holds_lease(self.now) {
            return Err(GlobalLogError::LeaseExpired);
        }
        Ok(self.state.master_version)
    }

    // ----- output -----

    pub fn take_ready(&mut self) -> NodeReady {
        let mut out = NodeReady::default();
        // A snapshot installed since the last ready comes before anything applied after it.
        if let Some(restored) = self.restored.take() {
            out.applied.push(restored);
        }
        self.maybe_snapshot();
        self.absorb(&mut out);
        self.drive(&mut out);
        self.absorb(&mut out);
        self.ask_for_snapshot(&mut out);
        out.messages.append(&mut self.outgoing);
        out.term_given_up = self.term_given_up.take();
        out
    }

    /// While behind the compacted log, asks every other member for its snapshot (a few hundred bytes) every
    /// retransmit interval; the first one that covers the gap is installed.
    fn ask_for_snapshot(&mut self, out: &mut NodeReady) {
        let Some((first_held, asked_at)) = self.snapshot_wanted else { return };
        if asked_at.is_some_and(|t| self.now.saturating_sub(t) < self.cfg.paxos.retransmit_ms) {
            return;
        }
        self.snapshot_wanted = Some((first_held, Some(self.now)));
        let me = self.id();
        for &to in &self.state.membership.members {
            if to != me {
                out.messages.push(PeerMessage::SnapshotRequest { from: me, to });
            }
        }
    }

    /// Drains the Paxos core, applies what was chosen and notes its effect on the lease.
    fn absorb(&mut self, out: &mut NodeReady) {
        let r = self.paxos.take_ready();
        merge_batch(&mut out.batch, r.batch);
        out.messages.extend(r.messages.into_iter().map(PeerMessage::Paxos));
        out.after_persist.extend(r.after_persist.into_iter().map(PeerMessage::Paxos));
        out.rebuild_required = out.rebuild_required.or(r.rebuild_required);
        if let Some(first) = r.rebuild_required {
            let asked_at = self.snapshot_wanted.and_then(|(_, at)| at);
            let first = self.snapshot_wanted.map_or(first, |(f, _)| f.max(first));
            self.snapshot_wanted = Some((first, asked_at));
        }
        out.catch_up_reads.extend(r.catch_up_reads);
        for (instance, value) in r.chosen {
            if instance != self.state.applied + 1 {
                continue; // already in the snapshot this node was rebuilt from
            }
            let first = out.applied.len();
            apply_keeping_before_open(&mut self.state, &mut self.before_open, instance, &value, &mut out.applied);
            // Borrowed, not cloned: an effect can carry a whole binlog transaction (or a 4 MiB part of one).
            for effect in &out.applied[first..] {
                self.on_applied(effect);
            }
            out.chosen.push((instance, value));
        }
    }

    fn on_applied(&mut self, effect: &Applied) {
        let me = self.id();
        match effect {
            Applied::MasterChanged { master, master_version, proposed_at_ms, handed_over, .. } => {
                // Ours even if we gave up waiting for it: a later leader may have chosen our proposal after all,
                // and then nobody but us can renew the term (seed 51402).
                let ours = !handed_over
                    && (self.change_master_pending == Some(*proposed_at_ms)
                        || self.own_change_proposals.contains(proposed_at_ms));
                self.own_appends.clear();
                self.handing_over_since = None;
                if *master == me && ours {
                    // One term per master version, never taken twice: versions only grow.
                    assert!(
                        self.my_term.is_none_or(|t| t < *master_version),
                        "node {me}: term {master_version} applied while holding term {:?}",
                        self.my_term
                    );
                    self.my_term = Some(*master_version);
                    self.lease_until = proposed_at_ms + self.cfg.lease_ms;
                    self.next_renew_at = proposed_at_ms + self.cfg.renew_interval_ms;
                } else if *master == me && *handed_over && self.eligible {
                    // Named by the master that stepped down. The term is ours, its lease is not yet: it starts from
                    // a renewal we propose (at once) and see applied, exactly as for a renewal of a term we won; every
                    // other member restarted its wait on applying this change.
                    self.my_term = Some(*master_version);
                    self.lease_until = 0;
                    self.next_renew_at = 0;
                    self.last_renewal_seen = self.now;
                } else {
                    self.my_term = None;
                    self.last_renewal_seen = self.now;
                    if self.standing_since.is_some() {
                        self.paxos.step_down();
                    }
                    if *handed_over {
                        // The successor campaigns at once; the old leader's stickiness must not hold it off.
                        self.paxos.forget_contact();
                    }
                }
                self.change_master_pending = None;
                self.standing_since = None;
            }
            Applied::LeaseRenewed { master_version, proposed_at_ms, .. } => {
                if self.my_term == Some(*master_version) && self.state.master_id == me {
                    // Commands reach the log in the order they were proposed: a renewal proposed after one of our
                    // appends comes out after it, so an append still missing now was dropped and never will be.
                    if let Some(&(at, seq, _)) = self.own_appends.front().filter(|(at, _, _)| at < proposed_at_ms) {
                        let why = format!(
                            "binlog transaction {seq}, proposed at {at} ms, never reached the log (a renewal \
                             proposed at {proposed_at_ms} ms did)"
                        );
                        self.give_up_term(why);
                        return;
                    }
                    self.lease_until = self.lease_until.max(proposed_at_ms + self.cfg.lease_ms);
                } else {
                    self.last_renewal_seen = self.now;
                }
            }
            Applied::BinlogAppended { master_version, last_seq, .. } if self.my_term == Some(*master_version) => {
                while self.own_appends.front().is_some_and(|(_, seq, _)| seq <= last_seq) {
                    self.own_appends.pop_front();
                }
            }
            Applied::BinlogPartAppended { master_version, gtid, offset, .. }
                if self.my_term == Some(*master_version) =>
            {
                let part = (gtid.seq_no, *offset);
                while self.own_appends.front().is_some_and(|(_, seq, at)| (*seq, *at) <= part) {
                    self.own_appends.pop_front();
                }
            }
            Applied::Rejected { kind: "append_binlog" | "append_binlog_part", master_version, reason, .. }
                if self.my_term == Some(*master_version) =>
            {
                // A gap: an earlier append of ours was lost, and everything after it is rejected the same way.
                self.give_up_term(format!("a binlog transaction of this term was rejected: {reason:?}"));
            }
            Applied::Rejected { kind: "change_master", .. } if self.change_master_pending.is_some() => {
                self.give_up_campaign();
            }
            Applied::MembershipChanged { membership, .. } => {
                if !membership.contains(me) {
                    self.my_term = None;
                    self.paxos.step_down();
                }
            }
            _ => {}
        }
    }

    /// Ends this node's term because its log and its master's binlog can no longer agree: the master's waiting
    /// commits must never be acknowledged, and only a new term (a fresh server, its tail truncated) can go on.
    fn give_up_term(&mut self, why: String) {
        self.hand_over();
        self.term_given_up = Some(why);
    }

    fn give_up_campaign(&mut self) {
        self.change_master_pending = None;
        self.standing_since = None;
        self.paxos.step_down();
        // Spread the next attempts over a whole campaign's length so that rivals stop colliding.
        let jitter = self.next_random() % (self.campaign_timeout() + 1);
        // Keep the preference order in the back-off too: with equal progress, ranks follow node ids, so rivals
        // that collided once do not collide forever.
        self.backoff_until = self.now + self.rank() * self.cfg.stand_stagger_ms + jitter;
    }

    /// Every `snapshot_every` instances, compacts the log up to the previous snapshot point (keeping that many
    /// instances for lagging members) and remembers the current state as the next one. Runs before the Paxos core
    /// is drained, so the compaction lands in a batch after the chosen entries it covers were written.
    fn maybe_snapshot(&mut self) {
        let every = self.cfg.snapshot_every.max(1);
        let due = self.pending_snapshot.as_ref().map_or(every, |old| old.applied + every);
        if self.state.applied < due {
            return;
        }
        if let Some(old) = self.pending_snapshot.take() {
            if old.applied >= self.paxos.first_held() {
                self.paxos.compact(Snapshot {
                    last_included: old.applied,
                    membership: old.membership.clone(),
                    data: old.encode_snapshot(),
                });
            }
        }
        // Never a snapshot inside a transaction's parts: their bytes are only in the log, and a member restored from
        // such a snapshot could never complete the transaction. The next input after its last part takes it.
        if self.state.open.is_none() {
            self.pending_snapshot = Some(self.state.clone());
        }
    }

    /// Election and renewal decisions, taken after every input.
    fn drive(&mut self, out: &mut NodeReady) {
        let now = self.now;
        let me = self.id();
        self.send_status(out);
        if self.state.master_id != 0 {
            self.paxos.set_prepare_guard(self.last_renewal_seen + self.cfg.lease_ms, self.state.master_id);
        }
        if self.state.master_id == me && self.my_term == Some(self.state.master_version) {
            match self.paxos.role() {
                // Someone unseated our Paxos leadership (for example right after a partition healed): take it
                // back, or the lease cannot be renewed.
                Role::Follower => self.paxos.campaign(),
                Role::Candidate => {}
                Role::Leader => {
                    if now >= self.next_renew_at {
                        let cmd =
                            Command::RenewLease { master_version: self.state.master_version, proposed_at_ms: now };
                        if self.paxos.propose(cmd.encode()).is_ok() {
                            self.next_renew_at = now + self.cfg.renew_interval_ms;
                        }
                    }
                }
            }
            return;
        }
        self.my_term = None;
        if let Some(since) = self.handing_over_since {
            if now.saturating_sub(since) <= self.campaign_timeout() && self.paxos.role() != Role::Follower {
                return;
            }
            self.handing_over_since = None;
        }
        let Some(since) = self.standing_since else {
            // A member that is not standing must not lead: its ballot would lock the master out.
            if self.paxos.role() != Role::Follower {
                self.paxos.step_down();
            }
            if self.may_stand(now) {
                self.standing_since = Some(now);
                self.paxos.campaign();
            }
            return;
        };
        if now.saturating_sub(since) > self.campaign_timeout() {
            self.give_up_campaign();
            return;
        }
        match self.paxos.role() {
            Role::Follower => self.give_up_campaign(),
            Role::Candidate => {}
            Role::Leader => {
                let log_settled = self.paxos.pending() == (0, 0) && self.paxos.last_chosen() == self.state.applied;
                if self.change_master_pending.is_none() && log_settled {
                    // Phase 1 may have brought renewals we had not seen: the wait since the newest one must have
                    // passed again before the compare-and-set, or the old master may still hold its lease.
                    if !self.may_stand(now) {
                        self.give_up_campaign();
                        return;
                    }
                    let cmd = Command::ChangeMaster {
                        expected_version: self.state.master_version,
                        expected_lease_seq: self.state.lease_seq,
                        new_master: me,
                        proposed_at_ms: now,
                    };
                    if self.paxos.propose(cmd.encode()).is_ok() {
                        self.change_master_pending = Some(now);
                        if self.own_change_proposals.len() >= 8 {
                            self.own_change_proposals.pop_front();
                        }
                        self.own_change_proposals.push_back(now);
                    }
                }
            }
        }
    }

    /// How long a campaign may take before it is abandoned: the configured time, but never less than four
    /// retransmit intervals — a campaign needs three round trips (phase 1, re-proposing what it found, the
    /// compare-and-set) and a lost message costs one interval; over links slow enough to need a long retransmit
    /// interval, a shorter limit abandons every campaign before it can win.
    fn campaign_timeout(&self) -> u64 {
        self.cfg.campaign_timeout_ms.max(4 * self.cfg.paxos.retransmit_ms)
    }

    fn may_stand(&self, now: u64) -> bool {
        if !self.eligible
            || !self.state.membership.contains(self.id())
            || now < self.backoff_until
            || self.paxos.other_proposer_active()
        {
            return false;
        }
        let rank = self.rank();
        let wait = self.cfg.lease_ms + self.cfg.max_clock_drift_ms + rank * self.cfg.stand_stagger_ms;
        now >= self.last_renewal_seen + wait
    }

    /// How many members have applied more than this one (ties go to the lower id).
    fn rank(&self) -> u64 {
        let me = self.id();
        let mine = self.progress();
        self.state
            .membership
            .members
            .iter()
            .filter(|&&m| m != me)
            .filter(|m| {
                let theirs = self.peers.get(m).map_or(0, |p| p.progress);
                theirs > mine || (theirs == mine && **m < me)
            })
            .count() as u64
    }

    fn progress(&self) -> u64 {
        self.progress_override.unwrap_or(self.state.applied)
    }

    fn send_status(&mut self, out: &mut NodeReady) {
        if self.last_status_sent.is_some_and(|t| self.now.saturating_sub(t) < self.cfg.status_interval_ms) {
            return;
        }
        self.last_status_sent = Some(self.now);
        let (me, progress, chosen_up_to) = (self.id(), self.progress(), self.paxos.last_chosen());
        // The members, the nodes whose address the log recorded (one being added learns how far the log goes and
        // asks for it), this node's own contacts, and whoever asked.
        let mut to: BTreeSet<NodeId> = std::mem::take(&mut self.status_replies);
        to.extend(self.state.membership.members.iter().copied());
        to.extend(self.state.addresses.keys().copied());
        to.extend(self.cfg.contacts.iter().copied());
        to.remove(&me);
        for to in to {
            out.messages.push(PeerMessage::Status { from: me, to, progress, chosen_up_to });
        }
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*: deterministic per seed, no global RNG in the core.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// What this node last heard from a peer ([`PeerMessage::Status`]).
#[derive(Clone, Copy, Debug)]
struct PeerSeen {
    progress: u64,
    at: u64,
}

/// Appends `next` to `acc` as if both batches were written one after the other.
fn merge_batch(acc: &mut WriteBatch, next: WriteBatch) {
    if let Some(p) = next.promised {
        acc.promised = Some(acc.promised.map_or(p, |a| a.max(p)));
    }
    acc.accepted.extend(next.accepted);
    acc.chosen.extend(next.chosen);
    if next.snapshot.is_some() {
        acc.snapshot = next.snapshot;
    }
}

/// Applies one chosen value, keeping in `before_open` the state before the first part of a transaction still open
/// (what a snapshot for another member must hold, see [`GlobalLogNode::snapshot`]).
fn apply_keeping_before_open(
    state: &mut ReplicatedState,
    before_open: &mut Option<ReplicatedState>,
    instance: Instance,
    value: &Value,
    out: &mut Vec<Applied>,
) {
    // Only an instance that carries a part can open a transaction: the state is copied for those alone.
    let before = (state.open.is_none() && Command::any_part(value)).then(|| state.clone());
    state.apply(instance, value, out);
    if state.open.is_none() {
        *before_open = None;
    } else if before.is_some() {
        *before_open = before;
    }
}
