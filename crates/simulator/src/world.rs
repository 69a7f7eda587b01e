//! The simulated world: nodes running [`GlobalLogNode`] over [`MemStorage`], a lossy network, drifting clocks and
//! a chaos schedule, all driven by one seeded RNG and one event queue ordered by (time, sequence), so that a seed
//! replays identically.

use std::collections::{BTreeMap, BTreeSet};

use paxsql_global_log::{Applied, GlobalLogConfig, GlobalLogNode, PeerMessage, ReadyIo};
use paxsql_paxos::{CatchUpRead, Instance, MemStorage, Membership, NodeId, Storage, Value, WriteBatch};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::invariants::{Checker, Violation};
use crate::plan::FaultPlan;

const TICK_MS: u64 = 10;
const CLIENT_EVERY_MS: u64 = 15;
/// Hard cap on processed events: a run that needs more is reported, never left spinning.
const MAX_EVENTS: u64 = 3_000_000;
/// Mean time between two switchovers an operator asks for, during the fault phase.
const SWITCHOVER_EVERY_MS: u64 = 1_500;

#[derive(Debug)]
enum Event {
    Tick(NodeId),
    Client,
    Deliver(PeerMessage),
    SyncDone {
        node: NodeId,
        incarnation: u64,
        messages: Vec<PeerMessage>,
    },
    Chaos,
    Restart(NodeId),
    Heal,
    /// An operator asks the lease holder to hand its term to another member.
    Switchover,
}

struct SimNode {
    node: Option<GlobalLogNode>,
    store: MemStorage,
    incarnation: u64,
    clock_offset: u64,
    clock_rate: f64,
    /// Next GTID sequence number this node's client will propose (0: take it from the log).
    next_seq: u64,
    /// The term its client serves in without a break, 0 after it saw its lease lapse.
    term_of_next_seq: u64,
    /// Stretches of serving (a lapse of the lease ends one, as a demotion does in the daemon): in each payload, so
    /// a transaction proposed again after a lapse differs from the one proposed before it, as MariaDB's would.
    epoch: u64,
    /// What its client proposed in this stretch and waits on, by seq_no: the term and the transaction's bytes.
    proposed: BTreeMap<u64, (u64, Vec<u8>)>,
}

/// Summary of a finished run.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub events: u64,
    pub chosen: usize,
    pub acked: usize,
    pub masters: usize,
    pub crashes: u64,
    pub partitions: u64,
    pub reconfigurations: u64,
    pub rebuilds: u64,
    /// Masters that gave up their term because one of its binlog proposals was lost.
    pub terms_given_up: u64,
    /// Terms a master handed to a successor it named (chosen in the log).
    pub hand_overs: u64,
    /// Switchovers an operator asked of a lease holder that it proposed (the hand-over may still be lost).
    pub switchovers: u64,
    /// Catch-ups served from storage (the member was behind the chosen values its peer holds in memory).
    pub storage_catch_ups: u64,
    /// Transactions in parts whose last part reached the log, and (per node applying it) parts dropped by a master
    /// change before their last part.
    pub parted_transactions: u64,
    pub parts_dropped: u64,
    /// Transactions a master proposed whose seq_no the log took with another transaction of the same term (a
    /// proposal from before a lapse of its lease, chosen after it): never acknowledged.
    pub not_acknowledged: u64,
    /// Runs in which one member stayed down for good after the heal.
    pub lasting_outages: u64,
    pub sim_ms: u64,
    /// Time from healing to a new acknowledged commit with all members converged.
    pub liveness_ms: Option<u64>,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.events += o.events;
        self.chosen += o.chosen;
        self.acked += o.acked;
        self.masters += o.masters;
        self.crashes += o.crashes;
        self.partitions += o.partitions;
        self.reconfigurations += o.reconfigurations;
        self.rebuilds += o.rebuilds;
        self.terms_given_up += o.terms_given_up;
        self.hand_overs += o.hand_overs;
        self.switchovers += o.switchovers;
        self.storage_catch_ups += o.storage_catch_ups;
        self.parted_transactions += o.parted_transactions;
        self.parts_dropped += o.parts_dropped;
        self.not_acknowledged += o.not_acknowledged;
        self.lasting_outages += o.lasting_outages;
        self.sim_ms += o.sim_ms;
        self.liveness_ms = match (self.liveness_ms, o.liveness_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
}

