//! The client side of the MariaDB client/server protocol that a replica needs, sans IO: the v10 greeting, the
//! login with `mysql_native_password`, OK / ERR / EOF packets, text result sets, the replication commands and
//! the semi-sync framing of the dump stream.
//!
//! Every parser takes a complete (reassembled) payload and returns a typed error on anything unexpected; none
//! of them indexes past what it has checked, so arbitrary bytes from the network cannot panic them
//! (`tests/t40_decoders.rs`, `fuzz/`).
//!
//! Layouts follow MariaDB's `sql/sql_acl.cc` (greeting, login), `sql/protocol.cc` (OK/ERR/EOF, rows),
//! `sql/sql_repl.cc` (COM_REGISTER_SLAVE, COM_BINLOG_DUMP) and `sql/semisync_master.cc` (semi-sync header and
//! reply), checked against `docs/evidence/replication-protocol.md`.

use sha1::{Digest, Sha1};

use crate::error::{Error, Result};

/// Capability bits (`CLIENT_*` in `include/mysql_com.h`).
pub(crate) mod caps {
    pub const LONG_PASSWORD: u32 = 0x1;
    pub const LONG_FLAG: u32 = 0x4;
    pub const PROTOCOL_41: u32 = 0x200;
    pub const TRANSACTIONS: u32 = 0x2000;
    pub const SECURE_CONNECTION: u32 = 0x8000;
    pub const PLUGIN_AUTH: u32 = 0x8_0000;
    pub const PLUGIN_AUTH_LENENC_CLIENT_DATA: u32 = 0x20_0000;
}

/// What a replica asks for. No CLIENT_DEPRECATE_EOF: result sets end with EOF packets, as the real I/O thread
/// sees them (capture); no CLIENT_SSL: the binlog server talks to its own node's mariadbd over loopback or the
/// unix socket.
pub(crate) const CLIENT_CAPS: u32 = caps::LONG_PASSWORD
    | caps::LONG_FLAG
    | caps::PROTOCOL_41
    | caps::TRANSACTIONS
    | caps::SECURE_CONNECTION
    | caps::PLUGIN_AUTH
    | caps::PLUGIN_AUTH_LENENC_CLIENT_DATA;

/// utf8mb4_general_ci: file names and setup statements are ASCII, so any charset works; this one loses nothing.
const CLIENT_CHARSET: u8 = 45;

/// The max_allowed_packet the client announces (MariaDB's upper bound, 1 GiB).
const CLIENT_MAX_PACKET: u32 = 1 << 30;

pub(crate) const NATIVE_PASSWORD: &str = "mysql_native_password";

pub(crate) const COM_QUERY: u8 = 0x03;
pub(crate) const COM_BINLOG_DUMP: u8 = 0x12;
pub(crate) const COM_REGISTER_SLAVE: u8 = 0x15;

/// `BINLOG_SEND_ANNOTATE_ROWS_EVENT`: send ANNOTATE_ROWS events (the real 10.11 replica sets it; paxsql keeps
/// the statement text so replicas' binlogs look like the master's).
pub(crate) const BINLOG_SEND_ANNOTATE_ROWS_EVENT: u16 = 0x0002;

/// First byte of a semi-sync header and of a semi-sync reply (`k_packet_magic_num`).
pub(crate) const SEMI_SYNC_MAGIC: u8 = 0xEF;
/// Semi-sync header flag: the master waits for a reply to this event (`k_packet_flag_sync`).
const SEMI_SYNC_FLAG_ACK: u8 = 0x01;

