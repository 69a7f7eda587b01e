//! Every way an application session can interrupt a commit that waits for its semi-sync ACK, tried through the
//! proxy against a real MariaDB 10.11 master whose commits wait forever (semi-sync on, no replica, no timeout).
//!
//! MariaDB's own behaviour, measured here as the control of each case: a *hard* `KILL QUERY` sent straight to
//! mariadbd ends the wait and commits — the row becomes visible to every reader and the writer gets OK — although
//! no replica holds it. Through the proxy, no path may do that: `KILL`, `KILL QUERY`, `KILL HARD …`,
//! `COM_PROCESS_KILL` (`mariadb-admin kill`) and a protocol-prepared `KILL ?` are sent on as `KILL SOFT`, which the
//! wait ignores; KILL inside other statements and dynamic SQL the proxy cannot read are refused with an error.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use common::{init_tracing, opts_at, phase, raw_command, Ports, RunningProxy};
use paxsql_mariadb_testkit::mysql_async::prelude::Queryable as _;
use paxsql_mariadb_testkit::mysql_async::{self, Conn};
use paxsql_mariadb_testkit::{MariaDb, MariaDbOptions};
use paxsql_proxy::{Backend, ProxyConfig, Route};

static PORTS: Ports = Ports::new(31200);

const APP_USER: &str = "app";
const APP_PASSWORD: &str = "app-pw-kill";
/// A throwaway account of this test server only, without a password, so that the raw-protocol client below can log
/// in without computing a scramble. It has no privilege beyond its own threads.
const RAW_USER: &str = "rawkill";
const WAITING: &str = "Waiting for semi-sync ACK from slave";

struct Setup {
    db: MariaDb,
    root: Conn,
    proxy: RunningProxy,
    rw: SocketAddr,
}

async fn setup() -> anyhow::Result<Setup> {
    let db = tokio::task::spawn_blocking(|| MariaDb::start(MariaDbOptions::master(9))).await??;
    let backend: SocketAddr = ([127, 0, 0, 1], db.port()).into();
    let mut root = db.conn().await?;
    root.query_drop(format!(
        "SET sql_log_bin=0; CREATE DATABASE test; CREATE TABLE test.k (id INT PRIMARY KEY); \
         CREATE USER '{APP_USER}'@'%' IDENTIFIED BY '{APP_PASSWORD}'; GRANT ALL ON test.* TO '{APP_USER}'@'%'; \
         CREATE USER '{RAW_USER}'@'%'; GRANT INSERT ON test.* TO '{RAW_USER}'@'%'"
    ))
    .await?;
    let cfg =
        ProxyConfig { rw_listen: Some(PORTS.next()), local_backend: Backend::Tcp(backend), ..ProxyConfig::default() };
    let proxy =
        RunningProxy::start(cfg, Route::Master { node_id: 9, master_version: 1, backend: Backend::Tcp(backend) })
            .await?;
    let rw = proxy.rw.context("rw")?;
    Ok(Setup { db, root, proxy, rw })
}

/// A commit of `INSERT INTO test.k VALUES (id)` through the proxy, parked in the semi-sync wait.
struct Waiter {
    id: i64,
    thread: u64,
    task: tokio::task::JoinHandle<Result<(), mysql_async::Error>>,
}

async fn park_commit(s: &mut Setup, id: i64, user: &str, password: &str) -> anyhow::Result<Waiter> {
    let mut conn = Conn::new(opts_at(s.rw, user, password)).await?;
    let thread: u64 = conn.query_first("SELECT CONNECTION_ID()").await?.context("no row")?;
    let task = tokio::spawn(async move { conn.query_drop(format!("INSERT INTO test.k VALUES ({id})")).await });
    waits_for_ack(&mut s.root, thread).await?;
    Ok(Waiter { id, thread, task })
}

async fn visible(root: &mut Conn, id: i64) -> anyhow::Result<bool> {
    let n: u64 = root.query_first(format!("SELECT COUNT(*) FROM test.k WHERE id = {id}")).await?.context("no row")?;
    Ok(n == 1)
}

