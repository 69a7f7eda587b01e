//! [`PaxosNode`]: one member's acceptor, proposer and learner as a single pure state machine.
//!
//! The protocol is Multi-Paxos with a stable leader (Lamport, "Paxos Made Simple" §3): a proposer runs phase 1
//! once for every instance from its first unchosen one on, then each command costs one phase-2 round trip.
//! Membership changes are values in the log that take effect for the instances after them; the leader stops
//! proposing past a pending change until it has run phase 1 with the new members.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use crate::message::{Message, MessageBody};
use crate::storage::{RecoveredState, Snapshot, Storage, StorageError, WriteBatch};
use crate::types::{Ballot, Instance, Membership, NodeId, Value};

/// Tunables of one member. Times are in milliseconds of the caller's monotonic clock.
#[derive(Clone, Debug)]
pub struct Config {
    pub id: NodeId,
    /// How often a leader announces its commit point (also its liveness signal to followers).
    pub heartbeat_ms: u64,
    /// How long a prepare, accept or catch-up request waits for an answer before it is sent again.
    pub retransmit_ms: u64,
    /// Instances a leader may have proposed and not yet seen chosen (the pipeline depth).
    pub max_in_flight: usize,
    /// Whether queued commands share one instance (up to `max_batch_bytes`) or take one each.
    pub batching: bool,
    pub max_batch_bytes: usize,
    /// Entries per promise message before the report is paged.
    pub max_promise_entries: usize,
    /// After hearing from a proposer, ignore prepares from any other node for this long. Keeps a campaign that
    /// is under way (or a live leader) from being unseated by the next node whose timer fires, which over slow
    /// links otherwise makes proposers duel forever. Liveness only; safety never depends on it.
    pub leader_stickiness_ms: u64,
    /// Limits of one catch-up message.
    pub catch_up_max_entries: usize,
    pub catch_up_max_bytes: usize,
    /// Bytes of chosen values kept in memory, newest first. Older ones down to the last snapshot stay in the
    /// caller's storage: a member that far behind is answered from there (see [`Ready::catch_up_reads`]), so the
    /// memory a node needs does not grow with the log it retains for laggards.
    pub chosen_cache_bytes: usize,
    /// A chosen value larger than this (a part of a large transaction) is not kept in memory: it empties the
    /// cache, so a large transaction passing through never fills it with its parts, and the small values after it
    /// are cached again. Members behind it are answered from storage.
    pub chosen_cache_value_limit: usize,
    /// Deliberately broken behaviour, only for proving that the simulator catches it. Never set in the daemon.
    #[doc(hidden)]
    pub bug: Option<Bug>,
}

/// Protocol bugs the simulator must be able to find.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// The new leader ignores the values reported in phase 1 and proposes its own.
    IgnorePromisedValues,
    /// The acceptor records an acceptance without raising its promise to that ballot (a lost promise write).
    AcceptWithoutPromise,
}

impl Config {
    pub fn new(id: NodeId) -> Self {
        Config {
            id,
            heartbeat_ms: 100,
            retransmit_ms: 200,
            max_in_flight: 64,
            batching: true,
            max_batch_bytes: 4 << 20,
            max_promise_entries: 512,
            leader_stickiness_ms: 1000,
            catch_up_max_entries: 512,
            catch_up_max_bytes: 8 << 20,
            chosen_cache_bytes: 32 << 20,
            chosen_cache_value_limit: 1 << 20,
            bug: None,
        }
    }
}

/// What the caller must do after feeding the node, drained by [`PaxosNode::take_ready`].
#[derive(Debug, Default)]
pub struct Ready {
    /// Write this to storage. Messages in `after_persist` depend on it being durable.
    pub batch: WriteBatch,
    /// Send now, in any order.
    pub messages: Vec<Message>,
    /// Send only once `batch` (and every earlier one) is durable.
    pub after_persist: Vec<Message>,
    /// Newly chosen values, contiguous and in instance order, each reported once: apply them.
    pub chosen: Vec<(Instance, Value)>,
    /// A peer no longer holds the instances this node is missing (they were compacted away): the node must be
    /// rebuilt from a healthy member's snapshot, see [`PaxosNode::install_snapshot`].
    pub rebuild_required: Option<Instance>,
    /// Members asking for chosen values older than the ones held in memory: read them from storage (the
    /// batches already written hold them) and send each a [`MessageBody::CatchUp`].
    pub catch_up_reads: Vec<CatchUpRead>,
}

/// A catch-up the caller serves from storage: chosen values from `from_instance` on, within the catch-up limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CatchUpRead {
    pub to: NodeId,
    pub from_instance: Instance,
    /// The sender's last chosen instance, for the reply's `chosen_up_to`.
    pub chosen_up_to: Instance,
}

impl CatchUpRead {
    /// The reply member `me` sends, read from its `store` within `cfg`'s catch-up limits. Read it before writing
    /// the ready's batch: a compaction in that batch may drop what was asked for (then the reply is `CatchUpGone`,
    /// as the core itself answers below its log).
    pub fn answer(&self, me: NodeId, store: &impl Storage, cfg: &Config) -> Result<Message, StorageError> {
        let body = match store.chosen(self.from_instance, cfg.catch_up_max_entries, cfg.catch_up_max_bytes) {
            Ok(entries) => MessageBody::CatchUp { entries, chosen_up_to: self.chosen_up_to },
            Err(StorageError::Compacted { first, .. }) => MessageBody::CatchUpGone { first_held: first },
            Err(e) => return Err(e),
        };
        Ok(Message { from: me, to: self.to, body })
    }
}

