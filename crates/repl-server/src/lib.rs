//! MariaDB replication server: serves paxsql's global log to the local mariadbd of a replica node.
//!
//! Place in the system (docs/ARCHITECTURE.md §1, §4 "Serve path"): on every node that is not the master, the local
//! mariadbd is configured `CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=<this server's port>,
//! MASTER_USE_GTID=slave_pos` and replicates the global log from us. We speak the server side of MariaDB's
//! replication protocol natively: handshake and `mysql_native_password` login, answers to every setup query a
//! 10.11 replica's I/O thread sends, `COM_REGISTER_SLAVE`, and `COM_BINLOG_DUMP`, which we serve from an
//! [`EventSource`] (the node implements it over the global log; [`MemoryEventSource`] is for tests) starting
//! after the replica's `@slave_connect_state`. A position we cannot serve exactly — a replica ahead of the log
//! or diverged from it — gets MariaDB's ERR 1236, never a silent skip.
//!
//! Structure (docs/ARCHITECTURE.md §13, "Pure core, thin shell"): [`Session`] (login and commands) and [`DumpStream`] (the event stream at our
//! own virtual binlog positions) are pure state machines — bytes in, bytes out, no IO, no clock; the tokio
//! shell [`ReplicationServer`] only moves bytes, waits, and wires KILL, heartbeats and shutdown.
//!
//! ```no_run
//! use std::sync::Arc;
//! use paxsql_repl_server::{MemoryEventSource, ReplicationServer, ReplicationServerConfig};
//! # async fn demo() -> Result<(), paxsql_repl_server::Error> {
//! let source = Arc::new(MemoryEventSource::new());
//! let config = ReplicationServerConfig {
//!     replica_password: "replpw".into(),
//!     server_id: 100,
//!     ..ReplicationServerConfig::default()
//! };
//! let server = ReplicationServer::bind("127.0.0.1:0".parse().unwrap(), config, Arc::clone(&source)).await?;
//! let (stop, stopped) = tokio::sync::watch::channel(false);
//! let task = tokio::spawn(server.run(stopped));
//! // ... source.append_events(raw_events_of_one_transaction)?; the replica receives them ...
//! stop.send_replace(true);
//! task.await.expect("server task")?;
//! # Ok(()) }
//! ```
//!
//! Answers chosen on purpose: `rpl_semi_sync_master_enabled` is `OFF` (replica nodes get their durability from
//! Paxos, so the replica need not ACK); `@master_binlog_checksum` is `CRC32` (events are served as the master
//! wrote them, with recomputed CRC after the position rewrite); our server_id is configurable and must differ
//! from the replica's.

pub mod conformance;
mod dump;
mod error;
mod server;
mod session;
mod source;

pub use dump::{DumpConfig, DumpStream};
pub use error::{Error, Result};
pub use server::{ReplicationServer, ReplicationServerConfig};
pub use session::{DumpRequest, Session, SessionConfig, Step, BINLOG_DUMP_NON_BLOCK, BINLOG_SEND_ANNOTATE_ROWS_EVENT};
pub use source::{
    missing_gtid_error, transactions_from_binlog, Batch, Cursor, EventSource, MemoryEventSource, Transaction,
};
