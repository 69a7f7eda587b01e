//! `paxsql-sim`: sweep seeds or reproduce one.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use paxsql_paxos::Bug;
use paxsql_simulator::{run_seed_with, sweep_with, Variant};

#[derive(Parser)]
#[command(about = "Deterministic simulator of paxsql's Paxos core, global log and master lease")]
struct Args {
    /// Run this one seed (with --trace, print every event).
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Sweep this many seeds.
    #[arg(long)]
    seeds: Option<u64>,
    /// First seed of the sweep.
    #[arg(long, default_value_t = 0)]
    start: u64,
    #[arg(long, default_value_t = 2)]
    threads: usize,
    #[arg(long)]
    trace: bool,
    /// Run a deliberately broken variant: ignore-promised-values, accept-without-promise (Paxos core),
    /// ack-by-seq-only (the master acknowledges by GTID alone, whatever transaction the log took there).
    #[arg(long)]
    bug: Option<String>,
    /// Leave out the lasting outages (by default every fourth seed keeps one member down for good from the heal
    /// on, and the rest must still elect a master): reproduces a plan as it was before they were added.
    #[arg(long)]
    no_lasting_outages: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut variant = Variant { lasting_outages: !args.no_lasting_outages, ..Variant::default() };
    match args.bug.as_deref() {
        None => {}
        Some("ignore-promised-values") => variant.bug = Some(Bug::IgnorePromisedValues),
        Some("accept-without-promise") => variant.bug = Some(Bug::AcceptWithoutPromise),
        Some("ack-by-seq-only") => variant.ack_by_seq_only = true,
        Some(other) => {
            eprintln!("unknown --bug {other}; known: ignore-promised-values, accept-without-promise, ack-by-seq-only");
            return ExitCode::from(2);
        }
    }
    let mut bug_flag = args.bug.as_ref().map(|b| format!(" --bug {b}")).unwrap_or_default();
    if !variant.lasting_outages {
        bug_flag += " --no-lasting-outages";
    }
    if let Some(seed) = args.seed {
        let out = run_seed_with(seed, variant, args.trace);
        println!("{}", out.plan.describe());
        for line in &out.trace {
            println!("{line}");
        }
        println!("stats: {:?}", out.stats);
        return match out.violation {
            None => {
                println!("seed {seed}: ok");
                ExitCode::SUCCESS
            }
            Some(v) => {
                println!("seed {seed}: VIOLATION {v}");
                ExitCode::FAILURE
            }
        };
    }
    let count = args.seeds.unwrap_or(1000);
    let started = Instant::now();
    let report = sweep_with(args.start, count, args.threads, variant, false);
    let secs = started.elapsed().as_secs_f64();
    for f in &report.failures {
        if let Some(v) = &f.violation {
            println!("seed {}: VIOLATION {v}", f.plan.seed);
            println!("  plan: {}", f.plan.describe());
            println!(
                "  reproduce: cargo run --release -p paxsql-simulator -- --seed {} --trace{bug_flag}",
                f.plan.seed
            );
        }
    }
    let t = &report.totals;
    println!(
        "faults injected: {} crashes, {} partitions, {} membership changes, {} rebuilds; {} masters elected ({} \
         gave up a term whose binlog proposal was lost, {} terms handed to a named successor, {} switchovers \
         proposed), {} catch-ups \
         served from storage, {} instances chosen, {} writes acknowledged; slowest recovery after healing {} ms \
         ({} runs with a member down for good after the heal)",
        t.crashes,
        t.partitions,
        t.reconfigurations,
        t.rebuilds,
        t.masters,
        t.terms_given_up,
        t.hand_overs,
        t.switchovers,
        t.storage_catch_ups,
        t.chosen,
        t.acked,
        t.liveness_ms.unwrap_or(0),
        t.lasting_outages
    );
    let q = |x| report.recovery_quantile(x).unwrap_or_default();
    let ((p50, _), (p99, _), (p999, _), (max, slowest)) = (q(0.5), q(0.99), q(0.999), q(1.0));
    println!("recovery after healing: p50 {p50} ms, p99 {p99} ms, p99.9 {p999} ms, max {max} ms (seed {slowest})");
    println!(
        "transactions in parts: {} acknowledged, {} dropped part-way by a master change (per node applying it); {} \
         proposals never acknowledged because the log took another transaction of the term at their seq_no",
        t.parted_transactions, t.parts_dropped, t.not_acknowledged
    );
    println!("{} seeds from {} in {secs:.1} s: {} violations", report.ran, args.start, report.failures.len());
    if report.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
