//! The testkit against real mariadbd: profiles, SQL helpers, crash/restart, cleanup.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _};
use paxsql_mariadb_testkit::{MariaDb, MariaDbOptions, TestkitError};

/// True once `pid` no longer exists (or is a zombie waiting for its new parent to reap it).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // Field 3 is the state; the command in field 2 is in parentheses and may contain spaces.
        Ok(stat) => stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')).unwrap_or(false),
    }
}

fn wait_gone(pid: u32, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        if process_gone(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    process_gone(pid)
}

fn var(db: &MariaDb, name: &str) -> anyhow::Result<String> {
    let value = db.query_value::<Option<String>>(&format!("SELECT @@global.{name}"))?;
    Ok(value.unwrap_or_default())
}

#[test]
fn profiles_follow_the_verified_recipe_and_servers_get_distinct_ports() -> anyhow::Result<()> {
    eprintln!("t00: a master- and a replica-profile server start in parallel on distinct ports");
    let (master, replica) = std::thread::scope(|s| {
        let m = s.spawn(|| MariaDb::start(MariaDbOptions::master(1)));
        let r = s.spawn(|| MariaDb::start(MariaDbOptions::replica(2)));
        (m.join().expect("master thread"), r.join().expect("replica thread"))
    });
    let (master, replica) = (master?, replica?);
    ensure!(master.port() != replica.port(), "both servers on port {}", master.port());
    ensure!(master.pid() != replica.pid());

    eprintln!("t00: both profiles carry the durability and GTID settings of docs/ARCHITECTURE.md §3");
    for db in [&master, &replica] {
        for (name, want) in [
            ("gtid_strict_mode", "1"),
            ("log_bin", "1"),
            ("log_slave_updates", "1"),
            ("binlog_format", "ROW"),
            ("sync_binlog", "1"),
            ("innodb_flush_log_at_trx_commit", "1"),
            ("rpl_semi_sync_master_wait_point", "AFTER_SYNC"),
            ("rpl_semi_sync_master_timeout", "18446744073709551615"),
            ("rpl_semi_sync_slave_enabled", "1"),
            ("bind_address", "127.0.0.1"),
        ] {
            ensure!(var(db, name)? == want, "{:?}: @@{name} = {:?}, want {want}", db.profile(), var(db, name)?);
        }
        ensure!(var(db, "log_bin_basename")?.ends_with("/data/mariadb-bin"), "{}", var(db, "log_bin_basename")?);
        ensure!(var(db, "port")? == db.port().to_string());
        ensure!(var(db, "socket")? == db.socket_path().display().to_string());
        ensure!(var(db, "gtid_binlog_pos")?.is_empty(), "fresh server has GTIDs: setup was binlogged");
    }
    ensure!(var(&master, "server_id")? == "1" && var(&replica, "server_id")? == "2");

    eprintln!("t00: master profile: semi-sync master on, waits even without replicas, writable");
    ensure!(var(&master, "rpl_semi_sync_master_enabled")? == "1");
    ensure!(var(&master, "rpl_semi_sync_master_wait_no_slave")? == "1");
    ensure!(var(&master, "read_only")? == "0");

    eprintln!("t00: replica profile: read_only, semi-sync master off, optimistic parallel apply");
    ensure!(var(&replica, "read_only")? == "1");
    ensure!(var(&replica, "rpl_semi_sync_master_enabled")? == "0");
    ensure!(var(&replica, "slave_parallel_threads")? == "4");
    ensure!(var(&replica, "slave_parallel_mode")? == "optimistic");
    Ok(())
}

/// Makes every commit before it durable in InnoDB, returning the GTID position before it.
///
/// MariaDB (MDEV-232) does not fsync the redo log at an InnoDB commit when the binlog is on: the commit record
/// of the LAST transaction reaches disk only with the next transaction's prepare or the once-a-second flush.
/// Normal crash recovery commits such a prepared transaction from the binlog, but `init-rpl-role=SLAVE` (all
/// profiles) rolls it back and truncates it from the binlog. So a commit that returned may vanish after kill -9;
/// one followed by another transaction's prepare may not. The fence transaction itself may or may not survive.
/// Needs the table `app.fence (id INT PRIMARY KEY)`.
fn durability_fence(db: &MariaDb) -> anyhow::Result<String> {
    let before = db.gtid_binlog_pos()?;
    db.exec("REPLACE INTO app.fence VALUES (1)")?;
    Ok(before)
}

#[test]
fn kill9_and_restart_keep_committed_data() -> anyhow::Result<()> {
    eprintln!("t00: a master-profile server with semi-sync switched off accepts writes");
    let mut db = MariaDb::start(MariaDbOptions::master(11))?;
    db.set_semi_sync_master(false)?;
    db.exec_batch(&[
        "CREATE DATABASE app",
        "CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB",
        "CREATE TABLE app.fence (id INT PRIMARY KEY)",
    ])?;
    db.exec("INSERT INTO app.t VALUES (1, 'one'), (2, 'two')")?;
    let durable_pos = durability_fence(&db)?;
    ensure!(durable_pos == "0-11-4", "4 transactions with server_id 11, got {durable_pos:?}");
    let pos_with_fence = db.gtid_binlog_pos()?;

    eprintln!("t00: kill -9 ends the process; restart reuses port, data dir and config");
    let pid = db.pid().context("pid while running")?;
    let port = db.port();
    db.kill9()?;
    ensure!(wait_gone(pid, Duration::from_secs(5)), "pid {pid} still alive after kill9");
    ensure!(!db.is_running());
    ensure!(matches!(db.kill9(), Err(TestkitError::NotRunning)));
    db.restart()?;
    ensure!(db.port() == port);
    ensure!(db.pid() != Some(pid));
    ensure!(matches!(db.restart(), Err(TestkitError::AlreadyRunning { .. })));

    eprintln!("t00: committed rows survive the crash; binlog and engine agree on the (possibly truncated) tail");
    let rows = db.query::<(i64, String)>("SELECT id, v FROM app.t ORDER BY id")?;
    ensure!(rows == vec![(1, "one".to_string()), (2, "two".to_string())], "{rows:?}");
    let pos = db.gtid_binlog_pos()?;
    let fence_rows = db.query_value::<i64>("SELECT COUNT(*) FROM app.fence")?;
    ensure!(
        (pos == pos_with_fence && fence_rows == 1) || (pos == durable_pos && fence_rows == 0),
        "after crash: gtid_binlog_pos {pos:?}, fence rows {fence_rows} (before crash {pos_with_fence:?})"
    );
    ensure!(var(&db, "rpl_semi_sync_master_enabled")? == "1", "restart reads the profile's config again");

    eprintln!("t00: crash_restart and a clean stop/restart work too");
    db.set_semi_sync_master(false)?;
    db.exec("INSERT INTO app.t VALUES (3, 'three')")?;
    durability_fence(&db)?;
    db.crash_restart()?;
    db.stop()?;
    ensure!(matches!(db.stop(), Err(TestkitError::NotRunning)));
    db.restart()?;
    ensure!(db.query_value::<i64>("SELECT COUNT(*) FROM app.t")? == 3);
    Ok(())
}

#[test]
fn master_profile_commit_blocks_without_semi_sync_replica() -> anyhow::Result<()> {
    eprintln!("t00: with no semi-sync replica, a commit on a master-profile server waits (wait_no_slave=ON)");
    let db = MariaDb::start(MariaDbOptions::master(21).with_sql_timeout(Duration::from_secs(3)))?;
    // sql_log_bin=0 statements do not wait: this is how the setup helpers work.
    db.exec_batch(&["SET sql_log_bin=0", "CREATE DATABASE app", "CREATE TABLE app.t (id INT PRIMARY KEY)"])?;
    match db.exec("INSERT INTO app.t VALUES (1)") {
        Err(TestkitError::SqlTimeout { .. }) => {}
        other => bail!("expected the commit to block until the SQL timeout, got {other:?}"),
    }
    eprintln!("t00: the waiting commit is in the binlog but invisible to other sessions");
    ensure!(db.gtid_binlog_pos()? == "0-21-1", "{}", db.gtid_binlog_pos()?);
    ensure!(db.query_value::<i64>("SELECT COUNT(*) FROM app.t")? == 0);
    let state =
        db.query::<(String,)>("SELECT state FROM information_schema.processlist WHERE info LIKE 'INSERT INTO app.t%'")?;
    ensure!(state.iter().any(|(s,)| s.contains("semi-sync ACK")), "no session waits for a semi-sync ACK: {state:?}");
    Ok(())
}

#[test]
fn setup_helpers_do_not_binlog_and_accounts_work() -> anyhow::Result<()> {
    eprintln!("t00: account helpers on a master-profile server neither block nor add GTIDs");
    let master = MariaDb::start(MariaDbOptions::master(31))?;
    master.create_replication_user("repl", "repl'pw")?;
    master.create_admin_user("admin", "adminpw")?;
    master.create_user("app", "%", "apppw", "SELECT, INSERT ON *.*")?;
    ensure!(master.gtid_binlog_pos()?.is_empty());
    let grants = master.query::<(String,)>("SHOW GRANTS FOR 'repl'@'%'")?;
    ensure!(grants.iter().any(|(g,)| g.contains("REPLICATION SLAVE")), "{grants:?}");
    master.exec_batch_as("admin", "adminpw", &["SELECT 1"])?;
    master.exec_batch_as("repl", "repl'pw", &["SELECT 1"])?;

    eprintln!("t00: read_only on a replica stops an application account but not an admin account");
    let replica = MariaDb::start(MariaDbOptions::replica(32))?;
    replica.create_admin_user("admin", "adminpw")?;
    replica.create_user("app", "%", "apppw", "SELECT, INSERT, CREATE ON *.*")?;
    replica.exec_batch_as("admin", "adminpw", &["CREATE DATABASE app", "CREATE TABLE app.t (id INT PRIMARY KEY)"])?;
    match replica.exec_batch_as("app", "apppw", &["INSERT INTO app.t VALUES (1)"]) {
        Err(TestkitError::Sql { source: paxsql_mariadb_testkit::mysql_async::Error::Server(e), .. }) => {
            ensure!(e.code == 1290, "expected ER_OPTION_PREVENTS_STATEMENT (1290), got {e:?}")
        }
        other => bail!("app account wrote through read_only: {other:?}"),
    }
    Ok(())
}

#[test]
fn drop_kills_the_server_and_removes_its_dir_also_on_panic() -> anyhow::Result<()> {
    eprintln!("t00: dropping a server kills it and removes its temp dir");
    let db = MariaDb::start(MariaDbOptions::standalone(41))?;
    let (pid, dir) = (db.pid().context("pid")?, db.base_dir().to_path_buf());
    drop(db);
    ensure!(wait_gone(pid, Duration::from_secs(5)), "pid {pid} alive after drop");
    ensure!(!dir.exists(), "{} still exists", dir.display());

    eprintln!("t00: a panicking test still kills its server");
    let seen: Mutex<Option<(u32, PathBuf)>> = Mutex::new(None);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let db = MariaDb::start(MariaDbOptions::standalone(42)).expect("start");
        *seen.lock().expect("lock") = Some((db.pid().expect("pid"), db.base_dir().to_path_buf()));
        panic!("test failure while the server runs");
    }));
    ensure!(outcome.is_err());
    let (pid, dir) = seen.lock().expect("lock").clone().context("server started")?;
    ensure!(wait_gone(pid, Duration::from_secs(5)), "pid {pid} alive after panic");
    ensure!(!dir.exists());

    eprintln!("t00: keep_dir keeps the dir (with data and error log) but not the process");
    let db = MariaDb::start(MariaDbOptions::standalone(43).keep_dir(true))?;
    let (pid, dir, log) = (db.pid().context("pid")?, db.base_dir().to_path_buf(), db.error_log_path().to_path_buf());
    drop(db);
    ensure!(wait_gone(pid, Duration::from_secs(5)));
    ensure!(log.exists() && dir.join("data").is_dir());
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// Not a test on its own: the body of `server_dies_with_the_test_process`, run in a child process.
#[test]
fn helper_child_exits_without_dropping_its_server() -> anyhow::Result<()> {
    if std::env::var_os("PAXSQL_TESTKIT_ORPHAN_CHILD").is_none() {
        return Ok(());
    }
    let db = MariaDb::start(MariaDbOptions::standalone(51))?;
    println!("ORPHAN {} {}", db.pid().context("pid")?, db.base_dir().display());
    // Leave without unwinding: no destructor runs.
    std::process::exit(0);
}

