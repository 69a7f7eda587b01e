//! The nemesis: the faults paxsql claims to survive (a fault atlas), schedules of them, and how each is applied
//! and undone. A schedule is a list of steps (fault, how long it is held, how long the cluster then settles);
//! random schedules come from `(seed, index)` alone, so `--seed S --only I` replays schedule I exactly.
//!
//! Atlas (3 nodes, LAN profile: lease 1.5 s, drift bound 0.3 s):
//! - kill -9 of a mariadbd or of a node process, master or replica, then restart;
//! - partitions of the Paxos links (iptables inside the namespace; clients still reach every mariadbd, as an
//!   application on the old master's side would): the master alone, a replica alone, a bridge (one link cut:
//!   one node sees both others, each of those sees a different majority), a directed ring (each node hears
//!   only its predecessor), one-way loss (the master's packets to the others dropped, theirs still arrive);
//! - SIGSTOP of the master's node process for longer than lease + drift, then SIGCONT;
//! - a slow network on the namespace's loopback (tc);
//! - the master cut off while the application account `KILL QUERY`s its own commits that wait for their ACK.

use std::fmt;
use std::time::Duration;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mysql_async::prelude::Queryable as _;

use crate::cluster::TestCluster;
use crate::workload::{connect, Endpoint};
use crate::FaultError;

/// Which node a fault aims at, resolved when it is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Master,
    /// The n-th (mod count) node that is not the master.
    Replica(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    KillMariadbd(Target),
    KillNode(Target),
    /// Cut every Paxos link of one node.
    Isolate(Target),
    /// Cut the link between the master and one replica.
    Bridge,
    /// Node i hears only node i-1 (directed).
    Ring,
    /// The master's Paxos packets to the others are dropped; theirs to it arrive.
    OneWayFromMaster,
    /// SIGSTOP of the master's node process for the hold time.
    PauseMaster,
    /// The master cut off from its peers and, all through the hold, every commit of the application account that
    /// waits for its ACK interrupted with `KILL QUERY` through the master's own RW port (what a pool's query
    /// timeout sends). Only a proxy that keeps a killed commit waiting keeps the histories clean.
    IsolateMasterKillWaiters,
    /// Slow loopback (netem delay/jitter, or a token bucket where netem is missing).
    SlowNetwork {
        delay_ms: u64,
        jitter_ms: u64,
    },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Master => write!(f, "master"),
            Target::Replica(i) => write!(f, "replica{i}"),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::KillMariadbd(t) => write!(f, "kill9-mariadbd({t})"),
            Fault::KillNode(t) => write!(f, "kill9-node({t})"),
            Fault::Isolate(t) => write!(f, "isolate({t})"),
            Fault::Bridge => write!(f, "bridge"),
            Fault::Ring => write!(f, "ring"),
            Fault::OneWayFromMaster => write!(f, "one-way-from-master"),
            Fault::PauseMaster => write!(f, "pause-master"),
            Fault::IsolateMasterKillWaiters => write!(f, "isolate-master-kill-waiters"),
            Fault::SlowNetwork { delay_ms, jitter_ms } => write!(f, "slow-net({delay_ms}ms±{jitter_ms})"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub fault: Fault,
    pub hold: Duration,
    pub settle: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub name: String,
    /// Workload before the first fault.
    pub warmup: Duration,
    pub steps: Vec<Step>,
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let steps: Vec<String> =
            self.steps.iter().map(|s| format!("{} {:.1}s", s.fault, s.hold.as_secs_f64())).collect();
        write!(f, "{}", steps.join(", "))
    }
}

fn step(fault: Fault, hold_ms: u64, settle_ms: u64) -> Step {
    Step { fault, hold: Duration::from_millis(hold_ms), settle: Duration::from_millis(settle_ms) }
}

