//! How long writes pause when the master moves (issue 14): a local three-node cluster, one writer on every node's
//! RW port (autocommit INSERTs with unique ids, reconnecting at once after an error), then in one invocation:
//!
//! - `steady`: the longest gap between two commits (any writer) in windows with no fault — the floor;
//! - `switchover`: `paxsql cluster switchover --to <next node>`, the longest gap around each;
//! - `kill -9`: kill -9 of the master's mariadbd (its node hands the term over), the longest gap around each.
//!
//! Prints each round, the medians and the ratio switchover / kill -9, the errors writers saw in each phase, and
//! checks at the end that every write acknowledged is in the table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use mysql_async::prelude::Queryable;

#[derive(Parser)]
struct Args {
    /// The `paxsql` binary.
    #[arg(long, default_value = "target/release/paxsql")]
    paxsql: PathBuf,
    #[arg(long, default_value_t = 27000)]
    base_port: u16,
    /// Switchovers, and kills, to measure.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
}

/// One writer's statement: when it ended, the id, and the error if it failed.
struct Op {
    at: Instant,
    id: u64,
    error: Option<String>,
}

type Ops = Arc<Mutex<Vec<Op>>>;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = std::env::temp_dir().join(format!("paxsql-switchover-bench-{}", std::process::id()));
    let up = Command::new(&args.paxsql)
        .args(["cluster", "up", "--nodes", "3", "--base-port", &args.base_port.to_string(), "--dir"])
        .arg(&dir)
        .output()
        .context("run paxsql cluster up")?;
    let result = if up.status.success() {
        measure(&args, &dir)
    } else {
        Err(anyhow::anyhow!("cluster up failed: {}", String::from_utf8_lossy(&up.stderr)))
    };
    let _ = Command::new(&args.paxsql).args(["cluster", "down", "--dir"]).arg(&dir).output();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn cluster_json(paxsql: &Path, dir: &Path) -> serde_json::Value {
    Command::new(paxsql)
        .args(["cluster", "status", "--json", "--dir"])
        .arg(dir)
        .output()
        .ok()
        .and_then(|o| serde_json::from_slice(&o.stdout).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// The serving master, waiting for one (and for every other node to be a replica again) up to `timeout`.
fn settled_master(paxsql: &Path, dir: &Path, timeout: Duration) -> anyhow::Result<u64> {
    let deadline = Instant::now() + timeout;
    loop {
        let st = cluster_json(paxsql, dir);
        if let Some(m) = st["master"].as_u64() {
            let nodes = st["nodes"].as_array().cloned().unwrap_or_default();
            if nodes.iter().all(|n| n["id"].as_u64() == Some(m) || n["database"] == "replica") {
                return Ok(m);
            }
        }
        if Instant::now() > deadline {
            bail!("the cluster did not settle: {st}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

async fn writer(url: String, w: u64, ops: Ops, stop: Arc<AtomicBool>) {
    let mut conn: Option<mysql_async::Conn> = None;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match mysql_async::Conn::from_url(&url).await {
                Ok(c) => conn.insert(c),
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
            },
        };
        n += 1;
        let id = w * 100_000_000 + n;
        let r = c.exec_drop("INSERT INTO sw (id, w) VALUES (?, ?)", (id, w)).await;
        let error = r.err().map(|e| {
            conn = None;
            e.to_string()
        });
        ops.lock().unwrap_or_else(|p| p.into_inner()).push(Op { at: Instant::now(), id, error });
    }
}

/// The longest gap between two commits (any writer) ending in `[from, to]`, counting from the last commit before
/// `from`.
fn pause(ops: &Ops, from: Instant, to: Instant) -> Duration {
    let ops = ops.lock().unwrap_or_else(|p| p.into_inner());
    let mut commits: Vec<Instant> = ops.iter().filter(|o| o.error.is_none() && o.at <= to).map(|o| o.at).collect();
    commits.sort();
    let first = commits.iter().rposition(|t| *t < from).unwrap_or(0);
    commits[first..].windows(2).map(|w| w[1].duration_since(w[0])).max().unwrap_or_default()
}

/// Errors writers saw in `[from, to]`, by message (ids cut off).
fn errors(ops: &Ops, from: Instant, to: Instant) -> BTreeMap<String, usize> {
    let ops = ops.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = BTreeMap::new();
    for e in ops.iter().filter(|o| o.at >= from && o.at <= to).filter_map(|o| o.error.as_ref()) {
        let key: String = e.chars().take(70).collect();
        *out.entry(key).or_insert(0) += 1;
    }
    out
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn measure(args: &Args, dir: &Path) -> anyhow::Result<()> {
    let info: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("cluster.json"))?)?;
    let password = info["app_password"].as_str().context("app_password")?.to_string();
    let rw = |n: u64| args.base_port + 10 * (n as u16 - 1) + 4;
    let url = |n: u64| format!("mysql://app:{password}@127.0.0.1:{}/app", rw(n));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let m = settled_master(&args.paxsql, dir, Duration::from_secs(60))?;
    rt.block_on(async {
        let mut c = mysql_async::Conn::from_url(&url(m)).await?;
        c.query_drop("CREATE TABLE sw (id BIGINT PRIMARY KEY, w INT)").await?;
        c.disconnect().await
    })?;
    let ops: Ops = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (1..=3).map(|w| rt.spawn(writer(url(w), w, ops.clone(), stop.clone()))).collect();
    std::thread::sleep(Duration::from_secs(3));

    println!("phase steady: longest gap between commits in {} windows of 1 s", args.rounds);
    let mut steady = Vec::new();
    for _ in 0..args.rounds {
        let from = Instant::now();
        std::thread::sleep(Duration::from_secs(1));
        steady.push(pause(&ops, from, Instant::now()));
    }
    println!("  {:?} ms", steady.iter().map(|d| ms(*d).round()).collect::<Vec<_>>());
    let steady_errors = errors(&ops, Instant::now() - Duration::from_secs(args.rounds as u64), Instant::now());

    println!("phase switchover: paxsql cluster switchover --to <next node>, {} times", args.rounds);
    let mut switch = Vec::new();
    let switch_from = Instant::now();
    for i in 0..args.rounds {
        let m = settled_master(&args.paxsql, dir, Duration::from_secs(60))?;
        std::thread::sleep(Duration::from_secs(1));
        let to = m % 3 + 1;
        let asked = Instant::now();
        let out = Command::new(&args.paxsql)
            .args(["cluster", "switchover", "--json", "--to", &to.to_string(), "--dir"])
            .arg(dir)
            .output()?;
        let answered = Instant::now();
        if !out.status.success() {
            bail!("switchover {} failed: {}", i + 1, String::from_utf8_lossy(&out.stderr));
        }
        let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        std::thread::sleep(Duration::from_secs(1));
        let p = pause(&ops, asked, answered + Duration::from_secs(1));
        println!(
            "  {:>2}: node {m} -> node {to}: writes paused {:.0} ms (drain {} ms, new master seen serving after {} ms)",
            i + 1,
            ms(p),
            json["drain_ms"],
            json["serving_after_ms"]
        );
        switch.push(p);
    }
    let switch_errors = errors(&ops, switch_from, Instant::now());

    println!("phase kill -9: the master's mariadbd killed, {} times", args.rounds);
    let mut kill = Vec::new();
    let kill_from = Instant::now();
    for i in 0..args.rounds {
        let m = settled_master(&args.paxsql, dir, Duration::from_secs(120))?;
        std::thread::sleep(Duration::from_secs(1));
        let pid: i32 = std::fs::read_to_string(dir.join(format!("n{m}/data/mariadbd.pid")))?.trim().parse()?;
        let killed = Instant::now();
        Command::new("kill").args(["-9", &pid.to_string()]).status()?;
        let new = loop {
            let st = cluster_json(&args.paxsql, dir);
            if let Some(n) = st["master"].as_u64().filter(|n| *n != m) {
                break n;
            }
            if killed.elapsed() > Duration::from_secs(30) {
                bail!("no new master 30 s after kill {}", i + 1);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        std::thread::sleep(Duration::from_secs(2));
        let p = pause(&ops, killed, Instant::now());
        println!("  {:>2}: node {m} killed -> node {new}: writes paused {:.0} ms", i + 1, ms(p));
        kill.push(p);
    }
    let kill_errors = errors(&ops, kill_from, Instant::now());
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        let _ = rt.block_on(w);
    }

    let (s, k, f) = (median(&switch), median(&kill), median(&steady));
    println!();
    println!(
        "writes paused (median of {}): steady {:.0} ms, switchover {:.0} ms, kill -9 of the master's mariadbd {:.0} ms",
        args.rounds,
        ms(f),
        ms(s),
        ms(k)
    );
    println!(
        "switchover: min {:.0} ms, max {:.0} ms; ratio switchover / kill -9 = {:.2}",
        ms(*switch.iter().min().unwrap_or(&Duration::ZERO)),
        ms(*switch.iter().max().unwrap_or(&Duration::ZERO)),
        s.as_secs_f64() / k.as_secs_f64().max(1e-9)
    );
    for (phase, e) in [("steady", steady_errors), ("switchover", switch_errors), ("kill -9", kill_errors)] {
        println!("writer errors during {phase}: {}", if e.is_empty() { "none".to_string() } else { format!("{e:?}") });
    }

    // Every acknowledged write must be in the table.
    let acked: BTreeSet<u64> =
        ops.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|o| o.error.is_none()).map(|o| o.id).collect();
    let m = settled_master(&args.paxsql, dir, Duration::from_secs(120))?;
    let stored: BTreeSet<u64> = rt.block_on(async {
        let mut c = mysql_async::Conn::from_url(&url(m)).await?;
        let ids: Vec<u64> = c.query("SELECT id FROM sw").await?;
        c.disconnect().await?;
        Ok::<_, mysql_async::Error>(ids.into_iter().collect())
    })?;
    let lost = acked.difference(&stored).count();
    println!("acknowledged writes: {}, in the table: {}, lost: {lost}", acked.len(), stored.len());
    // A write whose client got an error may still have committed (its OK lost with the connection): an unknown
    // outcome. How many of them did, per phase.
    let ops_all = ops.lock().unwrap_or_else(|p| p.into_inner());
    for (phase, from, to) in [("switchover", switch_from, kill_from), ("kill -9", kill_from, Instant::now())] {
        let failed: Vec<u64> =
            ops_all.iter().filter(|o| o.error.is_some() && o.at >= from && o.at < to).map(|o| o.id).collect();
        let committed = failed.iter().filter(|id| stored.contains(id)).count();
        println!("{phase}: {} writes ended in an error, {committed} of them committed nonetheless", failed.len());
    }
    drop(ops_all);
    if lost > 0 {
        bail!("{lost} acknowledged writes are missing");
    }
    Ok(())
}
