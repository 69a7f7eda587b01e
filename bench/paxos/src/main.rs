//! `paxos-bench`: chosen values per second and commit latency of three in-process Paxos members over raft-engine
//! with real fsync, for each combination of value size, batching mode and number of closed-loop proposers.
//! See the library docs for the driver loop.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use paxsql_bench_paxos::{run, BenchConfig, RunReport};

#[derive(Parser, Debug)]
#[command(about = "Paxos core over raft-engine: throughput and commit latency, 3 in-process members, real fsync")]
struct Args {
    /// Measured seconds per run of a configuration.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Seconds of load before measuring starts.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Runs of each configuration (the table shows the best and the spread).
    #[arg(long, default_value_t = 2)]
    runs: usize,
    /// Smoke run: 1 s per configuration, 0.2 s warmup, one run.
    #[arg(long)]
    quick: bool,
    /// Value sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "1024,65536")]
    sizes: Vec<usize>,
    /// Numbers of closed-loop proposers (outstanding commands).
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    proposers: Vec<usize>,
    #[arg(long, value_enum, value_delimiter = ',', default_value = "batch,pipeline,single")]
    modes: Vec<Mode>,
    /// Ready's a member takes (writing unsynced) before one fsync.
    #[arg(long, default_value_t = 16)]
    group: usize,
    /// Where the stores go (a fresh temp dir per run, removed after it). Default: the system temp dir.
    #[arg(long)]
    dir: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// batching = true, max_in_flight = 64.
    Batch,
    /// batching = false, max_in_flight = 64: one command per instance, pipelined.
    Pipeline,
    /// batching = false, max_in_flight = 1: one command per instance, one instance at a time.
    Single,
}

impl Mode {
    fn settings(self) -> (bool, usize) {
        match self {
            Mode::Batch => (true, 64),
            Mode::Pipeline => (false, 64),
            Mode::Single => (false, 1),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Mode::Batch => "batch, 64 in flight",
            Mode::Pipeline => "no batch, 64 in flight",
            Mode::Single => "no batch, 1 in flight",
        }
    }
}

fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    if args.quick {
        (args.seconds, args.warmup, args.runs) = (1.0, 0.2, 1);
    }
    anyhow::ensure!(args.runs >= 1 && args.seconds > 0.0, "need at least one run of positive length");
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    println!(
        "# paxos-bench: {} s measured + {} s warmup per run, {} run(s) each, group commit up to {} Ready's per fsync, stores under {}",
        args.seconds,
        args.warmup,
        args.runs,
        args.group,
        base.display()
    );
    let mut rows = Vec::new();
    for &size in &args.sizes {
        for &mode in &args.modes {
            for &proposers in &args.proposers {
                let (batching, max_in_flight) = mode.settings();
                let cfg = BenchConfig {
                    value_bytes: size,
                    proposers,
                    batching,
                    max_in_flight,
                    warmup: Duration::from_secs_f64(args.warmup),
                    measure: Duration::from_secs_f64(args.seconds),
                    max_values: None,
                    group_readies: args.group,
                    record_chosen: false,
                };
                let mut reports = Vec::new();
                for i in 0..args.runs {
                    let r = run(&cfg, &base)?;
                    println!("{}  (run {})", line(size, mode, proposers, &r), i + 1);
                    reports.push(r);
                }
                rows.push((size, mode, proposers, reports));
            }
        }
    }
    println!();
    println!("| value | mode | proposers | values/s | MiB/s | p50 ms | p99 ms | mean ms | values/instance | leader fsyncs/s | leader time in write | values/s of each run |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for (size, mode, proposers, reports) in &rows {
        let best = reports.iter().max_by(|a, b| a.commands_per_sec().total_cmp(&b.commands_per_sec())).expect("a run");
        let all: Vec<String> = reports.iter().map(|r| format!("{:.0}", r.commands_per_sec())).collect();
        let leader = best.leader();
        println!(
            "| {} | {} | {} | {:.0} | {:.1} | {:.2} | {:.2} | {:.2} | {:.1} | {:.0} | {:.0} % | {} |",
            size_label(*size),
            mode.label(),
            proposers,
            best.commands_per_sec(),
            best.commands_per_sec() * *size as f64 / (1 << 20) as f64,
            best.latency_ms(50.0),
            best.latency_ms(99.0),
            best.mean_latency_ms(),
            best.commands as f64 / best.instances.max(1) as f64,
            leader.syncs as f64 / leader.wall.as_secs_f64(),
            100.0 * leader.write_time.as_secs_f64() / leader.wall.as_secs_f64(),
            all.join(" / "),
        );
    }
    Ok(())
}

fn size_label(bytes: usize) -> String {
    if bytes % 1024 == 0 {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} B")
    }
}

fn line(size: usize, mode: Mode, proposers: usize, r: &RunReport) -> String {
    format!(
        "{:>6} {:<23} proposers={:<3} {:>8.0} values/s  p50={:>7.2} ms  p99={:>7.2} ms  mean={:>7.2} ms  values/instance={:>5.1}  election={:.1?}  leader: syncs={} writes={} accepts/instance={:.2}  max follower inbox={}",
        size_label(size),
        mode.label(),
        proposers,
        r.commands_per_sec(),
        r.latency_ms(50.0),
        r.latency_ms(99.0),
        r.mean_latency_ms(),
        r.commands as f64 / r.instances.max(1) as f64,
        r.election,
        r.leader().syncs,
        r.leader().batches,
        r.leader().accepts_sent as f64 / r.leader().last_chosen.max(1) as f64,
        r.nodes[1..].iter().map(|n| n.max_inbox).max().unwrap_or(0),
    )
}
