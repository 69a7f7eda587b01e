//! The crate's one error type.

use thiserror::Error;

/// Everything that can go wrong when decoding binlog events or parsing GTIDs.
///
/// Framing errors are kept apart on purpose (mini-redis style): [`Error::Incomplete`] means "wait for more
/// bytes", whereas [`Error::Truncated`], [`Error::Malformed`] and [`Error::ChecksumMismatch`] mean the bytes we
/// have are wrong and more input will not help.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    /// The buffer ends before the event does (shorter than the 19-byte header, or than the header's
    /// `event_size`). A stream reader should read more and try again.
    #[error("incomplete event: have {have} bytes, need {need}")]
    Incomplete { have: usize, need: usize },

    /// The event is complete per its `event_size`, but its body ends inside a field its type requires.
    #[error("truncated event: body ends inside {what} at offset {offset}")]
    Truncated { what: &'static str, offset: usize },

    /// A field holds a value the format does not allow. `offset` counts from the first byte of the event.
    #[error("malformed event: {what} at offset {offset}")]
    Malformed { what: &'static str, offset: usize },

    /// The CRC32 in the last 4 bytes of the event does not match the bytes before it.
    #[error("binlog checksum mismatch: event carries {expected:#010x}, bytes hash to {actual:#010x}")]
    ChecksumMismatch { expected: u32, actual: u32 },

    /// A GTID ("domain-server-seq") or GTID position ("0-1-42,1-2-7") did not parse.
    #[error("invalid GTID {text:?}: {what}")]
    InvalidGtid { text: String, what: &'static str },

    /// A GTID position names the same replication domain twice (MariaDB allows one GTID per domain in
    /// `@@gtid_binlog_pos` / `@slave_connect_state`).
    #[error("GTID position names domain {domain_id} twice")]
    DuplicateDomain { domain_id: u32 },
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;
