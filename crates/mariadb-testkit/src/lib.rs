//! Real `mariadbd` servers for paxsql's tests.
//!
//! paxsql runs an unmodified MariaDB 10.11 next to each node's binlog server (docs/ARCHITECTURE.md §1). Everything that talks
//! to MariaDB — the binlog capture on the master, the replication server that feeds replicas, the proxy, the
//! failover and crash-recovery paths — is tested against real servers, and this crate is how tests get them:
//! [`MariaDb::start`] initialises a data dir with `mariadb-install-db`, writes an option file following the
//! verified recipe (docs/ARCHITECTURE.md §3, [`Profile`]), starts `mariadbd` on a free 127.0.0.1 port and waits until root can
//! log in. Tests then crash it ([`MariaDb::kill9`]), restart it on the same data dir ([`MariaDb::restart`]), and
//! run SQL through blocking helpers or async `mysql_async` connections. Dropping a [`MariaDb`] always kills
//! the process and removes its temp dir, also when the test panics.
//!
//! A missing MariaDB installation is an error naming `deploy/install-deps.sh`, never a skipped test.
//!
//! ```no_run
//! use paxsql_mariadb_testkit::{MariaDb, MariaDbOptions, ReplicationSource};
//! # fn main() -> Result<(), paxsql_mariadb_testkit::TestkitError> {
//! let master = MariaDb::start(MariaDbOptions::master(1))?;
//! master.create_replication_user("repl", "replpw")?; // sql_log_bin=0: no semi-sync wait
//! let replica = MariaDb::start(MariaDbOptions::replica(2))?;
//! replica.change_master(&ReplicationSource::loopback(master.port(), "repl", "replpw"))?;
//! replica.start_slave()?;
//! master.wait_semi_sync_clients(1, std::time::Duration::from_secs(30))?;
//! // Commits on the master now wait for the replica's ACK instead of blocking forever.
//! master.exec("CREATE TABLE test.t (id INT PRIMARY KEY)")?;
//! # Ok(()) }
//! ```
//!
//! Memory: each server uses a 32 MiB buffer pool and about 90 MiB RSS, so a 5-node cluster plus baselines fits
//! easily; override sizes with [`MariaDbOptions::with_config_line`] for benchmarks.

mod admin;
mod config;
mod error;
mod server;
mod spawner;
mod sql;

pub use admin::{quote, ReplicationSource};
pub use config::{MariaDbOptions, Profile, DEFAULT_SQL_TIMEOUT, DEFAULT_START_TIMEOUT};
pub use error::TestkitError;
pub use mysql_async;
pub use server::{MariaDb, ROOT_PASSWORD};
