//! A running replica never serves what the global log does not hold, and never looks healthy with a stopped
//! applier (README "What paxsql guarantees"): a privileged write on a replica (`read_only` does not bind
//! READ ONLY ADMIN) is caught within a check round, the RO port refuses, and the replica is rebuilt; a replica
//! whose applier stops is reported with the error, restarted, and rebuilt when it keeps stopping; only the
//! master's mariadbd takes logins over TCP.

mod common;

use std::time::{Duration, Instant};

use common::Cluster;

const T: Duration = Duration::from_secs(10);

/// Node `id`'s `database` and `database_detail`, as `cluster status --json` shows them.
fn database(c: &Cluster, id: u64) -> (String, String) {
    let st = c.status();
    let node = st["nodes"].as_array().and_then(|n| n.iter().find(|n| n["id"] == id).cloned()).unwrap_or_default();
    (node["database"].as_str().unwrap_or("").to_string(), node["database_detail"].as_str().unwrap_or("").to_string())
}

/// Waits until `cond` holds for node `id`'s database state; returns how long it took.
fn wait_database(c: &Cluster, id: u64, timeout: Duration, what: &str, cond: impl Fn(&str, &str) -> bool) -> Duration {
    let start = Instant::now();
    loop {
        let (state, detail) = database(c, id);
        if cond(&state, &detail) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < timeout,
            "node {id}: {what} within {timeout:?}; database {state}: {detail}\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn checksums_equal(c: &Cluster, nodes: &[u64]) {
    let first = c.sql(nodes[0], "CHECKSUM TABLE t", T).expect("checksum");
    for &n in &nodes[1..] {
        assert_eq!(c.sql(n, "CHECKSUM TABLE t", T).expect("checksum"), first, "node {n} differs");
    }
}

/// Table `t` with one row of the log's on every node; returns the master and the replicas.
fn with_table_t(c: &Cluster) -> (u64, Vec<u64>) {
    let all = [1, 2, 3];
    let m = c.wait_master(None, Duration::from_secs(30));
    let replicas: Vec<u64> = all.into_iter().filter(|n| *n != m).collect();
    c.sql_via(m, "proxy_rw", "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(64))", T).expect("create");
    c.sql_via(m, "proxy_rw", "INSERT INTO t VALUES (1, 'log')", T).expect("insert");
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "1", Duration::from_secs(30));
    (m, replicas)
}

