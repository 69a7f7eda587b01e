//! CI mode of the fault suite: one schedule per fault kind on one real 3-node cluster in a network namespace
//! created for it; every schedule must pass (conservation, linearizability, appends, checksums, one writable
//! lease holder). Needs root (namespaces, iptables), mariadbd (deploy/install-deps.sh) and the `paxsql` binary,
//! which `cargo test --workspace --release` builds beside this test (or set PAXSQL_BIN).

use paxsql_fault_suite::nemesis::ci_schedules;
use paxsql_fault_suite::runner::{run_suite, SuiteConfig, WorkloadMix};

#[test]
fn every_fault_kind_keeps_the_cluster_consistent() {
    let schedules: Vec<_> =
        ci_schedules().into_iter().enumerate().map(|(i, s)| (s, format!("ci{i}"), i as u64)).collect();
    let cfg = SuiteConfig {
        netns: format!("pxf-ci-{}", std::process::id()),
        work_dir: std::env::temp_dir().join("paxsql-faults-ci"),
        base_port: 24100, // below the ephemeral port range, as the long mode's default
        mix: WorkloadMix::default(),
    };
    let reports = run_suite(cfg, schedules, |r| {
        eprintln!("{r}");
        for p in &r.problems {
            eprintln!("    PROBLEM: {p}");
        }
        for i in &r.info {
            eprintln!("    info: {i}");
        }
    })
    .expect("the suite runs");
    let failed: Vec<String> =
        reports.iter().filter(|r| !r.passed()).map(|r| format!("{r}\n  {:?}", r.problems)).collect();
    assert!(failed.is_empty(), "schedules failed:\n{}", failed.join("\n"));
}