impl Ready {
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
            && self.messages.is_empty()
            && self.after_persist.is_empty()
            && self.chosen.is_empty()
            && self.rebuild_required.is_none()
            && self.catch_up_reads.is_empty()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Follower,
    /// Running phase 1 to become leader.
    Candidate,
    /// Phase 1 done: proposals go straight to phase 2.
    Leader,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    #[error("not the leader (last known leader: {hint:?})")]
    NotLeader { hint: Option<NodeId> },
    #[error("a membership change is already pending")]
    ReconfigurationPending,
    #[error("membership change must add or remove exactly one member")]
    NotSingleStep,
}

#[derive(Debug)]
struct Phase1 {
    from: Instance,
    membership: Membership,
    /// Next instance each member still has to report on (paging of long reports).
    cursor: BTreeMap<NodeId, Instance>,
    complete: BTreeSet<NodeId>,
    reports: BTreeMap<Instance, (Ballot, Value)>,
    sent_at: u64,
    /// When it began (retransmits move `sent_at` only).
    started_at: u64,
}

#[derive(Debug)]
struct InFlight {
    value: Value,
    membership: Membership,
    accepted_by: BTreeSet<NodeId>,
    sent_at: u64,
    /// When it was first proposed (retransmits move `sent_at` only).
    proposed_at: u64,
}

#[derive(Debug)]
struct Leadership {
    ballot: Ballot,
    /// Phase 1 under way: for the whole log when becoming leader, or for the instances after a pending
    /// membership change. No proposal goes at or past `phase1.from` until it completes.
    phase1: Option<Phase1>,
    established: bool,
    next_instance: Instance,
    /// Membership for `next_instance`, counting membership changes still in flight.
    next_membership: Membership,
    in_flight: BTreeMap<Instance, InFlight>,
    pending_reconfig: Option<Instance>,
    last_heartbeat: u64,
    /// Acceptors that promised a higher ballot: they will never accept ours again.
    lost: BTreeSet<NodeId>,
}

/// One member of the Paxos group. See the crate docs for the run loop.
#[derive(Debug)]
pub struct PaxosNode {
    cfg: Config,
    now: u64,
    // Acceptor.
    promised: Ballot,
    accepted: BTreeMap<Instance, (Ballot, Value)>,
    prepare_guard: Option<(u64, NodeId)>,
    /// The proposer this acceptor last heard from, when, and whether as a leader (accepts, commits) rather than
    /// as a candidate (prepares).
    last_contact: Option<(NodeId, u64, bool)>,
    /// The rival prepare (proposer, ballot) stickiness last ignored, and since when it has been ignored.
    ignored: Option<(NodeId, Ballot, u64)>,
    // Learner.
    first_held: Instance,
    last_chosen: Instance,
    /// The newest chosen values, contiguous up to `last_chosen`, for catch-up and phase-1 reports; those from
    /// `first_held` up to the first one held here are only in storage.
    chosen_log: BTreeMap<Instance, Value>,
    chosen_log_bytes: usize,
    /// Chosen values known past a gap, waiting for the gap to fill.
    chosen_ahead: BTreeMap<Instance, Value>,
    membership: Membership,
    catch_up_sent_at: Option<u64>,
    leader_hint: Option<NodeId>,
    // Proposer.
    leader: Option<Leadership>,
    max_round_seen: u64,
    queue: VecDeque<Bytes>,
    queued_reconfig: Option<Membership>,
    ready: Ready,
    last_step_down: &'static str,
}

impl PaxosNode {
    /// A member starting with an empty log, in the group's initial membership.
    pub fn new(cfg: Config, initial: Membership) -> Self {
        Self::restore(cfg, initial, RecoveredState { first_chosen: 1, ..Default::default() }, Vec::new())
    }

    /// A member restarting from its storage: `chosen` must yield every chosen entry it holds, in order, from
    /// `state.first_chosen` to `state.last_chosen` (only the newest `chosen_cache_bytes` are kept). `initial` is
    /// the group's initial membership, used when no snapshot says otherwise.
    pub fn restore(
        cfg: Config,
        initial: Membership,
        state: RecoveredState,
        chosen: impl IntoIterator<Item = (Instance, Value)>,
    ) -> Self {
        let mut membership = state.snapshot.as_ref().map_or(initial, |s| s.membership.clone());
        let mut node = PaxosNode {
            max_round_seen: state.promised.round,
            cfg,
            now: 0,
            promised: state.promised,
            accepted: state.accepted,
            prepare_guard: None,
            last_contact: None,
            ignored: None,
            first_held: state.first_chosen,
            last_chosen: state.last_chosen,
            chosen_log: BTreeMap::new(),
            chosen_log_bytes: 0,
            chosen_ahead: BTreeMap::new(),
            membership: Membership::default(),
            catch_up_sent_at: None,
            leader_hint: None,
            leader: None,
            queue: VecDeque::new(),
            queued_reconfig: None,
            ready: Ready::default(),
            last_step_down: "",
        };
        for ((i, v), expected) in chosen.into_iter().zip(state.first_chosen..) {
            assert_eq!(i, expected, "restored chosen log is not contiguous");
            if let Value::Reconfigure(m) = &v {
                if membership.is_single_step_to(m) {
                    membership = m.clone();
                }
            }
            node.hold_chosen(i, v);
        }
        node.membership = membership;
        node
    }

