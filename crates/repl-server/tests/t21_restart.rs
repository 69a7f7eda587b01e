//! The replica restarts cleanly (STOP SLAVE sends KILL <dump id> on a second connection) and with kill -9 in
//! the middle of a backlog, and resumes from its @@gtid_slave_pos without gaps or duplicates (gtid_strict_mode
//! would stop it on either: error 1950 or a duplicate key).

mod common;

use std::time::{Duration, Instant};

use common::*;
use paxsql_mariadb_testkit::ReplicationSource;

fn seq_of(pos: &str) -> u64 {
    pos.rsplit('-').next().and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[test]
fn replica_resumes_after_clean_restart_and_kill9() -> anyhow::Result<()> {
    init_tracing();
    phase("source workload, first half served");
    let source = start_source()?;
    let served = Served::start(Served::config(100))?;
    served.block_on(workload(&source, 0, 400, 4, 50, false))?;
    let all = read_transactions(&source, "mariadb-bin")?;
    let total = all.len();
    let mut rest = all.into_iter();
    for trx in rest.by_ref().take(total / 4) {
        served.source.append(trx)?;
    }
    let mut replica = start_replica(3)?;
    replica.change_master(&ReplicationSource::loopback(served.port, REPL_USER, REPL_PASSWORD))?;
    replica.start_slave()?;
    let first = served.source.gtid_pos().to_string();
    wait_caught_up(&replica, &first, Duration::from_secs(120))?;

    phase("STOP SLAVE (KILL on a second connection) and START SLAVE");
    replica.stop_slave()?;
    for trx in rest.by_ref().take(total / 4) {
        served.source.append(trx)?;
    }
    replica.start_slave()?;
    wait_caught_up(&replica, &served.source.gtid_pos().to_string(), Duration::from_secs(120))?;

    phase("clean restart of the replica while new transactions arrive");
    replica.stop()?;
    for trx in rest.by_ref().take(total / 8) {
        served.source.append(trx)?;
    }
    replica.restart()?;
    wait_caught_up(&replica, &served.source.gtid_pos().to_string(), Duration::from_secs(120))?;

    phase("kill -9 of the replica in the middle of the remaining backlog");
    let before = seq_of(&replica.gtid_slave_pos()?);
    for trx in rest.by_ref() {
        served.source.append(trx)?;
    }
    let target = before + 5;
    let deadline = Instant::now() + Duration::from_secs(60);
    while seq_of(&replica.gtid_slave_pos()?) < target && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let at_kill = replica.gtid_slave_pos()?;
    replica.kill9()?;
    eprintln!("    killed at {at_kill}, log ends at {}", served.source.gtid_pos());
    replica.restart()?;
    let want = source.gtid_binlog_pos()?;
    assert_eq!(served.source.gtid_pos().to_string(), want);
    wait_caught_up(&replica, &want, Duration::from_secs(180))?;
    assert_same_data(&source, &replica)?;
    assert_eq!(status(&replica, "Slave_SQL_Running"), "Yes");
    Ok(())
}
