//! A three-node paxsql cluster on real MariaDB: replication, failover after kill -9 of the master's mariadbd and
//! of its node process, no acknowledged write lost, a stale master never acknowledges, a former master rejoins
//! aligned, and a minority never accepts a write.

mod common;

use std::time::Duration;

use common::Cluster;

const CHECKSUM: &str = "CHECKSUM TABLE t";

/// What a node logs each time its mariadbd starts replicating from the node's binlog server.
const REPLICATING: &str = "local mariadbd replicates from this node's binlog server";

fn checksums_equal(c: &Cluster, nodes: &[u64]) {
    let first = c.sql(nodes[0], CHECKSUM, Duration::from_secs(10)).expect("checksum");
    for &n in &nodes[1..] {
        assert_eq!(c.sql(n, CHECKSUM, Duration::from_secs(10)).expect("checksum"), first, "node {n} differs");
    }
}

/// Inserts rows `ids` on `node`, one transaction each; returns the ids the server acknowledged.
fn insert(c: &Cluster, node: u64, ids: std::ops::Range<u64>) -> Vec<u64> {
    ids.filter(|id| c.sql(node, &format!("INSERT INTO t VALUES ({id}, 'v{id}')"), Duration::from_secs(5)).is_ok())
        .collect()
}

/// A number node `id` reports in `cluster status --json` (0 if absent).
fn node_figure(c: &Cluster, id: u64, key: &str) -> u64 {
    let status = c.status();
    let nodes = status["nodes"].as_array().cloned().unwrap_or_default();
    nodes.iter().find(|n| n["id"] == id).and_then(|n| n[key].as_u64()).unwrap_or(0)
}

/// A cluster whose table `t` holds rows 0..3 on every node.
fn up_with_three_rows(base_port: u16, all: &[u64]) -> Cluster {
    let c = Cluster::up(3, base_port);
    let m = c.master().expect("a master");
    c.sql(m, "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(64))", Duration::from_secs(10)).expect("create");
    assert_eq!(insert(&c, m, 0..3).len(), 3);
    c.wait_all(all, "SELECT COUNT(*) FROM t", "3", Duration::from_secs(30));
    c
}

/// Restarts the (stopped) `nodes` with a snapshot of the global log every `every` instances, so that compaction
/// happens within a test.
fn restart_with_snapshot_every(c: &Cluster, nodes: &[u64], every: u64) {
    for &id in nodes {
        let toml = c.node_dir(id).join("node.toml");
        let text = std::fs::read_to_string(&toml).expect("node.toml");
        std::fs::write(&toml, format!("{text}\n[timing]\nsnapshot_every = {every}\n")).expect("node.toml");
        c.restart_node(id);
    }
}

#[test]
fn writes_replicate_and_failover_loses_no_acknowledged_write() {
    let c = Cluster::up(3, 26000);
    let all = [1, 2, 3];
    let (m1, term1) = c.master_term().expect("a master after cluster up");
    eprintln!("phase: writes on master {m1} appear on every node with equal checksums");
    c.sql(m1, "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(64))", Duration::from_secs(10)).expect("create");
    let mut acked = insert(&c, m1, 0..50);
    assert_eq!(acked.len(), 50, "a healthy master acknowledges every write");
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "50", Duration::from_secs(20));
    checksums_equal(&c, &all);
    for n in all.iter().filter(|n| **n != m1) {
        let err = c.sql(*n, "INSERT INTO t VALUES (999999, 'replica')", Duration::from_secs(5)).unwrap_err();
        assert!(err.contains("1290") || err.contains("read-only"), "replica {n} accepted a write: {err}");
    }

    eprintln!("phase: kill -9 the master's mariadbd; a new master takes over and writes continue");
    c.kill9_mariadbd(m1);
    // Any node may serve the new term, the old master too once its mariadbd is back and aligned.
    let (m2, _) = c.wait_new_term(term1, Duration::from_secs(30));
    acked.extend(insert(&c, m2, 100..150));
    c.wait_all(&all, "SELECT COUNT(*) FROM t", &acked.len().to_string(), Duration::from_secs(60));
    checksums_equal(&c, &all);

    eprintln!("phase: kill -9 the master's node process; its mariadbd never acknowledges again");
    c.kill9_node(m2);
    let stale = c.sql(m2, "INSERT INTO t VALUES (777777, 'stale')", Duration::from_secs(3));
    assert!(stale.is_err(), "a master whose node died acknowledged a write: {stale:?}");
    let m3 = c.wait_master(Some(m2), Duration::from_secs(30));
    acked.extend(insert(&c, m3, 200..250));
    let survivors: Vec<u64> = all.iter().copied().filter(|n| *n != m2).collect();
    c.wait_all(&survivors, "SELECT COUNT(*) FROM t", &acked.len().to_string(), Duration::from_secs(60));

    eprintln!("phase: the former master restarts, drops its un-acknowledged tail and rejoins aligned");
    c.restart_node(m2);
    c.wait_all(&all, "SELECT COUNT(*) FROM t", &acked.len().to_string(), Duration::from_secs(90));
    c.wait_all(&[m2], "SELECT COUNT(*) FROM t WHERE id = 777777", "0", Duration::from_secs(10));
    checksums_equal(&c, &all);
    let ids = c.sql(m3, "SELECT GROUP_CONCAT(id ORDER BY id) FROM t", Duration::from_secs(5)).expect("ids");
    let mut want = acked.clone();
    want.sort();
    let want = want.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    assert_eq!(ids, want, "every acknowledged write, and nothing else, is in the table");
}

