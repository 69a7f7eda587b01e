//! The guarantee on paths real clients and operators take (README "What paxsql guarantees, and what it cannot"):
//! a `KILL QUERY` of a commit waiting for its majority on a master cut off from its peers is neither
//! acknowledged nor readable; no account without a password exists on any port; a master whose semi-sync
//! settings are switched off stops serving.

mod common;

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::Cluster;

/// One try: isolate the master, start an INSERT through its RW port, KILL QUERY it through the RW port while
/// the master still holds its lease, read the row through the RW port and on the master's mariadbd. Returns
/// whether the KILL reached the master (it may not, if the lease ran out first), after checking that neither the
/// writer nor any reader saw the row.
fn kill_waiting_commit_once(c: &Cluster, attempt: u64) -> bool {
    let all = [1, 2, 3];
    let m = c.wait_master(None, Duration::from_secs(30));
    let id = 1000 + attempt;
    let t = Duration::from_secs(5);
    c.isolate(m, &all);
    let isolated_at = Instant::now();
    let insert = format!("INSERT INTO k VALUES ({id})");
    thread::scope(|scope| {
        let writer = scope.spawn(|| c.sql_via(m, "proxy_rw", &insert, Duration::from_secs(20)));
        // The writer's session, as the application account sees its own sessions.
        let lookup = format!("SELECT id FROM information_schema.processlist WHERE info = '{insert}'");
        let mut thread_id = None;
        while thread_id.is_none() && isolated_at.elapsed() < Duration::from_millis(1200) {
            thread_id = c.sql(m, &lookup, t).ok().filter(|s| !s.is_empty());
        }
        let Some(thread_id) = thread_id else {
            eprintln!("attempt {attempt}: the writer's session was not seen within the lease; healing");
            c.heal();
            let _ = writer.join();
            return false;
        };
        let killed = c.sql_via(m, "proxy_rw", &format!("KILL QUERY {thread_id}"), t);
        let killed_after = isolated_at.elapsed();
        let read_rw = c.sql_via(m, "proxy_rw", &format!("SELECT COUNT(*) FROM k WHERE id = {id}"), t);
        let read_direct = c.root_sql(m, &format!("SELECT COUNT(*) FROM app.k WHERE id = {id}"));
        eprintln!(
            "attempt {attempt}: KILL QUERY {thread_id} through the master's RW port {killed_after:?} after the cut: \
             {killed:?}; reader on the RW port: {read_rw:?}; on the master's mariadbd: {read_direct:?}"
        );
        assert_ne!(read_rw.as_deref(), Ok("1"), "a reader on the RW port sees a commit no majority holds");
        assert_ne!(read_direct.as_deref(), Ok("1"), "the master's mariadbd shows a commit no majority holds");
        let written = writer.join().expect("writer thread");
        eprintln!("attempt {attempt}: writer: {written:?}");
        assert!(written.is_err(), "the writer got OK for a commit no majority holds: {written:?}");
        c.heal();
        killed.is_ok() && killed_after < Duration::from_millis(1400)
    })
}

#[test]
fn a_killed_waiting_commit_is_neither_acknowledged_nor_read_on_a_cut_off_master() {
    let c = Cluster::up_in_netns(3, 26900);
    let m = c.master().expect("a master");
    c.sql_via(m, "proxy_rw", "CREATE TABLE k (id BIGINT PRIMARY KEY)", Duration::from_secs(10)).expect("create");
    let mut delivered = 0;
    for attempt in 0..4 {
        if kill_waiting_commit_once(&c, attempt) {
            delivered += 1;
        }
        // After the heal, the old master may win its term back or another member may take over: wait until some
        // master accepts writes again before the next try.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let m = c.wait_master(None, Duration::from_secs(30));
            if c.sql_via(m, "proxy_rw", "SELECT 1", Duration::from_secs(5)).is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "no master accepts writes after the heal\n{}", c.logs());
            thread::sleep(Duration::from_millis(200));
        }
        if delivered >= 2 {
            break;
        }
    }
    assert!(delivered >= 1, "no KILL reached a cut-off master within its lease in 4 tries");
    // Whatever happened to the killed commits (outcome unknown to their writers), every node holds the same.
    let all = [1, 2, 3];
    let m = c.wait_master(None, Duration::from_secs(30));
    let count = c.sql(m, "SELECT COUNT(*) FROM k", Duration::from_secs(10)).expect("count");
    c.wait_all(&all, "SELECT COUNT(*) FROM k", &count, Duration::from_secs(90));
}