pub struct Outcome {
    pub plan: FaultPlan,
    pub stats: Stats,
    pub violation: Option<Violation>,
    pub trace: Vec<String>,
}

pub struct Simulation {
    plan: FaultPlan,
    rng: ChaCha8Rng,
    /// Drives the operator's switchovers on a stream of its own, so that the faults a seed injected before
    /// switchovers existed stay the same faults (regression seeds keep their meaning).
    operator_rng: ChaCha8Rng,
    now: u64,
    seq: u64,
    events: BTreeMap<(u64, u64), Event>,
    nodes: BTreeMap<NodeId, SimNode>,
    initial: Membership,
    blocked: BTreeSet<(NodeId, NodeId)>,
    checker: Checker,
    healed_at: Option<u64>,
    /// The member kept down for good from the heal on ([`FaultPlan::lasting_outage`]).
    gone: Option<NodeId>,
    /// Highest GTID acknowledged after healing (liveness needs one).
    acked_after_heal: bool,
    loss: f64,
    stats: Stats,
    trace: Option<Vec<String>>,
    last_state_line: BTreeMap<NodeId, String>,
}

impl Simulation {
    pub fn new(plan: FaultPlan, trace: bool) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(plan.seed);
        let initial = Membership::new(1..=plan.nodes as u64);
        let pool = if plan.membership_changes { plan.nodes as u64 + 1 } else { plan.nodes as u64 };
        let mut nodes = BTreeMap::new();
        for id in 1..=pool {
            let rate = 1.0 + rng.gen_range(-plan.clock_rate_error..=plan.clock_rate_error);
            let offset = rng.gen_range(0..1_000_000);
            nodes.insert(
                id,
                SimNode {
                    node: None,
                    store: MemStorage::new(),
                    incarnation: 0,
                    clock_offset: offset,
                    clock_rate: rate,
                    next_seq: 0,
                    term_of_next_seq: 0,
                    epoch: 0,
                    proposed: BTreeMap::new(),
                },
            );
        }
        let loss = plan.loss;
        let operator_rng = ChaCha8Rng::seed_from_u64(plan.seed ^ 0x7377_6974_6368_6f76);
        let mut sim = Simulation {
            plan,
            rng,
            operator_rng,
            now: 0,
            seq: 0,
            events: BTreeMap::new(),
            nodes,
            initial,
            blocked: BTreeSet::new(),
            checker: Checker::default(),
            healed_at: None,
            gone: None,
            acked_after_heal: false,
            loss,
            stats: Stats::default(),
            trace: trace.then(Vec::new),
            last_state_line: BTreeMap::new(),
        };
        let ids: Vec<NodeId> = sim.nodes.keys().copied().collect();
        for id in ids {
            sim.start_node(id);
        }
        sim.schedule(CLIENT_EVERY_MS, Event::Client);
        let first_chaos = sim.rng.gen_range(0..sim.plan.chaos_every_ms * 2);
        sim.schedule(first_chaos, Event::Chaos);
        sim.schedule(sim.plan.fault_phase_ms, Event::Heal);
        let first_switchover = sim.operator_rng.gen_range(500..SWITCHOVER_EVERY_MS * 2);
        sim.schedule(first_switchover, Event::Switchover);
        sim
    }

    fn node_config(&self, id: NodeId) -> GlobalLogConfig {
        let mut cfg = GlobalLogConfig::lan(id, self.initial.clone());
        cfg.lease_ms = FaultPlan::LEASE_MS;
        cfg.max_clock_drift_ms = FaultPlan::MAX_CLOCK_DRIFT_MS;
        cfg.snapshot_every = self.plan.snapshot_every;
        cfg.seed = self.plan.seed;
        cfg.paxos.max_in_flight = self.plan.max_in_flight;
        cfg.paxos.batching = self.plan.batching;
        cfg.paxos.max_batch_bytes = 256;
        cfg.paxos.max_promise_entries = 16;
        cfg.paxos.catch_up_max_entries = 16;
        cfg.paxos.chosen_cache_bytes = self.plan.chosen_cache_bytes;
        // With the small caches, values above half of it leave the cache empty (the path a large transaction's
        // parts take in the daemon); with the large one, none does.
        cfg.paxos.chosen_cache_value_limit = self.plan.chosen_cache_bytes / 2;
        cfg.paxos.bug = self.plan.bug;
        // Slow links get timers sized for them, as an operator would (the WAN profile): retransmitting faster
        // than a round trip only floods the network.
        let round_trip = 2 * self.plan.delay_ms.1;
        cfg.paxos.retransmit_ms = cfg.paxos.retransmit_ms.max(round_trip + 50);
        cfg.stand_stagger_ms = cfg.stand_stagger_ms.max(2 * round_trip);
        cfg
    }

    fn local_time(&self, id: NodeId) -> u64 {
        let n = &self.nodes[&id];
        n.clock_offset + (self.now as f64 * n.clock_rate) as u64
    }

    fn schedule(&mut self, after_ms: u64, event: Event) {
        self.seq += 1;
        self.events.insert((self.now + after_ms, self.seq), event);
    }

    fn log(&mut self, line: impl FnOnce() -> String) {
        if let Some(t) = self.trace.as_mut() {
            t.push(format!("{:>7} {}", self.now, line()));
        }
    }

    fn start_node(&mut self, id: NodeId) {
        let now = self.local_time(id);
        let cfg = self.node_config(id);
        let sn = self.nodes.get_mut(&id).expect("node exists");
        let recovered = sn.store.recover().expect("MemStorage recover");
        let chosen = sn.store.chosen(recovered.first_chosen, usize::MAX, usize::MAX).expect("MemStorage read");
        let mut replayed = Vec::new();
        let node = GlobalLogNode::restore(cfg, recovered, chosen, now, &mut |e| replayed.push(e.clone()));
        let (applied, last_gtid) = (node.state().applied, node.state().last_gtid);
        sn.node = Some(node);
        sn.incarnation += 1;
        sn.next_seq = 0;
        sn.proposed.clear();
        self.checker.node_reset(id, applied, last_gtid);
        self.checker.replayed_parts(id, &replayed);
        let jitter = self.rng.gen_range(0..TICK_MS);
        self.schedule(jitter, Event::Tick(id));
        self.log(|| format!("node {id} starts at applied {applied}"));
    }

    /// Runs to the end: a violation, or liveness reached after healing, or the liveness bound passed.
    pub fn run(mut self) -> Outcome {
        let violation = self.run_inner().err();
        self.stats.chosen = self.checker.chosen_count();
        self.stats.acked = self.checker.acked().len();
        self.stats.masters = self.checker.masters();
        self.stats.sim_ms = self.now;
        Outcome { plan: self.plan, stats: self.stats, violation, trace: self.trace.unwrap_or_default() }
    }

    fn run_inner(&mut self) -> Result<(), Violation> {
        while let Some(((at, _), event)) = self.events.pop_first() {
            self.now = at;
            self.stats.events += 1;
            if self.stats.events > MAX_EVENTS {
                return Err(self.violation("bounded run", format!("more than {MAX_EVENTS} events")));
            }
            self.handle(event)?;
            self.check_leases()?;
            self.check_states()?;
            if let Some(healed) = self.healed_at {
                if self.converged() {
                    self.stats.liveness_ms = Some(self.now - healed);
                    return self.final_checks();
                }
                if self.now > healed + self.plan.liveness_bound_ms {
                    return Err(self.violation("liveness after faults heal", self.liveness_report()));
                }
            }
        }
        Err(self.violation("bounded run", "event queue ran dry".into()))
    }

    fn violation(&self, invariant: &'static str, detail: String) -> Violation {
        Violation { at_ms: self.now, invariant, detail }
    }

    fn handle(&mut self, event: Event) -> Result<(), Violation> {
        match event {
            Event::Tick(id) => {
                let now = self.local_time(id);
                let Some(node) = self.nodes.get_mut(&id).and_then(|n| n.node.as_mut()) else { return Ok(()) };
                node.tick(now);
                self.schedule(TICK_MS, Event::Tick(id));
                self.process_ready(id)
            }
            Event::Deliver(msg) => {
                let to = msg.to();
                let now = self.local_time(to);
                if self.blocked.contains(&(msg.from(), to)) {
                    return Ok(());
                }
                if self.nodes.get(&to).is_none_or(|n| n.node.is_none()) {
                    return Ok(());
                }
                if self.trace.is_some() {
                    self.log(|| format!("deliver {msg:?}"));
                }
                if let Some(node) = self.nodes.get_mut(&to).and_then(|n| n.node.as_mut()) {
                    node.step(msg, now);
                }
                self.process_ready(to)
            }
            Event::SyncDone { node, incarnation, messages } => {
                let Some(sn) = self.nodes.get_mut(&node) else { return Ok(()) };
                if sn.incarnation != incarnation || sn.node.is_none() {
                    return Ok(()); // the node crashed before its disk caught up: these messages never leave
                }
                sn.store.sync();
                for m in messages {
                    self.send(m);
                }
                Ok(())
            }
            Event::Client => {
                self.client_writes()?;
                self.schedule(CLIENT_EVERY_MS, Event::Client);
                Ok(())
            }
            Event::Chaos => {
                if self.healed_at.is_none() {
                    self.chaos();
                    let next = self.rng.gen_range(1..self.plan.chaos_every_ms * 2);
                    self.schedule(next, Event::Chaos);
                }
                Ok(())
            }
            Event::Restart(id) => {
                if self.gone != Some(id) && self.nodes.get(&id).is_some_and(|n| n.node.is_none()) {
                    self.start_node(id);
                }
                Ok(())
            }
            Event::Switchover => {
                if self.healed_at.is_none() {
                    self.switchover()?;
                    let next = self.operator_rng.gen_range(1..SWITCHOVER_EVERY_MS * 2);
                    self.schedule(next, Event::Switchover);
                }
                Ok(())
            }
            Event::Heal => {
                self.healed_at = Some(self.now);
                self.blocked.clear();
                self.loss = 0.0;
                let members = self.members();
                if self.plan.lasting_outage && members.len() >= 3 {
                    // The highest member id: no draw from the RNG, so the rest of the run stays comparable.
                    let id = *members.iter().max().expect("three members");
                    self.gone = Some(id);
                    let sn = self.nodes.get_mut(&id).expect("a member is a node");
                    if sn.node.is_some() {
                        sn.store.crash(0);
                        sn.node = None;
                        sn.incarnation += 1;
                        self.stats.crashes += 1;
                    }
                    self.stats.lasting_outages += 1;
                    self.log(|| format!("heal: node {id} stays down for good"));
                }
                let down: Vec<NodeId> = self
                    .nodes
                    .iter()
                    .filter(|(id, n)| n.node.is_none() && self.gone != Some(**id))
                    .map(|(id, _)| *id)
                    .collect();
                for id in down {
                    self.start_node(id);
                }
                self.log(|| "heal: partitions removed, all nodes up, no more loss".into());
                Ok(())
            }
        }
    }

    /// Drains a node's output: reports first, then [`SimIo`] in the daemon's order.
    fn process_ready(&mut self, id: NodeId) -> Result<(), Violation> {
        let Some(sn) = self.nodes.get_mut(&id) else { return Ok(()) };
        let Some(node) = sn.node.as_mut() else { return Ok(()) };
        let ready = node.take_ready();
        if let Some(why) = &ready.term_given_up {
            let why = why.clone();
            self.stats.terms_given_up += 1;
            self.log(|| format!("node {id} gives up its term: {why}"));
        }
        let Some(node) = self.nodes.get(&id).and_then(|sn| sn.node.as_ref()) else { return Ok(()) };
        if self.trace.is_some() {
            let (role, ballot, applied) = (node.paxos().role(), node.paxos().ballot(), node.state().applied);
            let (master, version) = (node.state().master_id, node.state().master_version);
            let line =
                format!("node {id}: role={role:?} ballot={ballot:?} applied={applied} master={master} v={version}");
            if self.last_state_line.get(&id) != Some(&line) {
                self.last_state_line.insert(id, line.clone());
                self.log(|| line);
            }
        }
        // A snapshot installed from a member's reply (this node was behind the compacted log) comes first: the
        // node restarts its log there, and the values chosen after it follow.
        for effect in &ready.applied {
            if let Applied::Restored { instance, last_gtid } = effect {
                let (instance, last_gtid) = (*instance, *last_gtid);
                self.checker.node_reset(id, instance, last_gtid);
                self.stats.rebuilds += 1;
                self.log(|| format!("node {id} rebuilt from a member's snapshot at {instance}"));
            }
        }
        let incarnation = self.nodes.get(&id).map_or(0, |sn| sn.incarnation);
        ready.carry_out(&mut SimIo { world: self, id, incarnation })
    }

    fn send(&mut self, msg: PeerMessage) {
        let (from, to) = (msg.from(), msg.to());
        if from == to {
            self.schedule(0, Event::Deliver(msg));
            return;
        }
        if self.blocked.contains(&(from, to)) || self.rng.gen_bool(self.loss) {
            return;
        }
        let (lo, hi) = self.plan.delay_ms;
        if self.rng.gen_bool(self.plan.duplicate) {
            let d = self.rng.gen_range(lo..=hi);
            self.schedule(d, Event::Deliver(msg.clone()));
        }
        let d = self.rng.gen_range(lo..=hi);
        self.schedule(d, Event::Deliver(msg));
    }

    /// Every lease holder's client proposes one transaction per client tick. Once a write has been acknowledged
    /// after healing, clients fall quiet so that the members can be seen to converge.
    fn client_writes(&mut self) -> Result<(), Violation> {
        if self.acked_after_heal {
            return Ok(());
        }
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            let now = self.local_time(id);
            let sn = self.nodes.get_mut(&id).expect("node exists");
            let Some(node) = sn.node.as_mut() else { continue };
            // As the node's role controller does: a lapsed lease demotes the database, whose recovery drops the
            // un-acknowledged tail, so a later lease (even of the same term) starts again from the log.
            let Some(term) = node.master_term(now) else {
                if sn.term_of_next_seq != 0 {
                    sn.epoch += 1;
                    sn.proposed.clear();
                }
                sn.term_of_next_seq = 0;
                continue;
            };
            if node.paxos().pending().1 >= 4 {
                continue;
            }
            if sn.term_of_next_seq != term {
                sn.next_seq = 0;
                sn.term_of_next_seq = term;
                sn.epoch += 1;
                sn.proposed.clear();
            }
            let from_log = node.state().last_gtid.map_or(1, |g| g.seq_no + 1);
            let seq = sn.next_seq.max(from_log);
            // The client acknowledges only what it proposed itself in this stretch (`proposed`): a restarted
            // master's clients are gone, as MariaDB's waiting sessions are after a crash.
            let payload = format!("n{id}:i{}:e{}:v{term}:s{seq}", sn.incarnation, sn.epoch).into_bytes();
            let server_id = (term * 100 + id) as u32;
            // Every fifth transaction goes into the log in three parts, as one too large for an entry does: a
            // master change between them must leave no part of it anywhere.
            let mut payload = payload;
            let proposed = if seq % 5 == 0 {
                payload.extend_from_slice(b":a large transaction in parts");
                let cuts = [0, payload.len() / 3, 2 * payload.len() / 3, payload.len()];
                cuts.windows(2).enumerate().all(|(i, w)| {
                    let last = i == 2;
                    let bytes = bytes::Bytes::copy_from_slice(&payload[w[0]..w[1]]);
                    node.propose_binlog_part(0, server_id, seq, w[0] as u64, last, bytes).is_ok()
                })
            } else {
                node.propose_binlog(0, server_id, seq, seq, bytes::Bytes::copy_from_slice(&payload)).is_ok()
            };
            if proposed {
                sn.next_seq = seq + 1;
                sn.proposed.insert(seq, (term, payload));
            }
            self.process_ready(id)?;
        }
        Ok(())
    }

    /// The master acknowledges a transaction once it is applied for its own term and is the one it proposed at that
    /// seq_no (the daemon's capture compares length and CRC32; here the bytes). Like MariaDB, it never renumbers a
    /// transaction it proposed: a rejected or lost one blocks every later one until the term ends.
    fn client_outcome(&mut self, id: NodeId, effect: &Applied) -> Result<(), Violation> {
        match effect {
            Applied::BinlogAppended { master_version, gtid_first, last_seq, events, .. }
                if gtid_first.seq_no == *last_seq =>
            {
                self.own_outcome(id, *master_version, *last_seq, events, false)
            }
            Applied::PartsDropped { .. } => {
                self.stats.parts_dropped += 1;
                Ok(())
            }
            Applied::BinlogPartAppended { master_version, gtid, last: true, .. } => {
                let Some(events) = self.checker.transaction(gtid.seq_no).cloned() else { return Ok(()) };
                self.own_outcome(id, *master_version, gtid.seq_no, &events, true)
            }
            _ => Ok(()),
        }
    }

    /// `applied` is in the log at `seq` for term `term`: the client acknowledges what it proposed there if that is
    /// it. With `plan.ack_by_seq_only` (a deliberately broken client) it acknowledges its own proposal at that
    /// seq_no whatever the log holds — the checker must then find an acknowledged write lost.
    fn own_outcome(&mut self, id: NodeId, term: u64, seq: u64, applied: &[u8], parted: bool) -> Result<(), Violation> {
        let Some(sn) = self.nodes.get_mut(&id) else { return Ok(()) };
        if sn.proposed.get(&seq).is_none_or(|(t, _)| *t != term) {
            return Ok(());
        }
        let Some((_, mine)) = sn.proposed.remove(&seq) else { return Ok(()) };
        if mine != applied && !self.plan.ack_by_seq_only {
            self.stats.not_acknowledged += 1;
            return Ok(());
        }
        if parted {
            self.stats.parted_transactions += 1;
        }
        self.checker.ack(self.now, seq, &mine)?;
        if self.healed_at.is_some() {
            self.acked_after_heal = true;
        }
        Ok(())
    }

    fn check_states(&mut self) -> Result<(), Violation> {
        for (id, n) in &self.nodes {
            if let Some(node) = n.node.as_ref() {
                self.checker.state(self.now, *id, node.state())?;
            }
        }
        Ok(())
    }

    fn check_leases(&self) -> Result<(), Violation> {
        let holders: Vec<(NodeId, u64)> = self
            .nodes
            .iter()
            .filter_map(|(id, n)| {
                n.node.as_ref().and_then(|node| node.master_term(self.local_time(*id))).map(|t| (*id, t))
            })
            .collect();
        self.checker.lease(self.now, &holders)
    }

    fn members(&self) -> Vec<NodeId> {
        // The membership of the most advanced node is the cluster's.
        self.nodes
            .values()
            .filter_map(|n| n.node.as_ref())
            .max_by_key(|n| n.state().applied)
            .map(|n| n.state().membership.members.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Liveness: a master holds its lease, committed something after healing, and every member has applied the
    /// whole log.
    fn converged(&self) -> bool {
        if !self.acked_after_heal {
            return false;
        }
        let members: Vec<NodeId> = self.members().into_iter().filter(|id| self.gone != Some(*id)).collect();
        let applied: BTreeSet<u64> = members
            .iter()
            .filter_map(|id| self.nodes.get(id).and_then(|n| n.node.as_ref()).map(|n| n.state().applied))
            .collect();
        let up = members.iter().all(|id| self.nodes.get(id).is_some_and(|n| n.node.is_some()));
        up && applied.len() == 1 && applied.first() == Some(&self.checker.max_chosen())
    }

    fn liveness_report(&self) -> String {
        let mut s =
            format!("acked_after_heal={} members={:?} gone={:?};", self.acked_after_heal, self.members(), self.gone);
        for (id, n) in &self.nodes {
            if let Some(node) = n.node.as_ref() {
                let st = node.state();
                s += &format!(
                    " node {id}: applied={} master={} v={} lease={} role={:?} promised={} first_held={};",
                    st.applied,
                    st.master_id,
                    st.master_version,
                    node.holds_lease(self.local_time(*id)),
                    node.paxos().role(),
                    node.paxos().promised(),
                    node.paxos().first_held(),
                );
            }
        }
        s
    }

    fn final_checks(&self) -> Result<(), Violation> {
        for id in self.members() {
            if let Some(node) = self.nodes.get(&id).and_then(|n| n.node.as_ref()) {
                let last = node.state().last_gtid.map_or(0, |g| g.seq_no);
                self.checker.all_acked_present(self.now, id, last)?;
            }
        }
        Ok(())
    }

    /// One fault action, chosen by the RNG among those the plan allows.
    fn chaos(&mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        let action = self.rng.gen_range(0..6);
        match action {
            0 | 1 if self.plan.crashes => {
                let id = ids[self.rng.gen_range(0..ids.len())];
                let sn = self.nodes.get_mut(&id).expect("node exists");
                if sn.node.is_some() {
                    let keep = self.rng.gen_range(0..=sn.store.pending_batches());
                    sn.store.crash(keep);
                    sn.node = None;
                    sn.incarnation += 1;
                    self.stats.crashes += 1;
                    let down_for = self.rng.gen_range(50..3_000);
                    self.schedule(down_for, Event::Restart(id));
                    self.log(|| format!("chaos: crash node {id} (kept {keep} un-synced batches), down {down_for} ms"));
                }
            }
            2 | 3 if self.plan.partitions => {
                self.blocked.clear();
                let mut side: Vec<NodeId> = ids.clone();
                // Isolate a random group (one node, or a minority or majority).
                let cut = self.rng.gen_range(1..ids.len());
                for i in (1..side.len()).rev() {
                    let j = self.rng.gen_range(0..=i);
                    side.swap(i, j);
                }
                let (a, b) = side.split_at(cut);
                let one_way = self.plan.asymmetric && self.rng.gen_bool(0.5);
                for &x in a {
                    for &y in b {
                        self.blocked.insert((x, y));
                        if !one_way {
                            self.blocked.insert((y, x));
                        }
                    }
                }
                self.stats.partitions += 1;
                let (a, b) = (a.to_vec(), b.to_vec());
                self.log(|| format!("chaos: partition {a:?} | {b:?} one_way={one_way}"));
            }
            4 => {
                self.blocked.clear();
                self.log(|| "chaos: partitions healed".into());
            }
            5 if self.plan.membership_changes => self.reconfigure(&ids),
            _ => {}
        }
    }

    /// The lease holder (if any) is asked to hand its term to a random member (sometimes a non-member, or
    /// itself, which it must refuse) or to the best one it sees. The daemon drains its database first; here the
    /// client's proposals in flight are exactly what the drain does not cover, so the checker sees whether a
    /// switchover can lose or reorder an acknowledged write.
    fn switchover(&mut self) -> Result<(), Violation> {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        let master = ids.iter().copied().find(|id| {
            let now = self.local_time(*id);
            self.nodes[id].node.as_ref().is_some_and(|n| n.holds_lease(now))
        });
        let Some(master) = master else { return Ok(()) };
        let to =
            if self.operator_rng.gen_bool(0.3) { None } else { Some(ids[self.operator_rng.gen_range(0..ids.len())]) };
        let now = self.local_time(master);
        let Some(node) = self.nodes.get_mut(&master).and_then(|n| n.node.as_mut()) else { return Ok(()) };
        let result = node.switch_over(to);
        let still_holds = node.holds_lease(now);
        self.log(|| format!("operator: switchover of node {master} to {to:?}: {result:?}"));
        match &result {
            // Once the hand-over is proposed the old master serves no more: its lease ends at once.
            Ok(_) if still_holds => {
                let detail = format!("node {master} still holds its lease after proposing a switchover");
                return Err(self.violation("a switchover ends the old master's lease", detail));
            }
            Ok(_) => self.stats.switchovers += 1,
            // A refusal changes nothing: the master keeps serving.
            Err(e) if !still_holds => {
                let detail = format!("node {master} lost its lease by refusing a switchover ({e})");
                return Err(self.violation("a refused switchover changes nothing", detail));
            }
            Err(_) => {}
        }
        self.process_ready(master)
    }

    fn reconfigure(&mut self, ids: &[NodeId]) {
        let master = ids.iter().copied().find(|id| {
            let now = self.local_time(*id);
            self.nodes[id].node.as_ref().is_some_and(|n| n.holds_lease(now))
        });
        let Some(master) = master else { return };
        let current = self.nodes[&master].node.as_ref().map(|n| n.state().membership.clone()).unwrap_or_default();
        let outside: Vec<NodeId> = ids.iter().copied().filter(|id| !current.contains(*id)).collect();
        let mut next = current.clone();
        if !outside.is_empty() && (current.members.len() <= 3 || self.rng.gen_bool(0.5)) {
            next.members.insert(outside[self.rng.gen_range(0..outside.len())]);
        } else if current.members.len() > 3 {
            let inside: Vec<NodeId> = current.members.iter().copied().collect();
            next.members.remove(&inside[self.rng.gen_range(0..inside.len())]);
        } else {
            return;
        }
        if let Some(node) = self.nodes.get_mut(&master).and_then(|n| n.node.as_mut()) {
            // As an operator's tool does: where the new member is reached goes into the log before it may vote.
            for added in next.members.difference(&current.members) {
                let _ = node.record_member(*added, format!("10.0.0.{added}:7101"), format!("10.0.0.{added}:3306"));
            }
            if node.change_membership(next.clone()).is_ok() {
                self.stats.reconfigurations += 1;
                self.log(|| format!("chaos: node {master} proposes membership {:?}", next.members));
            }
        }
    }
}

/// How the simulator carries out a node's output ([`ReadyIo`]; `carry_out` fixes the order, as in the daemon):
/// every chosen value and effect checked, messages through the simulated network, the batch written unsynced and
/// its sync scheduled after a random delay — `after_persist` leaves only then, and a crash before it loses both.
struct SimIo<'w> {
    world: &'w mut Simulation,
    id: NodeId,
    incarnation: u64,
}

