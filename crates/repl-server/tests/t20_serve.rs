//! A real MariaDB replica replicates from our server fed with events captured from a real MariaDB source:
//! backlog (DDL, multi-statement transactions, a 17 MiB row, group commits), then live appends; parallel
//! (optimistic, 4 threads) apply with the source's commit ids preserved; virtual binlog rotation.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use paxsql_binlog::{BinlogEvent, Checksum, EventData, Gtid};
use paxsql_mariadb_testkit::ReplicationSource;

/// (flags2, commit_id) of every GTID event.
fn commit_ids(trxs: &[paxsql_repl_server::Transaction]) -> BTreeMap<Gtid, (u8, Option<u64>)> {
    trxs.iter()
        .map(|t| match BinlogEvent::decode(&t.events[0], Checksum::Crc32).map(|e| e.data) {
            Ok(EventData::Gtid(g)) => (t.gtid, (g.flags2, g.commit_id)),
            other => panic!("{}: first event {other:?}", t.gtid),
        })
        .collect()
}

#[test]
fn replica_replicates_backlog_and_live_appends_with_parallel_apply() -> anyhow::Result<()> {
    init_tracing();
    phase("source: mixed workload with a 17 MiB row and group commits");
    let source = start_source()?;
    let mut config = Served::config(100);
    // Small virtual files, so the stream rotates several times (a ROTATE plus a new opening each time).
    config.virtual_file_bytes_max = 256 * 1024;
    let served = Served::start(config)?;
    served.block_on(workload(&source, 0, 150, 8, 40, true))?;
    let n = feed_new(&source, &served.source)?;
    let trxs = read_transactions(&source, "mariadb-bin")?;
    let biggest = trxs.iter().flat_map(|t| t.events.iter()).map(|e| e.len()).max().unwrap_or(0);
    assert!(biggest > 16 * 1024 * 1024, "no event above 16 MiB (biggest {biggest})");
    let source_ids = commit_ids(&trxs);
    let grouped = source_ids.values().filter(|(_, c)| c.is_some()).count();
    eprintln!("    {n} transactions, biggest event {biggest} bytes, {grouped} with a commit_id");
    assert!(grouped > 0, "the workload produced no group commit (no commit_id): parallel check would be void");

    phase("replica (4 optimistic parallel threads) replicates the backlog from our server");
    let replica = start_replica(2)?;
    replica.change_master(&ReplicationSource::loopback(served.port, REPL_USER, REPL_PASSWORD))?;
    replica.start_slave()?;
    let want = source.gtid_binlog_pos()?;
    wait_caught_up(&replica, &want, Duration::from_secs(180))?;
    assert_eq!(replica.gtid_slave_pos()?, want);
    assert_same_data(&source, &replica)?;

    phase("live: new transactions appended while the replica waits (heartbeats in between)");
    std::thread::sleep(Duration::from_millis(2500));
    served.block_on(workload(&source, 1, 60, 4, 20, true))?;
    let n = feed_new(&source, &served.source)?;
    eprintln!("    appended {n} more");
    let want = source.gtid_binlog_pos()?;
    wait_caught_up(&replica, &want, Duration::from_secs(120))?;
    assert_same_data(&source, &replica)?;
    assert_eq!(status(&replica, "Slave_IO_Running"), "Yes");
    assert_eq!(status(&replica, "Slave_SQL_Running"), "Yes");
    let master_file = status(&replica, "Master_Log_File");
    assert!(master_file.starts_with("paxsql-bin.") && master_file.as_str() > "paxsql-bin.000002", "{master_file}");

    phase("the relay log holds the source's GTID flags2 and commit_id for every transaction");
    let relayed = read_transactions(&replica, "mariadb-bin-relay")?;
    let relayed_ids = commit_ids(&relayed);
    let all_source = commit_ids(&read_transactions(&source, "mariadb-bin")?);
    assert_eq!(relayed_ids.len(), all_source.len(), "relay log has a different number of transactions");
    assert_eq!(relayed_ids, all_source);
    // And the bytes are the source's, except log_pos and the CRC.
    let source_trxs = read_transactions(&source, "mariadb-bin")?;
    for (a, b) in source_trxs.iter().zip(&relayed) {
        assert_eq!(a.gtid, b.gtid);
        let a_events: Vec<&bytes::Bytes> = a.events.iter().collect();
        assert_eq!(a_events.len(), b.events.len(), "{}", a.gtid);
        for (x, y) in a.events.iter().zip(&b.events) {
            assert_eq!(x.len(), y.len());
            assert!(x[..13] == y[..13] && x[17..x.len() - 4] == y[17..y.len() - 4], "{}: event differs", a.gtid);
        }
    }
    drop(replica);
    drop(served);
    Ok(())
}