#[test]
fn no_account_without_a_password_and_a_master_without_its_guarantees_stops_serving() {
    let c = Cluster::up(3, 27000);
    let t = Duration::from_secs(10);
    for id in [1, 2, 3] {
        for which in ["mariadb", "proxy_rw", "proxy_ro"] {
            let (host, port) = c.endpoint(id, which);
            for user in ["root", "", "mysql", "app"] {
                let out = Command::new("timeout")
                    .args(["10", "mariadb", "--protocol=tcp", "--skip-ssl", "--skip-password", "-N", "-B"])
                    .arg(format!("-h{host}"))
                    .arg(format!("-P{port}"))
                    .arg(format!("-u{user}"))
                    .args(["-e", "SELECT CURRENT_USER()"])
                    .output()
                    .expect("mariadb client");
                assert!(
                    !out.status.success(),
                    "node {id} {which}: user {user:?} logged in without a password as {}",
                    String::from_utf8_lossy(&out.stdout)
                );
            }
        }
        let accounts = c
            .root_sql(
                id,
                "SELECT CONCAT(user, '@', host, ':', plugin, ':', authentication_string <> '') \
                                         FROM mysql.user ORDER BY 1",
            )
            .expect("accounts");
        eprintln!("node {id} accounts: {}", accounts.replace('\n', ", "));
        for line in accounts.lines() {
            assert!(
                line.ends_with(":1") || line.starts_with("mariadb.sys@localhost:"),
                "node {id}: account without a password: {line}"
            );
        }
    }
    use std::os::unix::fs::PermissionsExt as _;
    for f in
        ["secrets", "secrets/cluster.secret", "secrets/admin.password", "secrets/replication.password", "cluster.json"]
    {
        let mode = std::fs::metadata(c.dir.path().join(f)).expect(f).permissions().mode() & 0o777;
        assert!(mode & 0o077 == 0, "{f} is readable by others: {mode:o}");
    }

    let (m, term) = c.master_term().expect("a master");
    c.sql_via(m, "proxy_rw", "CREATE TABLE g (id INT PRIMARY KEY)", t).expect("create");
    eprintln!("phase: a DBA switches semi-sync off on master {m}: it must stop serving and hand over");
    let off_at = Instant::now();
    c.root_sql(m, "SET GLOBAL rpl_semi_sync_master_enabled = OFF").expect("set global");
    let (m2, _) = c.wait_new_term(term, Duration::from_secs(30));
    eprintln!("new term with master {m2} {:?} after the switch-off", off_at.elapsed());
    c.wait_log(m, "log/node.log", "guarantees do not hold", Duration::from_secs(5));
    c.sql_via(m2, "proxy_rw", "INSERT INTO g VALUES (1)", t).expect("the new master serves");
    c.wait_all(&[1, 2, 3], "SELECT COUNT(*) FROM g", "1", Duration::from_secs(60));
}

/// A probe that opens a new connection through every node's RW port every 20 ms and asks which server answers:
/// every answer must come from a writable master, never from a read-only server (a demoted or recovering former
/// master, a replica). Returns (answers from a master, answers from read-only servers, failures).
fn probe_rw_ports(c: &Cluster, for_how_long: Duration) -> (usize, Vec<String>, Vec<String>) {
    let deadline = Instant::now() + for_how_long;
    let (mut answers, mut read_only, mut failed) = (0, Vec::new(), Vec::new());
    thread::scope(|scope| {
        let probes: Vec<_> = [1, 2, 3]
            .into_iter()
            .map(|id| {
                scope.spawn(move || {
                    let mut seen = Vec::new();
                    while Instant::now() < deadline {
                        seen.push(c.sql_via(id, "proxy_rw", "SELECT @@port, @@read_only", Duration::from_secs(8)));
                        thread::sleep(Duration::from_millis(20));
                    }
                    seen
                })
            })
            .collect();
        for p in probes {
            for answer in p.join().expect("probe thread") {
                match answer {
                    Ok(row) if row.ends_with("\t1") => read_only.push(row),
                    Ok(_) => answers += 1,
                    Err(e) => failed.push(e),
                }
            }
        }
    });
    (answers, read_only, failed)
}

