//! The RW port against real MariaDB servers: forwarding (mysql_async and the `mariadb` CLI), the hold during an
//! election, the ERR packet when no master comes or the master is unreachable, cutting connections when the
//! master changes, max_connections, shutdown.

mod common;

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use common::{cli, init_tracing, opts_at, phase, wait_until, Ports, RunningProxy};
use paxsql_mariadb_testkit::mysql_async::prelude::Queryable as _;
use paxsql_mariadb_testkit::mysql_async::{self, Conn};
use paxsql_mariadb_testkit::{MariaDb, MariaDbOptions, ROOT_PASSWORD};
use paxsql_proxy::{Backend, ForwardMode, ProxyConfig, Route};
use tokio::io::AsyncReadExt as _;

static PORTS: Ports = Ports::new(31000);

const HOLD: Duration = Duration::from_millis(800);

fn master(node_id: u64, master_version: u64, db: &MariaDb) -> Route {
    Route::Master { node_id, master_version, backend: Backend::Tcp(([127, 0, 0, 1], db.port()).into()) }
}

/// The server error a failed connect returned, or why it is not one.
fn server_error(result: Result<Conn, mysql_async::Error>) -> anyhow::Result<mysql_async::ServerError> {
    match result {
        Err(mysql_async::Error::Server(e)) => Ok(e),
        Err(other) => bail!("expected a server error, got {other:?}"),
        Ok(_) => bail!("expected a server error, the connection succeeded"),
    }
}