/// A bounds-checked reader over one payload. Every accessor names the field it reads, so an error says what
/// was missing and where.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    during: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], during: &'static str) -> Self {
        Reader { buf, pos: 0, during }
    }

    fn err(&self, what: &'static str) -> Error {
        Error::Protocol { during: self.during, what, offset: self.pos }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.buf.len()).ok_or_else(|| self.err(what))?;
        let b = &self.buf[self.pos..end];
        self.pos = end;
        Ok(b)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let b = self.bytes(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let b = &self.buf[self.pos..];
        self.pos = self.buf.len();
        b
    }

    /// A NUL-terminated string; `lenient` accepts the end of the payload as terminator (some servers omit the
    /// NUL after the last field).
    pub(crate) fn nul_terminated(&mut self, what: &'static str, lenient: bool) -> Result<&'a [u8]> {
        let rest = &self.buf[self.pos..];
        match rest.iter().position(|&b| b == 0) {
            Some(n) => {
                self.pos += n + 1;
                Ok(&rest[..n])
            }
            None if lenient => Ok(self.rest()),
            None => Err(self.err(what)),
        }
    }

    /// A length-encoded integer; `None` for the NULL marker 0xFB.
    pub(crate) fn lenenc_int(&mut self, what: &'static str) -> Result<Option<u64>> {
        let first = self.u8(what)?;
        Ok(Some(match first {
            0xFB => return Ok(None),
            0xFC => u64::from(self.u16(what)?),
            0xFD => {
                let b = self.array::<3>(what)?;
                u64::from(u32::from_le_bytes([b[0], b[1], b[2], 0]))
            }
            0xFE => u64::from_le_bytes(self.array(what)?),
            0xFF => return Err(self.err(what)),
            n => u64::from(n),
        }))
    }

    /// A length-encoded string; `None` for NULL.
    pub(crate) fn lenenc_bytes(&mut self, what: &'static str) -> Result<Option<&'a [u8]>> {
        match self.lenenc_int(what)? {
            None => Ok(None),
            Some(n) => {
                let n = usize::try_from(n).map_err(|_| self.err(what))?;
                self.bytes(n, what).map(Some)
            }
        }
    }
}

/// The server's v10 greeting (`Protocol::HandshakeV10`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Greeting {
    /// E.g. `5.5.5-10.11.19-MariaDB-0+deb12u1-log` (MariaDB prefixes `5.5.5-` for old clients).
    pub server_version: String,
    pub connection_id: u32,
    pub capabilities: u32,
    /// The 20-byte nonce for `mysql_native_password`.
    pub scramble: Vec<u8>,
    /// The plugin the server proposes for the login (`mysql_native_password` unless configured otherwise).
    pub auth_plugin: String,
}

/// A server's ERR packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerError {
    pub code: u16,
    /// The 5-character SQLSTATE, empty when the server sent none (errors before the handshake).
    pub sql_state: String,
    pub message: String,
}

impl ServerError {
    pub(crate) fn into_error(self, during: impl Into<String>) -> Error {
        Error::Server { code: self.code, sql_state: self.sql_state, message: self.message, during: during.into() }
    }
}

/// Parses an ERR packet (`0xFF | code u16 | ['#' sqlstate(5)] | message`).
pub(crate) fn parse_err(payload: &[u8]) -> Result<ServerError> {
    let mut r = Reader::new(payload, "ERR packet");
    if r.u8("ERR marker")? != 0xFF {
        return Err(Error::Protocol { during: "ERR packet", what: "not an ERR packet", offset: 0 });
    }
    let code = r.u16("error code")?;
    let mut sql_state = String::new();
    if r.remaining() >= 6 && payload.get(3) == Some(&b'#') {
        r.u8("sqlstate marker")?;
        sql_state = String::from_utf8_lossy(r.bytes(5, "sqlstate")?).into_owned();
    }
    let message = String::from_utf8_lossy(r.rest()).into_owned();
    Ok(ServerError { code, sql_state, message })
}

/// An EOF packet: `0xFE` with fewer than 9 bytes (a longer one starting with 0xFE is a row or length).
pub(crate) fn is_eof(payload: &[u8]) -> bool {
    payload.first() == Some(&0xFE) && payload.len() < 9
}

/// An OK packet (`0x00 | affected_rows lenenc | last_insert_id lenenc | status u16 | warnings u16 | ...`).
pub(crate) fn is_ok(payload: &[u8]) -> Result<bool> {
    if payload.first() != Some(&0x00) {
        return Ok(false);
    }
    let mut r = Reader::new(payload, "OK packet");
    r.u8("OK marker")?;
    r.lenenc_int("affected rows")?;
    r.lenenc_int("last insert id")?;
    Ok(true)
}

