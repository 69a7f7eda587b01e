//! Shared helpers of the integration tests: real MariaDB servers from the testkit, a workload, reading a
//! server's binlog files into transactions, our server on its own runtime, and bounded waits.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use paxsql_mariadb_testkit::mysql_async::prelude::Queryable;
use paxsql_mariadb_testkit::mysql_async::Conn;
use paxsql_mariadb_testkit::{MariaDb, MariaDbOptions};
use paxsql_repl_server::{
    transactions_from_binlog, MemoryEventSource, ReplicationServer, ReplicationServerConfig, Transaction,
};

pub const REPL_USER: &str = "repl";
pub const REPL_PASSWORD: &str = "replpw";
pub const TABLES: usize = 6;

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// Prints a phase header, so a failing run's log says which check it was in.
pub fn phase(text: &str) {
    eprintln!("=== {text}");
}

/// Options every server of these tests gets: room for a 17 MiB row (packet size, and InnoDB refuses BLOBs
/// larger than 10% of the redo log).
fn big_rows(opts: MariaDbOptions) -> MariaDbOptions {
    opts.with_config_line("max_allowed_packet=64M")
        .with_config_line("innodb_log_file_size=256M")
        .with_config_line("innodb_buffer_pool_size=64M")
}

/// The source of realistic events: a standalone (no semi-sync) server.
pub fn start_source() -> anyhow::Result<MariaDb> {
    Ok(MariaDb::start(big_rows(MariaDbOptions::standalone(1)))?)
}

/// A replica-profile server (read_only, semi-sync slave on, 4 optimistic parallel applier threads), keeping its
/// relay logs so tests can read what we served.
pub fn start_replica(server_id: u32) -> anyhow::Result<MariaDb> {
    let opts = big_rows(MariaDbOptions::replica(server_id))
        .with_config_line("slave_max_allowed_packet=64M")
        .with_config_line("relay_log_purge=OFF");
    Ok(MariaDb::start(opts)?)
}

/// Our server on its own runtime, stopped (through the shutdown channel) on drop.
pub struct Served {
    pub source: Arc<MemoryEventSource>,
    pub port: u16,
    stop: tokio::sync::watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<paxsql_repl_server::Result<()>>>,
    rt: tokio::runtime::Runtime,
}

impl Served {
    pub fn start(config: ReplicationServerConfig) -> anyhow::Result<Served> {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let source = Arc::new(MemoryEventSource::new());
        let server =
            rt.block_on(ReplicationServer::bind("127.0.0.1:0".parse().expect("address"), config, Arc::clone(&source)))?;
        let port = server.local_addr().port();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = rt.spawn(server.run(stopped));
        Ok(Served { source, port, stop, task: Some(task), rt })
    }

