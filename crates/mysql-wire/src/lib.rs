//! The MySQL/MariaDB client/server wire protocol, sans IO: bytes in, values out, and back.
//!
//! Place in the system (docs/ARCHITECTURE.md §2, crate map): every paxsql crate that speaks MySQL takes its
//! packets from here — the binlog client that captures the master's binlog (`paxsql-repl-client`), the
//! replication server that serves the global log to a replica's mariadbd (`paxsql-repl-server`), the proxy that
//! reads its clients' logins and commands (`paxsql-proxy`) and the admin SQL port (`paxsql-admin-sql`). Nothing
//! here does IO, keeps time or allocates more than the packet it builds; the crates around it own their sockets.
//!
//! - [`packet`]: framing (3-byte length, sequence id, 16 MiB chunks), with sequence ids checked.
//! - [`Reader`], [`put_lenenc_int`], [`put_lenenc_str`]: bounds-checked fields and length-encoded values.
//! - [`caps`], [`command`]: the protocol's constants.
//! - [`ErrPacket`], [`ok_payload`], [`eof_payload`], [`is_ok`], [`is_eof`]: the generic answers.
//! - [`handshake`]: the server greeting, the client's login and the auth switch, both directions.
//! - [`auth`]: `mysql_native_password`.
//! - [`replication`]: the binlog dump's commands and stream framing, semi-sync included.
//! - [`resultset`]: text result sets, written and read.
//! - [`statement`]: the SQL text those endpoints must understand themselves (`LIKE` patterns).
//!
//! Layouts follow MariaDB's `sql/sql_acl.cc` (greeting, login), `sql/protocol.cc` (OK/ERR/EOF, rows) and
//! `sql-common/client.c`, checked against the captures in docs/evidence/replication-protocol.md. Every decoder
//! takes untrusted bytes: it returns a [`WireError`] naming the field and its offset, never panics
//! (`fuzz/`).

pub mod auth;
pub mod handshake;
pub mod packet;
pub mod replication;
pub mod resultset;
pub mod statement;

mod error;
mod generic;
mod reader;

pub use error::WireError;
pub use generic::{eof_payload, is_eof, is_ok, ok_payload, result_end_ok_payload, ErrPacket};
pub use reader::{put_lenenc_int, put_lenenc_str, Reader};

/// Result of this crate's decoders.
pub type Result<T> = std::result::Result<T, WireError>;

/// Capability flags (`CLIENT_*` in MariaDB's `include/mysql_com.h`).
pub mod caps {
    pub const LONG_PASSWORD: u32 = 1;
    pub const FOUND_ROWS: u32 = 1 << 1;
    pub const LONG_FLAG: u32 = 1 << 2;
    pub const CONNECT_WITH_DB: u32 = 1 << 3;
    pub const COMPRESS: u32 = 1 << 5;
    pub const PROTOCOL_41: u32 = 1 << 9;
    pub const SSL: u32 = 1 << 11;
    pub const TRANSACTIONS: u32 = 1 << 13;
    pub const SECURE_CONNECTION: u32 = 1 << 15;
    pub const MULTI_STATEMENTS: u32 = 1 << 16;
    pub const MULTI_RESULTS: u32 = 1 << 17;
    pub const PS_MULTI_RESULTS: u32 = 1 << 18;
    pub const PLUGIN_AUTH: u32 = 1 << 19;
    pub const CONNECT_ATTRS: u32 = 1 << 20;
    pub const PLUGIN_AUTH_LENENC_CLIENT_DATA: u32 = 1 << 21;
    pub const SESSION_TRACK: u32 = 1 << 23;
    /// The client accepts an OK packet (header 0xFE) instead of the EOF that ends a result set, and no EOF
    /// after the column definitions. A 10.11 replica's I/O thread does NOT set it (caps 0x8038a205 in the
    /// replication capture); mysql_async does.
    pub const DEPRECATE_EOF: u32 = 1 << 24;

    /// What paxsql's own endpoints (the replication server, the admin port) announce in their greeting; an
    /// endpoint that offers TLS adds `SSL`. No compression, no multi-statements, no session tracking: they answer
    /// one statement per query.
    pub const PAXSQL_SERVER: u32 = LONG_PASSWORD
        | FOUND_ROWS
        | LONG_FLAG
        | CONNECT_WITH_DB
        | PROTOCOL_41
        | TRANSACTIONS
        | SECURE_CONNECTION
        | MULTI_RESULTS
        | PS_MULTI_RESULTS
        | PLUGIN_AUTH
        | CONNECT_ATTRS
        | PLUGIN_AUTH_LENENC_CLIENT_DATA
        | DEPRECATE_EOF;
}

/// `SERVER_STATUS_AUTOCOMMIT`, the status an answer outside a transaction carries.
pub const STATUS_AUTOCOMMIT: u16 = 0x0002;

/// utf8mb4_general_ci, the character set paxsql's own endpoints announce and log in with.
pub const CHARSET_UTF8MB4_GENERAL_CI: u8 = 45;

/// Command bytes (`enum_server_command` in MariaDB's `include/my_command.h`) paxsql reads or sends.
pub mod command {
    pub const COM_QUIT: u8 = 0x01;
    pub const COM_INIT_DB: u8 = 0x02;
    pub const COM_QUERY: u8 = 0x03;
    pub const COM_FIELD_LIST: u8 = 0x04;
    pub const COM_DROP_DB: u8 = 0x06;
    pub const COM_STATISTICS: u8 = 0x09;
    pub const COM_PROCESS_KILL: u8 = 0x0C;
    pub const COM_PING: u8 = 0x0E;
    pub const COM_CHANGE_USER: u8 = 0x11;
    pub const COM_BINLOG_DUMP: u8 = 0x12;
    pub const COM_REGISTER_SLAVE: u8 = 0x15;
    pub const COM_STMT_PREPARE: u8 = 0x16;
    pub const COM_STMT_EXECUTE: u8 = 0x17;
    pub const COM_STMT_SEND_LONG_DATA: u8 = 0x18;
    pub const COM_STMT_CLOSE: u8 = 0x19;
    pub const COM_STMT_RESET: u8 = 0x1A;
    pub const COM_SET_OPTION: u8 = 0x1B;
    pub const COM_RESET_CONNECTION: u8 = 0x1F;

    /// A `COM_QUERY` packet payload.
    pub fn com_query(sql: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + sql.len());
        out.push(COM_QUERY);
        out.extend_from_slice(sql.as_bytes());
        out
    }
}
