//! The whole relay against real MariaDB: a semi-sync master (AFTER_SYNC, infinite timeout, wait_no_slave) →
//! our `ReplicationClient`, which ACKs each assembled transaction only after appending it to a
//! `MemoryEventSource` (paxsql ACKs only once the global log holds it, docs/ARCHITECTURE.md §3) → our `ReplicationServer`
//! → a real replica with 4 optimistic parallel applier threads (docs/ARCHITECTURE.md §4).
//!
//! Checks: every commit of a concurrent mixed workload (DDL, multi-statement transactions, 17 tables, a 17 MiB
//! row) returns, released by our ACKs; equal `CHECKSUM TABLE` everywhere and `gtid_slave_pos` =
//! `gtid_binlog_pos`; the replica's relay log carries the master's GTID flags2 and commit_id; the replica
//! survives a clean restart and kill -9 during the workload without gap or duplicate; a commit stays blocked
//! and invisible while the relay holds its transaction back, and returns once it is relayed and ACKed.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use common::{
    assert_same_data, checksums, init_tracing, read_transactions, status, wait_caught_up, Served, REPL_PASSWORD,
    REPL_USER,
};
use paxsql_binlog::{split_event, BinlogEvent, Checksum, EventData, Gtid};
use paxsql_mariadb_testkit::mysql_async::prelude::Queryable;
use paxsql_mariadb_testkit::mysql_async::{Conn, Opts};
use paxsql_mariadb_testkit::{MariaDb, MariaDbOptions, ReplicationSource};
use paxsql_repl_client::{ConnectOptions, ReplicationClient, TransactionAssembler};
use paxsql_repl_server::MemoryEventSource;
use tokio::runtime::Runtime;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Shared tables every session writes to in multi-statement transactions (plus one private table per session
/// for its DDL, and `w.big`).
const TABLES: u64 = 10;
const SESSIONS: u64 = 6;
/// Bound on one statement of the workload, commits included (they wait for our ACK).
const STATEMENT_BOUND: Duration = Duration::from_secs(60);
/// Bound on anything that should happen promptly.
const PROMPT: Duration = Duration::from_secs(20);
/// Bound on a replica catching up.
const CATCH_UP: Duration = Duration::from_secs(180);
/// The row larger than one 16 MiB protocol packet.
const BIG_ROW_BYTES: usize = 17 * 1024 * 1024;
/// The id phase 3 inserts while the relay holds its transaction back.
const HELD_ID: u64 = 999_999_999;

static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// Opens a phase: one line saying what it checks, with the time since the test started.
fn phase(what: &str) {
    let t0 = START.get_or_init(Instant::now);
    eprintln!("[{:>7.2}s] === {what}", t0.elapsed().as_secs_f64());
}

/// Room for the 17 MiB row: packet size, and InnoDB refuses BLOBs larger than 10% of the redo log.
fn big_rows(opts: MariaDbOptions) -> MariaDbOptions {
    opts.with_config_line("max_allowed_packet=64M")
        .with_config_line("innodb_log_file_size=256M")
        .with_config_line("innodb_buffer_pool_size=64M")
}

fn seq_of(pos: &str) -> u64 {
    pos.parse::<Gtid>().map(|g| g.seq_no).unwrap_or(0)
}

/// What the relay did with one transaction.
#[derive(Debug, Clone)]
struct Relayed {
    gtid: Gtid,
    flags2: u8,
    commit_id: Option<u64>,
    ack_requested: bool,
    largest_event: usize,
}

/// Our client as the master's semi-sync replica, feeding `source`. `hold` = true stands for a Paxos round that
/// has not chosen the value yet: the relay keeps the received transaction, neither appends nor ACKs it.
struct Relay {
    hold: watch::Sender<bool>,
    /// The last transaction the relay assembled (appended or held).
    received: watch::Receiver<Option<Gtid>>,
    relayed: Arc<Mutex<Vec<Relayed>>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl Relay {
    fn start(rt: &Runtime, master: &MariaDb, source: Arc<MemoryEventSource>) -> anyhow::Result<Relay> {
        let opts = ConnectOptions::tcp("127.0.0.1", master.port(), REPL_USER, REPL_PASSWORD, 1001);
        let client = rt.block_on(ReplicationClient::connect(opts))?;
        let (hold, hold_rx) = watch::channel(false);
        let (received_tx, received) = watch::channel(None);
        let relayed = Arc::new(Mutex::new(Vec::new()));
        let task = rt.spawn(relay(client, source, hold_rx, received_tx, Arc::clone(&relayed)));
        Ok(Relay { hold, received, relayed, task: Some(task) })
    }

    /// Fails with the relay's own error if it stopped.
    fn check(&mut self, rt: &Runtime) -> anyhow::Result<()> {
        if self.task.as_ref().is_some_and(JoinHandle::is_finished) {
            let task = self.task.take().expect("checked above");
            let result = rt.block_on(task).context("relay task panicked")?;
            bail!("the relay stopped: {result:?}");
        }
        ensure!(self.task.is_some(), "the relay stopped earlier");
        Ok(())
    }

    fn relayed(&self) -> Vec<Relayed> {
        self.relayed.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The relay loop: assemble, (wait while held), append to the source, then ACK.
async fn relay(
    mut client: ReplicationClient,
    source: Arc<MemoryEventSource>,
    mut hold: watch::Receiver<bool>,
    received: watch::Sender<Option<Gtid>>,
    relayed: Arc<Mutex<Vec<Relayed>>>,
) -> anyhow::Result<()> {
    let mut assembler = TransactionAssembler::new();
    loop {
        let event = client.next_event().await?;
        let Some(trx) = assembler.push(&event)? else { continue };
        received.send_replace(Some(trx.gtid));
        hold.wait_for(|held| !*held).await?;
        let mut events = Vec::with_capacity(trx.event_count);
        let mut rest = &trx.events[..];
        while !rest.is_empty() {
            let (event, tail) = split_event(rest)?;
            events.push(event.to_vec());
            rest = tail;
        }
        let Ok(EventData::Gtid(g)) = BinlogEvent::decode(&events[0], Checksum::Crc32).map(|e| e.data) else {
            bail!("{}: first event is not a GTID event", trx.gtid);
        };
        let largest_event = events.iter().map(Vec::len).max().unwrap_or(0);
        let appended = source.append_events(events)?;
        ensure!(appended == trx.gtid, "appended {appended}, assembled {}", trx.gtid);
        relayed.lock().unwrap_or_else(|p| p.into_inner()).push(Relayed {
            gtid: trx.gtid,
            flags2: g.flags2,
            commit_id: g.commit_id,
            ack_requested: trx.ack_requested,
            largest_event,
        });
        // Only now, with the transaction in the log the replicas are served from, may the master commit.
        if trx.ack_requested {
            client.ack(&trx.end_file, trx.end_pos)?;
        }
    }
}

/// Runs one statement, bounded: a commit that never returns fails the test instead of hanging it.
async fn run(conn: &mut Conn, sql: String) -> anyhow::Result<()> {
    let label: String = sql.chars().take(80).collect();
    tokio::time::timeout(STATEMENT_BOUND, conn.query_drop(sql))
        .await
        .with_context(|| format!("not returned within {STATEMENT_BOUND:?}: {label}"))?
        .with_context(|| label)?;
    Ok(())
}

async fn create_schema(master: &MariaDb) -> anyhow::Result<()> {
    let mut c = master.conn().await?;
    run(&mut c, "CREATE DATABASE w".into()).await?;
    for t in 0..TABLES {
        run(
            &mut c,
            format!(
                "CREATE TABLE w.t{t} (id BIGINT PRIMARY KEY, v VARCHAR(300), n INT NOT NULL DEFAULT 0) ENGINE=InnoDB"
            ),
        )
        .await?;
    }
    for s in 0..SESSIONS {
        run(&mut c, format!("CREATE TABLE w.s{s} (id BIGINT PRIMARY KEY) ENGINE=InnoDB")).await?;
    }
    run(&mut c, "CREATE TABLE w.big (id INT PRIMARY KEY, b LONGBLOB) ENGINE=InnoDB".into()).await?;
    let _ = c.disconnect().await;
    Ok(())
}

/// One client session: multi-statement transactions over three shared tables, and (with `ddl`) every 10th time
/// a DDL on its private table (DDL on shared tables between concurrent multi-table transactions can deadlock on
/// metadata locks, which MariaDB resolves by failing one of them). It only updates and deletes its own rows by
/// primary key, so sessions never deadlock in InnoDB. Runs at least `min_trx` transactions, then until `stop`.
/// Returns how many transactions it committed.
async fn session(
    opts: Opts,
    round: u64,
    s: u64,
    (min_trx, ddl): (u64, bool),
    stop: Arc<AtomicBool>,
) -> anyhow::Result<u64> {
    let mut c = Conn::new(opts).await?;
    let mut i = 0u64;
    let mut prev: Option<(u64, u64)> = None;
    while i < min_trx || !stop.load(Ordering::Relaxed) {
        let id = (round * 100 + s) * 1_000_000 + i * 2;
        let (a, b) = ((s + i) % TABLES, (s + i + 3) % TABLES);
        run(&mut c, "BEGIN".into()).await?;
        run(&mut c, format!("INSERT INTO w.t{a} (id, v, n) VALUES ({id}, 'r{round} s{s} i{i}', {i})")).await?;
        run(&mut c, format!("INSERT INTO w.t{b} (id, v) VALUES ({}, REPEAT('y', {}))", id + 1, (i * 37) % 300)).await?;
        if let Some((pa, pid)) = prev {
            run(&mut c, format!("UPDATE w.t{pa} SET n = n + 1, v = CONCAT(v, '+') WHERE id = {pid}")).await?;
            let pb = (pa + 3) % TABLES;
            run(&mut c, format!("DELETE FROM w.t{pb} WHERE id = {}", pid + 1)).await?;
        }
        run(&mut c, "COMMIT".into()).await?;
        if ddl && i % 10 == 9 {
            run(&mut c, format!("ALTER TABLE w.s{s} ADD COLUMN c{round}_{i} INT NOT NULL DEFAULT {i}")).await?;
            run(&mut c, format!("INSERT INTO w.s{s} (id) VALUES ({id})")).await?;
        }
        prev = Some((a, id));
        i += 1;
    }
    let _ = c.disconnect().await;
    Ok(i)
}

/// `SESSIONS` concurrent sessions of round `round`; returns the transactions committed by all.
async fn sessions(master_opts: Opts, round: u64, shape: (u64, bool), stop: Arc<AtomicBool>) -> anyhow::Result<u64> {
    let mut tasks = Vec::new();
    for s in 0..SESSIONS {
        tasks.push(tokio::spawn(session(master_opts.clone(), round, s, shape, Arc::clone(&stop))));
    }
    let mut total = 0;
    for (s, task) in tasks.into_iter().enumerate() {
        total += task.await?.with_context(|| format!("session {s} of round {round}"))?;
    }
    Ok(total)
}

/// A replica-profile server with the brief's replication settings, relay logs kept for inspection.
fn start_replica(server_id: u32, served_port: u16) -> anyhow::Result<MariaDb> {
    let opts = big_rows(MariaDbOptions::replica(server_id))
        .with_config_line("slave_parallel_threads=4")
        .with_config_line("slave_parallel_mode=optimistic")
        .with_config_line("slave_max_allowed_packet=1G")
        .with_config_line("relay_log_purge=OFF");
    let replica = MariaDb::start(opts)?;
    replica.change_master(&ReplicationSource::loopback(served_port, REPL_USER, REPL_PASSWORD))?;
    replica.start_slave()?;
    replica.wait_slave_running(PROMPT)?;
    Ok(replica)
}

/// Every transaction the master wrote is in the relay's source, the replica applied exactly those, and the
/// data is equal; the replica runs without error.
fn assert_relayed_everything(
    master: &MariaDb,
    served: &Served,
    replica: &MariaDb,
    relay: &Relay,
) -> anyhow::Result<()> {
    let want = master.gtid_binlog_pos()?;
    // No wait here: each commit returned only after our ACK, which came after the append.
    assert_eq!(served.source.gtid_pos().to_string(), want, "the relay's log ends where the master's binlog does");
    let relayed = relay.relayed();
    for (i, r) in relayed.iter().enumerate() {
        assert_eq!(r.gtid, Gtid::new(0, 1, i as u64 + 1), "relayed transaction #{i}: a gap or a duplicate");
        assert!(r.ack_requested, "{}: the master did not wait for our ACK (fell back to async?)", r.gtid);
    }
    assert_eq!(relayed.len() as u64, seq_of(&want));
    wait_caught_up(replica, &want, CATCH_UP)?;
    assert_eq!(replica.gtid_slave_pos()?, want, "replica gtid_slave_pos = master gtid_binlog_pos");
    assert_same_data(master, replica)?;
    for (field, value) in
        [("Slave_IO_Running", "Yes"), ("Slave_SQL_Running", "Yes"), ("Last_SQL_Errno", "0"), ("Last_IO_Errno", "0")]
    {
        assert_eq!(status(replica, field), value, "{field}: {}", status(replica, "Last_SQL_Error"));
    }
    eprintln!(
        "    {} transactions relayed, replica at {want}, its IO thread at {}",
        relayed.len(),
        status(replica, "Gtid_IO_Pos")
    );
    Ok(())
}

/// (flags2, commit_id) by GTID, from raw transactions read off binlog or relay log files.
fn gtid_flags(trxs: &[paxsql_repl_server::Transaction]) -> anyhow::Result<BTreeMap<Gtid, (u8, Option<u64>)>> {
    let mut out = BTreeMap::new();
    for t in trxs {
        match BinlogEvent::decode(&t.events[0], Checksum::Crc32)?.data {
            EventData::Gtid(g) => out.insert(t.gtid, (g.flags2, g.commit_id)),
            other => bail!("{}: first event {other:?}", t.gtid),
        };
    }
    Ok(out)
}

/// The replica's own binlog events from GTID 0-1-`seq` on (a few), for a failure message.
fn binlog_after(replica: &MariaDb, seq: u64) -> anyhow::Result<String> {
    let logs: Vec<(String, u64)> = replica.query("SHOW BINARY LOGS")?;
    let mut out = Vec::new();
    for (file, _) in logs.iter().rev().take(2).rev() {
        let events: Vec<(String, u64, String, u32, u64, String)> =
            replica.query(&format!("SHOW BINLOG EVENTS IN '{file}'"))?;
        let gtid = format!("0-1-{seq}");
        if let Some(at) = events.iter().position(|e| e.2 == "Gtid" && e.5.split_whitespace().any(|w| w == gtid)) {
            out.extend(events[at..].iter().take(6).map(|e| format!("    {file}:{} {} {}", e.1, e.2, e.5)));
        }
    }
    Ok(out.join("\n"))
}

/// Waits (bounded) until the replica applied a transaction after seq_no `after`.
fn wait_progress(replica: &MariaDb, after: u64) -> anyhow::Result<u64> {
    let deadline = Instant::now() + CATCH_UP;
    loop {
        let seq = seq_of(&replica.gtid_slave_pos()?);
        if seq > after {
            return Ok(seq);
        }
        if Instant::now() >= deadline {
            let fields = ["Slave_IO_Running", "Slave_SQL_Running", "Last_IO_Error", "Last_SQL_Error", "Gtid_IO_Pos"];
            let slave = replica.slave_status().ok().flatten().unwrap_or_default();
            let st: Vec<String> =
                fields.iter().map(|f| format!("{f}={}", slave.get(*f).map_or("", String::as_str))).collect();
            bail!(
                "replica still at seq_no {seq} after {CATCH_UP:?}, want > {after}; {}\nreplica binlog from \
                 GTID 0-1-{}:\n{}\nreplica error log:\n{}",
                st.join(", "),
                seq + 1,
                binlog_after(replica, seq + 1).unwrap_or_else(|e| format!("(cannot read: {e})")),
                replica.error_log_tail(30)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

async fn count_visible(master: &MariaDb, isolation: &str) -> anyhow::Result<i64> {
    let mut c = master.conn().await?;
    c.query_drop(format!("SET SESSION TRANSACTION ISOLATION LEVEL {isolation}")).await?;
    let n: Option<i64> = c.query_first(format!("SELECT COUNT(*) FROM w.t0 WHERE id = {HELD_ID}")).await?;
    let _ = c.disconnect().await;
    Ok(n.unwrap_or(-1))
}

#[test]
fn master_relay_server_replica_end_to_end() -> anyhow::Result<()> {
    init_tracing();
    let t0 = Instant::now();
    START.get_or_init(|| t0);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;

    phase("setup: semi-sync master, our relay (client → MemoryEventSource → server), replica of our server");
    let master = MariaDb::start(big_rows(MariaDbOptions::master(1)))?;
    master.create_replication_user(REPL_USER, REPL_PASSWORD)?;
    let served = Served::start(Served::config(100))?;
    let mut relay = Relay::start(&rt, &master, Arc::clone(&served.source))?;
    master.wait_semi_sync_clients(1, PROMPT)?;
    let mut replica = start_replica(3, served.port)?;
    let semi: Vec<(String, String)> = master.query("SHOW GLOBAL VARIABLES LIKE 'rpl_semi_sync_master_%'")?;
    eprintln!("    master semi-sync: {semi:?}");

    phase("1. concurrent mixed workload (DDL, multi-statement trx, 17 tables, 17 MiB row): every commit returns");
    let t1 = Instant::now();
    let stop = Arc::new(AtomicBool::new(true));
    let committed = rt.block_on(async {
        create_schema(&master).await?;
        let big = {
            let opts = master.opts();
            tokio::spawn(async move {
                let mut c = Conn::new(opts).await?;
                run(&mut c, format!("INSERT INTO w.big VALUES (1, REPEAT('x', {BIG_ROW_BYTES}))")).await?;
                run(&mut c, "BEGIN".into()).await?;
                run(&mut c, "INSERT INTO w.big VALUES (2, 'small')".into()).await?;
                run(&mut c, "UPDATE w.big SET b = REPEAT('z', 1000) WHERE id = 2".into()).await?;
                run(&mut c, "COMMIT".into()).await?;
                let _ = c.disconnect().await;
                anyhow::Ok(())
            })
        };
        let n = sessions(master.opts(), 1, (40, true), Arc::clone(&stop)).await?;
        big.await??;
        anyhow::Ok(n)
    });
    relay.check(&rt)?;
    let committed = committed?;
    eprintln!("    {committed} session transactions committed in {:.1}s", t1.elapsed().as_secs_f64());
    assert_eq!(committed, SESSIONS * 40);

    phase("1. checks: checksums, gtid_slave_pos = gtid_binlog_pos, a >16 MiB event, commit_ids relayed intact");
    assert_relayed_everything(&master, &served, &replica, &relay)?;
    let tables = checksums(&master)?.len();
    assert!(tables >= 8, "only {tables} tables");
    let largest = relay.relayed().iter().map(|r| r.largest_event).max().unwrap_or(0);
    assert!(largest > 16 << 20, "largest relayed event {largest} bytes, want > 16 MiB");
    let master_flags = gtid_flags(&read_transactions(&master, "mariadb-bin")?)?;
    let relay_flags: BTreeMap<Gtid, (u8, Option<u64>)> =
        relay.relayed().iter().map(|r| (r.gtid, (r.flags2, r.commit_id))).collect();
    assert_eq!(relay_flags, master_flags, "our relay saw the master's GTID flags2/commit_id");
    let replica_flags = gtid_flags(&read_transactions(&replica, "mariadb-bin-relay")?)?;
    assert_eq!(replica_flags, master_flags, "the replica's relay log holds the master's GTID flags2/commit_id");
    let with_commit_id = master_flags.values().filter(|(_, c)| c.is_some()).count();
    eprintln!(
        "    {tables} tables, largest event {largest} bytes, {with_commit_id}/{} transactions with a commit_id",
        master_flags.len()
    );
    assert!(with_commit_id > 0, "no group commit on the master: the commit_id check would be void");
    let workers: i64 = replica.query_value(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'system user' \
         AND STATE LIKE '%Waiting for work from SQL thread%'",
    )?;
    let parallel: (i64, String) = replica
        .query_first("SELECT @@slave_parallel_threads, @@slave_parallel_mode")?
        .context("no row for slave_parallel_*")?;
    // Informational: optimistic apply runs transactions concurrently and retries on conflicts; 0 retries does not
    // mean no parallelism, so it is printed, not asserted.
    let retried: Option<(String, String)> =
        replica.query_first("SHOW GLOBAL STATUS LIKE 'Slave_retried_transactions'")?;
    eprintln!("    replica: {parallel:?}, {workers} idle parallel worker threads, {retried:?}");
    assert_eq!(parallel, (4, "optimistic".to_string()));
    assert_eq!(workers, 4, "the replica's 4 parallel applier threads");

    phase("2. replica restarts (clean, then kill -9) while the workload continues: no gap, no duplicate");
    let t2 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let workload = rt.spawn(sessions(master.opts(), 2, (20, true), Arc::clone(&stop)));
    let at = wait_progress(&replica, seq_of(&replica.gtid_slave_pos()?))?;
    replica.stop()?;
    eprintln!("    clean stop at seq_no {at}");
    std::thread::sleep(Duration::from_millis(500));
    replica.restart()?;
    let at = seq_of(&master.gtid_binlog_pos()?);
    let resumed = wait_progress(&replica, at)?;
    eprintln!("    restarted; replica at seq_no {resumed}, past the master's {at} at restart");
    stop.store(true, Ordering::Relaxed);
    let mut committed = rt
        .block_on(async { tokio::time::timeout(CATCH_UP, workload).await })
        .context("phase 2 workload did not end")???;
    // The kill -9 comes during DML only. MariaDB 10.11 does not make a replica's DDL atomic with its
    // gtid_slave_pos (seen here in CI and in 1 of 17 local runs): after a kill -9 in the middle of an ALTER,
    // either the binlog holds the master's GTID while gtid_slave_pos is one behind, or DDL recovery finishes the
    // ALTER and logs it under the replica's own server_id (0-3-N); strict mode then stops the SQL thread with
    // error 1950. A paxsql node handles both (alignment sets gtid_slave_pos from its binlog, or rebuilds the
    // diverged server): tests/t30_failover.rs kills a replica's mariadbd during DDL. A bare replica cannot.
    wait_caught_up(&replica, &master.gtid_binlog_pos()?, CATCH_UP)?;
    let stop = Arc::new(AtomicBool::new(false));
    let workload = rt.spawn(sessions(master.opts(), 3, (20, false), Arc::clone(&stop)));
    let at = wait_progress(&replica, seq_of(&replica.gtid_slave_pos()?) + 5)?;
    replica.kill9()?;
    eprintln!("    kill -9 at seq_no {at} (master at {})", master.gtid_binlog_pos()?);
    std::thread::sleep(Duration::from_millis(500));
    replica.restart()?;
    let at = seq_of(&master.gtid_binlog_pos()?);
    let resumed = wait_progress(&replica, at)?;
    eprintln!("    restarted; replica at seq_no {resumed}, past the master's {at} at restart");
    stop.store(true, Ordering::Relaxed);
    let more = rt.block_on(async { tokio::time::timeout(CATCH_UP, workload).await });
    relay.check(&rt)?;
    committed += more.context("phase 2 workload after kill -9 did not end")???;
    eprintln!("    {committed} session transactions committed in {:.1}s", t2.elapsed().as_secs_f64());
    assert_relayed_everything(&master, &served, &replica, &relay)?;

    phase("3. a commit stays blocked and invisible while the relay holds its transaction, returns once ACKed");
    let before = seq_of(&master.gtid_binlog_pos()?);
    relay.hold.send_replace(true);
    let mut insert = {
        let opts = master.opts();
        rt.spawn(async move {
            let mut c = Conn::new(opts).await?;
            c.query_drop(format!("INSERT INTO w.t0 (id, v) VALUES ({HELD_ID}, 'held')")).await?;
            anyhow::Ok(())
        })
    };
    let mut received = relay.received.clone();
    rt.block_on(async {
        tokio::time::timeout(PROMPT, received.wait_for(|g| g.is_some_and(|g| g.seq_no > before))).await
    })
    .context("the relay did not receive the INSERT")??;
    std::thread::sleep(Duration::from_secs(2));
    assert!(!insert.is_finished(), "the INSERT returned while the relay held back its ACK");
    let seen = rt.block_on(async {
        anyhow::Ok((count_visible(&master, "REPEATABLE READ").await?, count_visible(&master, "READ COMMITTED").await?))
    })?;
    assert_eq!(seen, (0, 0), "another session saw the un-ACKed row (REPEATABLE READ, READ COMMITTED)");
    assert_eq!(seq_of(&served.source.gtid_pos().to_string()), before, "the held transaction reached the log");
    let on_replica: i64 = replica.query_value(&format!("SELECT COUNT(*) FROM w.t0 WHERE id = {HELD_ID}"))?;
    assert_eq!(on_replica, 0, "the replica got the held transaction");
    let held_at = Instant::now();
    relay.hold.send_replace(false);
    rt.block_on(async { tokio::time::timeout(PROMPT, &mut insert).await })
        .context("the INSERT did not return after the ACK")???;
    eprintln!("    INSERT returned {:.0} ms after the relay let go", held_at.elapsed().as_secs_f64() * 1000.0);
    let seen = rt.block_on(async { count_visible(&master, "READ COMMITTED").await })?;
    assert_eq!(seen, 1, "the ACKed row is visible on the master");
    relay.check(&rt)?;
    assert_relayed_everything(&master, &served, &replica, &relay)?;
    let on_replica: i64 = replica.query_value(&format!("SELECT COUNT(*) FROM w.t0 WHERE id = {HELD_ID}"))?;
    assert_eq!(on_replica, 1);

    phase("end: the master never fell back to async (no commit without our ACK)");
    let semi: BTreeMap<String, String> =
        master.query::<(String, String)>("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_%'")?.into_iter().collect();
    eprintln!("    {semi:?}");
    assert_eq!(semi.get("Rpl_semi_sync_master_status").map(String::as_str), Some("ON"));
    assert_eq!(semi.get("Rpl_semi_sync_master_no_tx").map(String::as_str), Some("0"));
    eprintln!("    total {:.1}s", t0.elapsed().as_secs_f64());
    drop(relay);
    drop(replica);
    drop(served);
    Ok(())
}