    pub fn config(server_id: u32) -> ReplicationServerConfig {
        ReplicationServerConfig {
            replica_user: REPL_USER.into(),
            replica_password: REPL_PASSWORD.into(),
            server_id,
            heartbeat_default_ms: 1000,
            ..ReplicationServerConfig::default()
        }
    }

    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Stops the server and waits (bounded) until every connection task ended.
    pub fn shutdown(&mut self) -> anyhow::Result<()> {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            self.rt
                .block_on(async { tokio::time::timeout(Duration::from_secs(10), task).await })
                .context("server did not stop within 10 s")???;
        }
        Ok(())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Binlog (or relay log) files `<base>.NNNNNN` of a server, in order.
pub fn log_files(dir: &Path, base: &str) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("").to_string();
        if let Some(suffix) = name.strip_prefix(&format!("{base}.")) {
            if !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()) {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// All transactions in the binlog files `<base>.*` of `db` (the server must be idle: no commit in flight).
pub fn read_transactions(db: &MariaDb, base: &str) -> anyhow::Result<Vec<Transaction>> {
    let mut all = Vec::new();
    for file in log_files(db.data_dir(), base)? {
        let bytes = std::fs::read(&file)?;
        if bytes.len() < 4 || &bytes[..4] != b"\xfebin" {
            bail!("{} is not a binlog file", file.display());
        }
        all.extend(transactions_from_binlog(&bytes[4..]).with_context(|| format!("parsing {}", file.display()))?);
    }
    Ok(all)
}

/// Appends the transactions of the source's binlog that `mem` does not have yet; returns how many.
pub fn feed_new(db: &MariaDb, mem: &MemoryEventSource) -> anyhow::Result<usize> {
    let trxs = read_transactions(db, "mariadb-bin")?;
    let have = mem.len();
    let mut n = 0;
    for trx in trxs.into_iter().skip(have) {
        mem.append(trx)?;
        n += 1;
    }
    Ok(n)
}

/// A mixed workload: (round 0) schema and a 17 MiB row; then multi-statement transactions over all tables, a
/// DDL, and `concurrency` sessions committing at once (so the binlog gets group commits with commit ids).
/// `myisam` adds writes to a MyISAM table (non-transactional events); leave it out where a replica is killed
/// with -9: MyISAM is not crash-safe, so a replica re-applies a row it already wrote (error 1062 after repair),
/// which is MariaDB's behaviour, not a replication gap.
pub async fn workload(
    db: &MariaDb,
    round: u64,
    trx_count: u64,
    concurrency: u64,
    per_session: u64,
    myisam: bool,
) -> anyhow::Result<()> {
    let mut c = db.conn().await?;
    let t = TABLES as u64;
    if round == 0 {
        c.query_drop("CREATE DATABASE IF NOT EXISTS w").await?;
        for i in 0..t {
            c.query_drop(format!(
                "CREATE TABLE w.t{i} (id BIGINT PRIMARY KEY, v VARCHAR(1000), n INT NOT NULL DEFAULT 0) ENGINE=InnoDB"
            ))
            .await?;
        }
        c.query_drop("CREATE TABLE w.big (id INT PRIMARY KEY, b LONGBLOB) ENGINE=InnoDB").await?;
        c.query_drop("INSERT INTO w.big VALUES (1, REPEAT('x', 17 * 1024 * 1024))").await?;
        if myisam {
            c.query_drop("CREATE TABLE w.myisam (id INT PRIMARY KEY, v INT) ENGINE=MyISAM").await?;
        }
    }
    let base = round * 10_000_000;
    for i in 0..trx_count {
        let id = base + i * 10;
        c.query_drop("BEGIN").await?;
        c.query_drop(format!(
            "INSERT INTO w.t{} (id, v, n) VALUES ({id}, 'r{round}-{i}', {i}), ({}, REPEAT('y', {}), 1)",
            i % t,
            id + 1,
            (i * 7) % 200
        ))
        .await?;
        c.query_drop(format!("UPDATE w.t{} SET n = n + 1, v = CONCAT(v, '+') WHERE id % 3 = 0", (i + 1) % t)).await?;
        c.query_drop(format!("DELETE FROM w.t{} WHERE id = {}", (i + 2) % t, id.saturating_sub(19))).await?;
        c.query_drop("COMMIT").await?;
        if myisam && i % 17 == 0 {
            c.query_drop(format!("INSERT INTO w.myisam VALUES ({}, {i})", base / 1000 + i)).await?;
        }
    }
    c.query_drop(format!("ALTER TABLE w.t{} ADD COLUMN c{round} INT NOT NULL DEFAULT {round}", round % t)).await?;
    let mut tasks = Vec::new();
    for k in 0..concurrency {
        let opts = db.opts();
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::new(opts).await?;
            for j in 0..per_session {
                let id = base + 5_000_000 + k * 100_000 + j;
                c.query_drop(format!("INSERT INTO w.t{} (id, v, n) VALUES ({id}, 'c{k}', {j})", k % t)).await?;
            }
            let _ = c.disconnect().await;
            Ok::<_, anyhow::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let _ = c.disconnect().await;
    Ok(())
}

/// `CHECKSUM TABLE` of every table in schema `w`, by name.
pub fn checksums(db: &MariaDb) -> anyhow::Result<Vec<(String, Option<i64>)>> {
    let tables: Vec<String> =
        db.query("SELECT CONCAT('w.', table_name) FROM information_schema.tables WHERE table_schema = 'w' ORDER BY 1")?;
    if tables.is_empty() {
        bail!("no tables in schema w on port {}", db.port());
    }
    Ok(db.query::<(String, Option<i64>)>(&format!("CHECKSUM TABLE {}", tables.join(", ")))?)
}

pub fn assert_same_data(source: &MariaDb, replica: &MariaDb) -> anyhow::Result<()> {
    let a = checksums(source)?;
    let b = checksums(replica)?;
    if a != b {
        bail!("checksums differ:\nsource  {a:?}\nreplica {b:?}");
    }
    eprintln!("    {} tables have equal checksums", a.len());
    Ok(())
}

/// Slave status fields, empty if none.
pub fn status(replica: &MariaDb, field: &str) -> String {
    replica.slave_status().ok().flatten().and_then(|s| s.get(field).cloned()).unwrap_or_default()
}

/// Waits until the replica's `gtid_slave_pos` equals `want`; fails early on a replication error.
pub fn wait_caught_up(replica: &MariaDb, want: &str, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let pos = replica.gtid_slave_pos()?;
        if pos == want {
            return Ok(());
        }
        let st = replica.slave_status()?.unwrap_or_default();
        let get = |k: &str| st.get(k).cloned().unwrap_or_default();
        let sql_errno = get("Last_SQL_Errno");
        let io_errno = get("Last_IO_Errno");
        if (!sql_errno.is_empty() && sql_errno != "0")
            || (io_errno != "0" && !io_errno.is_empty() && io_errno != "2003")
        {
            bail!(
                "replication error at {pos}: IO {io_errno} {:?} SQL {sql_errno} {:?}",
                get("Last_IO_Error"),
                get("Last_SQL_Error")
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "replica at {pos:?} after {timeout:?}, want {want:?}; IO={} SQL={}",
                get("Slave_IO_Running"),
                get("Slave_SQL_Running")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `Last_IO_Errno` is `errno`; returns `Last_IO_Error`.
pub fn wait_io_errno(replica: &MariaDb, errno: &str, timeout: Duration) -> anyhow::Result<String> {
    let deadline = Instant::now() + timeout;
    loop {
        if status(replica, "Last_IO_Errno") == errno {
            return Ok(status(replica, "Last_IO_Error"));
        }
        if Instant::now() >= deadline {
            bail!(
                "Last_IO_Errno {:?} ({:?}) after {timeout:?}, want {errno}",
                status(replica, "Last_IO_Errno"),
                status(replica, "Last_IO_Error")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
