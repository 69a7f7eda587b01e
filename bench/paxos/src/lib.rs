//! Benchmark of the Paxos core ([`paxsql_paxos::PaxosNode`]) over the durable raft-engine store
//! ([`paxsql_paxos_store::RaftEngineStorage`]): three members in one process, each driven by its own thread over
//! its own store in a directory on disk, talking through an in-process network of channels.
//!
//! Each member's driver runs the loop the daemon will run (crate docs of `paxsql-paxos`):
//! 1. wait for a message or the next tick, then step every message already waiting;
//! 2. `take_ready`: send `messages` at once, write `batch` to the store *without* syncing, keep `after_persist`,
//!    apply `chosen`; step what arrived meanwhile and take the next `Ready`, up to [`BenchConfig::group_readies`]
//!    of them (group commit);
//! 3. one fsync (the last batch of the group is written with `sync = true`), then send every `after_persist`.
//!
//! Messages a member addresses to itself go through its own inbox like any other.
//!
//! Node 1 campaigns at start. Once it is leader it runs a closed-loop load: `proposers` clients, each with one
//! command outstanding, proposing its next command as soon as the leader sees the previous one in
//! `Ready::chosen`. The commit latency of a command is the time from `propose` to that moment.
//!
//! Members compact their in-memory chosen log (and the store) every [`COMPACT_EVERY_INSTANCES`] instances or
//! [`COMPACT_EVERY_BYTES`], as the daemon will after applying, so that a long run does not hold every value in memory.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use paxsql_paxos::{
    Config, Instance, Membership, Message, MessageBody, NodeId, PaxosNode, Role, Snapshot, Storage, Value, WriteBatch,
};
use paxsql_paxos_store::RaftEngineStorage;

/// The members of the benchmarked group; node 1 leads.
pub const MEMBERS: [NodeId; 3] = [1, 2, 3];
const LEADER: NodeId = 1;

/// How often a driver calls `tick` (heartbeats every 100 ms and retransmissions after 200 ms need no finer clock).
const TICK: Duration = Duration::from_millis(5);
/// Messages stepped at most before the node's output is taken.
const MAX_STEPS_PER_READY: usize = 1024;
/// Compaction thresholds, see the crate docs.
pub const COMPACT_EVERY_INSTANCES: u64 = 1024;
pub const COMPACT_EVERY_BYTES: usize = 64 << 20;
/// How long node 1 may take to become leader before the run is declared failed.
const ELECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Every command starts with the proposer slot and its sequence number, both u32 little-endian.
const HEADER_BYTES: usize = 8;

/// One benchmark configuration.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Size of each proposed command (at least 8 bytes: the slot and sequence header).
    pub value_bytes: usize,
    /// Closed-loop clients, each with one command outstanding.
    pub proposers: usize,
    /// `Config::batching` of every member: queued commands share one instance.
    pub batching: bool,
    /// `Config::max_in_flight`: instances the leader may have proposed and not yet seen chosen.
    pub max_in_flight: usize,
    /// Load before measuring starts (not counted).
    pub warmup: Duration,
    /// How long to measure.
    pub measure: Duration,
    /// Stop once this many commands were measured, even if `measure` has not passed (the smoke test).
    pub max_values: Option<u64>,
    /// `Ready`s a driver takes, writing each batch without syncing, before one fsync. 1 = one sync per `Ready`.
    pub group_readies: usize,
    /// Keep every member's chosen log as (instance, hash of the value), to compare them afterwards.
    pub record_chosen: bool,
}

/// What one member's driver did.
#[derive(Clone, Debug, Default)]
pub struct DriverStats {
    pub id: NodeId,
    /// fsyncs (writes with `sync = true`).
    pub syncs: u64,
    /// Non-empty batches written.
    pub batches: u64,
    /// Value bytes written as accepted entries plus as chosen entries (each value is written twice).
    pub value_bytes_written: u64,
    /// Time spent inside `Storage::write`, syncing included.
    pub write_time: Duration,
    /// Accept messages sent (3 per instance without retransmissions).
    pub accepts_sent: u64,
    /// Most messages queued in this member's inbox at once.
    pub max_inbox: usize,
    /// How long the driver ran (election and warmup included): the time base of the counters above.
    pub wall: Duration,
    /// Highest instance this member saw chosen.
    pub last_chosen: Instance,
    /// (instance, hash of the value) of every chosen instance, when `record_chosen`.
    pub chosen: Vec<(Instance, u64)>,
}

