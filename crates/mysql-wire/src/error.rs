//! The crate's one error type.

use thiserror::Error;

/// Why bytes are not the packet they should be. Each crate using the wire maps it into its own error, adding
/// which connection and which exchange it was.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    /// A packet (after joining 16 MiB chunks) is longer than the caller accepts.
    #[error("packet of {len} bytes exceeds the limit of {max} bytes")]
    PacketTooLarge { len: usize, max: usize },

    /// A chunk of a multi-chunk packet does not carry the next sequence id.
    #[error("packet out of order while {during}: sequence id {got}, expected {expected}")]
    PacketOutOfOrder { during: &'static str, expected: u8, got: u8 },

    /// A payload ends early or holds a value the protocol does not allow; `offset` counts from its first byte.
    #[error("malformed {during}: {what} at offset {offset}")]
    Malformed { during: &'static str, what: &'static str, offset: usize },
}