/// Parses the greeting; an ERR instead of a greeting (too many connections, host blocked) is returned as
/// [`Error::Server`].
pub(crate) fn parse_greeting(payload: &[u8]) -> Result<Greeting> {
    if payload.first() == Some(&0xFF) {
        return Err(parse_err(payload)?.into_error("the connection greeting"));
    }
    let mut r = Reader::new(payload, "greeting");
    if r.u8("protocol version")? != 10 {
        return Err(Error::Protocol { during: "greeting", what: "protocol version is not 10", offset: 0 });
    }
    let server_version = String::from_utf8_lossy(r.nul_terminated("server version", false)?).into_owned();
    let connection_id = r.u32("connection id")?;
    let mut scramble = r.bytes(8, "scramble part 1")?.to_vec();
    r.u8("filler")?;
    let caps_low = r.u16("capabilities (low)")?;
    let _charset = r.u8("charset")?;
    let _status = r.u16("status flags")?;
    let caps_high = r.u16("capabilities (high)")?;
    let capabilities = u32::from(caps_low) | u32::from(caps_high) << 16;
    let auth_data_len = r.u8("auth data length")?;
    // 6 reserved bytes, then 4 bytes of MariaDB extended capabilities (zero for MySQL): 10 in all.
    r.bytes(10, "reserved")?;
    if capabilities & caps::PROTOCOL_41 == 0 || capabilities & caps::SECURE_CONNECTION == 0 {
        return Err(Error::Protocol {
            during: "greeting",
            what: "server lacks CLIENT_PROTOCOL_41 / CLIENT_SECURE_CONNECTION",
            offset: 0,
        });
    }
    // Part 2 is max(13, auth_data_len - 8) bytes; its last byte is a NUL that is not part of the nonce.
    let part2_len = usize::from(auth_data_len).saturating_sub(8).max(13);
    let part2 = r.bytes(part2_len, "scramble part 2")?;
    let part2 = part2.strip_suffix(&[0]).unwrap_or(part2);
    scramble.extend_from_slice(part2);
    let auth_plugin = if capabilities & caps::PLUGIN_AUTH != 0 {
        String::from_utf8_lossy(r.nul_terminated("auth plugin name", true)?).into_owned()
    } else {
        NATIVE_PASSWORD.to_string()
    };
    Ok(Greeting { server_version, connection_id, capabilities, scramble, auth_plugin })
}

/// `mysql_native_password`: `SHA1(password) XOR SHA1(scramble + SHA1(SHA1(password)))`; empty for an empty
/// password (`scramble_411` in `sql/password.c`).
pub(crate) fn native_password_token(password: &[u8], scramble: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let stage1 = Sha1::digest(password);
    let stage2 = Sha1::digest(stage1);
    let mut h = Sha1::new();
    h.update(scramble);
    h.update(stage2);
    let mix = h.finalize();
    stage1.iter().zip(mix.iter()).map(|(a, b)| a ^ b).collect()
}

/// The login packet (`HandshakeResponse41`).
pub(crate) fn handshake_response(greeting: &Greeting, user: &str, password: &str) -> Vec<u8> {
    let caps = CLIENT_CAPS & (greeting.capabilities | caps::LONG_PASSWORD);
    let token = native_password_token(password.as_bytes(), &greeting.scramble);
    let mut out = Vec::with_capacity(64 + user.len());
    out.extend_from_slice(&caps.to_le_bytes());
    out.extend_from_slice(&CLIENT_MAX_PACKET.to_le_bytes());
    out.push(CLIENT_CHARSET);
    out.extend_from_slice(&[0u8; 23]); // 19 reserved + 4 MariaDB extended capabilities (none)
    out.extend_from_slice(user.as_bytes());
    out.push(0);
    if caps & caps::PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
        put_lenenc_int(&mut out, token.len() as u64);
    } else {
        out.push(token.len() as u8); // 20 or 0
    }
    out.extend_from_slice(&token);
    if caps & caps::PLUGIN_AUTH != 0 {
        out.extend_from_slice(NATIVE_PASSWORD.as_bytes());
        out.push(0);
    }
    out
}

/// The server's answer to a login packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuthReply {
    Ok,
    /// `0xFE plugin\0 data`: use `plugin` with the fresh nonce `data`.
    Switch {
        plugin: String,
        data: Vec<u8>,
    },
    /// `0x01 ...`: more rounds of a multi-step plugin (caching_sha2, ed25519 ...), which we do not speak.
    MoreData,
}

