//! The crate's one error type.

use std::path::PathBuf;

use thiserror::Error;

/// What can go wrong opening, appending to or reading the served binlog.
#[derive(Debug, Error)]
pub enum Error {
    /// A file operation failed (disk full, permissions, a vanished directory).
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A file holds something this format never writes (a torn tail is not this: it is cut off at open).
    #[error("{path}: {what} (byte {offset})")]
    Corrupt { path: PathBuf, what: &'static str, offset: u64 },

    /// A transaction the log refuses: out of GTID order, or not a valid event group.
    #[error(transparent)]
    Log(#[from] paxsql_repl_server::Error),

    /// A part of a transaction that does not continue the one being received (the global log refuses such parts,
    /// so this is a bug or a corrupt log; the part changes nothing).
    #[error("part of {gtid} at byte {offset} does not continue {open}")]
    PartOutOfOrder { gtid: paxsql_binlog::Gtid, offset: u64, open: String },

    /// A configuration value is unusable.
    #[error("invalid served-binlog configuration: {0}")]
    Config(String),
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;