#[test]
fn a_minority_never_accepts_a_write() {
    let c = Cluster::up(3, 26100);
    let m = c.master().expect("a master");
    c.sql(m, "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(64))", Duration::from_secs(10)).expect("create");
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|n| *n != m).collect();
    eprintln!("phase: both other nodes die (node processes and their mariadbds); master {m} is alone");
    c.kill9_nodes(&others);
    // Whatever it was doing, a lone node must not acknowledge: give it well over a lease to try.
    for i in 0..5 {
        let r = c.sql(m, &format!("INSERT INTO t VALUES ({i}, 'minority')"), Duration::from_secs(3));
        assert!(r.is_err(), "the minority acknowledged write {i}: {r:?}");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while c.master().is_some() {
        assert!(std::time::Instant::now() < deadline, "a node alone still serves as master\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_node_whose_data_diverged_is_rebuilt_from_a_healthy_member() {
    let c = Cluster::up(3, 26200);
    let all = [1, 2, 3];
    let m = c.master().expect("a master");
    let r = [1, 2, 3].into_iter().find(|n| *n != m).expect("a replica");
    c.sql(m, "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(64))", Duration::from_secs(10)).expect("create");
    c.wait_all(&[r], "SELECT COUNT(*) FROM t", "0", Duration::from_secs(20));

    // A running replica's node would catch the write at once (t47); here its node is frozen (its mariadbd dies with
    // it when it is killed: PR_SET_PDEATHSIG), and the write must be found by the alignment check of the restart.
    eprintln!("phase: replica {r}'s node is frozen; a privileged account writes on its mariadbd: its GTIDs diverge");
    c.pause_node(r);
    let dir = c.node_dir(r);
    let admin_pw = std::fs::read_to_string(c.dir.path().join("secrets/admin.password")).expect("admin password");
    let out = std::process::Command::new("mariadb")
        .arg(format!("--socket={}", dir.join("run/mysqld.sock").display()))
        // The second transaction's prepare flushes the first one's commit to the redo log, so at least the first
        // survives the kill -9 below (a commit younger than that can be rolled back: MDEV-232).
        .args([
            "-uroot",
            "app",
            "-e",
            "INSERT INTO t VALUES (4242, 'diverged'); INSERT INTO t VALUES (4243, 'diverged')",
        ])
        .env("MYSQL_PWD", admin_pw.trim())
        .output()
        .expect("mariadb client");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // Give InnoDB time to make the commit durable: with init-rpl-role=SLAVE a commit younger than ~1 s can be
    // rolled back by a kill -9 recovery (MDEV-232), which would quietly re-align the server.
    std::thread::sleep(Duration::from_secs(3));
    eprintln!("phase: the node restarts; its alignment check refuses to serve the diverged server");
    c.kill9_nodes(&[r]);
    c.restart_node(r);
    c.wait_log(r, "log/node-restart.log", "is not a prefix of the global log", Duration::from_secs(60));
    // It must not have been wired as a replica of the global log (nor be master).
    let io = c.sql(
        r,
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'system user'",
        Duration::from_secs(5),
    );
    assert_eq!(io.as_deref(), Ok("0"), "the diverged server runs replication threads");
    assert_ne!(c.master(), Some(r));

    eprintln!("phase: the cluster writes past the diverged transactions: the node sees the divergence and rebuilds");
    let acked = insert(&c, m, 0..10);
    assert_eq!(acked.len(), 10, "the rest of the cluster keeps working");
    c.wait_log(r, "log/node-restart.log", "rebuild complete", Duration::from_secs(180));
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "10", Duration::from_secs(60));
    c.wait_all(&all, "SELECT COUNT(*) FROM t WHERE v = 'diverged'", "0", Duration::from_secs(10));
    checksums_equal(&c, &all);
    let more = insert(&c, m, 10..20);
    assert_eq!(more.len(), 10);
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "20", Duration::from_secs(60));
    assert_eq!(c.sql(r, "SELECT @@read_only", Duration::from_secs(5)).as_deref(), Ok("1"));
}

