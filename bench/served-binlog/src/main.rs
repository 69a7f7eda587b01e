//! Soak of the served binlog store on its own (issue 12, item 4's synthetic feed): appends millions of
//! transactions, batched per Paxos instance as the node's apply path does, with retention on, and samples over time
//! the process RSS, the bytes on disk, `locate` latency for positions spread over the held history (what a
//! replica connecting or the alignment check asks) and the time to reopen the store (a node restart).
//!
//! The node's own figures under real sysbench load are `bench/memory/run.sh`; this isolates the store so that
//! ten million transactions take minutes, not hours.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use paxsql_binlog::{Gtid, GtidSet};
use paxsql_repl_server::conformance::transaction_events;
use paxsql_repl_server::EventSource;
use paxsql_served_binlog::{ServedBinlog, ServedBinlogConfig};
use rand::{Rng, SeedableRng};

#[derive(Parser)]
#[command(
    about = "Soak of the served binlog store: RSS, disk, locate latency and reopen time over millions of transactions"
)]
struct Args {
    /// Transactions to append.
    #[arg(long, default_value_t = 10_000_000)]
    transactions: u64,
    /// Query bytes per transaction (sysbench oltp_insert's served transactions are ~670 bytes in all).
    #[arg(long, default_value_t = 500)]
    query_bytes: usize,
    /// Transactions per Paxos instance (a batched value).
    #[arg(long, default_value_t = 8)]
    per_instance: u64,
    #[arg(long, default_value_t = 16)]
    segment_mib: u64,
    #[arg(long, default_value_t = 32)]
    cache_mib: usize,
    /// Retention in MiB (the node's default is 2048; smaller so the soak reaches it).
    #[arg(long, default_value_t = 1024)]
    retain_mib: u64,
    /// Sample every this many transactions.
    #[arg(long, default_value_t = 250_000)]
    sample_every: u64,
    /// `locate` calls per sample, at positions spread uniformly over the held history.
    #[arg(long, default_value_t = 2_000)]
    locates: usize,
    /// Directory for the store (a temporary one under /tmp by default).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    #[arg(long, default_value = "bench/served-binlog/samples.csv")]
    out: std::path::PathBuf,
}

fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn config(dir: &std::path::Path, args: &Args) -> ServedBinlogConfig {
    let mut cfg = ServedBinlogConfig::new(dir);
    cfg.segment_bytes = args.segment_mib << 20;
    cfg.cache_bytes = args.cache_mib << 20;
    cfg.retain_bytes = args.retain_mib << 20;
    cfg.retain_time = None;
    cfg
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let tmp;
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::Builder::new().prefix("served-binlog-soak").tempdir_in("/tmp")?;
            tmp.path().to_owned()
        }
    };
    let mut log = ServedBinlog::open(config(&dir, &args)).context("opening the store")?;
    let mut csv = std::fs::File::create(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    writeln!(
        csv,
        "transactions,elapsed_s,append_tps,rss_kb,disk_bytes,segments,first_held,locate_p50_us,locate_p99_us,\
         locate_max_us,tail_holds_p50_us,tail_holds_p99_us,reopen_ms,rss_after_reopen_kb"
    )?;
    println!(
        "{:>11} {:>8} {:>9} {:>8} {:>9} {:>5} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9}",
        "trx",
        "secs",
        "trx/s",
        "RSS MB",
        "disk MiB",
        "segs",
        "first held",
        "locate p50",
        "p99",
        "max",
        "tail p50",
        "p99",
        "reopen"
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    let start = Instant::now();
    let mut window_start = (Instant::now(), 0u64);
    let mut seq = 0u64;
    let mut instance = 0u64;
    while seq < args.transactions {
        instance += 1;
        // A fresh buffer per instance, as the node gets each chosen value's (the store keeps slices of it).
        let mut batch = Vec::new();
        for _ in 0..args.per_instance.min(args.transactions - seq) {
            seq += 1;
            batch.extend_from_slice(&transaction_events(Gtid::new(0, 1, seq), args.query_bytes));
        }
        log.append_instance(instance, batch.into()).context("append")?;
        if seq % args.sample_every < args.per_instance || seq == args.transactions {
            // What the node does before a compaction; here, once per sample.
            log.sync().context("sync")?;
            let tps = (seq - window_start.1) as f64 / window_start.0.elapsed().as_secs_f64();
            let stats = log.stats();
            let first_seq = stats.first_index + 1;
            let mut lat = Vec::with_capacity(args.locates);
            for _ in 0..args.locates {
                let want: GtidSet = format!("0-1-{}", rng.gen_range(first_seq..=seq)).parse()?;
                let t = Instant::now();
                let cursor = log.locate(&want).context("locate")?;
                lat.push(t.elapsed());
                std::hint::black_box(cursor);
            }
            lat.sort();
            // What a replica's health check asks every round: does the log hold the position it applied, a few
            // transactions behind the tail.
            let mut tail = Vec::with_capacity(args.locates);
            for _ in 0..args.locates {
                let want: GtidSet =
                    format!("0-1-{}", seq.saturating_sub(rng.gen_range(0..1000)).max(first_seq)).parse()?;
                let t = Instant::now();
                let held = log.holds(&want);
                tail.push(t.elapsed());
                anyhow::ensure!(held, "the tail position {want} is not held");
            }
            tail.sort();
            let rss = rss_kb();
            let t = Instant::now();
            drop(log);
            log = ServedBinlog::open(config(&dir, &args)).context("reopening the store")?;
            let reopen = t.elapsed();
            let rss_after = rss_kb();
            let (p50, p99, max) = (percentile(&lat, 0.5), percentile(&lat, 0.99), percentile(&lat, 1.0));
            let (tail50, tail99) = (percentile(&tail, 0.5), percentile(&tail, 0.99));
            writeln!(
                csv,
                "{seq},{:.1},{tps:.0},{rss},{},{},{first_seq},{},{},{},{},{},{},{rss_after}",
                start.elapsed().as_secs_f64(),
                stats.disk_bytes,
                stats.segments,
                p50.as_micros(),
                p99.as_micros(),
                max.as_micros(),
                tail50.as_nanos() as f64 / 1000.0,
                tail99.as_nanos() as f64 / 1000.0,
                reopen.as_millis(),
            )?;
            println!(
                "{seq:>11} {:>8.1} {tps:>9.0} {:>8.1} {:>9.1} {:>5} {first_seq:>11} {:>8} us {:>7} us {:>7} us \
                 {:>7.1} us {:>7.1} us {:>6} ms",
                start.elapsed().as_secs_f64(),
                rss as f64 / 1024.0,
                stats.disk_bytes as f64 / (1 << 20) as f64,
                stats.segments,
                p50.as_micros(),
                p99.as_micros(),
                max.as_micros(),
                tail50.as_nanos() as f64 / 1000.0,
                tail99.as_nanos() as f64 / 1000.0,
                reopen.as_millis(),
            );
            window_start = (Instant::now(), seq);
        }
    }
    println!("samples: {}", args.out.display());
    Ok(())
}
