//! Switchover while clients write (issue 14, item 1), on a real three-node cluster: one writer per node's RW port
//! (the client library, autocommit INSERTs with unique ids) while `paxsql cluster switchover` (once `paxsql
//! switchover --peers …` with the operator's certificate) moves the master three times — to a named node, to the next named node, and to whichever member the master finds most caught
//! up — and then `paxsql cluster restart` restarts every node, one at a time, the master last after a switchover.
//!
//! Checked: each switchover ends with the named node (or a member) serving a later term and the old master a
//! replica again; no writer ever gets an error other than an unknown outcome on the statement in flight when its
//! connection to the old master closed (at most one per writer per switchover); every write reported committed is
//! on every node and the nodes' checksums agree. Refused without changing anything: a switchover to the master
//! itself, to a node that does not exist, and one whose drain cannot get its lock (a session holds a table
//! locked on the master) — the master keeps its term and the writers keep committing.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{operator_args, paxsql, Cluster};
use paxsql_client::{Client, Error};

#[derive(Debug, Clone)]
enum Outcome {
    Committed,
    Unknown,
    Failed(String),
}

/// (writer, id, outcome, finished at)
type Ops = Mutex<Vec<(u64, u64, Outcome, Instant)>>;

async fn writer(client: Client, w: u64, ops: Arc<Ops>, stop: Arc<AtomicBool>) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let id = w * 1_000_000 + n;
        let outcome = match client.execute("INSERT INTO sw (id, writer) VALUES (?, ?)", (id, w)).await {
            Ok(_) => Outcome::Committed,
            Err(Error::OutcomeUnknown { .. }) => Outcome::Unknown,
            Err(e) => Outcome::Failed(e.to_string()),
        };
        ops.lock().unwrap_or_else(|p| p.into_inner()).push((w, id, outcome, Instant::now()));
    }
}

fn switchover(c: &Cluster, args: &[&str]) -> (bool, serde_json::Value, String) {
    let mut cmd = Command::new(paxsql());
    cmd.args(["cluster", "switchover", "--json", "--dir"]).arg(c.dir.path()).args(args);
    run_switchover(cmd)
}

/// The same through `paxsql switchover`, the form for any cluster: its peers, cluster id and secret, and the
/// operator's certificate (the peers run mutual TLS).
fn switchover_any_cluster(c: &Cluster, args: &[&str]) -> (bool, serde_json::Value, String) {
    let st = c.status();
    let peers: Vec<String> =
        (0..3).filter_map(|i| st["nodes"][i]["endpoints"]["peer"].as_str().map(String::from)).collect();
    let mut cmd = Command::new(paxsql());
    cmd.args(["switchover", "--json"]);
    operator_args(&mut cmd, &peers, st["cluster_id"].as_str().expect("cluster id"), c.dir.path()).args(args);
    run_switchover(cmd)
}

fn run_switchover(mut cmd: Command) -> (bool, serde_json::Value, String) {
    let out = cmd.output().expect("run paxsql switchover");
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.success(), json, text)
}

/// The longest time between two commits (by any writer) from `from` to `to`: how long writes paused.
fn pause_within(ops: &[(u64, u64, Outcome, Instant)], from: Instant, to: Instant) -> Duration {
    let mut commits: Vec<Instant> =
        ops.iter().filter(|o| matches!(o.2, Outcome::Committed) && o.3 >= from && o.3 <= to).map(|o| o.3).collect();
    commits.sort();
    commits.windows(2).map(|w| w[1].duration_since(w[0])).max().unwrap_or(to.duration_since(from))
}

