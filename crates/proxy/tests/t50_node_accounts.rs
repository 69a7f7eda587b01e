//! What a privileged client can no longer do through the proxy, on a real MariaDB 10.11: stop the server, read its
//! binlog as a replica, or change the accounts the node runs the server with.
//!
//! Found by running MariaDB's own test suite (`mariadb-test-run --extern`) through a cluster's RW port: its
//! `mysqltest` stops the server with `COM_SHUTDOWN` (the master's node then failed over), and a test that truncates
//! `mysql.global_priv` and fails before restoring it left every node unable to log in to its own server. Each case
//! below is refused with ERR 1235 and the server keeps running with its accounts intact; each assertion fails with
//! the proxy's command filter off.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;

use anyhow::{ensure, Context};
use common::{init_tracing, opts_at, phase, raw_command, Ports, RunningProxy};
use paxsql_mariadb_testkit::mysql_async::prelude::Queryable as _;
use paxsql_mariadb_testkit::mysql_async::{self, Conn};
use paxsql_mariadb_testkit::{MariaDb, MariaDbOptions};
use paxsql_proxy::{Backend, ProxyConfig, Route};

static PORTS: Ports = Ports::new(31380);

const DBA: &str = "dba";
const DBA_PASSWORD: &str = "dba-pw-accounts";
/// A throwaway account of this test server only, without a password, for the raw-protocol client; it holds what the
/// commands under test need.
const RAW_USER: &str = "rawdba";
const ER_NOT_SUPPORTED_YET: u16 = 1235;

/// The error code of an ERR packet, or `None` for any other answer.
fn err_code(packet: &[u8]) -> Option<u16> {
    match packet {
        [0xff, lo, hi, ..] => Some(u16::from_le_bytes([*lo, *hi])),
        _ => None,
    }
}