/// After `what` was done to `w`: for a second, no reader sees the row and the writer has no OK. Then releases the
/// wait the only way left (semi-sync off and on: every waiter commits), and checks the row appears — so the
/// commit really was in the wait and this check could have failed.
async fn still_waiting(s: &mut Setup, w: Waiter, what: &str) -> anyhow::Result<()> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    ensure!(!visible(&mut s.root, w.id).await?, "{what}: a reader sees row {} that no replica holds", w.id);
    if w.task.is_finished() {
        let outcome = w.task.await?;
        ensure!(outcome.is_err(), "{what}: the writer got OK for a commit no replica holds");
        eprintln!("{what}: writer ended with {outcome:?} (outcome unknown to it), row invisible");
    } else {
        let state: Option<String> = s
            .root
            .query_first(format!("SELECT state FROM information_schema.processlist WHERE id = {}", w.thread))
            .await?;
        ensure!(state.as_deref() == Some(WAITING), "{what}: thread {} is in state {state:?}", w.thread);
        eprintln!("{what}: still waiting for its ACK, row invisible");
    }
    s.root.query_drop("SET GLOBAL rpl_semi_sync_master_enabled=OFF").await?;
    s.root.query_drop("SET GLOBAL rpl_semi_sync_master_enabled=ON").await?;
    let sql = format!("SELECT COUNT(*) FROM test.k WHERE id = {}", w.id);
    until_one(&mut s.root, &sql, "the released commit becomes visible").await
}