#[test]
fn switchover_moves_the_master_while_clients_write() {
    let c = Cluster::up(3, 28600);
    let (m0, _) = c.master_term().expect("a master serves");
    c.sql_via(m0, "proxy_rw", "CREATE TABLE sw (id BIGINT PRIMARY KEY, writer INT)", Duration::from_secs(30))
        .expect("create table");

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let ops: Arc<Ops> = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    eprintln!("phase: one writer through each node's RW port");
    let writers: Vec<_> =
        (1..=3u64).map(|w| rt.spawn(writer(c.app_client(&[w]), w, ops.clone(), stop.clone()))).collect();
    let committed =
        || ops.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|o| matches!(o.2, Outcome::Committed)).count();
    std::thread::sleep(Duration::from_secs(3));
    assert!(committed() > 20, "the writers made little progress: {}\n{}", committed(), c.logs());

    eprintln!("phase: refused switchovers change nothing");
    let (m, term) = c.master_term().expect("a master serves");
    let (ok, _, text) = switchover(&c, &["--to", &m.to_string()]);
    assert!(!ok && text.contains("is the master already"), "switchover to the master itself: {text}");
    let (ok, _, text) = switchover(&c, &["--to", "9"]);
    assert!(!ok && text.contains("does not answer"), "switchover to node 9: {text}");
    // A session on the master holds a table lock: the drain cannot get its read lock and gives up.
    let locker = std::thread::scope(|s| {
        let h = s.spawn(|| c.root_sql(m, "LOCK TABLES app.sw WRITE; SELECT SLEEP(6); UNLOCK TABLES"));
        std::thread::sleep(Duration::from_millis(500));
        let other = if m == 1 { 2 } else { 1 };
        let (ok, _, text) = switchover(&c, &["--to", &other.to_string(), "--drain-timeout", "1"]);
        assert!(!ok && text.contains("drain failed"), "a drain that cannot lock must fail: {text}");
        h.join().expect("locker thread")
    });
    locker.expect("the locking session ran to its end");
    assert_eq!(c.master_term(), Some((m, term)), "a refused switchover changed the master");
    let before = committed();
    std::thread::sleep(Duration::from_secs(1));
    assert!(committed() > before, "writes stopped after a refused switchover\n{}", c.logs());

    let mut pauses = Vec::new();
    for step in 0..3 {
        let (m, term) = c.master_term().expect("a master serves");
        let to = (step < 2).then(|| m % 3 + 1);
        eprintln!("phase: switchover {} from node {m} (term {term}) to {to:?}", step + 1);
        let args: Vec<String> = to.map(|t| vec!["--to".to_string(), t.to_string()]).unwrap_or_default();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let asked = Instant::now();
        // The second one through the form for any cluster.
        let (ok, json, text) = if step == 1 { switchover_any_cluster(&c, &args) } else { switchover(&c, &args) };
        assert!(ok, "switchover failed: {text}\n{}", c.logs());
        eprintln!("{text}{json}");
        let new_master = json["new_master"].as_u64().expect("a new master in the result");
        assert_ne!(new_master, m, "the master moved");
        if let Some(to) = to {
            assert_eq!(new_master, to, "the named node took over: {json}");
        }
        assert!(json["new_term"].as_u64() > Some(term), "a later term: {json}");
        assert!(json["old_master_replica_after_ms"].as_u64().is_some(), "old master a replica again: {json}");
        assert_eq!(c.master_term().map(|(m, _)| m), Some(new_master), "cluster status agrees");
        let answered = Instant::now();
        std::thread::sleep(Duration::from_secs(1));
        let o = ops.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let pause = pause_within(&o, asked, answered + Duration::from_secs(1));
        eprintln!("switchover {}: writes paused for at most {pause:?}", step + 1);
        pauses.push(pause);
    }
    eprintln!("phase: rolling restart while the writers go on");
    let (m, term) = c.master_term().expect("a master serves");
    let out = Command::new(paxsql())
        .args(["cluster", "restart", "--json", "--dir"])
        .arg(c.dir.path())
        .output()
        .expect("run paxsql cluster restart");
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "rolling restart failed: {text}\n{}", c.logs());
    eprintln!("{text}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("restart --json");
    let order: Vec<u64> =
        json["restarted"].as_array().map(|a| a.iter().filter_map(|r| r["node"].as_u64()).collect()).unwrap_or_default();
    assert_eq!(order.len(), 3, "every node restarted: {json}");
    assert_eq!(order.last(), Some(&m), "the master restarted last: {json}");
    let (m2, term2) = c.master_term().expect("a master serves after the restart");
    assert!(m2 != m && term2 > term, "the master moved to a restarted replica: {m} -> {m2}, {term} -> {term2}");
    for id in 1..=3 {
        let pid = c.status()["nodes"][(id - 1) as usize]["pids"]["node"].as_u64();
        assert!(pid.is_some(), "node {id} runs after the restart");
    }
    let before = committed();
    std::thread::sleep(Duration::from_secs(1));
    assert!(committed() > before, "writes stopped after the rolling restart\n{}", c.logs());

    stop.store(true, Ordering::Relaxed);
    for w in writers {
        rt.block_on(w).expect("writer task");
    }

    eprintln!("phase: outcomes");
    let ops = ops.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let failed: Vec<String> = ops
        .iter()
        .filter_map(|o| match &o.2 {
            Outcome::Failed(e) => Some(format!("writer {} id {}: {e}", o.0, o.1)),
            _ => None,
        })
        .collect();
    let unknown: Vec<u64> = ops.iter().filter(|o| matches!(o.2, Outcome::Unknown)).map(|o| o.1).collect();
    let ok_ids: Vec<u64> = ops.iter().filter(|o| matches!(o.2, Outcome::Committed)).map(|o| o.1).collect();
    eprintln!(
        "writes: {} committed, {} unknown, {} failed; pauses {pauses:?}",
        ok_ids.len(),
        unknown.len(),
        failed.len()
    );
    assert!(failed.is_empty(), "writers got errors: {failed:?}\n{}", c.logs());
    // One statement in flight per writer per event at most (3 switchovers, then 3 node restarts and the
    // rolling restart's switchover): the one its closed connection carried.
    assert!(unknown.len() <= 3 * 7, "more unknown outcomes than statements in flight: {unknown:?}");
    assert!(pauses.iter().all(|p| *p < Duration::from_secs(10)), "a switchover stalled the writers: {pauses:?}");

    eprintln!("phase: every committed write on every node, checksums equal");
    let count = ok_ids.len() as u64;
    let master = c.master().expect("a master serves");
    let total = c.sql_via(master, "proxy_rw", "SELECT COUNT(*) FROM sw", Duration::from_secs(30)).expect("count");
    let total: u64 = total.trim().parse().expect("a count");
    assert!(total >= count && total <= count + unknown.len() as u64, "rows {total}, committed {count}");
    let checksum = c.sql(master, "CHECKSUM TABLE app.sw", Duration::from_secs(30)).expect("checksum");
    c.wait_all(&[1, 2, 3], "CHECKSUM TABLE app.sw", &checksum, Duration::from_secs(60));
    // Each committed id, checked on the master (whose data every node now equals).
    let ids = ok_ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let present = c
        .sql_via(master, "proxy_rw", &format!("SELECT COUNT(*) FROM sw WHERE id IN ({ids})"), Duration::from_secs(30))
        .expect("present");
    assert_eq!(present.trim().parse::<u64>().ok(), Some(count), "an acknowledged write is missing");
}
