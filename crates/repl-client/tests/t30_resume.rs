//! Reconnecting from a GTID state (what the binlog server does after any stream error): the stream continues
//! right after the given GTID with no duplicates, a transaction that was waiting for an ACK when the old
//! connection died is resent and released by an ACK on the new one, and an unknown GTID is a typed 1236.

mod common;

use std::time::Duration;

use common::*;
use paxsql_binlog::{event_flags, event_type, EventData, Gtid, GtidSet};
use paxsql_mariadb_testkit::mysql_async::prelude::Queryable;
use paxsql_repl_client::{Error, ReplicationClient};

fn gtids(s: &str) -> GtidSet {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_from_gtid_continues_without_duplicates() -> anyhow::Result<()> {
    phase("write transactions 0-1-1..10 through a first connection");
    let master = start_master(&[])?;
    let (ack, mut rx, reader) = spawn_reader(ReplicationClient::connect(client_opts(&master)).await?);
    commit_with_ack(&master, &mut rx, &ack, "CREATE DATABASE r").await?;
    commit_with_ack(&master, &mut rx, &ack, "CREATE TABLE r.t (id INT PRIMARY KEY)").await?;
    let mut last_end = 0;
    for id in 3..=10 {
        last_end = commit_with_ack(&master, &mut rx, &ack, &format!("INSERT INTO r.t VALUES ({id})")).await?.end_pos;
    }
    reader.abort();
    let _ = reader.await;
    // The handle's writer task notices the dropped client asynchronously: allow it a moment. Probe with a position
    // just past what was acknowledged: should a probe still get through, it must not pre-acknowledge future commits
    // (an ACK far ahead, as this test once sent, made MariaDB skip the ACK request of later commits).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while ack.ack("mariadb-bin.000001", last_end + 1).is_ok() {
        assert!(std::time::Instant::now() < deadline, "ACK handle of a dropped client must fail");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    phase("resume after 0-1-5: the opening events, an artificial GTID_LIST at the resume point, then 6..10");
    let (ack, mut rx, reader) = spawn_reader(ReplicationClient::resume(client_opts(&master), gtids("0-1-5")).await?);
    let mut opening = Vec::new();
    loop {
        match tokio::time::timeout(PROMPT, rx.recv()).await?.ok_or_else(|| anyhow::anyhow!("reader ended"))? {
            Item::Event(e) if e.gtid().is_none() => opening.push(e),
            Item::Event(e) => {
                assert_eq!(e.gtid(), Some(Gtid::new(0, 1, 6)), "first GTID after resuming from 0-1-5");
                break;
            }
            Item::Trx(t) => anyhow::bail!("transaction {} before any GTID event", t.gtid),
        }
    }
    let types: Vec<u8> = opening.iter().map(|e| e.type_code()).collect();
    assert_eq!(
        types,
        [
            event_type::ROTATE,
            event_type::FORMAT_DESCRIPTION,
            event_type::GTID_LIST,
            event_type::BINLOG_CHECKPOINT,
            event_type::GTID_LIST
        ]
    );
    let resume_point = &opening[4];
    assert!(resume_point.header.flags & event_flags::ARTIFICIAL != 0);
    assert!(matches!(&resume_point.data, Some(EventData::GtidList(l)) if l.gtids == [Gtid::new(0, 1, 5)]));
    let mut seen = Vec::new();
    for _ in 6..=10 {
        seen.push(next_trx(&mut rx).await?.gtid.seq_no);
    }
    assert_eq!(seen, [6, 7, 8, 9, 10]);

    // MariaDB switches semi-sync back on only once a reconnected replica has caught up with the binlog end; a commit
    // made before that is sent without an ACK request (seen once in CI). A paxsql master must likewise wait for
    // this before it accepts writes.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status: Vec<(String, String)> = master.query("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_status'")?;
        if status.first().is_some_and(|(_, v)| v == "ON") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "semi-sync master did not switch back on: {status:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    phase("a new commit arrives once, right after");
    let t11 = commit_with_ack(&master, &mut rx, &ack, "INSERT INTO r.t VALUES (11)").await?;
    assert_eq!(t11.gtid, Gtid::new(0, 1, 11));
    assert!(tokio::time::timeout(Duration::from_millis(500), next_trx(&mut rx)).await.is_err(), "duplicate");

    phase("the connection dies while a commit waits; the resumed stream resends it and our ACK releases it");
    let mut conn = master.conn().await?;
    let mut waiting = tokio::spawn(async move { conn.query_drop("INSERT INTO r.t VALUES (12)").await });
    let t12 = next_trx(&mut rx).await?;
    assert_eq!(t12.gtid, Gtid::new(0, 1, 12));
    reader.abort();
    let _ = reader.await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "the commit returned without any ACK");
    let (ack, mut rx, reader) = spawn_reader(ReplicationClient::resume(client_opts(&master), gtids("0-1-11")).await?);
    let again = next_trx(&mut rx).await?;
    assert_eq!((again.gtid, &again.events, again.end_pos), (t12.gtid, &t12.events, t12.end_pos));
    assert!(!waiting.is_finished());
    ack.ack(&again.end_file, again.end_pos)?;
    tokio::time::timeout(PROMPT, &mut waiting).await???;
    reader.abort();
    let _ = reader.await;

    phase("resume from the end: nothing until the next commit; heartbeats surface when asked for");
    let mut opts = client_opts(&master);
    opts.surface_heartbeats = true;
    opts.heartbeat_period = Duration::from_millis(200);
    opts.idle_timeout = Some(Duration::from_secs(2));
    let mut client = ReplicationClient::resume(opts, gtids("0-1-12")).await?;
    let heartbeat = loop {
        let e = tokio::time::timeout(PROMPT, client.next_event()).await??;
        assert!(e.gtid().is_none(), "unexpected transaction {:?}", e.gtid());
        if e.is_heartbeat() {
            break e;
        }
    };
    assert_eq!((heartbeat.file.as_ref(), heartbeat.end_pos), (again.end_file.as_ref(), again.end_pos));
    drop(client);

    phase("unknown GTIDs are refused with a typed 1236");
    for start in ["0-1-999999999", "0-7-5"] {
        match ReplicationClient::resume(client_opts(&master), gtids(start)).await {
            Err(Error::Server { code: 1236, message, .. }) => {
                assert!(message.contains(start) && message.contains("not in the master's binlog"), "{message}");
                eprintln!("{start}: {message}");
            }
            other => anyhow::bail!("{start}: expected error 1236, got {other:?}"),
        }
    }
    Ok(())
}