/// The outcome of one configuration.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// From `campaign` to `role() == Leader` on node 1.
    pub election: Duration,
    /// Length of the measured window.
    pub elapsed: Duration,
    /// Commands chosen in the window (commands, not instances: a batched instance holds several).
    pub commands: u64,
    /// Instances chosen in the window.
    pub instances: u64,
    /// Commit latency of every command chosen in the window, sorted, in microseconds.
    pub latencies_us: Vec<u64>,
    /// Per member, in [`MEMBERS`] order.
    pub nodes: Vec<DriverStats>,
}

impl RunReport {
    pub fn commands_per_sec(&self) -> f64 {
        self.commands as f64 / self.elapsed.as_secs_f64()
    }

    pub fn instances_per_sec(&self) -> f64 {
        self.instances as f64 / self.elapsed.as_secs_f64()
    }

    /// The `p`-th percentile (0..=100) of the commit latency in milliseconds (nearest rank).
    pub fn latency_ms(&self, p: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * self.latencies_us.len() as f64).ceil() as usize;
        self.latencies_us[rank.clamp(1, self.latencies_us.len()) - 1] as f64 / 1000.0
    }

    /// Mean commit latency in milliseconds.
    pub fn mean_latency_ms(&self) -> f64 {
        self.latencies_us.iter().sum::<u64>() as f64 / self.latencies_us.len().max(1) as f64 / 1000.0
    }

    pub fn leader(&self) -> &DriverStats {
        &self.nodes[0]
    }
}

/// Runs one configuration on three fresh stores under `base_dir` and returns what it measured.
pub fn run(cfg: &BenchConfig, base_dir: &Path) -> anyhow::Result<RunReport> {
    assert!(cfg.value_bytes >= HEADER_BYTES, "values carry an {HEADER_BYTES}-byte header");
    assert!(cfg.proposers >= 1 && cfg.group_readies >= 1);
    let dir = tempfile::Builder::new().prefix("paxos-bench-").tempdir_in(base_dir).context("creating the run dir")?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut inboxes = Vec::new();
    let mut senders = Vec::new();
    for _ in MEMBERS {
        let (tx, rx) = mpsc::channel();
        let depth = Arc::new(AtomicUsize::new(0));
        senders.push(Peer { tx, depth: depth.clone() });
        inboxes.push((rx, depth));
    }
    let mut handles = Vec::new();
    for (id, (inbox, depth)) in MEMBERS.into_iter().zip(inboxes) {
        let store_dir = dir.path().join(format!("node-{id}"));
        let store = RaftEngineStorage::open(&store_dir).with_context(|| format!("opening {}", store_dir.display()))?;
        let mut node_cfg = Config::new(id);
        node_cfg.batching = cfg.batching;
        node_cfg.max_in_flight = cfg.max_in_flight;
        let driver = Driver {
            node: PaxosNode::new(node_cfg, Membership::new(MEMBERS)),
            store,
            inbox,
            depth,
            peers: senders.clone(),
            stop: stop.clone(),
            group_readies: cfg.group_readies,
            record_chosen: cfg.record_chosen,
            load: (id == LEADER).then(|| Load::new(cfg)),
            stats: DriverStats { id, ..Default::default() },
            compacted_at: 0,
            bytes_since_compact: 0,
        };
        let handle = thread::Builder::new().name(format!("paxos-{id}")).spawn(move || driver.run())?;
        handles.push(handle);
    }
    drop(senders);
    let mut nodes = Vec::new();
    let mut load = None;
    for h in handles {
        let (stats, l) = h.join().map_err(|_| anyhow::anyhow!("a driver thread panicked"))??;
        nodes.push(stats);
        load = load.or(l);
    }
    let load = load.expect("node 1 runs the load");
    let Some(election) = load.election else {
        bail!("node 1 did not become leader within {ELECTION_TIMEOUT:?}");
    };
    let mut latencies_us = load.latencies_us;
    latencies_us.sort_unstable();
    let (start, end) = (load.measure_start.expect("measured"), load.measure_end.expect("measured"));
    Ok(RunReport {
        election,
        elapsed: end.saturating_duration_since(start),
        commands: load.commands,
        instances: load.instances,
        latencies_us,
        nodes,
    })
}

