//! Membership changes while clients write (issue 14, item 3), on a real cluster: 3 → 5 → 3 nodes and a dead node
//! replaced. `paxsql cluster add-node` adds node 4 before the first transaction (an empty log), then node 5 while
//! two writers (the client library, autocommit INSERTs with unique ids) run through the RW ports, as they do to the
//! end; each new node provisions its empty data directory with a copy of a member's and catches up before it votes.
//! `cluster remove-node` removes the master (switched over first) and another initial member (an unknown node is
//! refused first), and `cluster replace-node` replaces a node killed with kill -9 by node 6.
//!
//! Checked: each change ends with the expected membership in the log; an added node was provisioned by a copy (its
//! log says so) and serves reads and writes through its own ports; a removed node's process is stopped; no writer
//! ever gets an error other than an unknown outcome on the statement in flight at a master change; every write
//! reported committed is on every remaining node and their checksums agree.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{node_of, paxsql, Cluster};
use paxsql_client::{Client, Error};

#[derive(Debug, Clone)]
enum Outcome {
    Committed,
    Unknown,
    Failed(String),
}

type Ops = Mutex<Vec<(u64, Outcome)>>;

async fn writer(client: Client, w: u64, ops: Arc<Ops>, stop: Arc<AtomicBool>) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let id = w * 1_000_000 + n;
        let outcome = match client.execute("INSERT INTO mb (id, writer) VALUES (?, ?)", (id, w)).await {
            Ok(_) => Outcome::Committed,
            Err(Error::OutcomeUnknown { .. }) => Outcome::Unknown,
            Err(e) => Outcome::Failed(e.to_string()),
        };
        ops.lock().unwrap_or_else(|p| p.into_inner()).push((id, outcome));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Runs `paxsql cluster <args> --json --dir D`: (success, JSON on stdout, stderr).
fn cluster_cmd(c: &Cluster, args: &[&str]) -> (bool, serde_json::Value, String) {
    let out = Command::new(paxsql())
        .arg("cluster")
        .args(args)
        .args(["--json", "--dir"])
        .arg(c.dir.path())
        .output()
        .expect("run paxsql cluster");
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    eprintln!("paxsql cluster {args:?}:\n{text}");
    (out.status.success(), serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null), text)
}

fn members(c: &Cluster) -> Vec<u64> {
    let st = c.status();
    st["members"].as_array().map(|m| m.iter().filter_map(|v| v.as_u64()).collect()).unwrap_or_default()
}

/// `cluster add-node`, which must add node `new` (provisioned by a copy) and leave `expected` voting.
fn add(c: &Cluster, new: u64, expected: &[u64]) {
    let (ok, json, text) = cluster_cmd(c, &["add-node"]);
    assert!(ok, "add-node failed: {text}\n{}", c.logs());
    assert_eq!(json["added"].as_u64(), Some(new), "{json}");
    assert_eq!(members(c), expected, "membership after adding node {new}");
    let log = std::fs::read_to_string(c.node_dir(new).join("log/node.log")).unwrap_or_default();
    assert!(
        log.contains("no database in the data directory") && log.contains("rebuilding the local database from a copy"),
        "node {new} was not provisioned by a copy:\n{}",
        c.logs()
    );
}

