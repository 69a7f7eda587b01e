//! paxsql's Jepsen-style fault-injection suite. It starts a real 3-node cluster (`paxsql cluster up`, real
//! mariadbd) inside a network namespace of its own, runs concurrent workloads against it (bank transfers,
//! registers with compare-and-set, appends) while a nemesis kills, pauses and partitions nodes, then heals
//! everything and checks the histories: totals conserved, histories linearizable, every acknowledged write
//! present exactly once in one order on every node, equal checksums.
//!
//! Run loop of one schedule ([`runner::run_schedule`]): monitor (every ~100 ms: who is master, `@@read_only` on
//! every node) + workload clients + nemesis steps → heal, restart, converge → checks → one [`runner::ScheduleReport`].

pub mod cluster;
pub mod error;
pub mod linearizability;
pub mod monitor;
pub mod nemesis;
pub mod runner;
pub mod workload;

pub use error::FaultError;