pub(crate) fn parse_auth_reply(payload: &[u8]) -> Result<AuthReply> {
    match payload.first() {
        Some(0x00) => Ok(AuthReply::Ok),
        Some(0xFF) => Err(parse_err(payload)?.into_error("login")),
        Some(0xFE) if payload.len() == 1 => {
            // Pre-4.1 "use the old password hash" request.
            Ok(AuthReply::Switch { plugin: "mysql_old_password".into(), data: Vec::new() })
        }
        Some(0xFE) => {
            let mut r = Reader::new(payload, "auth switch request");
            r.u8("marker")?;
            let plugin = String::from_utf8_lossy(r.nul_terminated("plugin name", true)?).into_owned();
            let data = r.rest();
            let data = data.strip_suffix(&[0]).unwrap_or(data).to_vec();
            Ok(AuthReply::Switch { plugin, data })
        }
        Some(0x01) => Ok(AuthReply::MoreData),
        _ => Err(Error::Protocol { during: "login", what: "unexpected reply to the login packet", offset: 0 }),
    }
}

pub(crate) fn put_lenenc_int(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=250 => out.push(n as u8),
        251..=0xFFFF => {
            out.push(0xFC);
            out.extend_from_slice(&(n as u16).to_le_bytes());
        }
        0x1_0000..=0xFF_FFFF => {
            out.push(0xFD);
            out.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
        }
        _ => {
            out.push(0xFE);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
}

/// The column count that opens a result set.
pub(crate) fn parse_column_count(payload: &[u8]) -> Result<u64> {
    let mut r = Reader::new(payload, "result set header");
    let n = r.lenenc_int("column count")?.ok_or(Error::Protocol {
        during: "result set header",
        what: "NULL column count",
        offset: 0,
    })?;
    if n == 0 || r.remaining() != 0 {
        return Err(Error::Protocol { during: "result set header", what: "bad column count", offset: 0 });
    }
    Ok(n)
}

/// One text-protocol row: `columns` length-encoded strings or NULLs.
pub(crate) fn parse_text_row(payload: &[u8], columns: usize) -> Result<Vec<Option<Vec<u8>>>> {
    let mut r = Reader::new(payload, "text row");
    let mut row = Vec::with_capacity(columns.min(payload.len()));
    for _ in 0..columns {
        row.push(r.lenenc_bytes("column value")?.map(<[u8]>::to_vec));
    }
    if r.remaining() != 0 {
        return Err(Error::Protocol { during: "text row", what: "bytes after the last column", offset: payload.len() });
    }
    Ok(row)
}

pub(crate) fn com_query(sql: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + sql.len());
    out.push(COM_QUERY);
    out.extend_from_slice(sql.as_bytes());
    out
}

/// `COM_REGISTER_SLAVE`: server_id, then report_host / report_user / report_password (u8-length strings,
/// empty like a replica without `report_host`), report_port, rank (unused), master_id (filled by the master).
pub(crate) fn com_register_slave(server_id: u32, report_port: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(18);
    out.push(COM_REGISTER_SLAVE);
    out.extend_from_slice(&server_id.to_le_bytes());
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&report_port.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out
}

/// `COM_BINLOG_DUMP` for a GTID dump: with `@slave_connect_state` set the master ignores file and position, so
/// like MariaDB's replica on a fresh start we send position 4 and an empty file name.
pub(crate) fn com_binlog_dump(server_id: u32, flags: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(11);
    out.push(COM_BINLOG_DUMP);
    out.extend_from_slice(&4u32.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&server_id.to_le_bytes());
    out
}

/// The semi-sync reply: `0xEF | position u64 LE | file name` (no NUL), sent with sequence id 0
/// (`Repl_semi_sync_slave::slave_reply`).
pub(crate) fn semi_sync_ack(file: &str, pos: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + file.len());
    out.push(SEMI_SYNC_MAGIC);
    out.extend_from_slice(&pos.to_le_bytes());
    out.extend_from_slice(file.as_bytes());
    out
}

/// Whether dump packets carry the 2-byte semi-sync header after the 0x00 status byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SemiSyncFraming {
    /// `@rpl_semi_sync_slave=1` was sent: decided by the first event. The first event of every dump is the
    /// fake ROTATE whose timestamp is 0, so its first byte is 0x00 without a header and 0xEF with one.
    Detect,
    On,
    Off,
}

