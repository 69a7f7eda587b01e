//! The client rides out a failover between real MariaDB servers, addressed directly (a stand-in for a paxsql
//! cluster with proxies: the library only needs MySQL endpoints and `@@read_only`).
//!
//! A is the writable master with semi-sync on, B its semi-sync replica (read-only), C a read-only server that
//! never becomes master. A workload writes through the client with autocommit statements and transactions.
//! The test stops B's I/O thread so that the next commit on A hangs waiting for its ACK (in flight), kills A
//! with SIGKILL, promotes B (applies everything it received, then `read_only=0`), and checks:
//! - the in-flight write is reported as `OutcomeUnknown` and NOT retried (its row is not on B);
//! - every write reported as committed is on B;
//! - the client found B by itself and the workload went on there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use paxsql_client::{Client, Error, Stage};
use paxsql_mariadb_testkit::{MariaDb, MariaDbOptions, ReplicationSource};

#[derive(Debug)]
enum Outcome {
    Committed,
    Unknown(Stage),
    Failed(String),
}

struct Log {
    ops: Mutex<Vec<(u64, Outcome, Instant)>>,
    stop: AtomicBool,
}

impl Log {
    fn committed(&self) -> usize {
        self.ops.lock().unwrap().iter().filter(|(_, o, _)| matches!(o, Outcome::Committed)).count()
    }
}

fn app_user(db: &MariaDb) {
    db.create_user("app", "%", "app-pw", "SELECT, INSERT, UPDATE, DELETE ON bank.*").expect("app user");
}

/// Writes ids 1, 2, 3... : odd ones as an autocommit INSERT, even ones as a transaction (INSERT + counter).
async fn workload(client: Client, log: Arc<Log>) {
    let mut id = 0u64;
    while !log.stop.load(Ordering::Relaxed) {
        id += 1;
        let result = if id % 2 == 1 {
            client.execute("INSERT INTO bank.t (id, v) VALUES (?, ?)", (id, id * 10)).await.map(|_| ())
        } else {
            client
                .run_transaction(async move |tx| {
                    tx.exec_drop("INSERT INTO bank.t (id, v) VALUES (?, ?)", (id, id * 10)).await?;
                    tx.exec_drop("UPDATE bank.counter SET n = n + 1 WHERE k = 1", ()).await?;
                    Ok(())
                })
                .await
        };
        let outcome = match result {
            Ok(()) => Outcome::Committed,
            Err(Error::OutcomeUnknown { during, .. }) => Outcome::Unknown(during),
            Err(e) => Outcome::Failed(e.to_string()),
        };
        log.ops.lock().unwrap().push((id, outcome, Instant::now()));
    }
}