/// CI mode: one schedule per fault kind.
pub fn ci_schedules() -> Vec<Schedule> {
    let one = |name: &str, s: Step| Schedule { name: name.into(), warmup: Duration::from_secs(3), steps: vec![s] };
    vec![
        one("kill-mariadbd-master", step(Fault::KillMariadbd(Target::Master), 5000, 5000)),
        one("kill-mariadbd-replica", step(Fault::KillMariadbd(Target::Replica(0)), 5000, 5000)),
        one("kill-node-master", step(Fault::KillNode(Target::Master), 5000, 5000)),
        one("kill-node-replica", step(Fault::KillNode(Target::Replica(1)), 5000, 5000)),
        one("isolate-master", step(Fault::Isolate(Target::Master), 7000, 5000)),
        one("isolate-replica", step(Fault::Isolate(Target::Replica(0)), 6000, 4000)),
        one("bridge", step(Fault::Bridge, 7000, 5000)),
        one("ring", step(Fault::Ring, 7000, 5000)),
        one("one-way-from-master", step(Fault::OneWayFromMaster, 7000, 5000)),
        one("pause-master", step(Fault::PauseMaster, 4000, 5000)),
        one("isolate-master-kill-waiters", step(Fault::IsolateMasterKillWaiters, 5000, 5000)),
        one("slow-network", step(Fault::SlowNetwork { delay_ms: 100, jitter_ms: 50 }, 7000, 4000)),
    ]
}

/// Long mode: schedule `index` of `seed` — one to three random steps, sometimes on a slow network.
pub fn random_schedule(seed: u64, index: u64) -> Schedule {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let target = |rng: &mut ChaCha8Rng| {
        if rng.gen_bool(0.5) {
            Target::Master
        } else {
            Target::Replica(rng.gen_range(0..2))
        }
    };
    let mut steps = Vec::new();
    for _ in 0..rng.gen_range(1..=3) {
        let kinds = [0u8, 1, 2, 3, 4, 5, 6, 7, 8, 9];
        let fault = match kinds.choose(&mut rng).copied().unwrap_or(0) {
            0 => Fault::KillMariadbd(target(&mut rng)),
            1 => Fault::KillNode(target(&mut rng)),
            2 => Fault::Isolate(target(&mut rng)),
            3 => Fault::Bridge,
            4 => Fault::Ring,
            5 => Fault::OneWayFromMaster,
            6 => Fault::PauseMaster,
            7 => Fault::Isolate(Target::Master),
            9 => Fault::IsolateMasterKillWaiters,
            _ => Fault::SlowNetwork { delay_ms: rng.gen_range(20..300), jitter_ms: rng.gen_range(0..50) },
        };
        let hold = match fault {
            // Around the lease: shorter than lease + drift must not change masters, longer must.
            Fault::PauseMaster => rng.gen_range(1000..6000),
            _ => rng.gen_range(1000..9000),
        };
        steps.push(step(fault, hold, rng.gen_range(0..5000)));
    }
    Schedule { name: format!("seed{seed}-{index}"), warmup: Duration::from_millis(rng.gen_range(1000..4000)), steps }
}

/// What applying a fault did, to undo it and to report it.
#[derive(Clone, Debug)]
pub struct Applied {
    pub description: String,
    killed_mariadbd: Vec<u64>,
    /// The task interrupting waiting commits, stopped at heal.
    interrupter: Option<Arc<Interrupter>>,
}

fn resolve(cluster: &TestCluster, t: Target) -> Option<u64> {
    let master = cluster.view().master()?;
    match t {
        Target::Master => Some(master),
        Target::Replica(i) => {
            let others: Vec<u64> = cluster.ids().into_iter().filter(|n| *n != master).collect();
            others.get(i as usize % others.len().max(1)).copied()
        }
    }
}