/// Polls `sql` (a count) every 50 ms until it is 1, for at most 10 s.
async fn until_one(root: &mut Conn, sql: &str, what: &str) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while root.query_first::<u64, _>(sql).await?.unwrap_or(0) != 1 {
        ensure!(std::time::Instant::now() < deadline, "{what}: not within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

async fn waits_for_ack(root: &mut Conn, thread: u64) -> anyhow::Result<()> {
    let sql =
        format!("SELECT COUNT(*) FROM information_schema.processlist WHERE id = {thread} AND state = '{WAITING}'");
    until_one(root, &sql, "the commit waits for its ACK").await
}

/// Logs in as [`RAW_USER`] (no password), then sends one `COM_PROCESS_KILL` for `thread` and returns the first
/// byte of the answer (0x00 OK, 0xFF ERR).
async fn com_process_kill(addr: SocketAddr, thread: u64) -> anyhow::Result<u8> {
    let mut kill = vec![0x0c];
    kill.extend_from_slice(&u32::try_from(thread)?.to_le_bytes());
    let answer = raw_command(addr, RAW_USER, &kill).await?;
    answer.first().copied().context("empty answer")
}

/// Runs `sql` through the proxy as the application account; the MariaDB error code it got, or 0 for success.
async fn outcome(rw: SocketAddr, sql: &str) -> anyhow::Result<u16> {
    let mut conn = Conn::new(opts_at(rw, APP_USER, APP_PASSWORD)).await?;
    let code = match conn.query_drop(sql).await {
        Ok(()) => 0,
        Err(mysql_async::Error::Server(e)) => {
            eprintln!("{sql}: {} {}", e.code, e.message);
            e.code
        }
        Err(e) => bail!("{sql}: {e}"),
    };
    drop(conn);
    Ok(code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_kill_through_the_proxy_ends_a_commit_waiting_for_its_ack() -> anyhow::Result<()> {
    init_tracing();
    let mut s = setup().await?;
    let rw = s.rw;
    let backend: SocketAddr = ([127, 0, 0, 1], s.db.port()).into();

    phase("control: a hard KILL QUERY straight to mariadbd ends the wait; the writer gets OK, readers see the row");
    let w = park_commit(&mut s, 1, APP_USER, APP_PASSWORD).await?;
    let mut direct = Conn::new(opts_at(backend, APP_USER, APP_PASSWORD)).await?;
    direct.query_drop(format!("KILL QUERY {}", w.thread)).await?;
    let writer = tokio::time::timeout(Duration::from_secs(10), w.task).await??;
    ensure!(writer.is_ok(), "MariaDB changed: the killed commit did not return OK: {writer:?}");
    ensure!(visible(&mut s.root, 1).await?, "MariaDB changed: a hard KILL QUERY did not release the commit");
    drop(direct);

    for (n, template) in
        [(2, "KILL QUERY {}"), (3, "KILL {}"), (4, "KILL HARD QUERY {}"), (5, "/* a comment */ kill connection {};")]
    {
        let w = park_commit(&mut s, n, APP_USER, APP_PASSWORD).await?;
        let sql = template.replace("{}", &w.thread.to_string());
        phase(&format!("through the proxy: {sql}"));
        ensure!(outcome(rw, &sql).await? == 0, "{sql} was not accepted");
        still_waiting(&mut s, w, &sql).await?;
    }

    phase("through the proxy: COM_PROCESS_KILL (the protocol command)");
    let w = park_commit(&mut s, 6, RAW_USER, "").await?;
    let answer = com_process_kill(rw, w.thread).await?;
    ensure!(answer == 0, "COM_PROCESS_KILL answered {answer:#x}");
    still_waiting(&mut s, w, "COM_PROCESS_KILL").await?;

    phase("through the proxy: mariadb-admin kill");
    let w = park_commit(&mut s, 7, APP_USER, APP_PASSWORD).await?;
    let thread = w.thread.to_string();
    let admin = tokio::task::spawn_blocking(move || {
        std::process::Command::new("timeout")
            .args(["20", "mariadb-admin", "--no-defaults", "--protocol=TCP", "-h127.0.0.1"])
            .arg(format!("-P{}", rw.port()))
            .arg(format!("-u{APP_USER}"))
            .env("MYSQL_PWD", APP_PASSWORD)
            .args(["kill", &thread])
            .output()
    })
    .await??;
    ensure!(admin.status.success(), "mariadb-admin kill: {}", String::from_utf8_lossy(&admin.stderr));
    still_waiting(&mut s, w, "mariadb-admin kill").await?;

    phase("through the proxy: a KILL prepared with COM_STMT_PREPARE, executed with COM_STMT_EXECUTE");
    let w = park_commit(&mut s, 8, APP_USER, APP_PASSWORD).await?;
    let mut conn = Conn::new(opts_at(rw, APP_USER, APP_PASSWORD)).await?;
    let stmt = conn.prep("KILL QUERY ?").await?;
    conn.exec_drop(&stmt, (w.thread,)).await?;
    drop(conn);
    still_waiting(&mut s, w, "prepared KILL QUERY ?").await?;

    phase("through the proxy: forms the proxy cannot make soft are refused, and the commit keeps waiting");
    let w = park_commit(&mut s, 9, APP_USER, APP_PASSWORD).await?;
    let t = w.thread;
    for sql in [
        format!("/*!KILL QUERY {t}*/"),
        format!("SELECT 1; KILL QUERY {t}"),
        format!("BEGIN NOT ATOMIC KILL QUERY {t}; END"),
        format!("PREPARE s FROM 'KILL QUERY {t}'"),
        format!("EXECUTE IMMEDIATE CONCAT('KILL QUERY ', {t})"),
    ] {
        let code = outcome(rw, &sql).await?;
        ensure!(code == 1235, "{sql}: expected ERR 1235 from the proxy, got {code}");
    }
    // Dynamic SQL built at run time is checked by the server on the text it built: a KILL in it never runs (a
    // PREPARE of it prepares the refusal, which its EXECUTE raises), ordinary built statements run.
    let mut conn = Conn::new(opts_at(rw, APP_USER, APP_PASSWORD)).await?;
    conn.query_drop(format!("SET @q = 'KILL QUERY {t}'")).await?;
    conn.query_drop("PREPARE s FROM @q").await?;
    let refused = conn.query_drop("EXECUTE s").await;
    ensure!(matches!(&refused, Err(mysql_async::Error::Server(e)) if e.code == 1235), "{refused:?}");
    conn.query_drop(format!("SET @q = CONVERT('kill query {t}' USING ucs2)")).await?;
    let refused = conn.query_drop("EXECUTE IMMEDIATE @q").await;
    ensure!(matches!(&refused, Err(mysql_async::Error::Server(e)) if e.code == 1235), "UCS-2: {refused:?}");
    // In a UCS-2 connection every literal, the check's own included, becomes wide characters unless marked.
    conn.query_drop("SET collation_connection = ucs2_general_ci").await?;
    conn.query_drop(format!("SET @q = 'KILL QUERY {t}'")).await?;
    let refused = conn.query_drop("EXECUTE IMMEDIATE @q").await;
    // MariaDB reads the SIGNAL's text wrongly in such a connection and answers 1407: refused all the same.
    ensure!(
        matches!(&refused, Err(mysql_async::Error::Server(e)) if e.code == 1235 || e.code == 1407),
        "UCS-2 connection: {refused:?}"
    );
    conn.query_drop("SET NAMES utf8mb4").await?;
    conn.query_drop("SET @n = 0").await?;
    let refused = conn
        .query_drop(format!("EXECUTE IMMEDIATE ELT(@n := @n + 1, 'SELECT 1', 'KILL QUERY {t}', 'KILL QUERY {t}')"))
        .await;
    let n: i64 = conn.query_first("SELECT @n").await?.context("no row")?;
    ensure!(refused.is_ok() && n == 1, "the built text must be evaluated once: {refused:?}, @n = {n}");
    conn.query_drop("SET @q = 'SELECT 41 + 1'").await?;
    conn.query_drop("PREPARE s FROM @q").await?;
    let built: Option<i64> = conn.query_first("EXECUTE s").await?;
    ensure!(built == Some(42), "PREPARE FROM @q through the proxy: {built:?}");
    let built: Option<i64> = conn.query_first("EXECUTE IMMEDIATE CONCAT('SELECT ', '?') USING 6 * 7").await?;
    ensure!(built == Some(42), "EXECUTE IMMEDIATE CONCAT(…) USING through the proxy: {built:?}");
    // The check adds nothing the client sees: a latin1 text with a byte utf8mb4 has no character for raises no
    // warning (found by MariaDB's main.ctype_uca through the RW port when the check converted every text).
    conn.query_drop("SET NAMES latin1").await?;
    conn.query_drop("EXECUTE IMMEDIATE CONCAT('SELECT ''', CHAR(0xD1), 'b''')").await?;
    // (The count the statement's own answer carries: SHOW WARNINGS would still list the 1407 above, which no
    // statement since has cleared.)
    ensure!(conn.get_warnings() == 0, "the guard left {} warning(s)", conn.get_warnings());
    drop(conn);
    still_waiting(&mut s, w, "refused dynamic and embedded KILLs").await?;

    phase("a statement timeout does not end the wait either (MariaDB's timeout is a soft kill)");
    let mut conn = Conn::new(opts_at(rw, APP_USER, APP_PASSWORD)).await?;
    let thread: u64 = conn.query_first("SELECT CONNECTION_ID()").await?.context("no row")?;
    let task = tokio::spawn(async move {
        conn.query_drop("SET STATEMENT max_statement_time=0.2 FOR INSERT INTO test.k VALUES (10)").await
    });
    waits_for_ack(&mut s.root, thread).await?;
    still_waiting(&mut s, Waiter { id: 10, thread, task }, "max_statement_time=0.2").await?;

    phase("an operator's statements that would bypass the log or take replication out of the node's hands");
    let mut root = Conn::new(opts_at(rw, "root", paxsql_mariadb_testkit::ROOT_PASSWORD)).await?;
    for sql in ["SET sql_log_bin = 0", "SET GLOBAL rpl_semi_sync_master_enabled = OFF", "RESET MASTER", "SHUTDOWN"] {
        let refused = root.query_drop(sql).await;
        ensure!(matches!(&refused, Err(mysql_async::Error::Server(e)) if e.code == 1235), "{sql}: {refused:?}");
    }
    let enabled: String = s.root.query_first("SELECT @@rpl_semi_sync_master_enabled").await?.context("no row")?;
    ensure!(enabled == "1", "semi-sync was switched off through the proxy: {enabled}");
    drop(root);

    phase("ordinary traffic is untouched and the counters tell what happened");
    ensure!(outcome(rw, "SELECT 'kill' AS word, 1 AS skill").await? == 0);
    let stats = s.proxy.stats.snapshot();
    eprintln!("{stats:?}");
    ensure!(stats.kills_softened >= 7, "kills_softened = {}", stats.kills_softened);
    ensure!(stats.commands_refused >= 8, "commands_refused = {}", stats.commands_refused);
    let Setup { proxy, db, root, .. } = s;
    drop(root);
    proxy.shutdown().await?;
    drop(db);
    Ok(())
}