#[test]
fn a_replica_holding_what_the_log_does_not_is_caught_refused_and_rebuilt() {
    let c = Cluster::up(3, 27600);
    let all = [1, 2, 3];
    let (m, replicas) = with_table_t(&c);
    for &r in &replicas {
        wait_database(&c, r, Duration::from_secs(10), "serving as replica", |s, _| s == "replica");
    }

    let r = replicas[0];
    eprintln!("phase: root writes on running replica {r} (binlogged): caught, RO port refuses, rebuilt");
    c.root_sql(r, "INSERT INTO app.t VALUES (4242, 'written on a replica')").expect("root writes on the replica");
    let caught = wait_database(&c, r, Duration::from_secs(5), "leave the replica state", |s, _| s != "replica");
    eprintln!("node {r}: stray write caught after {caught:?}: {:?}", database(&c, r));
    assert!(caught < Duration::from_secs(2), "caught only after {caught:?}");
    let ro = c.sql_via(r, "proxy_ro", "SELECT COUNT(*) FROM t WHERE id = 4242", T);
    assert!(ro.is_err(), "the RO port of a replica holding a stray write answered: {ro:?}");
    assert_ne!(c.master(), Some(r));
    let deadline = Instant::now() + Duration::from_secs(3);
    while common::sample(&c.metrics(r), "paxsql_database_serving") != Some(0.0) {
        assert!(Instant::now() < deadline, "/metrics of node {r} keeps calling its database serving");
        std::thread::sleep(Duration::from_millis(100));
    }
    c.wait_log(r, "log/node.log", "rebuild complete", Duration::from_secs(180));
    wait_database(&c, r, Duration::from_secs(60), "serving as replica again", |s, _| s == "replica");
    c.sql_via(m, "proxy_rw", "INSERT INTO t VALUES (2, 'log')", T).expect("insert");
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "2", Duration::from_secs(60));
    assert_eq!(c.sql_via(r, "proxy_ro", "SELECT COUNT(*) FROM t WHERE id = 4242", T).as_deref(), Ok("0"));
    checksums_equal(&c, &all);

    let r = replicas[1];
    eprintln!(
        "phase: root writes on replica {r} with sql_log_bin=0 (no GTID); the log's own row then stops its applier"
    );
    c.root_sql(r, "SET sql_log_bin = 0; INSERT INTO app.t VALUES (500, 'written on a replica')").expect("root writes");
    c.sql_via(m, "proxy_rw", "INSERT INTO t VALUES (500, 'log')", T).expect("the log's row");
    let seen = wait_database(&c, r, Duration::from_secs(5), "report the stopped applier", |s, d| {
        s != "replica" && d.contains("1062")
    });
    eprintln!("node {r}: stopped applier reported after {seen:?}: {:?}", database(&c, r));
    // The figure an operator watches for a replica falling behind: fed by the server's own position.
    let behind = |id: u64| {
        let st = c.status();
        st["nodes"]
            .as_array()
            .and_then(|n| n.iter().find(|n| n["id"] == id))
            .and_then(|n| n["lag_transactions"].as_u64())
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while behind(r).unwrap_or(0) < 1 {
        assert!(Instant::now() < deadline, "node {r}'s stopped applier shows no lag: {:?}", behind(r));
        std::thread::sleep(Duration::from_millis(200));
    }
    c.wait_log(r, "log/node.log", "the applier keeps stopping: rebuilding the replica", Duration::from_secs(60));
    c.wait_log(r, "log/node.log", "rebuild complete", Duration::from_secs(180));
    wait_database(&c, r, Duration::from_secs(60), "serving as replica again", |s, _| s == "replica");
    c.wait_all(&all, "SELECT v FROM t WHERE id = 500", "log", Duration::from_secs(60));
    c.sql_via(m, "proxy_rw", "INSERT INTO t VALUES (3, 'log')", T).expect("insert");
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "4", Duration::from_secs(60));
    checksums_equal(&c, &all);
    let deadline = Instant::now() + Duration::from_secs(5);
    while all.iter().any(|n| behind(*n) != Some(0)) {
        assert!(Instant::now() < deadline, "caught-up nodes show lag: {:?}", all.map(behind));
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_dbas_reset_master_and_ddl_on_the_master_leave_no_node_holding_what_the_log_lacks() {
    let c = Cluster::up(3, 27700);
    let all = [1, 2, 3];
    let (m, term) = c.master_term().expect("a master");
    c.sql_via(m, "proxy_rw", "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(64))", T).expect("create");
    c.sql_via(m, "proxy_rw", "INSERT INTO t VALUES (1, 'log')", T).expect("insert");
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "1", Duration::from_secs(30));

    eprintln!("phase: root on master {m}'s socket: RESET MASTER, then a DDL of its own");
    // Either may fail: the node resigns and SIGKILLs its mariadbd as soon as its capture loses the binlog, and the
    // DDL may then reach a restarted server (a replica, where root is not bound by read_only).
    let reset = c.root_sql(m, "RESET MASTER");
    eprintln!("root's RESET MASTER on the master: {reset:?}");
    // The DBA reconnects until the server takes the DDL: on the restarted former master, now a replica.
    let deadline = Instant::now() + Duration::from_secs(30);
    let ddl = loop {
        let ddl = c.root_sql(m, "CREATE VIEW app.v AS SELECT 'not in the log' AS x");
        if ddl.is_ok() || Instant::now() > deadline {
            break ddl;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("root's CREATE VIEW on node {m}: {ddl:?}; its database: {:?}", database(&c, m));
    let (m2, _) = c.wait_new_term(term, Duration::from_secs(60));
    eprintln!("new term: master {m2}");

    eprintln!("phase: the log's own CREATE VIEW and rows; every node ends serving exactly the log");
    c.sql_via(m2, "proxy_rw", "CREATE VIEW v AS SELECT 'from the log' AS x", T).expect("the log's view");
    c.sql_via(m2, "proxy_rw", "INSERT INTO t VALUES (2, 'log')", T).expect("insert");
    for &n in &all {
        wait_database(&c, n, Duration::from_secs(240), "serve again", |s, _| s == "replica" || s == "master");
    }
    c.wait_all(&all, "SELECT x FROM v", "from the log", Duration::from_secs(120));
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "2", Duration::from_secs(60));
    // The first wait can pass in the moment between the former master's restart as a replica and its check
    // catching the DBA's DDL (seen: 170 ms); the rebuild that follows must end serving too.
    for &n in &all {
        wait_database(&c, n, Duration::from_secs(240), "serve at the end", |s, _| s == "replica" || s == "master");
    }
    checksums_equal(&c, &all);
}

/// What each statement a DBA may run on the master's own socket (outside every proxy, where they are refused) does
/// to the cluster: measured, printed, and in every case the cluster must end serving with every node holding
/// exactly the log.
#[test]
fn dba_statements_on_the_masters_socket_leave_every_node_holding_exactly_the_log() {
    let c = Cluster::up(3, 27900);
    let all = [1, 2, 3];
    let m = c.wait_master(None, Duration::from_secs(30));
    c.sql_via(m, "proxy_rw", "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(64))", T).expect("create");
    let mut next_id = 0u64;
    for statement in [
        "FLUSH BINARY LOGS",
        "PURGE BINARY LOGS BEFORE NOW()",
        "KILL <the capture's Binlog Dump thread>",
        "INSTALL SONAME 'ha_blackhole'",
    ] {
        c.wait_master(None, Duration::from_secs(30));
        let (m, term) = c.master_term().expect("a master");
        let sql = if statement.starts_with("KILL") {
            let id = c
                .root_sql(m, "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%' LIMIT 1")
                .expect("the capture's dump thread");
            format!("KILL {id}")
        } else {
            statement.to_string()
        };
        let outcome = c.root_sql(m, &sql);
        let started = Instant::now();
        // The application goes on writing through another node's RW port.
        let via = all.into_iter().find(|n| *n != m).expect("another node");
        let mut written = None;
        while started.elapsed() < Duration::from_secs(30) {
            next_id += 1;
            if c.sql_via(via, "proxy_rw", &format!("INSERT INTO t VALUES ({next_id}, 'after')"), T).is_ok() {
                written = Some(started.elapsed());
                break;
            }
        }
        let after = c.master_term();
        eprintln!(
            "{sql} on master {m}'s socket: {outcome:?}; next write acknowledged after {written:?}; master/term before \
             {:?}, after {after:?}",
            (m, term)
        );
        assert!(written.is_some(), "{sql}: no write acknowledged within 30 s");
        let rows = c.sql_via(via, "proxy_rw", "SELECT COUNT(*) FROM t", T).expect("count");
        for &n in &all {
            wait_database(&c, n, Duration::from_secs(180), "serve again", |s, _| s == "replica" || s == "master");
        }
        c.wait_all(&all, "SELECT COUNT(*) FROM t", &rows, Duration::from_secs(60));
        checksums_equal(&c, &all);
    }
}

#[test]
fn the_read_only_port_refuses_accounts_that_read_only_does_not_bind() {
    let c = Cluster::up(3, 28200);
    let all = [1, 2, 3];
    let m = c.wait_master(None, Duration::from_secs(30));
    let r = all.into_iter().find(|n| *n != m).expect("a replica");
    c.sql_via(m, "proxy_rw", "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(64))", T).expect("create");
    // Created on the master, so through the log on every node: a DBA with every privilege, and a user holding
    // them only through a role (`SET DEFAULT ROLE`).
    c.root_sql(
        m,
        "CREATE USER 'dba'@'%' IDENTIFIED BY 'dba-pw-123'; GRANT ALL PRIVILEGES ON *.* TO 'dba'@'%'; \
         CREATE ROLE admin_role; GRANT ALL PRIVILEGES ON *.* TO admin_role; \
         CREATE USER 'ops'@'%' IDENTIFIED BY 'ops-pw-123'; GRANT admin_role TO 'ops'@'%'; \
         SET DEFAULT ROLE admin_role FOR 'ops'@'%'",
    )
    .expect("accounts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.root_sql(r, "SELECT COUNT(*) FROM mysql.user WHERE User IN ('dba', 'ops')").as_deref() != Ok("2") {
        assert!(Instant::now() < deadline, "the accounts did not reach replica {r}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The node reads the privileged accounts every second.
    std::thread::sleep(Duration::from_secs(2));

    for account in [("dba", "dba-pw-123"), ("ops", "ops-pw-123")] {
        let ro = c.sql_as(r, "proxy_ro", account, "INSERT INTO app.t VALUES (7, 'written on a replica')");
        eprintln!("{} through replica {r}'s RO port: {ro:?}", account.0);
        let err = ro.expect_err("a privileged account logged in through the RO port");
        assert!(err.contains("1227") && err.contains("READ ONLY ADMIN"), "{err}");
        // Through the RW port it reaches the master and writes into the log.
        c.sql_as(r, "proxy_rw", account, "SELECT 1").expect("privileged account through the RW port");
    }
    assert_eq!(c.sql_via(r, "proxy_ro", "SELECT COUNT(*) FROM t", T).as_deref(), Ok("0"), "the app reads on RO");
    let (state, _) = database(&c, r);
    assert_eq!(state, "replica", "nothing was written on the replica");
}

/// Logs in as `account` over TCP straight to node `id`'s mariadbd (no proxy) and reports which server answered.
fn tcp_login(c: &Cluster, id: u64, account: (&str, &str)) -> Result<String, String> {
    c.sql_as(id, "mariadb_tcp", account, "SELECT @@port")
}

/// Waits until a TCP login to node `id`'s mariadbd gives `accepted`; returns the last outcome.
fn wait_tcp_login(c: &Cluster, id: u64, account: (&str, &str), accepted: bool, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let outcome = tcp_login(c, id, account);
        if outcome.is_ok() == accepted {
            return outcome.unwrap_or_else(|e| e);
        }
        assert!(
            Instant::now() < deadline,
            "node {id}: TCP login accepted={} within {timeout:?}: {outcome:?}",
            !accepted
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn only_the_masters_mariadbd_takes_logins_over_tcp_across_a_failover() {
    let c = Cluster::up(3, 28300);
    let all = [1, 2, 3];
    let m = c.wait_master(None, Duration::from_secs(30));
    let replicas: Vec<u64> = all.into_iter().filter(|n| *n != m).collect();
    c.sql_via(m, "proxy_rw", "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(64))", T).expect("create");
    c.root_sql(m, "CREATE USER 'dba'@'%' IDENTIFIED BY 'dba-pw-123'; GRANT ALL PRIVILEGES ON *.* TO 'dba'@'%'")
        .expect("a DBA account");
    let deadline = Instant::now() + Duration::from_secs(30);
    for &n in &all {
        while c.root_sql(n, "SELECT COUNT(*) FROM mysql.user WHERE User = 'dba'").as_deref() != Ok("1") {
            assert!(Instant::now() < deadline, "the DBA account did not reach node {n}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let dba = ("dba", "dba-pw-123");
    let app_password = c.password();
    let app = ("app", app_password.as_str());

    eprintln!("phase: the master {m} takes a DBA's TCP login; the replicas refuse it (and root's, and the app's)");
    assert_eq!(tcp_login(&c, m, dba), Ok(c.port(m).to_string()), "the master's mariadbd over TCP");
    for &r in &replicas {
        for account in [dba, app] {
            let err = tcp_login(&c, r, account).expect_err("a replica's mariadbd took a login over TCP");
            assert!(err.contains("1045"), "replica {r}, {}: {err}", account.0);
        }
        // Its socket and its RO port still serve.
        assert_eq!(c.sql(r, "SELECT @@require_secure_transport", T).as_deref(), Ok("1"));
        assert_eq!(c.sql_via(r, "proxy_ro", "SELECT COUNT(*) FROM t", T).as_deref(), Ok("0"));
    }

    let r = replicas[0];
    eprintln!("phase: someone on replica {r}'s machine lifts the fence; its node puts it back within a check round");
    c.root_sql(r, "SET GLOBAL require_secure_transport = OFF").expect("lift the fence");
    let start = Instant::now();
    let refused = wait_tcp_login(&c, r, dba, false, Duration::from_secs(10));
    eprintln!("replica {r} refuses TCP logins again after {:?}: {refused}", start.elapsed());

    eprintln!("phase: kill -9 the master's node; the new master takes TCP logins, the old one refuses them");
    c.kill9_node(m);
    let m2 = c.wait_master(Some(m), Duration::from_secs(30));
    let accepted = wait_tcp_login(&c, m2, dba, true, Duration::from_secs(10));
    assert_eq!(accepted, c.port(m2).to_string());
    c.sql_via(m2, "proxy_rw", "INSERT INTO t VALUES (1, 'after failover')", T).expect("write on the new master");
    c.restart_node(m);
    wait_database(&c, m, Duration::from_secs(60), "serving as replica", |s, _| s == "replica");
    let err = tcp_login(&c, m, dba).expect_err("the former master's mariadbd took a login over TCP");
    assert!(err.contains("1045"), "{err}");
    // The RO port serves what the replica applied so far: the write above arrives within moments of the restart.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let seen = c.sql_via(m, "proxy_ro", "SELECT COUNT(*) FROM t", T);
        if seen.as_deref() == Ok("1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the former master's RO port does not serve the new master's write: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for &n in all.iter().filter(|n| **n != m2) {
        assert!(tcp_login(&c, n, dba).is_err(), "node {n} is not the master and took a TCP login");
    }
}

/// MariaDB 10.11 writes `RENAME TABLE` of a temporary table to the binlog, and no replica can apply it (1146):
/// found by MariaDB's own `main.backup_log` run through the RW port, which stopped both replicas at once. The proxy
/// refuses it (both ports); done on the master's socket, past the proxy, both replicas stop, no replica can give a
/// copy, and the master gives one as the last resort: both are rebuilt and serve again with equal checksums.
#[test]
fn replicas_that_all_stop_at_one_transaction_are_rebuilt_from_the_master() {
    let c = Cluster::up(3, 28700);
    let all = [1, 2, 3];
    let (m, replicas) = with_table_t(&c);

    eprintln!("phase: RENAME TABLE of a temporary table is refused through the RW and RO ports");
    let rename = "CREATE TEMPORARY TABLE tmp1 (a INT); RENAME TABLE tmp1 TO tmp2";
    for (id, port) in [(m, "proxy_rw"), (replicas[0], "proxy_rw"), (replicas[1], "proxy_ro")] {
        let refused = c.sql_via(id, port, rename, T);
        assert!(
            refused.as_ref().is_err_and(|e| e.contains("1235") && e.contains("temporary table")),
            "node {id} {port}: {refused:?}"
        );
    }
    // ALTER TABLE … RENAME of a temporary table is not logged, and passes.
    c.sql_via(
        m,
        "proxy_rw",
        "CREATE TEMPORARY TABLE tmp1 (a INT); ALTER TABLE tmp1 RENAME TO tmp2; DROP TABLE tmp2",
        T,
    )
    .expect("ALTER TABLE … RENAME of a temporary table");
    c.sql_via(m, "proxy_rw", "INSERT INTO t VALUES (2, 'log')", T).expect("insert");
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "2", Duration::from_secs(30));
    for &r in &replicas {
        wait_database(&c, r, Duration::from_secs(10), "serving as replica", |s, _| s == "replica");
    }

    eprintln!("phase: the same on the master's socket: both replicas stop, and are rebuilt from the master");
    c.root_sql(m, "USE app; CREATE TEMPORARY TABLE tmp1 (a INT); RENAME TABLE tmp1 TO tmp2").expect("root on socket");
    for &r in &replicas {
        wait_database(&c, r, Duration::from_secs(10), "report the stopped applier", |s, d| {
            s != "replica" && d.contains("1146")
        });
    }
    for &r in &replicas {
        c.wait_log(
            r,
            "log/node.log",
            "no replica can give a copy: rebuilding from the master's",
            Duration::from_secs(90),
        );
        c.wait_log(r, "log/node.log", "rebuild complete", Duration::from_secs(180));
        wait_database(&c, r, Duration::from_secs(60), "serving as replica again", |s, _| s == "replica");
    }
    assert_eq!(c.master(), Some(m), "the master kept serving while it gave copies");
    c.sql_via(m, "proxy_rw", "INSERT INTO t VALUES (3, 'log')", T).expect("insert after the rebuilds");
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "3", Duration::from_secs(60));
    checksums_equal(&c, &all);
}