    // ----- introspection -----

    pub fn id(&self) -> NodeId {
        self.cfg.id
    }
    pub fn role(&self) -> Role {
        match &self.leader {
            None => Role::Follower,
            Some(l) if l.established => Role::Leader,
            Some(_) => Role::Candidate,
        }
    }
    pub fn ballot(&self) -> Option<Ballot> {
        self.leader.as_ref().map(|l| l.ballot)
    }
    pub fn promised(&self) -> Ballot {
        self.promised
    }
    pub fn last_chosen(&self) -> Instance {
        self.last_chosen
    }
    pub fn first_held(&self) -> Instance {
        self.first_held
    }
    /// Membership in force for the instance after the last chosen one.
    pub fn membership(&self) -> &Membership {
        &self.membership
    }
    pub fn leader_hint(&self) -> Option<NodeId> {
        self.leader_hint
    }
    /// Proposed instances not yet chosen, plus commands waiting for a slot.
    pub fn pending(&self) -> (usize, usize) {
        (self.leader.as_ref().map_or(0, |l| l.in_flight.len()), self.queue.len())
    }
    /// The first chosen instance held in memory (older ones down to [`Self::first_held`] are only in storage).
    pub fn first_in_memory(&self) -> Instance {
        self.chosen_log.first_key_value().map_or(self.last_chosen + 1, |(i, _)| *i)
    }
    /// The chosen value of `instance`, if held in memory.
    pub fn chosen_value(&self, instance: Instance) -> Option<&Value> {
        self.chosen_log.get(&instance)
    }

    pub fn take_ready(&mut self) -> Ready {
        self.flush_queue();
        // What goes to disk together must never record an acceptance above the promise: after a crash the node
        // would answer a Prepare with a value accepted under a ballot it never promised. Cheap: ballots only.
        for (instance, ballot, _) in &self.ready.batch.accepted {
            assert!(
                *ballot <= self.promised,
                "node {}: instance {instance} accepted at {ballot:?} above the promise {:?}",
                self.cfg.id,
                self.promised
            );
        }
        std::mem::take(&mut self.ready)
    }

    // ----- inputs -----

    /// Advances time: retransmissions and heartbeats.
    pub fn tick(&mut self, now: u64) {
        self.now = self.now.max(now);
        let now = self.now;
        let retransmit = self.cfg.retransmit_ms;
        let Some(l) = self.leader.as_mut() else {
            return;
        };
        let mut out = Vec::new();
        if let Some(p) = l.phase1.as_mut() {
            if now.saturating_sub(p.sent_at) >= retransmit {
                p.sent_at = now;
                // Values chosen meanwhile need no report (nothing is proposed at or below the last chosen
                // instance), and an acceptor may hold them only in storage and refuse to promise below its memory
                // window: ask from past them.
                let floor = self.last_chosen + 1;
                for (&node, cursor) in p.cursor.iter_mut() {
                    if !p.complete.contains(&node) {
                        *cursor = (*cursor).max(floor);
                        out.push((node, MessageBody::Prepare { ballot: l.ballot, from_instance: *cursor }));
                    }
                }
            }
        }
        for (&instance, f) in l.in_flight.iter_mut() {
            if now.saturating_sub(f.sent_at) >= retransmit {
                f.sent_at = now;
                for &node in f.membership.members.difference(&f.accepted_by) {
                    let body = MessageBody::Accept {
                        ballot: l.ballot,
                        instance,
                        value: f.value.clone(),
                        chosen_up_to: self.last_chosen,
                    };
                    out.push((node, body));
                }
            }
        }
        if l.established && now.saturating_sub(l.last_heartbeat) >= self.cfg.heartbeat_ms {
            l.last_heartbeat = now;
            let mut to: BTreeSet<NodeId> = self.membership.members.clone();
            to.extend(l.next_membership.members.iter().copied());
            for node in to {
                if node != self.cfg.id {
                    out.push((node, MessageBody::Commit { ballot: l.ballot, chosen_up_to: self.last_chosen }));
                }
            }
        }
        // An acceptor that promised a higher ballot refuses this one for good, and one that is silent may never
        // answer: a leader that kept waiting would hold the log (and, above it, a master's lease renewals) until
        // the silent member came back, while the refusing one could have been won by a higher ballot — two live
        // members of three with no master (seen in CI: a member killed right after an election). So once a
        // proposal has waited two retransmit intervals with an acceptor lost, the leader runs phase 1 again above
        // the ballot it was refused with. Its queue stays (a step-down would drop it, and a master whose binlog
        // proposal is dropped must give its term up); what is in flight comes back through phase 1.
        // The same holds for phase 1: a candidate refused by one acceptor while another is silent would wait for
        // the silent one for ever.
        let waited = |since: u64| now.saturating_sub(since) >= 2 * retransmit;
        let stalled = !l.lost.is_empty()
            && (l.in_flight.values().any(|f| waited(f.proposed_at))
                || l.phase1.as_ref().is_some_and(|p| waited(p.started_at)));
        for (to, body) in out {
            self.send(to, body);
        }
        if stalled {
            self.last_step_down = "refused by an acceptor and no majority without it: campaigning above the refusal";
            self.leader = None;
            self.campaign();
        }
    }