#[test]
fn no_rw_connection_reaches_a_former_master_after_its_mariadbd_or_node_dies_freezes_or_is_cut_off() {
    // In a namespace of its own, so that the master can also be cut off from its peers.
    let c = Cluster::up_in_netns(3, 27200);
    for (round, fault) in [
        "kill -9 of the master's mariadbd",
        "SIGSTOP of the master's node for 4 s",
        "partition of the master's node from its peers for 6 s",
        "kill -9 of the master's mariadbd",
        "kill -9 of the master's node",
    ]
    .into_iter()
    .enumerate()
    {
        let (m, term) = c.master_term().expect("a master");
        eprintln!("round {round}: {fault} (node {m}) while every RW port is probed");
        let (answers, read_only, failed) = thread::scope(|scope| {
            let probe = scope.spawn(|| probe_rw_ports(&c, Duration::from_secs(8)));
            thread::sleep(Duration::from_millis(500));
            if fault.starts_with("SIGSTOP") {
                c.pause_node(m);
                thread::sleep(Duration::from_secs(4));
                c.resume_node(m);
            } else if fault.starts_with("partition") {
                c.isolate(m, &[1, 2, 3]);
                thread::sleep(Duration::from_secs(6));
                c.heal();
            } else if fault.ends_with("node") {
                c.kill9_node(m);
            } else {
                c.kill9_mariadbd(m);
            }
            probe.join().expect("probe")
        });
        eprintln!(
            "round {round}: {answers} answers from a master, {} failed, read-only answers: {read_only:?}",
            failed.len()
        );
        for f in failed.iter().take(3) {
            eprintln!("  failed: {f}");
        }
        assert!(read_only.is_empty(), "{fault}: RW connections answered by a read-only server: {read_only:?}");
        assert!(answers > 0, "no answer at all");
        c.wait_new_term(term, Duration::from_secs(30));
        if fault.ends_with("node") {
            c.restart_node(m);
        }
    }
}

/// tmpfs mounts of a test, unmounted when dropped (after the cluster using them, declared later, is down).
struct Mounts(Vec<std::path::PathBuf>);

impl Mounts {
    fn tmpfs(&mut self, path: &std::path::Path, size: &str) {
        std::fs::create_dir_all(path).expect("mount point");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "cannot mount a tmpfs on {} (the test needs root)", path.display());
        self.0.push(path.to_path_buf());
    }
}

impl Drop for Mounts {
    fn drop(&mut self) {
        for p in self.0.iter().rev() {
            let _ = Command::new("umount").arg("-l").arg(p).status();
        }
    }
}

struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

fn pid_alive(pid: Option<i32>) -> bool {
    pid.is_some_and(common::alive)
}