async fn sql_outcome(conn: &mut Conn, sql: &str) -> anyhow::Result<u16> {
    Ok(match conn.query_drop(sql).await {
        Ok(()) => 0,
        Err(mysql_async::Error::Server(e)) => {
            eprintln!("{sql}: {} {}", e.code, e.message);
            e.code
        }
        Err(e) => return Err(e).context(sql.to_string()),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_privileged_client_cannot_stop_the_server_read_its_binlog_or_touch_the_node_accounts() -> anyhow::Result<()> {
    init_tracing();
    let db = tokio::task::spawn_blocking(|| MariaDb::start(MariaDbOptions::standalone(11))).await??;
    let backend: SocketAddr = ([127, 0, 0, 1], db.port()).into();
    let mut root = db.conn().await?;
    root.query_drop(format!(
        "CREATE USER '{DBA}'@'%' IDENTIFIED BY '{DBA_PASSWORD}'; GRANT ALL ON *.* TO '{DBA}'@'%' WITH GRANT OPTION; \
         CREATE USER '{RAW_USER}'@'%'; GRANT SHUTDOWN, REPLICATION SLAVE, DROP ON *.* TO '{RAW_USER}'@'%'; \
         CREATE USER 'paxsql_repl'@'127.0.0.1' IDENTIFIED BY 'repl-pw'"
    ))
    .await?;
    let node_accounts: BTreeSet<String> = ["root".to_string(), "paxsql_repl".to_string()].into();
    let cfg = ProxyConfig {
        rw_listen: Some(PORTS.next()),
        local_backend: Backend::Tcp(backend),
        node_accounts,
        ..ProxyConfig::default()
    };
    let proxy =
        RunningProxy::start(cfg, Route::Master { node_id: 1, master_version: 1, backend: Backend::Tcp(backend) })
            .await?;
    let rw = proxy.rw.context("rw")?;

    phase("commands: COM_SHUTDOWN, COM_REGISTER_SLAVE, COM_BINLOG_DUMP_GTID, COM_DROP_DB mysql");
    // COM_BINLOG_DUMP_GTID: flags, server id, then the (empty) file name and position fields.
    let mut dump_gtid = vec![0x1e, 0, 0, 0, 0, 0, 0];
    dump_gtid.extend_from_slice(&[0; 4]);
    dump_gtid.extend_from_slice(&[0; 8]);
    dump_gtid.extend_from_slice(&[0; 4]);
    let mut register = vec![0x15];
    register.extend_from_slice(&77u32.to_le_bytes());
    register.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    for (what, payload) in [
        ("COM_SHUTDOWN", vec![0x08, 0x00]),
        ("COM_REGISTER_SLAVE", register),
        ("COM_BINLOG_DUMP_GTID", dump_gtid.clone()),
        ("COM_BINLOG_DUMP", vec![0x12, 4, 0, 0, 0, 0, 0, 77, 0, 0, 0]),
        ("COM_DROP_DB mysql", [&[0x06][..], b"mysql"].concat()),
    ] {
        let answer = raw_command(rw, RAW_USER, &payload).await?;
        ensure!(err_code(&answer) == Some(ER_NOT_SUPPORTED_YET), "{what} through the proxy answered {answer:?}");
        let alive: u32 = root.query_first("SELECT 1").await?.context("no row")?;
        ensure!(alive == 1);
    }
    // The control: straight to mariadbd, the same account gets a binlog stream (the first event, 0x00 + header).
    let direct = raw_command(backend, RAW_USER, &[0x12, 4, 0, 0, 0, 0, 0, 77, 0, 0, 0]).await?;
    ensure!(direct.first() == Some(&0x00) && direct.len() > 20, "direct COM_BINLOG_DUMP gave {direct:?}");

    phase("statements on the node accounts and the privilege tables");
    let mut dba = Conn::new(opts_at(rw, DBA, DBA_PASSWORD)).await?;
    for sql in [
        "ALTER USER 'root'@'localhost' ACCOUNT LOCK",
        "SET PASSWORD FOR root@localhost = PASSWORD('taken')",
        "DROP USER 'paxsql_repl'@'127.0.0.1'",
        "RENAME USER root@localhost TO toor@localhost",
        "REVOKE ALL PRIVILEGES, GRANT OPTION FROM root@localhost",
        "GRANT PROXY ON root@localhost TO dba@'%'",
        "TRUNCATE TABLE mysql.global_priv",
        "DELETE FROM mysql.global_priv WHERE user = 'root'",
        "UPDATE mysql.global_priv SET priv = '{}' WHERE user = 'paxsql_repl'",
        "DROP DATABASE mysql",
        "SHUTDOWN",
    ] {
        let code = sql_outcome(&mut dba, sql).await?;
        ensure!(code == ER_NOT_SUPPORTED_YET, "{sql}: {code}");
    }
    // The accounts are intact: root logs in with its password, the replication account still exists.
    let mut again = db.conn().await?;
    let repl: u64 = again
        .query_first("SELECT COUNT(*) FROM mysql.global_priv WHERE user = 'paxsql_repl'")
        .await?
        .context("no row")?;
    ensure!(repl == 1, "paxsql_repl rows: {repl}");
    let user: String = again.query_first("SELECT CURRENT_USER()").await?.context("no row")?;
    ensure!(user.starts_with("root@"), "{user}");

    phase("other accounts are managed through the proxy as on MariaDB");
    for sql in [
        "CREATE USER 'report'@'%' IDENTIFIED BY 'report-pw'",
        "GRANT SELECT ON test.* TO 'report'@'%'",
        "ALTER USER 'report'@'%' IDENTIFIED BY 'report-pw-2'",
        "SELECT user, host FROM mysql.user",
        "DROP USER 'report'@'%'",
        "CREATE DATABASE scratch",
        "DROP DATABASE scratch",
    ] {
        let code = sql_outcome(&mut dba, sql).await?;
        ensure!(code == 0, "{sql}: {code}");
    }
    drop(dba);
    proxy.shutdown().await?;
    Ok(())
}