    /// Tells the acceptor to ignore prepares from anyone but `except` until `until` (and from itself never):
    /// while a master lease is live, a node cut off from the master must not unseat it. Liveness only; safety
    /// never depends on it.
    pub fn set_prepare_guard(&mut self, until: u64, except: NodeId) {
        self.prepare_guard = Some((until, except));
    }

    /// A peer says it has chosen up to `chosen_up_to` (anti-entropy, e.g. from a periodic status message): if
    /// that is ahead of us, ask it for the difference. Learners otherwise hear only from a leader, and a leader
    /// unseated right after choosing a value may never tell anyone.
    pub fn observe_peer_chosen(&mut self, peer: NodeId, chosen_up_to: Instance) {
        if chosen_up_to > self.last_chosen {
            self.request_catch_up(peer);
        }
    }

    /// Starts phase 1 with a ballot above every one seen. No-op if already leading or campaigning.
    pub fn campaign(&mut self) {
        if self.leader.is_some() {
            return;
        }
        let ballot = Ballot::new(self.max_round_seen.max(self.promised.round) + 1, self.cfg.id);
        self.max_round_seen = ballot.round;
        self.last_contact = Some((self.cfg.id, self.now, false));
        // Promise our own ballot durably before any prepare leaves: a restarted node must never reuse a ballot
        // that others may have promised, or it could propose two values under one ballot.
        self.promised = ballot;
        self.ready.batch.promised = Some(ballot);
        let from = self.last_chosen + 1;
        let membership = self.membership.clone();
        self.leader = Some(Leadership {
            ballot,
            phase1: None,
            established: false,
            next_instance: from,
            next_membership: membership.clone(),
            in_flight: BTreeMap::new(),
            pending_reconfig: None,
            last_heartbeat: 0,
            lost: BTreeSet::new(),
        });
        self.start_phase1(from, membership);
    }

    /// Gives up leadership (queued commands are dropped; values in flight may still be chosen).
    pub fn step_down(&mut self) {
        self.step_down_because("asked to");
    }

    /// Stops sticking to the proposer this acceptor last heard from (a liveness aid only): used when the log
    /// itself names the next leader, whose prepare must not wait out the old leader's stickiness window.
    pub fn forget_contact(&mut self) {
        if self.last_contact.is_some_and(|(node, _, _)| node != self.cfg.id) {
            self.last_contact = None;
        }
    }

    /// Whether another proposer reached this acceptor within the stickiness window: a node should not start a
    /// campaign of its own while someone else's is under way or someone leads.
    pub fn other_proposer_active(&self) -> bool {
        self.last_contact.is_some_and(|(node, at, _)| {
            node != self.cfg.id && self.now.saturating_sub(at) < self.cfg.leader_stickiness_ms
        })
    }

