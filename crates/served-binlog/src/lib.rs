//! The served global binlog on disk.
//!
//! Place in the system (docs/ARCHITECTURE.md §4): every node applies the chosen global log and appends each
//! transaction here; the node's replication server ([`paxsql_repl_server`]) serves its local mariadbd from it through
//! the [`EventSource`](paxsql_repl_server::EventSource) trait. The Paxos log stays the durable truth: this is a copy
//! laid out for serving (whole transactions in log order, a GTID index, the tail in memory), kept on disk so a node's
//! memory does not grow with history, and re-filled from the Paxos log's replay after a crash. The node syncs it
//! before the Paxos log compacts, so the replay always covers whatever a crash took from it.
//!
//! Memory is bounded by the tail cache, the active segment's index and at most two sealed segments' indexes; a
//! restart reads the active segment and a small summary per sealed one, whatever the history.

mod conformance_impl;
mod error;
mod lookup_clock;
mod segment;
mod store;

pub use error::{Error, Result};
pub use lookup_clock::LookupTime;
pub use store::{ServedBinlog, ServedBinlogConfig, ServedBinlogStats};
