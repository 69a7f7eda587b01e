//! The deterministic simulator of paxsql: it runs the very [`paxsql_global_log::GlobalLogNode`] the daemon runs
//! (Paxos core, state machine, lease) on a simulated network, disk and clocks, injects the faults of a seeded
//! [`FaultPlan`], and checks the safety invariants after every step, then requires progress once faults heal.
//!
//! ```no_run
//! let outcome = paxsql_simulator::run_seed(42, None, false);
//! assert!(outcome.violation.is_none(), "{}", outcome.violation.unwrap());
//! ```

mod invariants;
mod plan;
mod world;

pub use invariants::Violation;
pub use plan::FaultPlan;
pub use world::{Outcome, Simulation, Stats};

use paxsql_paxos::Bug;

/// Runs one seed. `bug` swaps in a deliberately broken protocol variant.
pub fn run_seed(seed: u64, bug: Option<Bug>, trace: bool) -> Outcome {
    let mut plan = FaultPlan::from_seed(seed);
    plan.bug = bug;
    Simulation::new(plan, trace).run()
}

/// Runs `count` seeds from `start` on `threads` threads; returns the failing outcomes (seed order) and how many
/// seeds ran.
pub fn sweep(start: u64, count: u64, threads: usize, bug: Option<Bug>, stop_at_first: bool) -> (Vec<Outcome>, u64) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Mutex;
    let next = AtomicU64::new(start);
    let ran = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= start + count {
                    return;
                }
                let outcome = run_seed(seed, bug, false);
                ran.fetch_add(1, Ordering::Relaxed);
                if outcome.violation.is_some() {
                    if stop_at_first {
                        stop.store(true, Ordering::Relaxed);
                    }
                    if let Ok(mut f) = failures.lock() {
                        f.push(outcome);
                    }
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap_or_default();
    failures.sort_by_key(|o| o.plan.seed);
    (failures, ran.load(Ordering::Relaxed))
}
