//! Errors a replica must see instead of silently wrong data: a wrong password (1045), a position ahead of the
//! log (1236 "not in the master's binlog"), a diverged position (1236 with MariaDB's "diverged" text).

mod common;

use std::time::Duration;

use common::*;
use paxsql_binlog::{synth, BinlogEvent, Checksum, EventData, GtidEvent, Query};
use paxsql_mariadb_testkit::ReplicationSource;

/// A DDL-like transaction 0-1-`seq_no` (never applied: the replicas here fail before streaming).
fn synthetic(seq_no: u64) -> Vec<Vec<u8>> {
    let g = GtidEvent::new(0, seq_no, paxsql_binlog::gtid_flags::STANDALONE, None);
    let g = BinlogEvent::new(1_700_000_000, 1, 0, 8, EventData::Gtid(g), Checksum::Crc32);
    let q = Query { db: b"test".to_vec(), query: b"DO 1".to_vec(), ..Query::default() };
    let q = BinlogEvent::new(1_700_000_000, 1, 0, 0, EventData::Query(q), Checksum::Crc32);
    let _ = synth::BINLOG_FIRST_EVENT_POS;
    vec![g.encode(Checksum::Crc32), q.encode(Checksum::Crc32)]
}

#[test]
fn wrong_password_ahead_and_diverged_positions_are_errors() -> anyhow::Result<()> {
    init_tracing();
    let served = Served::start(Served::config(100))?;
    for seq_no in 1..=5 {
        served.source.append_events(synthetic(seq_no))?;
    }
    let replica = start_replica(4)?;

    phase("wrong password: Last_IO_Errno 1045");
    replica.change_master(&ReplicationSource::loopback(served.port, REPL_USER, "not-the-password"))?;
    replica.start_slave()?;
    let error = wait_io_errno(&replica, "1045", Duration::from_secs(30))?;
    eprintln!("    {error}");
    assert!(error.contains("Access denied"), "{error}");
    replica.stop_slave()?;

    phase("a replica ahead of the log (0-1-999999): Last_IO_Errno 1236, never a silent skip");
    replica.exec("SET GLOBAL gtid_slave_pos = '0-1-999999'")?;
    replica.change_master(&ReplicationSource::loopback(served.port, REPL_USER, REPL_PASSWORD))?;
    replica.start_slave()?;
    let error = wait_io_errno(&replica, "1236", Duration::from_secs(30))?;
    eprintln!("    {error}");
    assert!(error.contains("requested to start from GTID 0-1-999999, which is not in the master's binlog"), "{error}");
    replica.stop_slave()?;

    phase("a diverged replica (0-7-3 where the log has 0-1-3): 1236 'diverged'");
    replica.exec("SET GLOBAL gtid_slave_pos = '0-7-3'")?;
    replica.start_slave()?;
    let error = wait_io_errno(&replica, "1236", Duration::from_secs(30))?;
    eprintln!("    {error}");
    assert!(error.contains("GTID 0-7-3") && error.contains("diverged"), "{error}");
    replica.stop_slave()?;

    phase("an unknown domain (5-1-1): 1236");
    replica.exec("SET GLOBAL gtid_slave_pos = '0-1-5,5-1-1'")?;
    replica.start_slave()?;
    let error = wait_io_errno(&replica, "1236", Duration::from_secs(30))?;
    assert!(error.contains("GTID 5-1-1"), "{error}");
    replica.stop_slave()?;
    Ok(())
}