    /// Why this node last stopped leading or campaigning (for logs and traces).
    pub fn last_step_down_reason(&self) -> &'static str {
        self.last_step_down
    }

    fn step_down_because(&mut self, reason: &'static str) {
        if self.leader.is_some() {
            self.last_step_down = reason;
        }
        self.leader = None;
        self.queue.clear();
        self.queued_reconfig = None;
    }

    /// Queues a command for the log. Only a leader (or a candidate, whose queue waits for phase 1) takes them.
    pub fn propose(&mut self, command: Bytes) -> Result<(), ProposeError> {
        if self.leader.is_none() {
            return Err(ProposeError::NotLeader { hint: self.leader_hint });
        }
        self.queue.push_back(command);
        Ok(())
    }

    /// Queues a membership change (add or remove one member).
    pub fn propose_membership(&mut self, next: Membership) -> Result<(), ProposeError> {
        let Some(l) = self.leader.as_ref() else {
            return Err(ProposeError::NotLeader { hint: self.leader_hint });
        };
        if l.pending_reconfig.is_some() || self.queued_reconfig.is_some() {
            return Err(ProposeError::ReconfigurationPending);
        }
        if !l.next_membership.is_single_step_to(&next) {
            return Err(ProposeError::NotSingleStep);
        }
        self.queued_reconfig = Some(next);
        Ok(())
    }

    /// Discards chosen entries up to the snapshot, which the caller took of its state machine at
    /// `snapshot.last_included` (at most the last chosen instance).
    pub fn compact(&mut self, snapshot: Snapshot) {
        assert!(snapshot.last_included <= self.last_chosen, "snapshot past the chosen log");
        if snapshot.last_included < self.first_held {
            return;
        }
        let kept = self.chosen_log.split_off(&(snapshot.last_included + 1));
        let dropped = std::mem::replace(&mut self.chosen_log, kept);
        self.chosen_log_bytes -= dropped.values().map(Value::size_bytes).sum::<usize>();
        self.first_held = snapshot.last_included + 1;
        self.ready.batch.snapshot = Some(snapshot);
    }

    /// Installs a snapshot taken from a healthy member after [`Ready::rebuild_required`].
    pub fn install_snapshot(&mut self, snapshot: Snapshot) {
        if snapshot.last_included <= self.last_chosen {
            return;
        }
        self.step_down_because("rebuilt from a snapshot");
        self.last_chosen = snapshot.last_included;
        self.first_held = snapshot.last_included + 1;
        self.chosen_log.clear();
        self.chosen_log_bytes = 0;
        self.chosen_ahead = self.chosen_ahead.split_off(&(self.last_chosen + 1));
        self.accepted = self.accepted.split_off(&(self.last_chosen + 1));
        self.membership = snapshot.membership.clone();
        self.ready.batch.snapshot = Some(snapshot);
        self.advance_chosen();
    }

    /// Handles one message addressed to this node.
    pub fn step(&mut self, msg: Message) {
        if msg.to != self.cfg.id {
            return;
        }
        let from = msg.from;
        match msg.body {
            MessageBody::Prepare { ballot, from_instance } => self.on_prepare(from, ballot, from_instance),
            MessageBody::Promise { ballot, from_instance, entries, more } => {
                self.on_promise(from, ballot, from_instance, entries, more)
            }
            MessageBody::Nack { rejected, promised } => self.on_nack(from, rejected, promised),
            MessageBody::Accept { ballot, instance, value, chosen_up_to } => {
                self.on_accept(from, ballot, instance, value, chosen_up_to)
            }
            MessageBody::Accepted { ballot, instance } => self.on_accepted(from, ballot, instance),
            MessageBody::Commit { ballot, chosen_up_to } => self.on_commit(from, ballot, chosen_up_to),
            MessageBody::CatchUpRequest { from_instance } => self.on_catch_up_request(from, from_instance),
            MessageBody::CatchUp { entries, chosen_up_to } => self.on_catch_up(from, entries, chosen_up_to),
            MessageBody::CatchUpGone { first_held } => {
                if first_held > self.last_chosen + 1 {
                    self.ready.rebuild_required = Some(first_held);
                }
            }
        }
    }

    // ----- acceptor -----

    fn on_prepare(&mut self, from: NodeId, ballot: Ballot, from_instance: Instance) {
        // A node outside the membership (typically one removed while it was cut off, still believing it is a
        // member) must not unseat the group's leader over and over. Liveness only: ignoring is always safe.
        let in_next = self.leader.as_ref().is_some_and(|l| l.next_membership.contains(from));
        if from != self.cfg.id && !self.membership.contains(from) && !in_next {
            return;
        }
        if let Some((until, except)) = self.prepare_guard {
            if self.now < until && from != except && from != self.cfg.id {
                return;
            }
        }
        if let Some((leader, at, leading)) = self.last_contact {
            // Sticking to ourselves lasts only while we campaign or lead: a failed candidate must at once be
            // willing to help the next one, or simultaneous candidates lock each other out for good.
            // A campaign (ours, or one we promised) holds off a rival only until the rival has insisted for a
            // retransmit interval: with a member gone, a majority may need every live member, and a promise to a
            // campaign that failed elsewhere (acceptors hear nothing more from a candidate once they promised) or
            // two candidates each ignoring the other's higher prepare would otherwise let no campaign through.
            // An established leader's hold is not cut short.
            let insisting = self.ignored.is_some_and(|(node, b, since)| {
                node == from && b == ballot && self.now.saturating_sub(since) >= self.cfg.retransmit_ms
            });
            let fresh = if leader == self.cfg.id {
                self.leader.as_ref().is_some_and(|l| l.established || !insisting)
            } else {
                self.now.saturating_sub(at) < self.cfg.leader_stickiness_ms && (leading || !insisting)
            };
            if fresh && leader != from && from != self.cfg.id && ballot > self.promised {
                if !self.ignored.is_some_and(|(node, b, _)| node == from && b == ballot) {
                    self.ignored = Some((from, ballot, self.now));
                }
                return;
            }
        }
        if ballot < self.promised {
            self.send(from, MessageBody::Nack { rejected: ballot, promised: self.promised });
            return;
        }
        if from != self.cfg.id {
            self.last_contact = Some((from, self.now, false));
        }
        if self.answered_below_memory(from, from_instance) {
            // A candidate this far behind is not promised (refusing is always safe) but told to rebuild or caught
            // up from storage; once it is, its next prepare is answered. A live majority is never blocked by it:
            // any member that is not behind campaigns and is answered.
            return;
        }
        self.raise_promise(ballot);
        let mut entries: Vec<(Instance, Ballot, Value)> = Vec::new();
        let limit = self.cfg.max_promise_entries.max(1);
        let chosen = self.chosen_log.range(from_instance..).map(|(i, v)| (*i, Ballot::CHOSEN, v));
        let mut above: BTreeMap<Instance, (Ballot, &Value)> =
            self.accepted.range(from_instance..).map(|(i, (b, v))| (*i, (*b, v))).collect();
        for (i, v) in self.chosen_ahead.range(from_instance..) {
            above.insert(*i, (Ballot::CHOSEN, v));
        }
        let mut more = false;
        for (i, b, v) in chosen.chain(above.into_iter().map(|(i, (b, v))| (i, b, v))) {
            if entries.len() >= limit {
                more = true;
                break;
            }
            entries.push((i, b, v.clone()));
        }
        self.send_after_persist(from, MessageBody::Promise { ballot, from_instance, entries, more });
    }

    fn raise_promise(&mut self, ballot: Ballot) {
        self.max_round_seen = self.max_round_seen.max(ballot.round);
        if ballot > self.promised {
            self.promised = ballot;
            self.ready.batch.promised = Some(ballot);
            if self.leader.as_ref().is_some_and(|l| l.ballot < ballot) {
                self.step_down_because("promised a higher ballot");
            }
        }
    }

    fn on_accept(&mut self, from: NodeId, ballot: Ballot, instance: Instance, value: Value, chosen_up_to: Instance) {
        if ballot < self.promised {
            self.send(from, MessageBody::Nack { rejected: ballot, promised: self.promised });
            return;
        }
        if self.cfg.bug != Some(Bug::AcceptWithoutPromise) {
            self.raise_promise(ballot);
        }
        self.leader_hint = Some(ballot.node);
        if from != self.cfg.id {
            self.last_contact = Some((from, self.now, true));
        }
        let already = self.accepted.get(&instance).is_some_and(|(b, v)| *b == ballot && *v == value);
        // A retransmitted accept of what we already hold is not written again: rewriting a large batch under a
        // slow disk only makes the disk slower (seen in bench/paxos with 4 MiB values).
        if instance > self.last_chosen && !self.chosen_ahead.contains_key(&instance) && !already {
            self.accepted.insert(instance, (ballot, value.clone()));
            self.ready.batch.accepted.push((instance, ballot, value));
        }
        self.send_after_persist(from, MessageBody::Accepted { ballot, instance });
        self.on_commit(from, ballot, chosen_up_to);
    }

    // ----- proposer -----

    fn start_phase1(&mut self, from: Instance, membership: Membership) {
        let Some(l) = self.leader.as_mut() else {
            return;
        };
        let ballot = l.ballot;
        let cursor = membership.members.iter().map(|&n| (n, from)).collect();
        l.phase1 = Some(Phase1 {
            from,
            membership: membership.clone(),
            cursor,
            complete: BTreeSet::new(),
            reports: BTreeMap::new(),
            sent_at: self.now,
            started_at: self.now,
        });
        for &node in &membership.members {
            self.send_after_persist(node, MessageBody::Prepare { ballot, from_instance: from });
        }
    }

    fn on_promise(
        &mut self,
        from: NodeId,
        ballot: Ballot,
        from_instance: Instance,
        entries: Vec<(Instance, Ballot, Value)>,
        more: bool,
    ) {
        let Some(l) = self.leader.as_mut() else {
            return;
        };
        if l.ballot != ballot {
            return;
        }
        let Some(p) = l.phase1.as_mut() else { return };
        if p.cursor.get(&from) != Some(&from_instance) || p.complete.contains(&from) {
            return; // a duplicate, or a page we already have
        }
        let mut next = from_instance;
        for (i, b, v) in entries {
            if i < from_instance {
                continue;
            }
            next = next.max(i + 1);
            match p.reports.get(&i) {
                Some((have, _)) if *have >= b => {}
                _ => {
                    p.reports.insert(i, (b, v));
                }
            }
        }
        if more {
            p.cursor.insert(from, next);
            self.send(from, MessageBody::Prepare { ballot, from_instance: next });
            return;
        }
        p.complete.insert(from);
        if p.membership.is_quorum(p.complete.iter()) {
            self.finish_phase1();
        }
    }

    fn finish_phase1(&mut self) {
        let Some(l) = self.leader.as_mut() else {
            return;
        };
        let Some(p) = l.phase1.take() else { return };
        let mut reports = p.reports;
        if self.cfg.bug == Some(Bug::IgnorePromisedValues) {
            reports.clear();
        }
        let last = reports.keys().next_back().copied().unwrap_or(p.from - 1);
        let membership = p.membership;
        for i in p.from..=last {
            let value = reports.remove(&i).map_or(Value::Noop, |(_, v)| v);
            let reconfig = match &value {
                Value::Reconfigure(m) if membership.is_single_step_to(m) => Some(m.clone()),
                _ => None,
            };
            self.propose_at(i, value, membership.clone());
            if let Some(m) = reconfig {
                self.begin_reconfig(i, m);
                return;
            }
        }
        if let Some(l) = self.leader.as_mut() {
            l.next_instance = last + 1;
            l.next_membership = membership;
            l.established = true;
        }
    }

    fn begin_reconfig(&mut self, at: Instance, next: Membership) {
        if let Some(l) = self.leader.as_mut() {
            l.pending_reconfig = Some(at);
            l.next_instance = at + 1;
            l.next_membership = next.clone();
            l.established = true;
        }
        self.start_phase1(at + 1, next);
    }

    fn propose_at(&mut self, instance: Instance, value: Value, membership: Membership) {
        // Never propose where the log is already decided: a proposal there under our ballot would break the
        // promise our commit messages make (every instance we proposed at and report chosen holds our value).
        if instance <= self.last_chosen {
            return;
        }
        let Some(l) = self.leader.as_mut() else {
            return;
        };
        let ballot = l.ballot;
        let to: Vec<NodeId> = membership.members.iter().copied().collect();
        l.in_flight.insert(
            instance,
            InFlight {
                value: value.clone(),
                membership,
                accepted_by: BTreeSet::new(),
                sent_at: self.now,
                proposed_at: self.now,
            },
        );
        let chosen_up_to = self.last_chosen;
        for node in to {
            self.send(node, MessageBody::Accept { ballot, instance, value: value.clone(), chosen_up_to });
        }
    }

    fn flush_queue(&mut self) {
        loop {
            let Some(l) = self.leader.as_ref() else {
                return;
            };
            if !l.established || l.phase1.is_some() || l.in_flight.len() >= self.cfg.max_in_flight.max(1) {
                return;
            }
            let instance = l.next_instance;
            if instance <= self.last_chosen {
                // Values were chosen past our proposals, so a higher ballot has been leading: we are stale.
                self.step_down_because("the log moved past this leader");
                return;
            }
            let membership = l.next_membership.clone();
            if l.pending_reconfig.is_none() {
                if let Some(next) = self.queued_reconfig.take() {
                    self.propose_at(instance, Value::Reconfigure(next.clone()), membership);
                    self.begin_reconfig(instance, next);
                    continue;
                }
            }
            if self.queue.is_empty() {
                return;
            }
            let mut batch = Vec::new();
            let mut bytes = 0;
            while let Some(cmd) = self.queue.front() {
                if !batch.is_empty() && (!self.cfg.batching || bytes + cmd.len() > self.cfg.max_batch_bytes) {
                    break;
                }
                bytes += cmd.len();
                batch.extend(self.queue.pop_front());
            }
            self.propose_at(instance, Value::Batch(batch), membership);
            if let Some(l) = self.leader.as_mut() {
                l.next_instance = instance + 1;
            }
        }
    }

    fn on_accepted(&mut self, from: NodeId, ballot: Ballot, instance: Instance) {
        let Some(l) = self.leader.as_mut() else {
            return;
        };
        if l.ballot != ballot {
            return;
        }
        let Some(f) = l.in_flight.get_mut(&instance) else {
            return;
        };
        if !f.membership.contains(from) {
            return;
        }
        f.accepted_by.insert(from);
        if f.membership.is_quorum(f.accepted_by.iter()) {
            let f = l.in_flight.remove(&instance).map(|f| f.value);
            if l.pending_reconfig == Some(instance) {
                l.pending_reconfig = None;
            }
            if let Some(v) = f {
                self.learn(instance, v);
            }
        }
    }

    /// One acceptor moving on does not unseat us (the others may still form a majority, and over a slow network
    /// a late prepare from a rival often reaches just one); we give up once no majority is left.
    fn on_nack(&mut self, from: NodeId, rejected: Ballot, promised: Ballot) {
        self.max_round_seen = self.max_round_seen.max(promised.round);
        let Some(l) = self.leader.as_mut() else { return };
        if l.ballot != rejected || promised <= rejected {
            return;
        }
        l.lost.insert(from);
        let hopeless = |m: &Membership| {
            m.members.len() - m.members.iter().filter(|n| !l.lost.contains(n)).count() > m.members.len() - m.quorum()
        };
        let mut doomed = hopeless(&l.next_membership);
        if let Some(p) = l.phase1.as_ref() {
            doomed |= hopeless(&p.membership);
        }
        for f in l.in_flight.values() {
            doomed |= hopeless(&f.membership);
        }
        if doomed {
            self.step_down_because("no majority left (nacks)");
        }
    }

    // ----- learner -----

    fn on_commit(&mut self, from: NodeId, ballot: Ballot, chosen_up_to: Instance) {
        if ballot >= self.promised {
            self.leader_hint = Some(ballot.node);
            if from != self.cfg.id && from == ballot.node {
                self.last_contact = Some((from, self.now, true));
            }
        }
        if self.leader.as_ref().is_some_and(|l| l.ballot < ballot) {
            self.step_down_because("commit from a higher ballot");
        }
        let mut i = self.last_chosen + 1;
        while i <= chosen_up_to {
            if !self.chosen_ahead.contains_key(&i) {
                match self.accepted.get(&i) {
                    Some((b, v)) if *b == ballot => {
                        let v = v.clone();
                        self.learn(i, v);
                    }
                    _ => break,
                }
            }
            i += 1;
        }
        if self.last_chosen < chosen_up_to {
            self.request_catch_up(from);
        }
    }

    fn request_catch_up(&mut self, from: NodeId) {
        if from == self.cfg.id {
            return;
        }
        if let Some(at) = self.catch_up_sent_at {
            if self.now.saturating_sub(at) < self.cfg.retransmit_ms {
                return;
            }
        }
        self.catch_up_sent_at = Some(self.now);
        self.send(from, MessageBody::CatchUpRequest { from_instance: self.last_chosen + 1 });
    }

    fn on_catch_up_request(&mut self, from: NodeId, from_instance: Instance) {
        if self.answered_below_memory(from, from_instance) {
            return;
        }
        let entries = crate::storage::take_within_limits(
            self.chosen_log.range(from_instance..),
            self.cfg.catch_up_max_entries,
            self.cfg.catch_up_max_bytes,
        );
        self.send(from, MessageBody::CatchUp { entries, chosen_up_to: self.last_chosen });
    }

    /// A member asking for chosen values from `from_instance` on, below those held in memory: compacted away
    /// (it must rebuild) or only in storage (the caller reads them). Returns whether it was answered so.
    fn answered_below_memory(&mut self, to: NodeId, from_instance: Instance) -> bool {
        if from_instance < self.first_held {
            self.send(to, MessageBody::CatchUpGone { first_held: self.first_held });
            return true;
        }
        if from_instance >= self.first_in_memory() {
            return false;
        }
        // One read per member and round: a retransmitted request while one is pending adds nothing.
        if !self.ready.catch_up_reads.iter().any(|r| r.to == to) {
            self.ready.catch_up_reads.push(CatchUpRead { to, from_instance, chosen_up_to: self.last_chosen });
        }
        true
    }

    /// Keeps `value` (chosen at `instance`, the next after the ones held) in memory, dropping the oldest beyond
    /// `chosen_cache_bytes`: storage keeps them.
    fn hold_chosen(&mut self, instance: Instance, value: Value) {
        if value.size_bytes() > self.cfg.chosen_cache_value_limit {
            // The cache must stay one contiguous run up to `last_chosen` (catch-up reads it from its first
            // instance on): leaving this one out means starting again after it.
            self.chosen_log.clear();
            self.chosen_log_bytes = 0;
            return;
        }
        self.chosen_log_bytes += value.size_bytes();
        self.chosen_log.insert(instance, value);
        while self.chosen_log_bytes > self.cfg.chosen_cache_bytes {
            let Some((_, old)) = self.chosen_log.pop_first() else { break };
            self.chosen_log_bytes -= old.size_bytes();
        }
    }

    fn on_catch_up(&mut self, from: NodeId, entries: Vec<(Instance, Value)>, chosen_up_to: Instance) {
        self.catch_up_sent_at = None;
        for (i, v) in entries {
            self.learn(i, v);
        }
        if self.last_chosen < chosen_up_to {
            self.request_catch_up(from);
        }
    }

    /// Records that `value` is chosen at `instance` and reports every newly contiguous chosen value.
    fn learn(&mut self, instance: Instance, value: Value) {
        // Learned again (a retransmitted commit, a catch-up page): it must be the value already chosen there. Two
        // values chosen for one instance is the one thing Paxos exists to prevent; going on would apply a log
        // that differs from the other members'. Checked in release builds: a comparison per duplicate.
        let known = if instance <= self.last_chosen {
            Some(self.chosen_log.get(&instance))
        } else {
            self.chosen_ahead.get(&instance).map(Some)
        };
        if let Some(known) = known {
            // A compacted instance (below a snapshot) or one only in storage has no value here to compare.
            if let Some(held) = known {
                assert!(
                    *held == value,
                    "node {}: instance {instance} learned with a value other than the one chosen there",
                    self.cfg.id
                );
            }
            return;
        }
        // A value learned from elsewhere that differs from our own proposal means a higher ballot chose it: we
        // are no longer the leader, and must not tell anyone that our proposal there was chosen.
        if let Some(l) = self.leader.as_ref() {
            if l.in_flight.get(&instance).is_some_and(|f| f.value != value) {
                self.step_down_because("a different value was chosen");
            }
        }
        self.chosen_ahead.insert(instance, value);
        self.advance_chosen();
    }

    fn advance_chosen(&mut self) {
        while let Some(value) = self.chosen_ahead.remove(&(self.last_chosen + 1)) {
            let instance = self.last_chosen + 1;
            self.last_chosen = instance;
            self.accepted.remove(&instance);
            if let Value::Reconfigure(m) = &value {
                if self.membership.is_single_step_to(m) {
                    self.membership = m.clone();
                }
            }
            self.hold_chosen(instance, value.clone());
            self.ready.batch.chosen.push((instance, value.clone()));
            self.ready.chosen.push((instance, value));
        }
        // Keep the chosen-ahead map from holding values below the log after a snapshot install.
        self.chosen_ahead = self.chosen_ahead.split_off(&(self.last_chosen + 1));
        if let Some(l) = self.leader.as_mut() {
            l.in_flight = l.in_flight.split_off(&(self.last_chosen + 1));
            if l.pending_reconfig.is_some_and(|r| r <= self.last_chosen) {
                l.pending_reconfig = None;
            }
        }
        // A member removed from the group stops leading once the change is chosen.
        if self.leader.is_some()
            && !self.membership.contains(self.cfg.id)
            && self.leader.as_ref().is_some_and(|l| l.pending_reconfig.is_none())
        {
            self.step_down_because("removed from the membership");
        }
    }

    // ----- output -----

    fn send(&mut self, to: NodeId, body: MessageBody) {
        self.ready.messages.push(Message { from: self.cfg.id, to, body });
    }

    fn send_after_persist(&mut self, to: NodeId, body: MessageBody) {
        self.ready.after_persist.push(Message { from: self.cfg.id, to, body });
    }
}