#[test]
fn a_former_master_with_an_unacknowledged_ddl_tail_rejoins_holding_exactly_the_global_log() {
    let c = Cluster::up(3, 26300);
    let all = [1, 2, 3];
    let (m, term) = c.master_term().expect("a master");
    let others: Vec<u64> = all.iter().copied().filter(|n| *n != m).collect();
    c.sql(m, "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(64))", Duration::from_secs(10)).expect("create");
    let mut acked = insert(&c, m, 0..20);
    assert_eq!(acked.len(), 20);
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "20", Duration::from_secs(30));

    eprintln!("phase: the other nodes freeze; a write and a DDL reach master {m}'s binlog but are never acknowledged");
    for &o in &others {
        c.pause_node(o);
    }
    // While the write waits, the master's Paxos core holds its proposal: the admin port's figure says so (it
    // read 0 whatever happened before it was fed by the core).
    let in_flight = || {
        let out = c.admin_sql(m, "SHOW STATUS LIKE 'paxos_proposals_in_flight'").ok()?;
        out.split_whitespace().nth(1)?.parse::<u64>().ok()
    };
    let (unacked, seen_in_flight) = std::thread::scope(|scope| {
        let write = scope.spawn(|| c.sql(m, "INSERT INTO t VALUES (5000, 'unacked')", Duration::from_secs(3)));
        let mut seen = None;
        while !write.is_finished() && seen.is_none_or(|n| n == 0) {
            seen = in_flight().or(seen);
            std::thread::sleep(Duration::from_millis(50));
        }
        (write.join().expect("writer thread"), seen)
    });
    assert!(unacked.is_err(), "a master without a majority acknowledged a write: {unacked:?}");
    assert!(
        seen_in_flight.is_some_and(|n| n >= 1),
        "paxos_proposals_in_flight on the frozen-out master: {seen_in_flight:?}"
    );
    let ddl = c.sql(m, "CREATE TABLE tail_ddl (id INT PRIMARY KEY)", Duration::from_secs(3));
    assert!(ddl.is_err(), "a master without a majority acknowledged a DDL: {ddl:?}");
    std::thread::sleep(Duration::from_secs(2));
    c.kill9_nodes(&[m]);
    for &o in &others {
        c.resume_node(o);
    }

    eprintln!("phase: the majority elects a new master and keeps writing");
    let (m2, _) = c.wait_new_term(term, Duration::from_secs(30));
    assert_ne!(m2, m);
    acked.extend(insert(&c, m2, 100..120));
    assert_eq!(acked.len(), 40);

    eprintln!("phase: the former master restarts; its un-ACKed tail goes (truncated by recovery, or rebuilt)");
    c.restart_node(m);
    // Where MariaDB can truncate the tail it does; where it refuses (a DDL in it) the node rebuilds. Either way the
    // node must end up a replica holding exactly the global log.
    c.wait_log(m, "log/node-restart.log", REPLICATING, Duration::from_secs(240));
    let log = std::fs::read_to_string(c.node_dir(m).join("log/node-restart.log")).unwrap_or_default();
    eprintln!("rebuilt: {}", log.contains("rebuild complete"));
    // A transaction the client never saw acknowledged has an unknown outcome, not a failed one: if one acceptor
    // took its proposal before the freeze, the next master must choose it (Paxos), and then it is on every node.
    // What must hold: every node holds exactly the global log, every acknowledged write included.
    let on_master = |sql: &str| c.sql(m2, sql, Duration::from_secs(10)).expect("query the master");
    let rows = on_master("SELECT COUNT(*) FROM t");
    let unacked_kept = on_master("SELECT COUNT(*) FROM t WHERE id = 5000");
    let ddl_kept = on_master("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_NAME = 'tail_ddl'");
    eprintln!("global log kept the unacknowledged insert: {unacked_kept}, the DDL: {ddl_kept}");
    let expected = 40 + unacked_kept.parse::<usize>().expect("count");
    assert_eq!(rows, expected.to_string(), "the master lost an acknowledged write or holds a foreign one");
    c.wait_all(&all, "SELECT COUNT(*) FROM t", &rows, Duration::from_secs(60));
    c.wait_all(&all, "SELECT COUNT(*) FROM t WHERE id = 5000", &unacked_kept, Duration::from_secs(10));
    c.wait_all(
        &all,
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_NAME = 'tail_ddl'",
        &ddl_kept,
        Duration::from_secs(10),
    );
    for id in &acked {
        c.wait_all(&all, &format!("SELECT COUNT(*) FROM t WHERE id = {id}"), "1", Duration::from_secs(10));
    }
    checksums_equal(&c, &all);
    assert_eq!(c.sql(m, "SELECT @@read_only", Duration::from_secs(5)).as_deref(), Ok("1"));
    assert_eq!(insert(&c, m2, 200..210).len(), 10);
    c.wait_all(&all, "SELECT COUNT(*) FROM t", &(expected + 10).to_string(), Duration::from_secs(60));
}