fn wait_until(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn client_rides_out_a_failover_and_reports_the_in_flight_write_as_unknown() {
    eprintln!("phase: start A (master), B (semi-sync replica of A), C (read-only bystander)");
    let mut a = MariaDb::start(MariaDbOptions::master(1)).expect("start A");
    let b = MariaDb::start(MariaDbOptions::replica(2)).expect("start B");
    let c = MariaDb::start(MariaDbOptions::replica(3)).expect("start C");
    a.create_replication_user("repl", "repl-pw").expect("repl user");
    b.change_master(&ReplicationSource::loopback(a.port(), "repl", "repl-pw")).expect("change master");
    b.start_slave().expect("start slave");
    b.wait_slave_running(Duration::from_secs(30)).expect("B replicating");
    a.wait_semi_sync_clients(1, Duration::from_secs(30)).expect("B acks");
    a.exec_batch(&[
        "CREATE DATABASE bank",
        "CREATE TABLE bank.t (id BIGINT PRIMARY KEY, v BIGINT NOT NULL)",
        "CREATE TABLE bank.counter (k INT PRIMARY KEY, n BIGINT NOT NULL)",
        "INSERT INTO bank.counter VALUES (1, 0)",
    ])
    .expect("schema on A");
    // C is never written by replication; it only needs the database so that logging in succeeds.
    c.exec_batch(&["SET sql_log_bin=0", "CREATE DATABASE bank"]).expect("database on C");
    b.wait_for_gtid(&a.gtid_binlog_pos().expect("A pos"), Duration::from_secs(30)).expect("schema on B");
    for db in [&a, &b, &c] {
        app_user(db);
    }

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // C first, then B: the client has to skip read-only servers to find A.
    let endpoints: Vec<String> = [&c, &b, &a].iter().map(|s| format!("127.0.0.1:{}", s.port())).collect();
    let (a_ep, b_ep) = (endpoints[2].clone(), endpoints[1].clone());
    let client = Client::builder()
        .endpoints(endpoints)
        .user("app")
        .password("app-pw")
        .database("bank")
        .failover_deadline(Duration::from_secs(30))
        .build()
        .expect("client");
    let log = Arc::new(Log { ops: Mutex::new(Vec::new()), stop: AtomicBool::new(false) });
    let worker = rt.spawn(workload(client.clone(), log.clone()));

    eprintln!("phase: workload on A");
    wait_until("50 commits on A", Duration::from_secs(60), || log.committed() >= 50);
    assert_eq!(client.active_endpoint().as_deref(), Some(a_ep.as_str()), "client found the writable server");

    eprintln!("phase: stop B's I/O thread so the next commit on A waits for its ACK (in flight)");
    b.exec("STOP SLAVE IO_THREAD").expect("stop io thread");
    wait_until("a commit waiting for its semi-sync ACK on A", Duration::from_secs(30), || {
        a.query_value::<i64>(
            "SELECT COUNT(*) FROM information_schema.processlist WHERE user = 'app' AND state LIKE '%semi-sync%'",
        )
        .map(|n| n > 0)
        .unwrap_or(false)
    });
    let before_kill = log.ops.lock().unwrap().len();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(log.ops.lock().unwrap().len(), before_kill, "the workload is stuck on the in-flight write");

    eprintln!("phase: kill -9 A, promote B");
    let killed_at = Instant::now();
    a.kill9().expect("kill A");
    wait_until("the in-flight write to be reported", Duration::from_secs(30), || {
        log.ops.lock().unwrap().len() > before_kill
    });
    let status = b.slave_status().expect("slave status").expect("B is a replica");
    let received = status.get("Gtid_IO_Pos").cloned().unwrap_or_default();
    b.wait_for_gtid(&received, Duration::from_secs(30)).expect("B applied all it received");
    b.exec_batch(&["STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = 0"]).expect("promote B");
    let promoted_at = Instant::now();
    eprintln!("B promoted {} ms after the kill", (promoted_at - killed_at).as_millis());

    eprintln!("phase: workload on B");
    let committed_before = log.committed();
    wait_until("50 commits on B", Duration::from_secs(60), || log.committed() >= committed_before + 50);
    log.stop.store(true, Ordering::Relaxed);
    rt.block_on(worker).expect("workload task");

    let ops = std::mem::take(&mut *log.ops.lock().unwrap());
    let failed: Vec<String> = ops
        .iter()
        .filter_map(|(id, o, _)| match o {
            Outcome::Failed(e) => Some(format!("write {id}: {e}")),
            _ => None,
        })
        .collect();
    assert!(failed.is_empty(), "no write may fail outright during a failover: {failed:?}");
    let unknown: Vec<_> = ops.iter().filter(|(_, o, _)| matches!(o, Outcome::Unknown(_))).collect();
    assert_eq!(unknown.len(), 1, "exactly the in-flight write is unknown: {unknown:?}");
    let (unknown_id, unknown_outcome, _) = unknown[0];
    let Outcome::Unknown(stage) = unknown_outcome else { unreachable!() };
    let expected_stage = if unknown_id % 2 == 1 { Stage::Statement } else { Stage::Commit };
    assert_eq!(*stage, expected_stage, "an autocommit write is unknown at its statement, a transaction at COMMIT");
    assert_eq!(ops[before_kill].0, *unknown_id, "the write reported right after the kill is the in-flight one");
    eprintln!("in-flight write id {unknown_id}: {unknown_outcome:?}");
    let first_on_b =
        ops.iter().find(|(id, o, _)| id > unknown_id && matches!(o, Outcome::Committed)).expect("a commit on B");
    eprintln!(
        "first commit on B {} ms after the kill ({} ms after the promotion); client saw {} failover(s)",
        (first_on_b.2 - killed_at).as_millis(),
        first_on_b.2.saturating_duration_since(promoted_at).as_millis(),
        client.failovers()
    );
    assert_eq!(client.active_endpoint().as_deref(), Some(b_ep.as_str()), "client moved to B");
    assert!(client.failovers() >= 1);

    eprintln!("phase: check B holds every committed write and not the unknown one (it was never retried)");
    let rows: Vec<(u64, u64)> = b.query("SELECT id, v FROM bank.t ORDER BY id").expect("rows on B");
    let on_b: std::collections::BTreeMap<u64, u64> = rows.into_iter().collect();
    let mut committed = 0;
    for (id, outcome, _) in &ops {
        if matches!(outcome, Outcome::Committed) {
            committed += 1;
            assert_eq!(on_b.get(id), Some(&(id * 10)), "committed write {id} missing on B");
        }
    }
    assert!(!on_b.contains_key(unknown_id), "write {unknown_id} was retried after OutcomeUnknown");
    assert_eq!(on_b.len(), committed, "B holds only writes reported as committed");
    let transactions = ops.iter().filter(|(id, o, _)| id % 2 == 0 && matches!(o, Outcome::Committed)).count();
    let counter: u64 = b.query_value("SELECT n FROM bank.counter WHERE k = 1").expect("counter");
    assert_eq!(counter as usize, transactions, "each committed transaction bumped the counter once");
    eprintln!("ok: {committed} committed writes all on B, 1 unknown (not retried), {transactions} transactions");
}
