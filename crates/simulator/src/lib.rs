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
/// An assertion of the code under test that fires (the Paxos core asserts what must never happen) is a violation of
/// that seed like any other, reported with its seed instead of ending the sweep.
pub fn run_seed(seed: u64, bug: Option<Bug>, trace: bool) -> Outcome {
    run_seed_with(seed, Variant { bug, ..Variant::default() }, trace)
}

/// What a run changes of its seed's plan.
#[derive(Clone, Copy, Debug)]
pub struct Variant {
    /// A deliberately broken Paxos core.
    pub bug: Option<Bug>,
    /// A deliberately broken master client ([`FaultPlan::ack_by_seq_only`]).
    pub ack_by_seq_only: bool,
    /// Whether every fourth seed (seed % 4 == 1) keeps one member down for good from the heal on
    /// ([`FaultPlan::lasting_outage`]): the rest must elect a master, take writes and converge. On by default;
    /// off reproduces a plan as it was before the outages were added.
    pub lasting_outages: bool,
}

impl Default for Variant {
    fn default() -> Self {
        Variant { bug: None, ack_by_seq_only: false, lasting_outages: true }
    }
}

/// [`run_seed`] with any [`Variant`].
pub fn run_seed_with(seed: u64, variant: Variant, trace: bool) -> Outcome {
    let mut plan = FaultPlan::from_seed(seed);
    plan.bug = variant.bug;
    plan.ack_by_seq_only = variant.ack_by_seq_only;
    // From the seed itself, not the plan's RNG: every other parameter of a seed stays what it was.
    plan.lasting_outage = variant.lasting_outages && seed % 4 == 1;
    let kept = plan.clone();
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Simulation::new(plan, trace).run())) {
        Ok(outcome) => outcome,
        Err(panic) => {
            let detail = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".into());
            Outcome {
                plan: kept,
                stats: Stats::default(),
                violation: Some(Violation { at_ms: 0, invariant: "an assertion of the code under test", detail }),
                trace: Vec::new(),
            }
        }
    }
}

/// What a sweep found.
#[derive(Default)]
pub struct SweepReport {
    /// Failing outcomes, in seed order.
    pub failures: Vec<Outcome>,
    pub ran: u64,
    /// Stats summed over every seed that ran (proof that the faults really happened).
    pub totals: Stats,
    /// Recovery after healing of each seed that measured one (ms, seed), for percentiles and the slowest seed.
    pub recoveries: Vec<(u64, u64)>,
}

impl SweepReport {
    /// The `q`-quantile (0..=1) of the recoveries after healing, and the seed that took it.
    pub fn recovery_quantile(&self, q: f64) -> Option<(u64, u64)> {
        let mut r = self.recoveries.clone();
        r.sort_unstable();
        let i = ((r.len() as f64 - 1.0) * q).round() as usize;
        r.get(i).copied()
    }
}

/// Runs `count` seeds from `start` on `threads` threads.
pub fn sweep(start: u64, count: u64, threads: usize, bug: Option<Bug>, stop_at_first: bool) -> SweepReport {
    sweep_with(start, count, threads, Variant { bug, ..Variant::default() }, stop_at_first)
}

/// [`sweep`] with any [`Variant`].
pub fn sweep_with(start: u64, count: u64, threads: usize, variant: Variant, stop_at_first: bool) -> SweepReport {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Mutex;
    let next = AtomicU64::new(start);
    let stop = AtomicBool::new(false);
    let report = Mutex::new(SweepReport::default());
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
                let outcome = run_seed_with(seed, variant, false);
                let failed = outcome.violation.is_some();
                if failed && stop_at_first {
                    stop.store(true, Ordering::Relaxed);
                }
                if let Ok(mut r) = report.lock() {
                    r.ran += 1;
                    r.totals.add(&outcome.stats);
                    if let Some(ms) = outcome.stats.liveness_ms {
                        r.recoveries.push((ms, seed));
                    }
                    if failed {
                        r.failures.push(outcome);
                    }
                }
            });
        }
    });
    let mut report = report.into_inner().unwrap_or_default();
    report.failures.sort_by_key(|o| o.plan.seed);
    report
}
