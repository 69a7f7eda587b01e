//! Streaming a mixed workload (DDL, multi-statement transactions, concurrent sessions, many tables, a
//! non-transactional table, rows of 20 and 40 MiB that arrive as multi-chunk packets) while ACKing as we go:
//! the assembled transactions are exactly GTIDs 0-1-1..N, and their bytes are exactly the master's binlog.

mod common;

use std::time::Duration;

use common::*;
use paxsql_binlog::{event_type, split_event, Checksum, EventDecoder, Gtid};
use paxsql_mariadb_testkit::mysql_async::prelude::Queryable;
use paxsql_repl_client::{ReplicationClient, Transaction};

const SESSIONS: usize = 4;
const TRX_PER_SESSION: usize = 25;
const TABLES: usize = 8;
const BIG_ROWS_MIB: [usize; 2] = [20, 40];

async fn workload(master: &paxsql_mariadb_testkit::MariaDb) -> anyhow::Result<()> {
    let mut ddl = master.conn().await?;
    ddl.query_drop("CREATE DATABASE w").await?;
    for t in 0..TABLES {
        ddl.query_drop(format!("CREATE TABLE w.t{t} (id INT AUTO_INCREMENT PRIMARY KEY, k INT, v VARCHAR(100))"))
            .await?;
    }
    ddl.query_drop("CREATE TABLE w.big (id INT PRIMARY KEY, b LONGBLOB) ENGINE=InnoDB").await?;
    ddl.query_drop("CREATE TABLE w.aria (id INT PRIMARY KEY) ENGINE=Aria").await?;

    let mut sessions = Vec::new();
    for s in 0..SESSIONS {
        let mut conn = master.conn().await?;
        sessions.push(tokio::spawn(async move {
            for i in 0..TRX_PER_SESSION {
                let (a, b) = ((s + i) % TABLES, (s + i + 1) % TABLES);
                conn.query_drop("BEGIN").await?;
                conn.query_drop(format!("INSERT INTO w.t{a} (k, v) VALUES ({i}, 'session {s} trx {i}')")).await?;
                // By primary key: concurrent sessions touch the same tables and must not deadlock.
                conn.query_drop(format!("UPDATE w.t{a} SET k = k + 1 WHERE id = LAST_INSERT_ID()")).await?;
                conn.query_drop(format!("INSERT INTO w.t{b} (k, v) VALUES ({i}, REPEAT('y', 90))")).await?;
                conn.query_drop("COMMIT").await?;
                if i % 10 == 5 {
                    conn.query_drop(format!("CREATE TABLE w.extra_{s}_{i} (x INT)")).await?;
                    conn.query_drop(format!("DROP TABLE w.extra_{s}_{i}")).await?;
                }
            }
            anyhow::Ok(())
        }));
    }
    for (id, mib) in BIG_ROWS_MIB.iter().enumerate() {
        ddl.query_drop(format!("INSERT INTO w.big VALUES ({id}, REPEAT('x', {mib} * 1024 * 1024))")).await?;
    }
    ddl.query_drop("INSERT INTO w.aria VALUES (1), (2)").await?;
    ddl.query_drop("ALTER TABLE w.t0 ADD INDEX k (k)").await?;
    for s in sessions {
        s.await??;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_workload_streams_as_consecutive_transactions() -> anyhow::Result<()> {
    phase("master with max_allowed_packet=64M; our client as its semi-sync replica");
    let master = start_master(&["max_allowed_packet=64M"])?;
    let client = ReplicationClient::connect(client_opts(&master)).await?;
    let (ack, mut rx, _reader) = spawn_reader(client);

    phase("run the workload while ACKing every transaction as it arrives");
    let master_ref = &master;
    let work = workload(master_ref);
    tokio::pin!(work);
    let mut trxs: Vec<Transaction> = Vec::new();
    let mut work_done = false;
    let mut last_seq: Option<u64> = None;
    while last_seq.is_none_or(|n| trxs.last().map(|t| t.gtid.seq_no) != Some(n)) {
        tokio::select! {
            result = &mut work, if !work_done => {
                result?;
                work_done = true;
                let pos: String = master.query_value("SELECT @@gtid_binlog_pos")?;
                let gtid: Gtid = pos.parse()?;
                eprintln!("workload done at {gtid}, {} transactions received so far", trxs.len());
                last_seq = Some(gtid.seq_no);
            }
            trx = tokio::time::timeout(Duration::from_secs(60), next_trx(&mut rx)) => {
                let trx = trx??;
                if trx.ack_requested {
                    ack.ack(&trx.end_file, trx.end_pos)?;
                }
                trxs.push(trx);
            }
        }
    }

    phase("GTIDs are exactly 0-1-1..N, each transaction decodes, and its bytes are the master's binlog");
    let n = trxs.len() as u64;
    let extra_ddl_per_session = 2 * (0..TRX_PER_SESSION).filter(|i| i % 10 == 5).count();
    let expected_n =
        (1 + TABLES + 2 + SESSIONS * (TRX_PER_SESSION + extra_ddl_per_session) + BIG_ROWS_MIB.len() + 2) as u64;
    assert_eq!(n, expected_n, "transaction count");
    for (i, t) in trxs.iter().enumerate() {
        assert_eq!(t.gtid, Gtid::new(0, 1, i as u64 + 1), "transaction #{i}");
        assert!(t.ack_requested, "{}: every transaction waits for an ACK on this master", t.gtid);
    }
    let binlog = std::fs::read(master.data_dir().join(trxs[0].end_file.as_ref()))?;
    let mut big_events = 0;
    let mut last_end = 0;
    for t in &trxs {
        assert!(t.end_pos > last_end, "{}: positions increase", t.gtid);
        last_end = t.end_pos;
        let start = t.end_pos as usize - t.events.len();
        assert!(
            binlog.get(start..t.end_pos as usize) == Some(&t.events[..]),
            "{}: bytes differ from the binlog file",
            t.gtid
        );
        let mut decoder = EventDecoder::new(Checksum::Crc32);
        let (mut rest, mut count, mut types) = (&t.events[..], 0, Vec::new());
        while !rest.is_empty() {
            let (event, tail) = split_event(rest)?;
            let decoded = decoder.decode(event)?;
            types.push(decoded.header.type_code);
            if event.len() > 16 << 20 {
                big_events += 1;
            }
            rest = tail;
            count += 1;
        }
        assert_eq!(count, t.event_count);
        assert_eq!(types[0], event_type::GTID);
        let last = *types.last().unwrap_or(&0);
        assert!(last == event_type::XID || last == event_type::QUERY, "{}: ends with type {last}", t.gtid);
    }
    assert_eq!(big_events, BIG_ROWS_MIB.len(), "row events larger than 16 MiB");
    Ok(())
}