/// Applies `fault`. Faults needing a master do nothing (and say so) when none serves.
pub fn apply(cluster: &TestCluster, fault: Fault) -> Result<Applied, FaultError> {
    let mut a = Applied { description: fault.to_string(), killed_mariadbd: vec![], interrupter: None };
    let ids = cluster.ids();
    let master = cluster.view().master();
    let need = |t: Target| resolve(cluster, t);
    match fault {
        Fault::KillMariadbd(t) => match need(t) {
            Some(n) => {
                cluster.kill9_mariadbd(n);
                a.killed_mariadbd.push(n);
                a.description = format!("{fault}=n{n}");
            }
            None => a.description += " (no master: skipped)",
        },
        Fault::KillNode(t) => match need(t) {
            Some(n) => {
                cluster.kill9_node(n);
                a.description = format!("{fault}=n{n}");
            }
            None => a.description += " (no master: skipped)",
        },
        Fault::Isolate(t) => match need(t) {
            Some(n) => {
                for o in ids.iter().filter(|o| **o != n) {
                    cluster.cut(n, *o)?;
                }
                a.description = format!("{fault}=n{n}");
            }
            None => a.description += " (no master: skipped)",
        },
        Fault::Bridge => {
            let m = master.unwrap_or(1);
            let other = ids.iter().copied().find(|o| *o != m).unwrap_or(2);
            cluster.cut(m, other)?;
            a.description = format!("{fault}(n{m}-x-n{other})");
        }
        Fault::Ring => {
            let k = ids.len() as u64;
            // Node i hears only i-1: drop every other directed link.
            for &from in &ids {
                for &to in &ids {
                    if from != to && to != from % k + 1 {
                        cluster.drop_one_way(from, to)?;
                    }
                }
            }
        }
        Fault::OneWayFromMaster => match master {
            Some(m) => {
                for o in ids.iter().filter(|o| **o != m) {
                    cluster.drop_one_way(m, *o)?;
                }
                a.description = format!("{fault}=n{m}");
            }
            None => a.description += " (no master: skipped)",
        },
        Fault::IsolateMasterKillWaiters => match master {
            Some(m) => {
                for o in ids.iter().filter(|o| **o != m) {
                    cluster.cut(m, *o)?;
                }
                a.interrupter = Some(Arc::new(Interrupter::start(cluster, m)));
                a.description = format!("{fault}=n{m}");
            }
            None => a.description += " (no master: skipped)",
        },
        Fault::PauseMaster => match master {
            Some(m) => {
                cluster.pause_node(m);
                a.description = format!("{fault}=n{m}");
            }
            None => a.description += " (no master: skipped)",
        },
        Fault::SlowNetwork { delay_ms, jitter_ms } => {
            let how = cluster.slow_network(delay_ms, jitter_ms, 2000)?;
            a.description = format!("{fault}[{how}]");
        }
    }
    Ok(a)
}

/// `KILL QUERY` of every application session waiting for its semi-sync ACK on one node, every 100 ms, through
/// that node's proxy RW port, as the application account (which sees and may kill its own sessions).
pub struct Interrupter {
    task: tokio::task::JoinHandle<()>,
    kills: Arc<AtomicU64>,
}

impl fmt::Debug for Interrupter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Interrupter {{ kills: {} }}", self.kills.load(Ordering::Relaxed))
    }
}

impl Interrupter {
    fn start(cluster: &TestCluster, node: u64) -> Interrupter {
        let n = cluster.node(node);
        let ep = Endpoint { node, host: n.host.clone(), port: n.proxy_rw_port, socket: None };
        let app = cluster.app.clone();
        let kills = Arc::new(AtomicU64::new(0));
        let counted = kills.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Ok(mut c) = connect(&app, &ep, Duration::from_secs(1)).await {
                    let waiting: Vec<u64> = c
                        .query(
                            "SELECT id FROM information_schema.processlist WHERE state LIKE 'Waiting for semi-sync%'",
                        )
                        .await
                        .unwrap_or_default();
                    for id in waiting {
                        if c.query_drop(format!("KILL QUERY {id}")).await.is_ok() {
                            counted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Interrupter { task, kills }
    }
}

/// Undoes everything: network healed, paused processes resumed, killed node processes restarted, and a
/// mariadbd that stays down restarted through its node (a node restarts its mariadbd itself only when it was the
/// master's; a replica's is started again by starting its node anew, whose start kills and restarts it).
/// Returns notes on what had to be done.
pub async fn heal(cluster: &TestCluster, applied: &[Applied]) -> Result<Vec<String>, FaultError> {
    let mut notes = Vec::new();
    for i in applied.iter().filter_map(|a| a.interrupter.as_ref()) {
        i.task.abort();
        notes.push(format!("{} KILL QUERY sent to commits waiting for their ACK", i.kills.load(Ordering::Relaxed)));
    }
    cluster.heal_network()?;
    cluster.resume_all();
    for id in cluster.ids() {
        if cluster.node_pid(id).is_none() {
            cluster.restart_node(id).await?;
        }
    }
    let killed_db: Vec<u64> = applied.iter().flat_map(|a| a.killed_mariadbd.iter().copied()).collect();
    // Give a node that restarts its own mariadbd the time to do so before stepping in.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    for id in cluster.ids() {
        while cluster.mariadbd_pid(id).is_none() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if cluster.mariadbd_pid(id).is_none() {
            let why = if killed_db.contains(&id) { "after kill -9" } else { "unexpectedly" };
            notes.push(format!("n{id}: mariadbd down {why} and not restarted by its node: restarted the node"));
            cluster.kill9_node(id);
            cluster.restart_node(id).await?;
        }
    }
    Ok(notes)
}