/// One packet of the dump stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StreamPacket {
    /// `payload[offset..]` is one binlog event.
    Event { ack_requested: bool, offset: usize },
    /// An ERR packet (e.g. 1236 when the GTID is not in the master's binlog).
    Error(ServerError),
    /// An EOF packet: the master ended the dump.
    Eof,
}

pub(crate) fn parse_stream_packet(payload: &[u8], framing: &mut SemiSyncFraming) -> Result<StreamPacket> {
    const DURING: &str = "binlog stream";
    match payload.first() {
        Some(0x00) => {}
        Some(0xFF) => return Ok(StreamPacket::Error(parse_err(payload)?)),
        Some(0xFE) if payload.len() < 9 => return Ok(StreamPacket::Eof),
        Some(_) => {
            return Err(Error::Protocol { during: DURING, what: "packet is neither event, ERR nor EOF", offset: 0 })
        }
        None => return Err(Error::Protocol { during: DURING, what: "empty packet", offset: 0 }),
    }
    if *framing == SemiSyncFraming::Detect {
        *framing = if payload.get(1) == Some(&SEMI_SYNC_MAGIC) { SemiSyncFraming::On } else { SemiSyncFraming::Off };
    }
    if *framing == SemiSyncFraming::Off {
        return Ok(StreamPacket::Event { ack_requested: false, offset: 1 });
    }
    if payload.get(1) != Some(&SEMI_SYNC_MAGIC) {
        return Err(Error::Protocol { during: DURING, what: "missing semi-sync magic 0xEF", offset: 1 });
    }
    match payload.get(2) {
        Some(&SEMI_SYNC_FLAG_ACK) => Ok(StreamPacket::Event { ack_requested: true, offset: 3 }),
        Some(0) => Ok(StreamPacket::Event { ack_requested: false, offset: 3 }),
        Some(_) => Err(Error::Protocol { during: DURING, what: "unknown semi-sync flag", offset: 2 }),
        None => Err(Error::Protocol { during: DURING, what: "truncated semi-sync header", offset: 2 }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A greeting as MariaDB 10.11.19 sends it (layout of the capture, nonce made up).
    pub(crate) fn greeting_bytes() -> Vec<u8> {
        let mut g = vec![10];
        g.extend_from_slice(b"5.5.5-10.11.19-MariaDB-0+deb12u1-log\0");
        g.extend_from_slice(&174u32.to_le_bytes()); // connection id
        g.extend_from_slice(b"abcdefgh"); // scramble part 1
        g.push(0); // filler
        g.extend_from_slice(&0xf7feu16.to_le_bytes()); // caps low
        g.push(45); // charset
        g.extend_from_slice(&2u16.to_le_bytes()); // status: autocommit
        g.extend_from_slice(&0x81ffu16.to_le_bytes()); // caps high (incl. PLUGIN_AUTH, LENENC data)
        g.push(21); // auth data length
        g.extend_from_slice(&[0; 6]);
        g.extend_from_slice(&0x1du32.to_le_bytes()); // MariaDB extended caps
        g.extend_from_slice(b"ijklmnopqrst\0"); // scramble part 2 + NUL
        g.extend_from_slice(b"mysql_native_password\0");
        g
    }

    #[test]
    fn greeting_fields() {
        let g = parse_greeting(&greeting_bytes()).unwrap();
        assert_eq!(g.server_version, "5.5.5-10.11.19-MariaDB-0+deb12u1-log");
        assert_eq!(g.connection_id, 174);
        assert_eq!(g.scramble, b"abcdefghijklmnopqrst");
        assert_eq!(g.auth_plugin, NATIVE_PASSWORD);
        let bytes = greeting_bytes();
        for cut in 0..bytes.len() - 22 {
            assert!(parse_greeting(&bytes[..cut]).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn native_password_known_vector() {
        // Expected value computed with Python hashlib:
        // s1=sha1(b"password"); s2=sha1(s1); x=sha1(b"\0"*20+s2); bytes(a^b for a,b in zip(s1,x)).hex()
        let token = native_password_token(b"password", &[0u8; 20]);
        let want = "072087d16fdfabc55b1644bb904205c60d505fcf";
        assert_eq!(token.iter().map(|b| format!("{b:02x}")).collect::<String>(), want);
        assert!(native_password_token(b"", &[0u8; 20]).is_empty());
    }

    #[test]
    fn login_packet_layout() {
        let g = parse_greeting(&greeting_bytes()).unwrap();
        let p = handshake_response(&g, "repl", "replpw");
        assert_eq!(u32::from_le_bytes([p[0], p[1], p[2], p[3]]) & CLIENT_CAPS, CLIENT_CAPS);
        assert_eq!(&p[32..37], b"repl\0");
        assert_eq!(p[37], 20); // lenenc token length
        assert!(p.ends_with(b"mysql_native_password\0"));
    }

    #[test]
    fn err_packets_from_the_capture() {
        let mut p = vec![0xFF];
        p.extend_from_slice(&1236u16.to_le_bytes());
        p.extend_from_slice(b"#HY000Error: connecting slave requested to start from GTID 0-1-999999999, which is not in the master's binlog");
        let e = parse_err(&p).unwrap();
        assert_eq!((e.code, e.sql_state.as_str()), (1236, "HY000"));
        assert!(e.message.starts_with("Error: connecting slave requested"));
        // Before the handshake MariaDB sends no SQLSTATE.
        let e = parse_err(&[0xFF, 0x10, 0x04, b'T', b'o', b'o']).unwrap();
        assert_eq!((e.code, e.sql_state.as_str(), e.message.as_str()), (1040, "", "Too"));
    }

    #[test]
    fn commands_match_the_capture() {
        // C->S COM_REGISTER_SLAVE raw: 15 02 00 00 00 00 00 00 0b 5b 00 00 00 00 00 00 00 00
        assert_eq!(com_register_slave(2, 23307), [0x15, 2, 0, 0, 0, 0, 0, 0, 0x0b, 0x5b, 0, 0, 0, 0, 0, 0, 0, 0]);
        // C->S COM_BINLOG_DUMP raw: 12 04 00 00 00 02 00 02 00 00 00
        assert_eq!(com_binlog_dump(2, BINLOG_SEND_ANNOTATE_ROWS_EVENT), [0x12, 4, 0, 0, 0, 2, 0, 2, 0, 0, 0]);
        // C->S SEMISYNC_ACK raw: ef c0 01 00 00 00 00 00 00 6e 31 2d 62 69 6e 2e 30 30 30 30 30 31
        let mut want = vec![0xef, 0xc0, 0x01, 0, 0, 0, 0, 0, 0];
        want.extend_from_slice(b"n1-bin.000001");
        assert_eq!(semi_sync_ack("n1-bin.000001", 448), want);
    }

    #[test]
    fn stream_packet_framing() {
        let mut f = SemiSyncFraming::Detect;
        assert_eq!(
            parse_stream_packet(&[0, 0xEF, 0, 0, 0], &mut f).unwrap(),
            StreamPacket::Event { ack_requested: false, offset: 3 }
        );
        assert_eq!(f, SemiSyncFraming::On);
        assert_eq!(
            parse_stream_packet(&[0, 0xEF, 1, 9], &mut f).unwrap(),
            StreamPacket::Event { ack_requested: true, offset: 3 }
        );
        assert!(parse_stream_packet(&[0, 0xEF, 2], &mut f).is_err());
        assert!(parse_stream_packet(&[0, 0xEE, 0], &mut f).is_err());
        assert_eq!(parse_stream_packet(&[0xFE, 0, 0, 2, 0], &mut f).unwrap(), StreamPacket::Eof);
        let mut f = SemiSyncFraming::Detect;
        assert_eq!(
            parse_stream_packet(&[0, 0, 0, 0, 0], &mut f).unwrap(),
            StreamPacket::Event { ack_requested: false, offset: 1 }
        );
        assert_eq!(f, SemiSyncFraming::Off);
    }

    #[test]
    fn text_rows() {
        // S->C data raw: 05 43 52 43 33 32 = 'CRC32'
        assert_eq!(parse_text_row(b"\x05CRC32", 1).unwrap(), vec![Some(b"CRC32".to_vec())]);
        assert_eq!(parse_text_row(&[0xFB, 1, b'x'], 2).unwrap(), vec![None, Some(b"x".to_vec())]);
        assert!(parse_text_row(&[5, b'a'], 1).is_err());
        assert_eq!(parse_column_count(&[1]).unwrap(), 1);
        assert!(parse_column_count(&[0]).is_err());
    }
}