/// A member's end of the in-process network: its inbox and how many messages wait in it.
#[derive(Clone)]
struct Peer {
    tx: Sender<Message>,
    depth: Arc<AtomicUsize>,
}

struct Driver {
    node: PaxosNode,
    store: RaftEngineStorage,
    inbox: Receiver<Message>,
    depth: Arc<AtomicUsize>,
    /// Indexed by node id - 1.
    peers: Vec<Peer>,
    stop: Arc<AtomicBool>,
    group_readies: usize,
    record_chosen: bool,
    load: Option<Load>,
    stats: DriverStats,
    /// Instance of the last compaction.
    compacted_at: Instance,
    bytes_since_compact: usize,
}

impl Driver {
    /// Runs until any member stops (the load is over, or something failed), then stops the others.
    fn run(mut self) -> anyhow::Result<(DriverStats, Option<Load>)> {
        let started = Instant::now();
        let outcome = self.run_loop(started);
        self.stats.wall = started.elapsed();
        self.stop.store(true, Ordering::Relaxed);
        outcome?;
        self.stats.last_chosen = self.node.last_chosen();
        Ok((self.stats, self.load))
    }

    fn run_loop(&mut self, started: Instant) -> anyhow::Result<()> {
        let mut next_tick = started;
        if self.load.is_some() {
            self.node.campaign();
        }
        // Whether the last round stopped at the group limit with output possibly left in the node.
        let mut more = self.process_ready()?;
        while !self.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let first = if more {
                self.inbox.try_recv().map_err(|e| e == TryRecvError::Disconnected)
            } else {
                self.inbox
                    .recv_timeout(next_tick.saturating_duration_since(now))
                    .map_err(|e| e == RecvTimeoutError::Disconnected)
            };
            match first {
                Ok(m) => {
                    self.received();
                    self.node.step(m);
                    self.step_waiting(MAX_STEPS_PER_READY - 1);
                }
                Err(true) => break,
                Err(false) => {}
            }
            let now = Instant::now();
            if now >= next_tick {
                self.node.tick(now.duration_since(started).as_millis() as u64);
                next_tick = now + TICK;
            }
            if let Some(load) = self.load.as_mut() {
                if load.poll(&mut self.node, now, started)? {
                    return Ok(());
                }
            }
            more = self.process_ready()?;
        }
        Ok(())
    }

    fn received(&mut self) {
        let waiting = self.depth.fetch_sub(1, Ordering::Relaxed);
        self.stats.max_inbox = self.stats.max_inbox.max(waiting);
    }

    /// Steps up to `max` messages that are already waiting, without blocking.
    fn step_waiting(&mut self, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            let Ok(m) = self.inbox.try_recv() else { break };
            self.received();
            self.node.step(m);
            n += 1;
        }
        n
    }

    fn send(&mut self, m: Message) {
        if matches!(m.body, MessageBody::Accept { .. }) {
            self.stats.accepts_sent += 1;
        }
        let peer = &self.peers[(m.to - 1) as usize];
        peer.depth.fetch_add(1, Ordering::Relaxed);
        // A peer that has stopped (end of the run) no longer listens.
        let _ = peer.tx.send(m);
    }

    /// Takes up to `group_readies` `Ready`s, then syncs once and sends what waited for it. Returns whether it
    /// stopped at the limit (the node may hold more output).
    fn process_ready(&mut self) -> anyhow::Result<bool> {
        let mut held: Option<WriteBatch> = None;
        let mut after_persist = Vec::new();
        let mut readies = 0;
        let mut at_limit = false;
        loop {
            let ready = self.node.take_ready();
            if let Some(first) = ready.rebuild_required {
                bail!(
                    "node {} fell behind a compaction (first held {first}); the bench never drops messages",
                    self.stats.id
                );
            }
            if ready.is_empty() {
                break;
            }
            readies += 1;
            for m in ready.messages {
                self.send(m);
            }
            if !ready.batch.is_empty() {
                // Write the previous batch unsynced; the last of the group is written with sync = true below.
                if let Some(prev) = held.replace(ready.batch) {
                    self.write(&prev, false)?;
                }
            }
            after_persist.extend(ready.after_persist);
            self.apply(ready.chosen, Instant::now())?;
            if readies >= self.group_readies {
                at_limit = true;
                break;
            }
            self.step_waiting(MAX_STEPS_PER_READY);
        }
        // Without a batch in this group, every earlier one was synced when its group ended: the messages below
        // depend on nothing unsynced.
        if let Some(last) = held {
            self.write(&last, true)?;
        }
        for m in after_persist {
            self.send(m);
        }
        self.maybe_compact();
        Ok(at_limit)
    }

    fn write(&mut self, batch: &WriteBatch, sync: bool) -> anyhow::Result<()> {
        let started = Instant::now();
        self.store.write(batch, sync).with_context(|| format!("node {}: writing a batch", self.stats.id))?;
        self.stats.write_time += started.elapsed();
        self.stats.batches += 1;
        self.stats.syncs += u64::from(sync);
        let accepted: usize = batch.accepted.iter().map(|(_, _, v)| v.size_bytes()).sum();
        let chosen: usize = batch.chosen.iter().map(|(_, v)| v.size_bytes()).sum();
        self.stats.value_bytes_written += (accepted + chosen) as u64;
        Ok(())
    }

    fn apply(&mut self, chosen: Vec<(Instance, Value)>, now: Instant) -> anyhow::Result<()> {
        for (instance, value) in chosen {
            self.bytes_since_compact += value.size_bytes();
            if self.record_chosen {
                let mut h = DefaultHasher::new();
                value.hash(&mut h);
                self.stats.chosen.push((instance, h.finish()));
            }
            if let Some(load) = self.load.as_mut() {
                load.chosen(&mut self.node, &value, now)?;
            }
        }
        Ok(())
    }

    /// Compacts once enough was chosen. Called after the batch holding the chosen entries was written, so that the
    /// snapshot never runs ahead of the store's chosen log.
    fn maybe_compact(&mut self) {
        let last = self.node.last_chosen();
        if last - self.compacted_at >= COMPACT_EVERY_INSTANCES
            || (self.bytes_since_compact >= COMPACT_EVERY_BYTES && last > self.compacted_at)
        {
            let membership = self.node.membership().clone();
            self.node.compact(Snapshot { last_included: last, membership, data: Vec::new() });
            self.compacted_at = last;
            self.bytes_since_compact = 0;
        }
    }
}