#[test]
fn nodes_are_added_removed_and_replaced_while_clients_write() {
    let c = Cluster::up(3, 28800);
    let m0 = c.wait_master(None, Duration::from_secs(60));
    // A log without a single transaction yet: the new node is 0 behind it once its copy serves.
    eprintln!("phase: 3 -> 4 nodes before any write");
    add(&c, 4, &[1, 2, 3, 4]);
    c.sql_via(m0, "proxy_rw", "CREATE TABLE mb (id BIGINT PRIMARY KEY, writer INT)", Duration::from_secs(30))
        .expect("create table");
    // Each writer knows every RW port the cluster will have (nodes 4 and 5 join later; base port 28800, RW at +4),
    // as an application given the cluster's endpoints does; the client library moves on when a node goes away.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let ops: Arc<Ops> = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let client = |order: &[u64]| {
        paxsql_client::Client::builder()
            .endpoints(order.iter().map(|id| format!("127.0.0.1:{}", 28800 + 10 * (id - 1) + 4)).collect::<Vec<_>>())
            .user("app")
            .password(c.password())
            .database("app")
            .failover_deadline(Duration::from_secs(30))
            .build()
            .expect("client")
    };
    let writers: Vec<_> = [(1u64, vec![3u64, 2, 1, 4, 5]), (2, vec![2, 3, 1, 5, 4])]
        .into_iter()
        .map(|(w, order)| rt.spawn(writer(client(&order), w, ops.clone(), stop.clone())))
        .collect();
    let committed =
        || ops.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|o| matches!(o.1, Outcome::Committed)).count();
    std::thread::sleep(Duration::from_secs(2));
    assert!(committed() > 10, "the writers made little progress: {}\n{}", committed(), c.logs());

    eprintln!("phase: 4 -> 5 nodes under the writers");
    add(&c, 5, &[1, 2, 3, 4, 5]);
    // The new node serves through its own ports: a write through its RW port, read back on its RO port.
    c.sql_via(5, "proxy_rw", "INSERT INTO mb (id, writer) VALUES (5, 0)", Duration::from_secs(30))
        .expect("write via node 5");
    c.wait_all(&[4, 5], "SELECT COUNT(*) FROM mb WHERE id = 5", "1", Duration::from_secs(30));
    let before = committed();
    std::thread::sleep(Duration::from_secs(1));
    assert!(committed() > before, "writes stopped with five members\n{}", c.logs());

    eprintln!("phase: refusals change nothing");
    let (ok, _, text) = cluster_cmd(&c, &["remove-node", "--node", "9"]);
    assert!(!ok && text.contains("no node 9"), "remove of an unknown node: {text}");

    eprintln!("phase: 5 -> 3 nodes, the master first");
    let m = c.wait_master(None, Duration::from_secs(30));
    let (ok, json, text) = cluster_cmd(&c, &["remove-node", "--node", &m.to_string()]);
    assert!(ok, "remove-node of the master failed: {text}\n{}", c.logs());
    assert!(json["switched_over_to"].as_u64().is_some_and(|s| s != m), "the master was switched over first: {json}");
    assert!(!members(&c).contains(&m), "node {m} still a member: {:?}", members(&c));
    assert!(node_of(&c.status(), m).is_null(), "node {m} still listed in the cluster");
    let other = [1u64, 2, 3].into_iter().find(|n| *n != m && members(&c).contains(n)).expect("an initial member left");
    let (ok, _, text) = cluster_cmd(&c, &["remove-node", "--node", &other.to_string()]);
    assert!(ok, "remove-node {other} failed: {text}\n{}", c.logs());
    let left = members(&c);
    assert_eq!(left.len(), 3, "three members left: {left:?}");
    let before = committed();
    std::thread::sleep(Duration::from_secs(1));
    assert!(committed() > before, "writes stopped with three members {left:?}\n{}", c.logs());

    eprintln!("phase: a dead node is replaced");
    let master = c.wait_master(None, Duration::from_secs(30));
    let victim = *left.iter().find(|n| **n != master).expect("a replica");
    c.kill9_node(victim);
    let (ok, json, text) = cluster_cmd(&c, &["replace-node", "--node", &victim.to_string()]);
    assert!(ok, "replace-node {victim} failed: {text}\n{}", c.logs());
    assert_eq!(json["added"]["added"].as_u64(), Some(6), "{json}");
    let now: Vec<u64> = members(&c);
    let mut want: Vec<u64> = left.iter().copied().filter(|n| *n != victim).chain([6]).collect();
    want.sort();
    assert_eq!(now, want, "membership after replacing node {victim}");

    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        rt.block_on(w).expect("writer task");
    }
    let ops = ops.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let failed: Vec<&str> = ops
        .iter()
        .filter_map(|o| match &o.1 {
            Outcome::Failed(e) => Some(e.as_str()),
            _ => None,
        })
        .collect();
    assert!(failed.is_empty(), "writers failed: {failed:?}\n{}", c.logs());
    let unknown = ops.iter().filter(|o| matches!(o.1, Outcome::Unknown)).count();
    // Master changes: the two removals (at most one switchover each) and at most one more per writer.
    assert!(unknown <= 8, "{unknown} statements with an unknown outcome");
    let acked: Vec<u64> = ops.iter().filter(|o| matches!(o.1, Outcome::Committed)).map(|o| o.0).collect();
    eprintln!("{} writes committed, {unknown} unknown", acked.len());
    let probe = format!(
        "SELECT COUNT(*) FROM mb WHERE id IN ({})",
        acked.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
    );
    c.wait_all(&want, &probe, &acked.len().to_string(), Duration::from_secs(60));
    // Every node ends with the same table (statements of unknown outcome included, whichever way they went).
    let master = c.wait_master(None, Duration::from_secs(30));
    let sum = "SELECT COUNT(*), SUM(id) FROM mb";
    let expected = c.sql(master, sum, Duration::from_secs(10)).expect("checksum on the master");
    c.wait_all(&want, sum, &expected, Duration::from_secs(60));
    for gone in [m, other, victim] {
        assert!(c.node_dir(gone).with_file_name(format!("n{gone}.removed")).exists(), "node {gone}'s files kept aside");
    }
}
