//! Semi-sync against a real master (docs/ARCHITECTURE.md §3 steps 1-4): a commit blocks until OUR ACK, no other session
//! (REPEATABLE READ, READ COMMITTED) sees it before, and it returns and becomes visible after.

mod common;

use std::time::Duration;

use common::*;
use paxsql_mariadb_testkit::mysql_async::prelude::Queryable;
use paxsql_mariadb_testkit::mysql_async::Conn;
use paxsql_repl_client::ReplicationClient;

async fn count(conn: &mut Conn, isolation: &str) -> anyhow::Result<i64> {
    conn.query_drop(format!("SET SESSION TRANSACTION ISOLATION LEVEL {isolation}")).await?;
    let n: Option<i64> = conn.query_first("SELECT COUNT(*) FROM t.a WHERE id = 1").await?;
    Ok(n.unwrap_or(-1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_waits_for_our_ack_and_is_invisible_until_then() -> anyhow::Result<()> {
    phase("start a master-profile server and connect as its semi-sync replica");
    let master = start_master(&[])?;
    let client = ReplicationClient::connect(client_opts(&master)).await?;
    assert_eq!(client.server().server_id, 1);
    assert!(client.server().server_version.contains("MariaDB"), "{:?}", client.server());
    assert_eq!(client.current_file(), "mariadb-bin.000001");
    let (ack, mut rx, reader) = spawn_reader(client);
    let semi_sync_clients: String = master.query_value("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_CLIENTS'")?;
    assert_eq!(semi_sync_clients, "1");

    phase("DDL waits for the ACK too (it is already done in the engine, docs/ARCHITECTURE.md §3)");
    let t1 = commit_with_ack(&master, &mut rx, &ack, "CREATE DATABASE t").await?;
    let t2 =
        commit_with_ack(&master, &mut rx, &ack, "CREATE TABLE t.a (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB")
            .await?;
    assert_eq!((t1.gtid.to_string(), t2.gtid.to_string()), ("0-1-1".into(), "0-1-2".into()));
    assert_eq!(t1.event_count, 2, "standalone DDL: GTID + QUERY");

    phase("an INSERT blocks until our ACK; RR and RC readers do not see it, RU does");
    let mut writer = master.conn().await?;
    let mut insert =
        tokio::spawn(async move { writer.query_drop("INSERT INTO t.a VALUES (1, 'blocked')").await.map(|_| writer) });
    let trx = next_trx(&mut rx).await?;
    assert_eq!(trx.gtid.to_string(), "0-1-3");
    assert!(trx.ack_requested && trx.end_file.as_ref() == "mariadb-bin.000001", "{trx:?}");
    // Hold the ACK a while, as a slow Paxos round would: the commit must stay blocked all along.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!insert.is_finished(), "the INSERT returned without our ACK");
    let mut reader_conn = master.conn().await?;
    assert_eq!(count(&mut reader_conn, "REPEATABLE READ").await?, 0, "REPEATABLE READ saw an un-ACKed row");
    assert_eq!(count(&mut reader_conn, "READ COMMITTED").await?, 0, "READ COMMITTED saw an un-ACKed row");
    // Known hazard (docs/ARCHITECTURE.md §3, docs/evidence/semisync-wait.md): dirty reads see the waiting row. Asserted so a change in MariaDB shows.
    assert_eq!(count(&mut reader_conn, "READ UNCOMMITTED").await?, 1);
    let binlog_pos: String = master.query_value("SELECT @@gtid_binlog_pos")?;
    assert_eq!(binlog_pos, "0-1-3", "gtid_binlog_pos includes the waiting transaction");

    phase("ACK from this task (the reader keeps running): the commit returns and the row is visible");
    ack.ack(&trx.end_file, trx.end_pos)?;
    tokio::time::timeout(PROMPT, &mut insert).await??.map_err(|e| anyhow::anyhow!("INSERT: {e}"))?;
    assert_eq!(count(&mut reader_conn, "REPEATABLE READ").await?, 1);
    assert_eq!(count(&mut reader_conn, "READ COMMITTED").await?, 1);
    let (file, pos): (String, u64) = master
        .query_first::<(String, u64, String, String)>("SHOW MASTER STATUS")?
        .map(|(f, p, _, _)| (f, p))
        .ok_or_else(|| anyhow::anyhow!("no SHOW MASTER STATUS row"))?;
    assert_eq!((file.as_str(), pos), (trx.end_file.as_ref(), trx.end_pos), "the ACKed position is the binlog end");

    phase("one ACK for the later of two waiting commits releases both (ACKs are cumulative)");
    let mut c2 = master.conn().await?;
    let mut c3 = master.conn().await?;
    let mut s2 = tokio::spawn(async move { c2.query_drop("INSERT INTO t.a VALUES (2, 'two')").await });
    let first = next_trx(&mut rx).await?;
    let mut s3 = tokio::spawn(async move { c3.query_drop("INSERT INTO t.a VALUES (3, 'three')").await });
    let second = next_trx(&mut rx).await?;
    assert!(first.end_pos < second.end_pos);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!s2.is_finished() && !s3.is_finished());
    ack.ack(&second.end_file, second.end_pos)?;
    tokio::time::timeout(PROMPT, &mut s2).await???;
    tokio::time::timeout(PROMPT, &mut s3).await???;
    // An older position after a newer one is ignored, not an error.
    ack.ack(&first.end_file, first.end_pos)?;

    phase("the stream ends with a typed error when the master dies; ACK handles then fail");
    drop(reader_conn);
    let mut master = master;
    master.kill9()?;
    let err = tokio::time::timeout(PROMPT, reader).await??;
    assert!(
        matches!(err, paxsql_repl_client::Error::Disconnected { .. } | paxsql_repl_client::Error::Io { .. }),
        "{err:?}"
    );
    // The handle's writer task learns of the closed connection asynchronously: allow it a moment (CI machines
    // are busy; a fixed 200 ms sleep was flaky).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while ack.ack(&second.end_file, second.end_pos + 1).is_ok() {
        assert!(std::time::Instant::now() < deadline, "ACK after the connection closed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
