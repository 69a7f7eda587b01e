//! Shared setup for the tests against real MariaDB: a master-profile server, our client as its semi-sync
//! replica, and a reader task that assembles transactions and hands them to the test.

#![allow(dead_code)] // each test file uses part of this module

use std::time::{Duration, Instant};

use paxsql_mariadb_testkit::mysql_async::prelude::Queryable;
use paxsql_mariadb_testkit::{MariaDb, MariaDbOptions};
use paxsql_repl_client::{
    AckHandle, ConnectOptions, Error, ReplicationClient, ReplicationEvent, Transaction, TransactionAssembler,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub const REPL_USER: &str = "repl";
pub const REPL_PASSWORD: &str = "replpw";
/// The server_id our client registers with (the master is 1).
pub const CLIENT_SERVER_ID: u32 = 1001;
/// Bound on anything that should happen promptly.
pub const PROMPT: Duration = Duration::from_secs(20);

static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// Opens a test phase: one line saying what it checks.
pub fn phase(what: &str) {
    let t0 = START.get_or_init(Instant::now);
    eprintln!("[{:>7.2}s] == {what}", t0.elapsed().as_secs_f64());
}

/// A master-profile server (semi-sync master ON, AFTER_SYNC, infinite timeout, wait_no_slave ON) with the
/// replication account.
pub fn start_master(extra_config: &[&str]) -> anyhow::Result<MariaDb> {
    let mut opts = MariaDbOptions::master(1);
    for line in extra_config {
        opts = opts.with_config_line(*line);
    }
    let master = MariaDb::start(opts)?;
    master.create_replication_user(REPL_USER, REPL_PASSWORD)?;
    Ok(master)
}

pub fn client_opts(master: &MariaDb) -> ConnectOptions {
    ConnectOptions::tcp("127.0.0.1", master.port(), REPL_USER, REPL_PASSWORD, CLIENT_SERVER_ID)
}

/// What the reader task hands over.
#[derive(Debug)]
pub enum Item {
    Event(ReplicationEvent),
    Trx(Transaction),
}

/// Streams `client` on its own task: every event and every assembled transaction goes to the channel (the
/// test ACKs from its own task through the returned handle). The task ends with the stream's error.
pub fn spawn_reader(mut client: ReplicationClient) -> (AckHandle, mpsc::UnboundedReceiver<Item>, JoinHandle<Error>) {
    let ack = client.ack_handle();
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut assembler = TransactionAssembler::new();
        loop {
            let event = match client.next_event().await {
                Ok(event) => event,
                Err(e) => return e,
            };
            let trx = match assembler.push(&event) {
                Ok(trx) => trx,
                Err(e) => return e,
            };
            let _ = tx.send(Item::Event(event));
            if let Some(trx) = trx {
                let _ = tx.send(Item::Trx(trx));
            }
        }
    });
    (ack, rx, task)
}

/// The next assembled transaction (skipping plain events), within `PROMPT`.
pub async fn next_trx(rx: &mut mpsc::UnboundedReceiver<Item>) -> anyhow::Result<Transaction> {
    let deadline = tokio::time::Instant::now() + PROMPT;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Err(_) => anyhow::bail!("no transaction from the stream within {PROMPT:?}"),
            Ok(None) => anyhow::bail!("the reader task ended"),
            Ok(Some(Item::Trx(t))) => return Ok(t),
            Ok(Some(Item::Event(_))) => {}
        }
    }
}

/// Runs `sql` on a fresh session; checks it is still blocked once its transaction reached us, ACKs, and checks
/// that it then returns.
pub async fn commit_with_ack(
    master: &MariaDb,
    rx: &mut mpsc::UnboundedReceiver<Item>,
    ack: &AckHandle,
    sql: &str,
) -> anyhow::Result<Transaction> {
    let mut conn = master.conn().await?;
    let owned = sql.to_string();
    let mut session = tokio::spawn(async move { conn.query_drop(owned).await.map(|_| conn) });
    let trx = next_trx(rx).await?;
    assert!(trx.ack_requested, "{sql}: the master must ask for an ACK: {trx:?}");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut session).await.is_err(),
        "{sql}: returned before our ACK"
    );
    ack.ack(&trx.end_file, trx.end_pos)?;
    tokio::time::timeout(PROMPT, session).await??.map_err(|e| anyhow::anyhow!("{sql}: {e}"))?;
    Ok(trx)
}