#[test]
fn a_master_whose_global_log_store_fills_up_stops_serving_and_another_takes_over() {
    let mut mounts = Mounts(Vec::new());
    // Each node's own directory (the global-log store, its status and lock files) on a small filesystem.
    let c = Cluster::up_prepared(3, 27300, |dir| {
        for id in 1..=3 {
            mounts.tmpfs(&dir.join(format!("n{id}/node")), "64m");
        }
    });
    let t = Duration::from_secs(10);
    let (m, term) = c.master_term().expect("a master");
    let other = [1, 2, 3].into_iter().find(|n| *n != m).expect("another node");
    c.sql_via(m, "proxy_rw", "CREATE TABLE f (id INT PRIMARY KEY, pad MEDIUMBLOB)", t).expect("create");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (acked, filled_at, node_gone_after) = thread::scope(|scope| {
        // Stops the writer however this closure ends (a failed check unwinds through here).
        let _stop_writer = StopOnDrop(&stop);
        // A writer through another node's RW port, which follows the master: what it got OK for must survive.
        let writer = scope.spawn(|| {
            let mut acked = Vec::new();
            let mut id = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                id += 1;
                // 32 KiB that do not compress (the store compresses its batches), so the store's preallocated space
                // runs out within seconds.
                let pad = vec!["RANDOM_BYTES(1024)"; 32].join(", ");
                let sql = format!("INSERT INTO f VALUES ({id}, CONCAT({pad}))");
                if c.sql_via(other, "proxy_rw", &sql, Duration::from_secs(8)).is_ok() {
                    acked.push(id);
                }
            }
            acked
        });
        thread::sleep(Duration::from_secs(1));
        let store = c.node_dir(m).join("node");
        let df = Command::new("df").args(["-B1M", "--output=avail"]).arg(&store).output().expect("df");
        let avail: u64 =
            String::from_utf8_lossy(&df.stdout).lines().nth(1).and_then(|l| l.trim().parse().ok()).expect("df");
        eprintln!("filling master {m}'s store filesystem: {avail} MiB free");
        let filled_at = Instant::now();
        let _ = Command::new("dd")
            .args(["if=/dev/zero", "bs=1M", &format!("count={avail}")])
            .arg(format!("of={}", store.join("fill").display()))
            .status();
        let node_pid = common::read_pid(&c.node_dir(m).join("node.pid"));
        let db_pid = common::read_pid(&c.node_dir(m).join("data/mariadbd.pid"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while (pid_alive(node_pid) || pid_alive(db_pid)) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
        let gone = (!pid_alive(node_pid) && !pid_alive(db_pid)).then(|| filled_at.elapsed());
        c.wait_new_term(term, Duration::from_secs(30));
        thread::sleep(Duration::from_secs(3));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (writer.join().expect("writer"), filled_at, gone)
    });
    eprintln!("node {m} and its mariadbd gone {node_gone_after:?} after the fill; {} writes acknowledged", acked.len());
    c.wait_log(m, "log/node.log", "fatal", Duration::from_secs(1));
    let gone = node_gone_after.expect("the master's node and mariadbd must stop when its store cannot write");
    assert!(gone < Duration::from_secs(5), "stopped only {gone:?} after the disk filled");
    let _ = filled_at;
    // Room again: the node comes back, catches up, and every acknowledged write is on every node.
    let _ = std::fs::remove_file(c.node_dir(m).join("node/fill"));
    c.restart_node(m);
    let m2 = c.wait_master(None, Duration::from_secs(30));
    let count = c.sql(m2, "SELECT COUNT(*) FROM f", t).expect("count");
    let max_acked = acked.iter().max().copied().unwrap_or(0);
    let missing = c
        .sql(
            m2,
            &format!(
                "SELECT {} - COUNT(*) FROM f WHERE id IN ({})",
                acked.len(),
                acked.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",")
            ),
            t,
        )
        .expect("acked check");
    assert_eq!(missing, "0", "acknowledged writes lost (max acked id {max_acked})");
    c.wait_all(&[1, 2, 3], "SELECT COUNT(*) FROM f", &count, Duration::from_secs(90));
}

