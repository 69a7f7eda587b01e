//! The crate's one error type.

use std::net::SocketAddr;

use paxsql_binlog::Gtid;
use thiserror::Error;

/// Everything that can go wrong while serving the global log to a replica.
///
/// Client-input errors ([`Error::PacketTooLarge`], [`Error::Malformed`]) end one connection, never the server.
/// Position errors ([`Error::GtidNotInLog`], [`Error::ReplicaDiverged`], [`Error::GtidPurged`]) are what an
/// [`EventSource`](crate::EventSource) returns from `locate`; the replica receives them as MariaDB's ERR 1236 with
/// MariaDB's own message text ([`Error::replica_message`]), so its `SHOW SLAVE STATUS` reads as with a real master.
#[derive(Debug, Error)]
pub enum Error {
    /// A client packet (after joining 16 MiB chunks) is longer than we accept from a client.
    #[error("client packet of {len} bytes exceeds the limit of {max} bytes")]
    PacketTooLarge { len: usize, max: usize },

    /// A client packet ends early or holds a value the protocol does not allow. `offset` counts from the first
    /// payload byte.
    #[error("malformed client packet: {what} at offset {offset}")]
    Malformed { what: &'static str, offset: usize },

    /// The replica asks to resume after a GTID the log does not hold, and the log holds nothing later in that
    /// domain: the replica is ahead of us (or names a domain we never had). Never skipped silently.
    #[error("GTID {gtid} is not in the log")]
    GtidNotInLog { gtid: Gtid },

    /// The replica's GTID is not in the log although the log has later sequence numbers in its domain: it
    /// executed transactions the log does not hold (MariaDB: "the slave has diverged").
    #[error("GTID {gtid} is not in the log, which has later GTIDs in domain {} (replica diverged)", gtid.domain_id)]
    ReplicaDiverged { gtid: Gtid },

    /// The log no longer holds the transactions after `gtid` (compacted away).
    #[error("the log no longer holds the transactions after GTID {gtid}")]
    GtidPurged { gtid: Gtid },

    /// `@slave_connect_state` is not a GTID position.
    #[error("invalid @slave_connect_state {text:?}: {reason}")]
    InvalidConnectState { text: String, reason: String },

    /// The event source cannot serve right now (storage error, shutting down).
    #[error("event source unavailable: {reason}")]
    SourceUnavailable { reason: String },

    /// A transaction handed to us is not a valid sequence of CRC32-checksummed events starting with a GTID
    /// event. The log is corrupt or the source broke its contract; the dump stops rather than forward it.
    #[error("transaction {gtid:?}: event {index} is corrupt: {source}")]
    CorruptEvent {
        gtid: Option<Gtid>,
        index: usize,
        #[source]
        source: paxsql_binlog::Error,
    },

    /// A transaction does not fit in one virtual binlog file (event positions are 32-bit).
    #[error("transaction {gtid} of {bytes} bytes does not fit in a binlog file")]
    TransactionTooLarge { gtid: Gtid, bytes: u64 },

    /// [`MemoryEventSource::append`](crate::MemoryEventSource::append) got a GTID that does not continue its
    /// domain (sequence numbers must grow within a domain, gtid_strict_mode).
    #[error("GTID {got} does not continue domain {} after {have}", got.domain_id)]
    GtidOutOfOrder { have: Gtid, got: Gtid },

    /// A configuration value is unusable.
    #[error("invalid configuration: {field}: {reason}")]
    InvalidConfig { field: &'static str, reason: String },

    /// Binding the listening socket failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },

    /// Socket IO failed (the peer vanished, reset, ...).
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// A client packet that does not frame or decode: it ends that one connection.
impl From<paxsql_mysql_wire::WireError> for Error {
    fn from(e: paxsql_mysql_wire::WireError) -> Error {
        use paxsql_mysql_wire::WireError as W;
        match e {
            W::PacketTooLarge { len, max } => Error::PacketTooLarge { len, max },
            W::PacketOutOfOrder { .. } => Error::Malformed { what: "chunk sequence id out of order", offset: 3 },
            W::Malformed { what, offset, .. } => Error::Malformed { what, offset },
        }
    }
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The message MariaDB's dump thread (`sql/sql_repl.cc`, 10.11) sends with ERR 1236 for the same condition;
    /// the replica shows it in `Last_IO_Error` (docs/evidence/replication-protocol.md).
    pub fn replica_message(&self) -> String {
        match self {
            Error::GtidNotInLog { gtid } => format!(
                "Error: connecting slave requested to start from GTID {gtid}, which is not in the master's binlog"
            ),
            Error::ReplicaDiverged { gtid } => format!(
                "Error: connecting slave requested to start from GTID {gtid}, which is not in the master's binlog. \
                 Since the master's binlog contains GTIDs with higher sequence numbers, it probably means that the \
                 slave has diverged due to executing extra erroneous transactions"
            ),
            Error::GtidPurged { .. } => "Could not find GTID state requested by slave in any binlog files. Probably \
                                         the slave state is too old and required binlog files have been purged."
                .to_string(),
            other => format!("paxsql binlog server: {other}"),
        }
    }
}
