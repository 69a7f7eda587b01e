//! A real MariaDB → MariaDB semi-sync replication pair built from the two profiles: proves that the profiles
//! and setup helpers fit together the way docs/ARCHITECTURE.md §3/§4 needs them.

use std::time::Duration;

use anyhow::ensure;
use paxsql_mariadb_testkit::{MariaDb, MariaDbOptions, ReplicationSource};

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn semi_sync_replica_acks_master_commits_and_applies_them() -> anyhow::Result<()> {
    eprintln!("t10: master profile + replica profile, replication account created with sql_log_bin=0");
    let master = MariaDb::start(MariaDbOptions::master(1))?;
    let replica = MariaDb::start(MariaDbOptions::replica(2))?;
    master.create_replication_user("repl", "replpw")?;

    eprintln!("t10: CHANGE MASTER ... MASTER_USE_GTID=slave_pos; the replica registers as semi-sync client");
    replica.change_master(&ReplicationSource::loopback(master.port(), "repl", "replpw"))?;
    replica.start_slave()?;
    replica.wait_slave_running(WAIT)?;
    master.wait_semi_sync_clients(1, WAIT)?;
    let status = replica.slave_status()?.unwrap_or_default();
    ensure!(status.get("Using_Gtid").map(String::as_str) == Some("Slave_Pos"), "{status:?}");
    ensure!(status.get("Parallel_Mode").map(String::as_str) == Some("optimistic"), "{status:?}");

    eprintln!("t10: master commits return (ACKed by the replica) instead of blocking");
    master.exec_batch(&["CREATE DATABASE app", "CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(20))"])?;
    master.exec("INSERT INTO app.t VALUES (1, 'replicated'), (2, 'too')")?;
    let acked = master.query_first::<(String, String)>("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_yes_tx'")?;
    let acked: u64 = acked.map(|(_, v)| v).unwrap_or_default().parse()?;
    ensure!(acked >= 3, "{acked} semi-sync ACKed transactions, want 3");

    eprintln!("t10: the replica applies them (MASTER_GTID_WAIT) with the master's GTIDs");
    let pos = master.gtid_binlog_pos()?;
    ensure!(pos == "0-1-3", "{pos}");
    replica.wait_for_gtid(&pos, WAIT)?;
    ensure!(replica.gtid_slave_pos()? == pos);
    // log_slave_updates: the replica's own binlog carries the same GTIDs (a replica can be promoted).
    ensure!(replica.gtid_binlog_pos()? == pos);
    let rows = replica.query::<(i64, String)>("SELECT id, v FROM app.t ORDER BY id")?;
    ensure!(rows == vec![(1, "replicated".into()), (2, "too".into())], "{rows:?}");

    eprintln!("t10: the replica's applier is not blocked by semi-sync (its semi-sync master is off)");
    master.exec("UPDATE app.t SET v = 'changed' WHERE id = 2")?;
    replica.wait_for_gtid(&master.gtid_binlog_pos()?, WAIT)?;
    ensure!(replica.query_value::<String>("SELECT v FROM app.t WHERE id = 2")? == "changed");
    replica.stop_slave()?;
    Ok(())
}