/// Finding of the relay test (crates/repl-server/tests/t30_relay.rs): MariaDB does not make a replica's DDL atomic
/// with its gtid_slave_pos. A kill -9 while the replica applies a DDL can leave the DDL in the binlog with
/// gtid_slave_pos one behind (then the next replicated GTID fails with error 1950 in strict mode), or DDL recovery
/// finishes the DDL at restart and logs it under the replica's own server_id (a GTID the global log does not
/// have). The node must come back from either: continue from its binlog position, or rebuild.
#[test]
fn a_replica_killed_while_applying_ddl_rejoins_holding_exactly_the_global_log() {
    let c = Cluster::up(3, 26800);
    let all = [1, 2, 3];
    let m = c.master().expect("a master");
    let r = all.into_iter().find(|n| *n != m).expect("a replica");
    const STREAMS: u64 = 3;
    const PAIRS_PER_STREAM: u64 = 800;
    for s in 0..STREAMS {
        c.sql(m, &format!("CREATE TABLE d{s} (id INT PRIMARY KEY)"), Duration::from_secs(10)).expect("create");
    }
    let node_log = c.node_dir(r).join("log/node.log");
    let serving = || std::fs::read_to_string(&node_log).unwrap_or_default().matches(REPLICATING).count();
    c.wait_log(r, "log/node.log", REPLICATING, Duration::from_secs(30));

    eprintln!("phase: {STREAMS} sessions run DDL back to back on master {m}; replica {r}'s mariadbd is killed 4 times");
    let kills = std::thread::scope(|scope| {
        let streams: Vec<_> = (0..STREAMS)
            .map(|s| {
                let c = &c;
                scope.spawn(move || {
                    let mut batch: String = (0..PAIRS_PER_STREAM)
                        .map(|i| {
                            format!(
                                "ALTER TABLE d{s} ADD COLUMN c{i} INT NOT NULL DEFAULT {i}; \
                                     ALTER TABLE d{s} DROP COLUMN c{i};"
                            )
                        })
                        .collect();
                    batch.push_str(&format!("ALTER TABLE d{s} ADD COLUMN done INT NOT NULL DEFAULT {s};"));
                    c.sql(m, &batch, Duration::from_secs(300))
                })
            })
            .collect();
        let mut kills = 0;
        for k in 0..4u64 {
            // Spread the kills over the stream, at different points of a DDL's apply.
            std::thread::sleep(Duration::from_millis(700 + 370 * k));
            if streams.iter().all(|t| t.is_finished()) {
                break;
            }
            let before = serving();
            c.kill9_mariadbd(r);
            kills += 1;
            let deadline = std::time::Instant::now() + Duration::from_secs(240);
            while serving() == before {
                assert!(std::time::Instant::now() < deadline, "replica {r} did not serve again\n{}", c.logs());
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        for (s, t) in streams.into_iter().enumerate() {
            let out = t.join().expect("DDL stream thread");
            assert!(out.is_ok(), "DDL stream {s} on the master failed: {out:?}");
        }
        kills
    });
    assert!(kills >= 2, "the DDL streams ended before the replica was killed twice ({kills})");

    eprintln!("phase: every node holds every DDL; replication still runs on replica {r}");
    // The last DDL of every stream is on every node, and so (GTID order, strict mode) is every DDL before it. Only
    // the `done` columns say so: a count of all columns also reaches its final figure mid-stream, whenever every
    // table holds an added column at once (a loaded replica then still had thousands of DDLs to apply).
    let done = "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'app' AND TABLE_NAME LIKE 'd%' \
                AND COLUMN_NAME = 'done'";
    c.wait_all(&all, done, &STREAMS.to_string(), Duration::from_secs(180));
    let columns = "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'app' AND TABLE_NAME LIKE 'd%'";
    c.wait_all(&all, columns, &(STREAMS * 2).to_string(), Duration::from_secs(10));
    c.sql(m, "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(64))", Duration::from_secs(10)).expect("create");
    assert_eq!(insert(&c, m, 0..10).len(), 10);
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "10", Duration::from_secs(60));
    checksums_equal(&c, &all);
    let gtid = c.sql(m, "SELECT @@gtid_binlog_pos", Duration::from_secs(5)).expect("master gtid");
    c.wait_all(&all, "SELECT @@gtid_binlog_pos", &gtid, Duration::from_secs(30));
    let log = std::fs::read_to_string(&node_log).unwrap_or_default();
    for line in log.lines().filter(|l| l.contains("diverged from the global log")).take(3) {
        eprintln!("node {r}: {line}");
    }
    eprintln!(
        "{kills} kills; node {r}: {} rebuilds, {} restarts continuing from the binlog position",
        log.matches("rebuild complete").count(),
        log.matches("replication continues from the binlog position").count()
    );
}

#[test]
fn the_whole_cluster_restarts_after_its_log_was_compacted_past_every_transaction() {
    let all = [1, 2, 3];
    let c = up_with_three_rows(27800, &all);

    eprintln!("phase: every node restarted with a snapshot every 10 instances (lease renewals fill the log), and");
    eprintln!("       mariadbd binlog files of 4 KiB of which the node keeps only the newest two");
    c.kill9_nodes(&all);
    for id in all {
        let cnf = c.node_dir(id).join("my.cnf");
        let text = std::fs::read_to_string(&cnf).expect("my.cnf");
        std::fs::write(&cnf, text.replace("max_binlog_size=256M", "max_binlog_size=4096")).expect("my.cnf");
        let toml = c.node_dir(id).join("node.toml");
        let text = std::fs::read_to_string(&toml).expect("node.toml");
        std::fs::write(&toml, text.replacen("[mariadb]\n", "[mariadb]\nbinlog_retain_bytes = 0\n", 1))
            .expect("node.toml");
    }
    restart_with_snapshot_every(&c, &all, 10);
    let m = c.wait_master(None, Duration::from_secs(60));
    // ~300 bytes of binlog each: a dozen files on every node.
    assert_eq!(insert(&c, m, 3..150).len(), 147);
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "150", Duration::from_secs(60));

    eprintln!("phase: every node purges its mariadbd's binlog down to the newest two files");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for id in all {
        loop {
            let metrics = c.metrics(id);
            let purged = common::sample(&metrics, "paxsql_mariadb_binlog_purged_files_total").unwrap_or(0.0);
            let files = common::sample(&metrics, "paxsql_mariadb_binlog_files").unwrap_or(0.0);
            // The gauge is as old as the last retention pass (every 10 s): the listing is what holds now.
            let listed = c.root_sql(id, "SHOW BINARY LOGS").expect("SHOW BINARY LOGS");
            if purged >= 5.0 && files <= 2.0 && listed.lines().count() <= 2 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "node {id}: {purged} files purged, {files} left by the last pass, listed now:\n{listed}\n{}",
                c.logs()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    assert_eq!(insert(&c, m, 150..151).len(), 1, "the master takes writes after its binlog was purged");
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "151", Duration::from_secs(30));

    eprintln!("phase: idle until the log has been compacted past the last transaction, then all nodes restart");
    std::thread::sleep(Duration::from_secs(20));
    c.kill9_nodes(&all);
    for id in all {
        c.restart_node(id);
    }
    // Whichever node is elected, its capture starts in its purged binlog.
    let m = c.wait_master(None, Duration::from_secs(60));
    assert_eq!(insert(&c, m, 151..153).len(), 2, "the restarted cluster takes writes");
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "153", Duration::from_secs(60));
    checksums_equal(&c, &all);

    eprintln!("phase: nodes started by hand (no pid file of cluster up): status and down find them by their locks");
    let mut pids = Vec::new();
    for id in all {
        let _ = std::fs::remove_file(c.node_dir(id).join("node.pid"));
    }
    let st = c.status();
    for n in st["nodes"].as_array().expect("nodes") {
        assert_ne!(n["role"], "down", "a running node listed as down: {n}");
        pids.push(n["pids"]["node"].as_i64().expect("node pid") as i32);
        pids.push(n["pids"]["mariadbd"].as_i64().expect("mariadbd pid") as i32);
    }
    let down = std::process::Command::new(common::paxsql())
        .args(["cluster", "down", "--dir"])
        .arg(c.dir.path())
        .output()
        .expect("cluster down");
    assert!(down.status.success(), "{}", String::from_utf8_lossy(&down.stderr));
    for pid in pids {
        assert!(!common::alive(pid), "pid {pid} still runs after cluster down");
    }
}

