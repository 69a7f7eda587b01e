//! What this client chooses on the wire; the encodings themselves are the shared wire crate's
//! ([`paxsql_mysql_wire`]): greeting, login, OK / ERR / EOF, text result sets, the replication commands and the
//! semi-sync framing of the dump stream.

use paxsql_mysql_wire::{caps, ErrPacket};

use crate::error::Error;

/// What a replica asks for. No CLIENT_DEPRECATE_EOF: result sets end with EOF packets, as the real I/O thread sees
/// them (capture); no CLIENT_SSL: the binlog server talks to its own node's mariadbd over loopback or the unix
/// socket.
pub(crate) const CLIENT_CAPS: u32 = caps::LONG_PASSWORD
    | caps::LONG_FLAG
    | caps::PROTOCOL_41
    | caps::TRANSACTIONS
    | caps::SECURE_CONNECTION
    | caps::PLUGIN_AUTH
    | caps::PLUGIN_AUTH_LENENC_CLIENT_DATA;

/// The max_allowed_packet the client announces (MariaDB's upper bound, 1 GiB).
pub(crate) const CLIENT_MAX_PACKET: u32 = 1 << 30;

/// A server's ERR packet as this crate's error, naming what was being done.
pub(crate) fn server_error(e: ErrPacket, during: impl Into<String>) -> Error {
    Error::Server { code: e.code, sql_state: e.sql_state_text(), message: e.message, during: during.into() }
}