#[test]
fn the_read_only_port_refuses_while_its_server_is_not_aligned() {
    let c = Cluster::up(3, 27400);
    let t = Duration::from_secs(10);
    let m = c.master().expect("a master");
    let n = [1, 2, 3].into_iter().find(|x| *x != m).expect("a replica");
    c.sql_via(m, "proxy_rw", "CREATE TABLE d (id INT PRIMARY KEY)", t).expect("create");
    c.sql_via(m, "proxy_rw", "INSERT INTO d VALUES (1)", t).expect("insert");
    c.wait_all(&[1, 2, 3], "SELECT COUNT(*) FROM d", "1", Duration::from_secs(30));
    assert_eq!(
        c.sql_via(n, "proxy_ro", "SELECT COUNT(*) FROM d", t).as_deref(),
        Ok("1"),
        "RO port of an aligned replica"
    );

    // Keep a diverged server up instead of rebuilding it, so that what the RO port answers is deterministic.
    let toml = c.node_dir(n).join("node.toml");
    let text = std::fs::read_to_string(&toml).expect("node.toml");
    std::fs::write(&toml, text.replace("[mariadb]\n", "[mariadb]\nauto_rebuild = false\n")).expect("node.toml");
    c.kill9_node(n);
    c.restart_node(n);
    c.wait_all(&[n], "SELECT COUNT(*) FROM d", "1", Duration::from_secs(60));

    eprintln!("phase: a privileged write on replica {n} outside the log, a clean restart of its mariadbd");
    // A clean shutdown keeps that write (a crash would let recovery drop it); the node restarts mariadbd. The node is
    // paused meanwhile: its replica check (every 0.5 s) must not find the write before the shutdown does (it then
    // holds the server for a rebuild instead, and this test would wait for a restart; seen in CI even with the
    // write and the shutdown in one session). Whether the write went in is checked below: the restarted server
    // holds it.
    let mariadbd = common::read_pid(&c.node_dir(n).join("data/mariadbd.pid")).expect("mariadbd pid");
    c.pause_node(n);
    let _ = c.root_sql(n, "INSERT INTO app.d VALUES (666); SHUTDOWN");
    let gone = Instant::now() + Duration::from_secs(30);
    // Exited: a zombie until the (paused) node reaps it, or gone.
    let running = || {
        std::fs::read_to_string(format!("/proc/{mariadbd}/stat"))
            .is_ok_and(|s| s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
    };
    while running() && Instant::now() < gone {
        thread::sleep(Duration::from_millis(50));
    }
    c.resume_node(n);
    c.wait_log(n, "log/node-restart.log", "mariadbd is gone", Duration::from_secs(30));
    c.sql_via(m, "proxy_rw", "INSERT INTO d VALUES (2)", t).expect("the log moves on past the local write");
    let deadline = Instant::now() + Duration::from_secs(60);
    let err = loop {
        let answer = c.sql_via(n, "proxy_ro", "SELECT COUNT(*) FROM d WHERE id = 666", t);
        assert_ne!(answer.as_deref(), Ok("1"), "the RO port served a row the global log does not have\n{}", c.logs());
        // Done once the restarted server is up holding the row and the node has judged it (not a prefix).
        let held = c.root_sql(n, "SELECT COUNT(*) FROM app.d WHERE id = 666");
        match answer {
            Err(e) if e.contains("not aligned") && e.contains("prefix") && held.as_deref() == Ok("1") => break e,
            other => assert!(Instant::now() < deadline, "RO port never refused: last {other:?}\n{}", c.logs()),
        }
        thread::sleep(Duration::from_millis(100));
    };
    eprintln!("RO port of the diverged replica: {err}");
    assert!(err.contains("1053"), "{err}");
    // The diverged server itself still holds the row: only the proxy stands between it and clients.
    assert_eq!(c.root_sql(n, "SELECT COUNT(*) FROM app.d WHERE id = 666").as_deref(), Ok("1"));
}

/// A binlog transaction larger than one log entry (one value must fit in one peer message, 16 MiB) goes into the
/// global log in parts and is acknowledged once its last part is chosen; replicas are served it whole. Before
/// parts existed, MariaDB's `main.count_distinct3` (an INSERT … SELECT of ~50 MB through the RW port) cost the
/// cluster its master, and such transactions were refused (ER_TRANS_CACHE_FULL) or cost a hand-over.
#[test]
fn a_transaction_larger_than_one_log_entry_commits_in_parts_and_reaches_every_node() {
    let c = Cluster::up(3, 28500);
    let all = [1, 2, 3];
    let m = c.wait_master(None, Duration::from_secs(30));
    let (_, term) = c.master_term().expect("a master term");
    let t = Duration::from_secs(10);
    c.sql_via(m, "proxy_rw", "CREATE TABLE big (id INT PRIMARY KEY, v LONGBLOB) ENGINE=InnoDB", t).expect("create");
    c.sql_via(m, "proxy_rw", "CREATE TABLE big_aria (id INT PRIMARY KEY, v LONGBLOB) ENGINE=Aria TRANSACTIONAL=0", t)
        .expect("create");
    c.sql_via(m, "proxy_rw", "CREATE TABLE many (id INT PRIMARY KEY, v VARCHAR(1000)) ENGINE=InnoDB", t)
        .expect("create");
    let rows = "(1, REPEAT('x', 8388608)), (2, REPEAT('y', 8388608)), (3, REPEAT('z', 8388608))";

    eprintln!("phase: one InnoDB transaction of 24 MiB (three 8 MiB rows) through the RW port");
    let started = Instant::now();
    let big =
        c.sql_via(m, "proxy_rw", &format!("BEGIN; INSERT INTO big VALUES {rows}; COMMIT"), Duration::from_secs(60));
    eprintln!("the big commit answered after {:?}: {big:?}", started.elapsed());
    big.expect("a transaction larger than one log entry commits");

    eprintln!("phase: one statement of 24 MiB on a non-transactional table");
    c.sql_via(m, "proxy_rw", &format!("INSERT INTO big_aria VALUES {rows}"), Duration::from_secs(60))
        .expect("a statement larger than one log entry commits");

    eprintln!("phase: an INSERT … SELECT of ~60 MB in small rows (many events, parts cut inside events)");
    let started = Instant::now();
    c.sql_via(
        m,
        "proxy_rw",
        "INSERT INTO many SELECT seq, REPEAT(CHAR(65 + seq % 26), 997) FROM seq_1_to_60000",
        Duration::from_secs(120),
    )
    .expect("a large INSERT … SELECT commits");
    eprintln!("the INSERT … SELECT answered after {:?}", started.elapsed());
    c.sql_via(m, "proxy_rw", "INSERT INTO big VALUES (4, 'small')", t).expect("a small write after the big ones");
    assert_eq!(c.master_term(), Some((m, term)), "large transactions must not cost the master its term");

    let sums = "SELECT CONCAT_WS(',', (SELECT GROUP_CONCAT(id) FROM big), (SELECT COUNT(*) FROM many), \
                (SELECT SUM(CRC32(v)) FROM big), (SELECT SUM(CRC32(v)) FROM big_aria), (SELECT SUM(CRC32(v)) FROM many))";
    let want = c.sql_via(m, "proxy_rw", sums, t).expect("checksums on the master");
    assert!(want.starts_with("1,2,3,4,60000,"), "{want}");
    c.wait_all(&all, sums, &want, Duration::from_secs(120));
    // They went through the log in parts (the capture says so once per transaction).
    c.wait_log(m, "log/node.log", "goes into the global log in parts", Duration::from_secs(5));
}

/// The master dies while a transaction goes into the global log in parts: no node may ever hold part of it. The
/// survivors' log drops the parts at the next term (or holds all of them, if the last part was chosen first), the
/// former master — whose own binlog holds the whole transaction — is aligned before it serves again, and all
/// three end with the same rows.
#[test]
fn a_master_lost_in_the_middle_of_a_transaction_in_parts_leaves_no_part_of_it_anywhere() {
    let c = Cluster::up(3, 28400);
    let all = [1, 2, 3];
    let m = c.wait_master(None, Duration::from_secs(30));
    let t = Duration::from_secs(10);
    c.sql_via(m, "proxy_rw", "CREATE TABLE many (id INT PRIMARY KEY, v VARCHAR(1000)) ENGINE=InnoDB", t)
        .expect("create");
    c.wait_all(&all, "SELECT COUNT(*) FROM many", "0", Duration::from_secs(30));
    let outcome = thread::scope(|s| {
        let writer = s.spawn(|| {
            c.sql_via(
                m,
                "proxy_rw",
                "INSERT INTO many SELECT seq, REPEAT(CHAR(65 + seq % 26), 997) FROM seq_1_to_300000",
                Duration::from_secs(120),
            )
        });
        c.wait_log(m, "log/node.log", "goes into the global log in parts", Duration::from_secs(60));
        thread::sleep(Duration::from_millis(300));
        eprintln!("killing node {m} (and its mariadbd) while its transaction goes into the log in parts");
        c.kill9_node(m);
        writer.join().expect("writer thread")
    });
    eprintln!("the writer's outcome: {outcome:?}");
    let next = c.wait_master(Some(m), Duration::from_secs(30));
    c.sql_via(next, "proxy_rw", "INSERT INTO many VALUES (0, 'after')", t).expect("a write in the next term");
    // All of it or none of it, the same on both survivors; and all of it if the client was told it committed.
    let count = c.sql_via(next, "proxy_rw", "SELECT COUNT(*) FROM many", t).expect("count");
    assert!(count == "1" || count == "300001", "a part of the transaction is visible: {count} rows");
    if outcome.is_ok() {
        assert_eq!(count, "300001", "an acknowledged transaction is missing");
    }
    let sums = "SELECT CONCAT(COUNT(*), ',', SUM(CRC32(v))) FROM many";
    let want = c.sql_via(next, "proxy_rw", sums, t).expect("sums");
    let survivors: Vec<u64> = all.iter().copied().filter(|&n| n != m).collect();
    c.wait_all(&survivors, sums, &want, Duration::from_secs(60));
    eprintln!("restarting node {m}: its own binlog holds the whole transaction, the log may not");
    c.restart_node(m);
    c.wait_all(&all, sums, &want, Duration::from_secs(180));
}