async fn server_id_of(conn: &mut Conn) -> anyhow::Result<u32> {
    conn.query_first::<u32, _>("SELECT @@server_id").await?.context("no row")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rw_port_holds_refuses_forwards_and_cuts() -> anyhow::Result<()> {
    init_tracing();
    let (a, b) = tokio::task::spawn_blocking(|| {
        Ok::<_, anyhow::Error>((
            MariaDb::start(MariaDbOptions::standalone(1))?,
            MariaDb::start(MariaDbOptions::standalone(2))?,
        ))
    })
    .await??;
    let cfg = ProxyConfig {
        rw_listen: Some(PORTS.next()),
        hold_during_election: HOLD,
        connect_timeout: Duration::from_secs(2),
        ..ProxyConfig::default()
    };
    let proxy = RunningProxy::start(cfg, Route::no_master("election in progress")).await?;
    let rw = proxy.rw.context("rw port")?;
    let root = opts_at(rw, "root", ROOT_PASSWORD);

    phase("no master: mysql_async gets ERR 1053 naming the reason once the hold time is over");
    let start = Instant::now();
    let err = server_error(Conn::new(root.clone()).await)?;
    let elapsed = start.elapsed();
    ensure!(err.code == 1053, "code {}", err.code);
    ensure!(err.message.contains("paxsql: no master: election in progress"), "message {:?}", err.message);
    ensure!(elapsed >= HOLD && elapsed < HOLD + Duration::from_secs(2), "returned after {elapsed:?}");

    phase("no master: the mariadb CLI shows code, SQLSTATE 08S01 and message, and returns quickly");
    let run = cli(rw, "root", ROOT_PASSWORD, &["--skip-ssl"], "SELECT 1").await?;
    ensure!(!run.success, "CLI succeeded: {run:?}");
    ensure!(
        run.stderr.contains("ERROR 1053 (08S01)") && run.stderr.contains("paxsql: no master: election in progress"),
        "stderr {:?}",
        run.stderr
    );
    ensure!(run.elapsed < HOLD + Duration::from_secs(3), "CLI took {:?}", run.elapsed);
    // The 10.11.19 client asks for TLS by default and then labels any ERR before the TLS handshake 2002 ("cannot
    // be verified"), as it would for MariaDB's own pre-handshake errors; code and message still reach the user.
    let run = cli(rw, "root", ROOT_PASSWORD, &[], "SELECT 1").await?;
    ensure!(
        !run.success && run.stderr.contains("1053 - paxsql: no master: election in progress"),
        "stderr {:?}",
        run.stderr
    );
    ensure!(proxy.stats.snapshot().refused_no_master == 3, "{:?}", proxy.stats.snapshot());

    phase("a connection waiting during the hold is served when a master is published within it");
    let waiting = tokio::spawn(Conn::new(root.clone()));
    tokio::time::sleep(HOLD / 3).await;
    proxy.set_route(master(1, 1, &a));
    let mut c1 = tokio::time::timeout(Duration::from_secs(10), waiting).await???;
    ensure!(server_id_of(&mut c1).await? == 1);

    phase("forwarding: DDL, writes and reads through the proxy, with mysql_async and the CLI");
    c1.query_drop("CREATE DATABASE test").await?;
    c1.query_drop("CREATE TABLE test.t (id INT PRIMARY KEY, v VARCHAR(20000))").await?;
    let big = "x".repeat(20000);
    for id in 0..50 {
        c1.exec_drop("INSERT INTO test.t VALUES (?, ?)", (id, &big)).await?;
    }
    let sum: i64 = c1.query_first("SELECT SUM(LENGTH(v)) FROM test.t").await?.context("no row")?;
    ensure!(sum == 50 * 20000);
    let run = cli(rw, "root", ROOT_PASSWORD, &[], "SELECT @@server_id, COUNT(*) FROM test.t").await?;
    ensure!(run.success && run.stdout == "1\t50", "{run:?}");

    phase("master change: every connection to the old master is cut at once, new ones go to the new master");
    let c1_id: u32 = c1.query_first("SELECT CONNECTION_ID()").await?.context("no row")?;
    // An idle raw client that read the greeting and sent nothing: it must see its socket closed.
    let mut raw = tokio::net::TcpStream::connect(rw).await?;
    let mut greeting = [0u8; 4];
    raw.read_exact(&mut greeting).await?;
    let cut_before = proxy.stats.snapshot().cut_on_master_change;
    proxy.set_route(master(2, 2, &b));
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(2), raw.read_to_end(&mut rest)).await;
    ensure!(closed.is_ok(), "idle client still open 2 s after the master changed");
    let start = Instant::now();
    let after = tokio::time::timeout(Duration::from_secs(5), c1.query_drop("SELECT 1")).await?;
    ensure!(after.is_err(), "a query on a connection to the old master succeeded");
    ensure!(start.elapsed() < Duration::from_secs(2), "cut connection took {:?} to fail", start.elapsed());
    // The old master's session ends too: the proxy reset its side.
    wait_until("old master's session gone", Duration::from_secs(5), || async {
        let mut admin = a.conn().await?;
        let n: u64 = admin
            .query_first(format!("SELECT COUNT(*) FROM information_schema.processlist WHERE id = {c1_id}"))
            .await?
            .context("no row")?;
        Ok(n == 0)
    })
    .await?;
    ensure!(proxy.stats.snapshot().cut_on_master_change >= cut_before + 2, "{:?}", proxy.stats.snapshot());
    let mut c2 = Conn::new(root.clone()).await?;
    ensure!(server_id_of(&mut c2).await? == 2);

    phase("same master, new master_version: also a change, also cut");
    proxy.set_route(master(2, 3, &b));
    let r = tokio::time::timeout(Duration::from_secs(5), c2.query_drop("SELECT 1")).await?;
    ensure!(r.is_err(), "connection survived a master_version change");
    let mut c3 = Conn::new(root.clone()).await?;
    ensure!(server_id_of(&mut c3).await? == 2);

    phase("route to no master: forwarded connections cut, new ones refused after the hold");
    proxy.set_route(Route::no_master("this node is in a minority"));
    let r = tokio::time::timeout(Duration::from_secs(5), c3.query_drop("SELECT 1")).await?;
    ensure!(r.is_err(), "connection survived the loss of the master");
    let err = server_error(Conn::new(root.clone()).await)?;
    ensure!(err.message.contains("paxsql: no master: this node is in a minority"), "{:?}", err.message);

    phase("unreachable master (its mariadbd died, its lease not yet over): the client is held, then served");
    let nobody = PORTS.next(); // nothing listens there
    proxy.set_route(Route::Master { node_id: 9, master_version: 4, backend: Backend::Tcp(nobody) });
    let waiting = tokio::spawn(Conn::new(root.clone()));
    tokio::time::sleep(HOLD / 3).await;
    ensure!(!waiting.is_finished(), "a client of an unreachable master was answered before the hold time");
    proxy.set_route(master(1, 5, &a));
    let mut held = tokio::time::timeout(Duration::from_secs(10), waiting).await???;
    ensure!(server_id_of(&mut held).await? == 1);
    ensure!(proxy.stats.snapshot().refused_backend_unreachable == 0, "{:?}", proxy.stats.snapshot());

    phase("unreachable master for the whole hold time: ERR naming it");
    proxy.set_route(Route::Master { node_id: 9, master_version: 6, backend: Backend::Tcp(nobody) });
    let start = Instant::now();
    let err = server_error(Conn::new(root.clone()).await)?;
    let elapsed = start.elapsed();
    ensure!(err.code == 1053 && err.message.contains("paxsql: master unreachable"), "{err:?}");
    ensure!(elapsed >= HOLD && elapsed < HOLD + Duration::from_secs(3), "took {elapsed:?}");
    ensure!(proxy.stats.snapshot().refused_backend_unreachable == 1);

    phase("shutdown: run returns and forwarded connections close");
    proxy.set_route(master(1, 7, &a));
    let mut c4 = Conn::new(root.clone()).await?;
    ensure!(server_id_of(&mut c4).await? == 1);
    let stats = std::sync::Arc::clone(&proxy.stats);
    proxy.shutdown().await?;
    let r = tokio::time::timeout(Duration::from_secs(5), c4.query_drop("SELECT 1")).await?;
    ensure!(r.is_err(), "connection survived the proxy's shutdown");
    ensure!(stats.snapshot().active == 0, "{:?}", stats.snapshot());
    ensure!(tokio::net::TcpStream::connect(rw).await.is_err(), "still accepting after shutdown");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_refused_with_err_1040() -> anyhow::Result<()> {
    init_tracing();
    let db = tokio::task::spawn_blocking(|| MariaDb::start(MariaDbOptions::standalone(3))).await??;
    // The other forwarding mode than the default, so both are exercised against MariaDB.
    let cfg = ProxyConfig {
        rw_listen: Some(PORTS.next()),
        max_connections: 1,
        forward_mode: ForwardMode::Copy,
        ..ProxyConfig::default()
    };
    let proxy = RunningProxy::start(cfg, master(3, 1, &db)).await?;
    let root = opts_at(proxy.rw.context("rw")?, "root", ROOT_PASSWORD);

    phase("copy mode: one connection fits; the second gets ERR 1040 at once; after the first closes, a new one fits");
    let mut first = Conn::new(root.clone()).await?;
    ensure!(server_id_of(&mut first).await? == 3);
    let err = server_error(Conn::new(root.clone()).await)?;
    ensure!(err.code == 1040 && err.message.contains("too many connections"), "{err:?}");
    first.disconnect().await?;
    wait_until("slot freed", Duration::from_secs(5), || async { Ok(proxy.stats.snapshot().active == 0) }).await?;
    let mut again = Conn::new(root.clone()).await?;
    ensure!(server_id_of(&mut again).await? == 3);
    let s = proxy.stats.snapshot();
    ensure!(s.refused_max_connections == 1 && s.accepted == 3, "{s:?}");
    ensure!(s.bytes_client_to_server > 0 && s.bytes_server_to_client > 0, "{s:?}");
    Ok(())
}