/// A node down while the others compacted the Paxos log past everything it holds comes back without an operator:
/// the members answer its catch-up with `CatchUpGone`, it installs a member's snapshot (peer messages
/// SnapshotRequest/SnapshotReply), its served binlog restarts at the snapshot's last GTID, and its database, now
/// behind the start of what it can serve, is rebuilt from a member with mariabackup.
#[test]
fn a_node_down_past_the_compacted_log_installs_a_snapshot_is_rebuilt_and_serves_again() {
    let all = [1, 2, 3];
    let c = up_with_three_rows(28400, &all);

    eprintln!("phase: every node restarted with a snapshot every 20 instances");
    c.kill9_nodes(&all);
    restart_with_snapshot_every(&c, &all, 20);
    let m = c.wait_master(None, Duration::from_secs(60));
    let r = all.into_iter().find(|n| *n != m).expect("a replica");
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "3", Duration::from_secs(60));
    let r_applied = node_figure(&c, r, "applied_instance");

    eprintln!("phase: node {r} down (at instance {r_applied}) while 300 transactions commit");
    c.kill9_nodes(&[r]);
    // Right after an election the master may run on a bare majority (the other member promised a higher ballot
    // while campaigning too): losing node r then costs an election, so each batch is retried on the current master
    // (INSERT IGNORE: a batch whose acknowledgement was lost to a master change may be partly in already).
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    for batch in 0..3u64 {
        let sql: String = (0..100u64)
            .map(|k| {
                let id = 3 + batch * 100 + k;
                format!("INSERT IGNORE INTO t VALUES ({id}, 'v{id}');")
            })
            .collect();
        loop {
            let master = c.wait_master(None, Duration::from_secs(60));
            if c.sql(master, &sql, Duration::from_secs(60)).is_ok() {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "300 writes not acknowledged in 180 s\n{}", c.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let live: Vec<u64> = all.into_iter().filter(|n| *n != r).collect();
    c.wait_all(&live, "SELECT COUNT(*) FROM t", "303", Duration::from_secs(60));
    for &n in &live {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        // Well past: node r's status may be a renewal or two behind where it stopped.
        while node_figure(&c, n, "log_first_held") <= r_applied + 50 {
            assert!(std::time::Instant::now() < deadline, "node {n} did not compact past instance {r_applied}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // The members' send queues still hold what they sent node r while it was down (up to 4096 messages): the
    // queued Accepts alone could teach it everything when it returns, and no snapshot would be needed (seen). A
    // restart of the live members empties them; their stores stay compacted.
    eprintln!("phase: the live members restart (their send queues to node {r} go), compacted");
    c.kill9_nodes(&live);
    for &n in &live {
        c.restart_node(n);
    }
    let m = c.wait_master(None, Duration::from_secs(60));
    c.wait_all(&live, "SELECT COUNT(*) FROM t", "303", Duration::from_secs(60));

    eprintln!("phase: node {r} restarts: snapshot from a member, database rebuilt, serving the whole log");
    c.restart_node(r);
    c.wait_log(r, "log/node-restart.log", "installed a member's snapshot", Duration::from_secs(60));
    c.wait_log(r, "log/node-restart.log", "rebuilding the local database from a copy", Duration::from_secs(60));
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "303", Duration::from_secs(240));
    c.wait_log(r, "log/node-restart.log", REPLICATING, Duration::from_secs(60));
    assert_eq!(insert(&c, m, 303..305).len(), 2, "the cluster takes writes");
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "305", Duration::from_secs(60));
    checksums_equal(&c, &all);
}
