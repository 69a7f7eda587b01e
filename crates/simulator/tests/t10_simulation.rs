//! The simulator's own acceptance tests: a seed sweep with zero violations, identical replays, and proof that a
//! deliberately broken proposer is caught.

use paxsql_paxos::Bug;
use paxsql_simulator::{run_seed, run_seed_with, sweep, sweep_with, Variant};

/// Seeds swept by `cargo test`; `PAXSQL_SIM_SEEDS` raises it.
fn default_seeds() -> u64 {
    std::env::var("PAXSQL_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(2000)
}

#[test]
fn seed_sweep_finds_no_violation() {
    let seeds = default_seeds();
    eprintln!("phase: sweeping {seeds} seeds, every invariant checked after every step");
    let report = sweep(0, seeds, 2, None, false);
    for f in &report.failures {
        if let Some(v) = &f.violation {
            eprintln!("seed {}: {v}\n  plan: {}", f.plan.seed, f.plan.describe());
            eprintln!("  reproduce: cargo run --release -p paxsql-simulator -- --seed {} --trace", f.plan.seed);
        }
    }
    assert_eq!(report.ran, seeds);
    assert!(report.failures.is_empty(), "{} of {seeds} seeds violated an invariant", report.failures.len());
    // The sweep must really have injected what the fault atlas promises, and made progress.
    let t = &report.totals;
    eprintln!("totals: {t:?}");
    assert!(t.crashes > seeds / 4, "crashes: {}", t.crashes);
    assert!(t.partitions > seeds / 4, "partitions: {}", t.partitions);
    assert!(t.reconfigurations > seeds / 20, "membership changes: {}", t.reconfigurations);
    assert!(t.rebuilds > 0, "no member was ever rebuilt from a snapshot");
    assert!(t.terms_given_up > 0, "no master ever lost a binlog proposal (the path that gives its term up)");
    assert!(t.hand_overs > 0, "no master ever handed its term to a successor");
    assert!(t.switchovers > seeds / 4, "switchovers: {}", t.switchovers);
    assert!(t.masters >= seeds as usize, "every seed elects at least one master");
    assert!(t.acked > seeds as usize * 10, "acknowledged writes: {}", t.acked);
}

#[test]
fn same_seed_gives_identical_trace() {
    for seed in [3, 4074, 10073] {
        let a = run_seed(seed, None, true);
        let b = run_seed(seed, None, true);
        assert!(a.trace.len() > 100, "seed {seed}: trace too short to mean anything");
        assert_eq!(a.trace, b.trace, "seed {seed} is not deterministic");
        assert_eq!(a.violation, b.violation);
    }
}

/// The first seed (of the default count) at which `bug` is caught, and the violation found there.
fn first_caught(bug: Bug) -> (u64, paxsql_simulator::Violation) {
    let report = sweep(0, default_seeds(), 2, Some(bug), true);
    let caught = report.failures.first().unwrap_or_else(|| panic!("the simulator did not catch {bug:?}"));
    let v = caught.violation.clone().expect("failures carry a violation");
    eprintln!("caught at seed {}: {v}", caught.plan.seed);
    (caught.plan.seed, v)
}

#[test]
fn broken_proposer_is_caught_within_default_seeds() {
    eprintln!("phase: a proposer that ignores the values reported in phase 1 must be caught");
    let (seed, v) = first_caught(Bug::IgnorePromisedValues);
    assert!(
        matches!(
            v.invariant,
            "at most one value chosen per instance"
                | "no acknowledged write lost"
                | "one transaction per GTID"
                | "an assertion of the code under test"
        ),
        "unexpected invariant: {v}"
    );
    // And the failing seed reproduces from its number alone.
    let again = run_seed(seed, Some(Bug::IgnorePromisedValues), false);
    assert_eq!(again.violation.as_ref(), Some(&v));
}

#[test]
fn an_acceptor_that_loses_its_promise_is_stopped_by_the_core_assertion() {
    eprintln!("phase: an acceptor recording acceptances above its promise must be caught");
    let (_, v) = first_caught(Bug::AcceptWithoutPromise);
    assert_eq!(v.invariant, "an assertion of the code under test", "{v}");
    assert!(v.detail.contains("above the promise"), "{v}");
}

/// A master that acknowledges a commit by its GTID alone, whatever transaction the log took at that seq_no: after a
/// lapse of its lease and its return in the same term, a proposal from before the lapse is chosen at the seq_no the
/// client proposed another transaction at, and an acknowledged write is lost. The daemon's capture compares each
/// transaction with what the log applied (`crates/node/src/capture.rs`); the simulated client compares the bytes.
#[test]
fn a_master_acknowledging_by_gtid_alone_is_caught() {
    eprintln!("phase: a client acknowledging by seq_no alone must lose an acknowledged write");
    let variant = Variant { ack_by_seq_only: true, ..Variant::default() };
    let report = sweep_with(0, 200, 2, variant, true);
    let caught = report.failures.first().expect("the simulator did not catch a master acknowledging by GTID alone");
    let v = caught.violation.clone().expect("failures carry a violation");
    eprintln!("caught at seed {}: {v}", caught.plan.seed);
    assert_eq!(v.invariant, "no acknowledged write lost", "{v}");
    assert_eq!(run_seed_with(caught.plan.seed, variant, false).violation, Some(v));
    // The same seed with the real rule: nothing lost.
    assert!(run_seed(caught.plan.seed, None, false).violation.is_none());
}

/// Seeds that once found a bug, each kept as a regression test (found by the 100,000-seed sweeps).
#[test]
fn seeds_that_found_bugs_stay_fixed() {
    let found = [
        // A candidate unseated a master whose renewals it only learned in phase 1 (two lease holders).
        107, 235, 1100, 1560, 1865,
        // The proposing incarnation and the full-log convergence check (simulator bugs, kept honest).
        2071, 10073,
        // A leader that learned chosen values past its next slot proposed there anyway, and its commit point
        // told a follower its own stale proposal was chosen (two values for one instance).
        22426, 23849, 38460, 58370, 75189,
        // Retransmissions faster than the round trip flooded a six-member group on slow links (liveness).
        22453,
        // A master change chosen by a later leader after its proposer gave up waiting: nobody renewed the term.
        51402,
        // A member removed while cut off never learned it and kept unseating the leader with new ballots.
        57068, 87786,
        // Equal-progress candidates of a six-member group on slow links kept colliding after back-off.
        25991, 28667,
        // A master whose binlog proposal was dropped with its Paxos queue kept its lease and renewed it while its
        // client (which, like MariaDB, cannot renumber) waited forever (liveness; also the fault suite's long run).
        8703, 8755, 27444, 29962,
    ];
    for seed in found {
        let out = run_seed(seed, None, false);
        assert!(out.violation.is_none(), "seed {seed}: {}", out.violation.map(|v| v.to_string()).unwrap_or_default());
    }
}
