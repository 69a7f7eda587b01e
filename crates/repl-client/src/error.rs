//! The crate's one error type.

use std::io;

use paxsql_binlog::Gtid;
use thiserror::Error;

/// Everything that can end a connection attempt, a binlog stream or a transaction assembly.
///
/// What the caller (paxsql's capture loop) does with it: [`Error::Disconnected`], [`Error::Io`],
/// [`Error::IdleTimeout`] and [`Error::ConnectTimeout`] mean "reconnect with
/// [`ReplicationClient::resume`](crate::ReplicationClient::resume) from the last GTID proposed to Paxos";
/// [`Error::Server`] with code 1236 means the master's binlog does not hold the requested GTID (a node that
/// must be rebuilt, docs/ARCHITECTURE.md §5); the decoding errors mean the bytes on the wire are not what MariaDB sends and
/// are bugs to report, never to skip over.
#[derive(Debug, Error)]
pub enum Error {
    /// The options cannot work (e.g. server_id 0, which MariaDB refuses for a replica).
    #[error("invalid replication client options: {what}")]
    InvalidOptions { what: String },

    /// Connecting, logging in, the setup queries and COM_BINLOG_DUMP together took longer than allowed.
    #[error("connecting to {address} did not finish within {timeout_ms} ms")]
    ConnectTimeout { address: String, timeout_ms: u128 },

    /// No packet (not even a heartbeat) arrived for longer than the idle timeout: the master or the network
    /// is gone without closing the socket.
    #[error("no packet from the master for {idle_ms} ms (heartbeats stopped)")]
    IdleTimeout { idle_ms: u128 },

    /// The server closed the connection (EOF, reset, or an EOF packet ending the dump).
    #[error("connection to the master closed while {during}")]
    Disconnected { during: String },

    /// Any other socket error.
    #[error("I/O error while {during}: {source}")]
    Io {
        during: String,
        #[source]
        source: io::Error,
    },

    /// The server answered with an ERR packet, e.g. 1236 "... requested to start from GTID ..., which is not in
    /// the master's binlog", 1045 access denied, or an error on a setup statement.
    #[error("MariaDB error {code} ({sql_state}) during {during}: {message}")]
    Server { code: u16, sql_state: String, message: String, during: String },

    /// The server wants an authentication plugin other than `mysql_native_password`.
    #[error(
        "authentication plugin {plugin:?} is not supported (create the replication account with mysql_native_password)"
    )]
    UnsupportedAuthPlugin { plugin: String },

    /// A packet does not follow the client/server protocol. `offset` counts from the first payload byte.
    #[error("malformed packet during {during}: {what} at offset {offset}")]
    Protocol { during: &'static str, what: &'static str, offset: usize },

    /// A packet arrived with an unexpected sequence id: the two ends disagree about framing.
    #[error("packet sequence id {got} where {expected} was expected ({during})")]
    PacketOutOfOrder { during: &'static str, expected: u8, got: u8 },

    /// A packet (after reassembly of its 16 MiB chunks) is larger than the configured maximum.
    #[error("packet of at least {len} bytes exceeds the limit of {max} bytes")]
    PacketTooLarge { len: usize, max: usize },

    /// An event inside a packet did not decode (bad size, bad checksum, bad body).
    #[error("binlog event at {file}:{end_pos} did not decode: {source}")]
    Event {
        file: String,
        end_pos: u64,
        #[source]
        source: paxsql_binlog::Error,
    },

    /// `SELECT @master_binlog_checksum` gave an algorithm MariaDB 10.11 does not have.
    #[error("master announced binlog checksum {value:?}, expected CRC32 or NONE")]
    UnknownChecksum { value: String },

    /// The master's server_id equals ours; MariaDB replicas refuse this too (their events would be skipped).
    #[error("master server_id {server_id} equals the server_id this client registers with")]
    ServerIdClash { server_id: u32 },

    /// A GTID event arrived while the previous event group was still open.
    #[error("GTID {next} started before the event group of {open} ended")]
    UnterminatedGroup { open: Gtid, next: Gtid },

    /// An event that belongs to an event group (row, query, XID...) arrived outside any group.
    #[error("event of type {type_code} at {file}:{end_pos} is outside any GTID event group")]
    EventOutsideGroup { type_code: u8, file: String, end_pos: u64 },
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Maps a socket error: the kinds that mean "the peer is gone" become [`Error::Disconnected`].
    pub(crate) fn io(during: impl Into<String>, source: io::Error) -> Error {
        use io::ErrorKind::*;
        match source.kind() {
            UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe | NotConnected => {
                Error::Disconnected { during: during.into() }
            }
            _ => Error::Io { during: during.into(), source },
        }
    }
}

/// Bytes that do not frame or decode as the protocol says.
impl From<paxsql_mysql_wire::WireError> for Error {
    fn from(e: paxsql_mysql_wire::WireError) -> Error {
        use paxsql_mysql_wire::WireError as W;
        match e {
            W::PacketTooLarge { len, max } => Error::PacketTooLarge { len, max },
            W::PacketOutOfOrder { during, expected, got } => Error::PacketOutOfOrder { during, expected, got },
            W::Malformed { during, what, offset } => Error::Protocol { during, what, offset },
        }
    }
}