/// The closed-loop load on the leader.
struct Load {
    proposers: usize,
    warmup: Duration,
    measure: Duration,
    max_values: Option<u64>,
    /// Random bytes the command bodies are cut from, so that raft-engine's lz4 finds nothing to compress.
    pool: Vec<u8>,
    pool_offset: usize,
    value_bytes: usize,
    /// When each proposer's outstanding command was proposed, and its sequence number.
    outstanding: Vec<(Instant, u32)>,
    election: Option<Duration>,
    measure_start: Option<Instant>,
    measure_end: Option<Instant>,
    commands: u64,
    instances: u64,
    latencies_us: Vec<u64>,
}

impl Load {
    fn new(cfg: &BenchConfig) -> Self {
        let pool_len = (8 << 20).max(4 * cfg.value_bytes);
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let pool = (0..pool_len)
            .map(|_| {
                // xorshift64: only has to defeat compression, not be a good RNG.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        Load {
            proposers: cfg.proposers,
            warmup: cfg.warmup,
            measure: cfg.measure,
            max_values: cfg.max_values,
            pool,
            pool_offset: 0,
            value_bytes: cfg.value_bytes,
            outstanding: Vec::new(),
            election: None,
            measure_start: None,
            measure_end: None,
            commands: 0,
            instances: 0,
            latencies_us: Vec::new(),
        }
    }

    fn command(&mut self, slot: u32, seq: u32) -> Vec<u8> {
        let body = self.value_bytes - HEADER_BYTES;
        if self.pool_offset + body > self.pool.len() {
            self.pool_offset = 0;
        }
        let mut cmd = Vec::with_capacity(self.value_bytes);
        cmd.extend_from_slice(&slot.to_le_bytes());
        cmd.extend_from_slice(&seq.to_le_bytes());
        cmd.extend_from_slice(&self.pool[self.pool_offset..self.pool_offset + body]);
        self.pool_offset += body;
        cmd
    }

    fn propose(&mut self, node: &mut PaxosNode, slot: u32, seq: u32, now: Instant) -> anyhow::Result<()> {
        let cmd = self.command(slot, seq);
        node.propose(cmd.into()).context("node 1 refused a proposal")?;
        self.outstanding[slot as usize] = (now, seq);
        Ok(())
    }

    /// Starts the load once node 1 leads; returns whether the run is over.
    fn poll(&mut self, node: &mut PaxosNode, now: Instant, started: Instant) -> anyhow::Result<bool> {
        if self.election.is_none() {
            if node.role() != Role::Leader {
                return Ok(now.duration_since(started) > ELECTION_TIMEOUT);
            }
            self.election = Some(now.duration_since(started));
            self.measure_start = Some(now + self.warmup);
            self.outstanding = vec![(now, 0); self.proposers];
            for slot in 0..self.proposers as u32 {
                self.propose(node, slot, 0, now)?;
            }
            return Ok(false);
        }
        if node.role() != Role::Leader {
            bail!("node 1 lost its leadership during the run");
        }
        // Also ends a run in which nothing is chosen any more.
        let start = self.measure_start.expect("set with the election");
        if self.measure_end.is_none() && now >= start + self.measure {
            self.measure_end = Some(now);
        }
        Ok(self.measure_end.is_some())
    }

    fn chosen(&mut self, node: &mut PaxosNode, value: &Value, now: Instant) -> anyhow::Result<()> {
        let Value::Batch(cmds) = value else { return Ok(()) };
        let Some(start) = self.measure_start else { return Ok(()) };
        if self.measure_end.is_some() {
            return Ok(());
        }
        let measuring = now >= start;
        if measuring {
            self.instances += 1;
        }
        for cmd in cmds {
            let slot = u32::from_le_bytes(cmd[0..4].try_into().expect("header"));
            let seq = u32::from_le_bytes(cmd[4..8].try_into().expect("header"));
            let (sent_at, outstanding) = self.outstanding[slot as usize];
            assert_eq!(seq, outstanding, "proposer {slot}: chosen command is not its outstanding one");
            if measuring {
                self.commands += 1;
                self.latencies_us.push(now.duration_since(sent_at).as_micros() as u64);
            }
            self.propose(node, slot, seq + 1, now)?;
        }
        let done_by_count = self.max_values.is_some_and(|m| self.commands >= m);
        if measuring && (now >= start + self.measure || done_by_count) {
            self.measure_end = Some(now);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn smoke_config(batching: bool, max_in_flight: usize) -> BenchConfig {
        BenchConfig {
            value_bytes: 1024,
            proposers: 16,
            batching,
            max_in_flight,
            warmup: Duration::ZERO,
            measure: Duration::from_secs(60),
            max_values: Some(200),
            group_readies: 8,
            record_chosen: true,
        }
    }

    /// The core loop chooses ~200 values on real stores, and every member's chosen log agrees where they overlap.
    #[test]
    fn smoke_two_hundred_values() {
        for (batching, in_flight) in [(true, 64), (false, 1)] {
            let base = tempfile::tempdir().unwrap();
            let r = run(&smoke_config(batching, in_flight), base.path()).unwrap();
            assert!(r.commands >= 200, "batching={batching}: only {} commands", r.commands);
            assert_eq!(r.latencies_us.len() as u64, r.commands);
            assert!(r.instances >= 1 && r.instances <= r.commands);
            if !batching {
                assert_eq!(r.instances, r.commands, "without batching every command takes its own instance");
            }
            let leader = &r.leader().chosen;
            assert!(leader.len() as u64 >= r.instances);
            for follower in &r.nodes[1..] {
                for (a, b) in leader.iter().zip(&follower.chosen) {
                    assert_eq!(a, b, "node {} disagrees with node 1", follower.id);
                }
                assert!(follower.syncs > 0, "node {} never persisted", follower.id);
            }
        }
    }
}