#[test]
fn server_dies_with_the_test_process() -> anyhow::Result<()> {
    eprintln!("t00: a test process that exits without destructors takes its mariadbd with it (PDEATHSIG)");
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(["--exact", "helper_child_exits_without_dropping_its_server", "--nocapture", "--test-threads=1"])
        .env("PAXSQL_TESTKIT_ORPHAN_CHILD", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            child.kill()?;
            child.wait()?;
            bail!("child test process did not finish in time");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut out = String::new();
    child.stdout.take().context("stdout")?.read_to_string(&mut out)?;
    // libtest prints "test <name> ... " without a newline before the test's own output.
    let line = out.lines().find_map(|l| l.split_once("ORPHAN ")).with_context(|| format!("child output: {out}"))?;
    let mut parts = line.1.split(' ');
    let pid: u32 = parts.next().context("pid")?.parse()?;
    let dir = PathBuf::from(parts.next().context("dir")?);
    let gone = wait_gone(pid, Duration::from_secs(10));
    // The temp dir stays behind in this case (no destructor ran); clean it up here.
    let _ = std::fs::remove_dir_all(&dir);
    ensure!(gone, "mariadbd pid {pid} survived its test process");
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
async fn usable_from_async_tests() -> anyhow::Result<()> {
    use paxsql_mariadb_testkit::mysql_async::prelude::Queryable as _;
    eprintln!("t00: start and blocking helpers work inside a tokio runtime; conn() gives an async connection");
    let db = MariaDb::start(MariaDbOptions::standalone(61))?;
    db.exec("CREATE DATABASE app")?;
    let mut conn = db.conn().await?;
    conn.query_drop("CREATE TABLE app.t (id INT PRIMARY KEY)").await?;
    conn.query_drop("INSERT INTO app.t VALUES (7)").await?;
    let ids: Vec<i64> = conn.query("SELECT id FROM app.t").await?;
    ensure!(ids == vec![7]);
    conn.disconnect().await?;
    ensure!(db.query_value::<i64>("SELECT id FROM app.t")? == 7);
    Ok(())
}

#[test]
fn missing_mariadb_names_the_install_script() {
    let msg = TestkitError::MissingProgram { program: "mariadbd" }.to_string();
    assert!(msg.contains("deploy/install-deps.sh"), "{msg}");
}
