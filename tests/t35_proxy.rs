//! The proxy inside `paxsql node`, on a real three-node cluster: every node's read-write port reaches the master,
//! the read-only port refuses writes with MariaDB's read-only error, sysbench runs through the read-write port, and
//! after kill -9 of the master's node new connections through a surviving node succeed once a new master serves.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::Cluster;

/// SQL as the application account through node `id`'s proxy port `which` ("proxy_rw" or "proxy_ro").
fn via(c: &Cluster, id: u64, which: &str, sql: &str, timeout: Duration) -> Result<String, String> {
    c.sql_via(id, which, sql, timeout)
}

#[test]
fn the_proxy_routes_writes_to_the_master_and_follows_a_failover() {
    let c = Cluster::up(3, 26500);
    let all = [1u64, 2, 3];
    let (m, term) = c.master_term().expect("a master");
    let r = all.into_iter().find(|n| *n != m).expect("a replica");

    eprintln!("phase: writes through replica {r}'s read-write port reach master {m}");
    via(&c, r, "proxy_rw", "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(64))", Duration::from_secs(10))
        .expect("create through the proxy");
    for n in all {
        via(&c, n, "proxy_rw", &format!("INSERT INTO t VALUES ({n}, 'via {n}')"), Duration::from_secs(10))
            .expect("insert through each node's proxy");
    }
    let server = via(&c, r, "proxy_rw", "SELECT @@port", Duration::from_secs(5)).expect("port");
    assert_eq!(server, c.port(m).to_string(), "the read-write port must land on the master's mariadbd");

    eprintln!("phase: an 8 MiB statement through replica {r}'s read-write port (relayed over TLS) arrives whole");
    // The end of a large command once stayed in the relay's TLS record buffer until the client's next command,
    // which never came: the client waited for an answer to a statement the master had not seen whole.
    let value: Vec<u8> = (0..4u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let hex: String = value.iter().map(|b| format!("{b:02x}")).collect();
    let script = c.dir.path().join("large-statement.sql");
    std::fs::write(
        &script,
        format!("CREATE TABLE big (id INT PRIMARY KEY, v LONGBLOB);\nINSERT INTO big VALUES (1, x'{hex}');\n"),
    )
    .expect("script");
    let started = Instant::now();
    c.sql_script_via(r, "proxy_rw", &script, Duration::from_secs(30)).expect("an 8 MiB statement through the relay");
    eprintln!("  relayed in {:.2} s", started.elapsed().as_secs_f64());
    let md5 = via(&c, m, "proxy_rw", "SELECT MD5(v), LENGTH(v) FROM big WHERE id = 1", Duration::from_secs(10))
        .expect("read back");
    let expected: String = {
        use std::io::Write as _;
        use std::process::Stdio;
        let mut child = Command::new("md5sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("md5sum");
        child.stdin.take().expect("stdin").write_all(&value).expect("md5sum input");
        let out = child.wait_with_output().expect("md5sum");
        String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or_default().to_string()
    };
    assert_eq!(md5, format!("{expected}\t{}", value.len()), "the relayed value differs from what was sent");

    eprintln!("phase: the admin SQL port and /metrics describe the cluster");
    let (host, admin_port) = c.endpoint(r, "admin_sql");
    let admin_pw = std::fs::read_to_string(c.dir.path().join("secrets/admin_sql.password")).expect("admin password");
    let out = Command::new("timeout")
        .args(["10", "mariadb", "--protocol=tcp", "--skip-ssl", "-upaxsql", "-N", "-B"])
        .arg(format!("-h{host}"))
        .arg(format!("-P{admin_port}"))
        .env("MYSQL_PWD", admin_pw.trim())
        .args(["-e", "SELECT * FROM paxsql.master"])
        .output()
        .expect("mariadb client");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "admin SQL port: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.split_whitespace().next(), Some(m.to_string().as_str()), "paxsql.master: {text}");
    let bad = Command::new("timeout")
        .args(["10", "mariadb", "--protocol=tcp", "--skip-ssl", "-upaxsql", "-pwrong"])
        .arg(format!("-h{host}"))
        .arg(format!("-P{admin_port}"))
        .args(["-e", "SELECT * FROM paxsql.master"])
        .output()
        .expect("mariadb client");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("1045"), "a wrong admin password must get 1045");
    let body = c.metrics(r);
    assert!(body.contains("paxsql_master_version"), "metrics: {body}");
    // Each member row's endpoints as node r knows them: its own admin, RW and RO ports, the others' unknown.
    // Columns: node_id, peer, mariadb, proxy_rw, proxy_ro, admin, role, reachable.
    let rows = c.admin_sql(r, "SELECT * FROM paxsql.members").expect("members");
    for line in rows.lines() {
        let cells: Vec<&str> = line.split('\t').collect();
        let id: u64 = cells[0].parse().expect("node_id");
        let want: Vec<String> = if id == r {
            ["proxy_rw", "proxy_ro", "admin_sql"]
                .iter()
                .map(|e| c.endpoint(r, e))
                .map(|(h, p)| format!("{h}:{p}"))
                .collect()
        } else {
            vec!["NULL".to_string(); 3]
        };
        assert_eq!(cells[3..6], want, "paxsql.members on node {r}: {rows}");
    }
    assert_eq!(rows.lines().count(), all.len(), "paxsql.members on node {r}: {rows}");

    eprintln!("phase: read-only ports read the local replica and refuse writes");
    let deadline = Instant::now() + Duration::from_secs(30);
    for n in all {
        while via(&c, n, "proxy_ro", "SELECT COUNT(*) FROM t", Duration::from_secs(5)).as_deref() != Ok("3") {
            assert!(Instant::now() < deadline, "node {n}'s read-only port never showed the writes\n{}", c.logs());
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let err = via(&c, r, "proxy_ro", "INSERT INTO t VALUES (99, 'ro')", Duration::from_secs(5)).unwrap_err();
    assert!(err.contains("1290") || err.contains("read-only"), "read-only port accepted a write: {err}");

    eprintln!("phase: sysbench oltp_read_write, 8 threads, 30 s, through the read-write port");
    let (host, port) = c.endpoint(r, "proxy_rw");
    let sb = |cmd: &str, extra: &[&str]| {
        Command::new("timeout")
            .arg("120")
            .args([
                "sysbench",
                "oltp_read_write",
                "--tables=2",
                "--table-size=2000",
                "--mysql-db=app",
                "--mysql-user=app",
            ])
            .arg(format!("--mysql-password={}", c.password()))
            .arg(format!("--mysql-host={host}"))
            .arg(format!("--mysql-port={port}"))
            .arg("--db-ps-mode=disable")
            .args(extra)
            .arg(cmd)
            .output()
            .expect("sysbench (deploy/install-deps.sh installs it)")
    };
    let prep = sb("prepare", &[]);
    assert!(prep.status.success(), "sysbench prepare: {}", String::from_utf8_lossy(&prep.stderr));
    let run = sb("run", &["--threads=8", "--time=30"]);
    let text = String::from_utf8_lossy(&run.stdout).to_string();
    assert!(run.status.success(), "sysbench run failed: {text}{}", String::from_utf8_lossy(&run.stderr));
    let tps = text.lines().find(|l| l.contains("transactions:")).unwrap_or("").to_string();
    eprintln!("sysbench through the proxy: {}", tps.trim());
    assert!(!tps.is_empty() && !tps.contains(" 0 "), "no transactions: {text}");

    eprintln!("phase: /metrics counts the master's ACKs and the replica's proxy connections");
    // The node copies its proxy's counters into the metrics once a second.
    std::thread::sleep(Duration::from_millis(1500));
    let acked = common::sample(&c.metrics(m), "paxsql_capture_acked_transactions_total");
    let proxied = common::sample(&c.metrics(r), "paxsql_proxy_connections_total");
    eprintln!("master {m}: {acked:?} transactions ACKed; node {r}'s proxy: {proxied:?} connections");
    assert!(acked.is_some_and(|n| n > 100.0), "ACK counter on the master: {acked:?}");
    assert!(proxied.is_some_and(|n| n >= 8.0), "proxy connection counter: {proxied:?}");

    eprintln!("phase: kill -9 master {m}'s node; new connections through node {r}'s proxy succeed after the election");
    let killed = Instant::now();
    c.kill9_node(m);
    let survivor = all.into_iter().find(|n| *n != m).expect("survivor");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // The proxy holds a new connection during the election, so one attempt usually rides it out.
        match via(&c, survivor, "proxy_rw", "INSERT INTO t VALUES (1000, 'after failover')", Duration::from_secs(10)) {
            Ok(_) => break,
            Err(e) => {
                assert!(Instant::now() < deadline, "no write through the proxy after the failover: {e}\n{}", c.logs());
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    eprintln!("first write through the proxy {:?} after the kill", killed.elapsed());
    let (m2, _) = c.wait_new_term(term, Duration::from_secs(30));
    assert_ne!(m2, m);
    let port_now = via(&c, survivor, "proxy_rw", "SELECT @@port", Duration::from_secs(10)).expect("port");
    assert_eq!(port_now, c.port(m2).to_string(), "the read-write port must follow the new master");
}