impl ReadyIo for SimIo<'_> {
    type Error = Violation;

    fn send(&mut self, msg: PeerMessage) {
        self.world.send(msg);
    }

    fn chosen(&mut self, instance: Instance, value: &Value) -> Result<(), Violation> {
        self.world.checker.chosen(self.world.now, self.id, instance, value)
    }

    fn applied(&mut self, effect: Applied) -> Result<(), Violation> {
        let (w, id) = (&mut *self.world, self.id);
        if matches!(effect, Applied::MasterChanged { handed_over: true, master, .. } if master == id) {
            w.stats.hand_overs += 1;
        }
        w.checker.applied(w.now, id, &effect)?;
        w.client_outcome(id, &effect)
    }

    fn catch_up(&mut self, read: CatchUpRead) -> Result<(), Violation> {
        let (w, id) = (&mut *self.world, self.id);
        let Some(sn) = w.nodes.get(&id) else { return Ok(()) };
        let Some(node) = sn.node.as_ref() else { return Ok(()) };
        match read.answer(id, &sn.store, &node.config().paxos) {
            Ok(m) => {
                w.stats.storage_catch_ups += 1;
                w.send(PeerMessage::Paxos(m));
                Ok(())
            }
            Err(e) => {
                let detail = format!("node {id}: read from {}: {e}", read.from_instance);
                Err(w.violation("storage answers catch-ups below the memory window", detail))
            }
        }
    }

    fn persist(&mut self, batch: WriteBatch, after: Vec<PeerMessage>) -> Result<(), Violation> {
        let (w, id) = (&mut *self.world, self.id);
        let Some(sn) = w.nodes.get_mut(&id) else { return Ok(()) };
        if let Err(e) = sn.store.write(&batch, false) {
            return Err(w.violation("storage writes are well-formed", format!("node {id}: {e}")));
        }
        // As the daemon does: a batch of chosen entries alone is written without a sync, so a crash may lose it
        // (with every later unsynced batch) until a later sync covers it.
        if !after.is_empty() || batch.needs_sync() {
            let delay = w.rng.gen_range(w.plan.fsync_ms.0..=w.plan.fsync_ms.1);
            w.schedule(delay, Event::SyncDone { node: id, incarnation: self.incarnation, messages: after });
        }
        Ok(())
    }
}
