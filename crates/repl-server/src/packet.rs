//! MySQL packet framing and the handful of generic server packets (OK, ERR, EOF, text result sets).
//!
//! A packet is a 3-byte little-endian payload length, a 1-byte sequence id and the payload. A payload of
//! 0xFFFFFF bytes or more travels as consecutive chunks of exactly 0xFFFFFF bytes, each with the next sequence
//! id, ended by a shorter chunk (possibly empty): binlog events larger than 16 MiB (one row with a big BLOB)
//! arrive at the replica this way. Framing never panics on input: [`decode_packet`] says "need more" with
//! `Ok(None)` and rejects over-long input with an error.

use crate::error::{Error, Result};

/// Largest chunk payload; a chunk of exactly this length means "more chunks follow".
pub const MAX_CHUNK: usize = 0xFF_FFFF;

/// Capability flags (MySQL `include/mysql_com.h`, MariaDB `include/mysql_com.h`) we use.
pub mod caps {
    pub const LONG_PASSWORD: u32 = 1;
    pub const FOUND_ROWS: u32 = 1 << 1;
    pub const LONG_FLAG: u32 = 1 << 2;
    pub const CONNECT_WITH_DB: u32 = 1 << 3;
    pub const PROTOCOL_41: u32 = 1 << 9;
    pub const SSL: u32 = 1 << 11;
    pub const TRANSACTIONS: u32 = 1 << 13;
    pub const SECURE_CONNECTION: u32 = 1 << 15;
    pub const MULTI_RESULTS: u32 = 1 << 17;
    pub const PLUGIN_AUTH: u32 = 1 << 19;
    pub const CONNECT_ATTRS: u32 = 1 << 20;
    pub const PLUGIN_AUTH_LENENC_CLIENT_DATA: u32 = 1 << 21;
    /// The client accepts an OK packet (header 0xFE) instead of the EOF that ends a result set, and no EOF
    /// after the column definitions. A 10.11 replica's I/O thread does NOT set it (caps 0x8038a205 in
    /// repl-handshake-and-stream.decoded.txt); mysql_async does.
    pub const DEPRECATE_EOF: u32 = 1 << 24;

    /// What we announce in the greeting. No SSL (loopback only), no session tracking, no multi-statements.
    pub const SERVER: u32 = LONG_PASSWORD
        | FOUND_ROWS
        | LONG_FLAG
        | CONNECT_WITH_DB
        | PROTOCOL_41
        | TRANSACTIONS
        | SECURE_CONNECTION
        | MULTI_RESULTS
        | PLUGIN_AUTH
        | CONNECT_ATTRS
        | PLUGIN_AUTH_LENENC_CLIENT_DATA
        | DEPRECATE_EOF;
}

/// `SERVER_STATUS_AUTOCOMMIT`, the status every answer carries (as in the captures: `00 00 00 02 00 00 00`).
pub const STATUS_AUTOCOMMIT: u16 = 0x0002;

/// Finds the first complete logical packet in `buf`, joining 0xFFFFFF-byte chunks. Returns the sequence id of
/// its LAST chunk (the answer continues from there), the payload, and how many bytes of `buf` it used; `Ok(None)`
/// when `buf` does not hold the whole packet yet. A payload longer than `max_payload` is an error as soon as the
/// chunk headers show it, so a client cannot make us buffer without bound.
pub fn decode_packet(buf: &[u8], max_payload: usize) -> Result<Option<(u8, Vec<u8>, usize)>> {
    let mut offset = 0usize;
    let mut total = 0usize;
    // First pass: check that every chunk is there, without copying.
    let last_seq = loop {
        let Some(header) = buf.get(offset..offset + 4) else { return Ok(None) };
        let len = usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
        total += len;
        if total > max_payload {
            return Err(Error::PacketTooLarge { len: total, max: max_payload });
        }
        if buf.len() < offset + 4 + len {
            return Ok(None);
        }
        offset += 4 + len;
        if len < MAX_CHUNK {
            break header[3];
        }
    };
    let mut payload = Vec::with_capacity(total);
    let mut at = 0usize;
    while at < offset {
        let len = usize::from(buf[at]) | usize::from(buf[at + 1]) << 8 | usize::from(buf[at + 2]) << 16;
        payload.extend_from_slice(&buf[at + 4..at + 4 + len]);
        at += 4 + len;
    }
    Ok(Some((last_seq, payload, offset)))
}

/// Appends `parts` (concatenated) as one logical packet, splitting at 0xFFFFFF bytes, and advances `seq` by one
/// per chunk. A payload whose length is a multiple of 0xFFFFFF (and not 0) gets the empty closing chunk the
/// protocol requires.
pub fn write_packet(out: &mut Vec<u8>, seq: &mut u8, parts: &[&[u8]]) {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    if total < MAX_CHUNK {
        push_header(out, total, *seq);
        *seq = seq.wrapping_add(1);
        for part in parts {
            out.extend_from_slice(part);
        }
        return;
    }
    let mut remaining = total;
    let mut part_index = 0usize;
    let mut part_offset = 0usize;
    loop {
        let chunk = remaining.min(MAX_CHUNK);
        push_header(out, chunk, *seq);
        *seq = seq.wrapping_add(1);
        let mut need = chunk;
        while need > 0 {
            let part = parts[part_index];
            let take = (part.len() - part_offset).min(need);
            out.extend_from_slice(&part[part_offset..part_offset + take]);
            part_offset += take;
            need -= take;
            if part_offset == part.len() {
                part_index += 1;
                part_offset = 0;
            }
        }
        remaining -= chunk;
        if chunk < MAX_CHUNK {
            return;
        }
        // A full chunk says "more follows"; when nothing does, an empty chunk ends the packet.
        if remaining == 0 {
            push_header(out, 0, *seq);
            *seq = seq.wrapping_add(1);
            return;
        }
    }
}

fn push_header(out: &mut Vec<u8>, len: usize, seq: u8) {
    debug_assert!(len <= MAX_CHUNK);
    out.extend_from_slice(&[len as u8, (len >> 8) as u8, (len >> 16) as u8, seq]);
}

/// Length-encoded integer (protocol "int<lenenc>").
pub fn put_lenenc_int(out: &mut Vec<u8>, v: u64) {
    match v {
        0..=250 => out.push(v as u8),
        251..=0xFFFF => {
            out.push(0xFC);
            out.extend_from_slice(&(v as u16).to_le_bytes());
        }
        0x1_0000..=0xFF_FFFF => {
            out.push(0xFD);
            out.extend_from_slice(&(v as u32).to_le_bytes()[..3]);
        }
        _ => {
            out.push(0xFE);
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// Length-encoded string.
pub fn put_lenenc_str(out: &mut Vec<u8>, s: &[u8]) {
    put_lenenc_int(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// OK packet payload: header 0x00, affected rows 0, last insert id 0, status, no warnings.
pub fn ok_payload() -> Vec<u8> {
    vec![0x00, 0x00, 0x00, STATUS_AUTOCOMMIT as u8, (STATUS_AUTOCOMMIT >> 8) as u8, 0x00, 0x00]
}

/// ERR packet payload (protocol 4.1: `0xFF code '#' sqlstate message`).
pub fn err_payload(code: u16, sql_state: &str, message: &str) -> Vec<u8> {
    let mut p = Vec::with_capacity(9 + message.len());
    p.push(0xFF);
    p.extend_from_slice(&code.to_le_bytes());
    p.push(b'#');
    let mut state = [b'H', b'Y', b'0', b'0', b'0'];
    for (dst, src) in state.iter_mut().zip(sql_state.bytes()) {
        *dst = src;
    }
    p.extend_from_slice(&state);
    p.extend_from_slice(message.as_bytes());
    p
}

/// EOF packet payload (`0xFE warnings status`).
pub fn eof_payload() -> Vec<u8> {
    vec![0xFE, 0x00, 0x00, STATUS_AUTOCOMMIT as u8, (STATUS_AUTOCOMMIT >> 8) as u8]
}

/// The OK packet that ends a result set under CLIENT_DEPRECATE_EOF: header 0xFE, then the OK fields.
fn result_end_ok_payload() -> Vec<u8> {
    vec![0xFE, 0x00, 0x00, STATUS_AUTOCOMMIT as u8, (STATUS_AUTOCOMMIT >> 8) as u8, 0x00, 0x00]
}

/// Column types we answer with (MySQL `enum_field_types`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// BIGINT (`MYSQL_TYPE_LONGLONG`, 0x08), binary charset.
    LongLong,
    /// VARCHAR (`MYSQL_TYPE_VAR_STRING`, 0xFD), utf8mb4.
    VarString,
}

/// One column of a text result set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub kind: ColumnType,
}

impl Column {
    pub fn text(name: impl Into<String>) -> Column {
        Column { name: name.into(), kind: ColumnType::VarString }
    }
    pub fn int(name: impl Into<String>) -> Column {
        Column { name: name.into(), kind: ColumnType::LongLong }
    }
}

/// A text-protocol result set: column definitions and rows of optional (NULL) text values.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResultSet {
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Option<String>>>,
}

impl ResultSet {
    /// Appends the whole result set as packets: column count, definitions, [EOF], rows, EOF — or, when the
    /// client negotiated CLIENT_DEPRECATE_EOF, no middle EOF and an OK (0xFE header) at the end.
    pub fn write(&self, out: &mut Vec<u8>, seq: &mut u8, client_caps: u32) {
        let deprecate_eof = client_caps & caps::DEPRECATE_EOF != 0;
        let mut p = Vec::new();
        put_lenenc_int(&mut p, self.columns.len() as u64);
        write_packet(out, seq, &[&p]);
        for column in &self.columns {
            p.clear();
            put_lenenc_str(&mut p, b"def");
            put_lenenc_str(&mut p, b""); // schema
            put_lenenc_str(&mut p, b""); // table
            put_lenenc_str(&mut p, b""); // org_table
            put_lenenc_str(&mut p, column.name.as_bytes());
            put_lenenc_str(&mut p, b""); // org_name
            p.push(0x0C); // length of the fixed fields
            let (charset, length, type_code, flags): (u16, u32, u8, u16) = match column.kind {
                // binary charset, 21 digits, NOT NULL | BINARY (as UNIX_TIMESTAMP() in the capture: 0x0080).
                ColumnType::LongLong => (63, 21, 0x08, 0x0080),
                // utf8mb4_general_ci, 4 * 1024 bytes.
                ColumnType::VarString => (45, 4096, 0xFD, 0x0000),
            };
            p.extend_from_slice(&charset.to_le_bytes());
            p.extend_from_slice(&length.to_le_bytes());
            p.push(type_code);
            p.extend_from_slice(&flags.to_le_bytes());
            p.push(if column.kind == ColumnType::LongLong { 0 } else { 0x27 }); // decimals (0x27: not fixed)
            p.extend_from_slice(&[0, 0]);
            write_packet(out, seq, &[&p]);
        }
        if !deprecate_eof {
            write_packet(out, seq, &[&eof_payload()]);
        }
        for row in &self.rows {
            p.clear();
            for value in row {
                match value {
                    Some(v) => put_lenenc_str(&mut p, v.as_bytes()),
                    None => p.push(0xFB),
                }
            }
            write_packet(out, seq, &[&p]);
        }
        let end = if deprecate_eof { result_end_ok_payload() } else { eof_payload() };
        write_packet(out, seq, &[&end]);
    }
}

/// Bounds-checked reader over a client payload; errors name the field and its offset.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else { return Err(Error::Malformed { what, offset: self.pos }) };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.bytes(1, what)?[0])
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16> {
        let b = self.bytes(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32> {
        let b = self.bytes(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn lenenc_int(&mut self, what: &'static str) -> Result<u64> {
        let first = self.u8(what)?;
        Ok(match first {
            0xFC => u64::from(self.u16(what)?),
            0xFD => {
                let b = self.bytes(3, what)?;
                u64::from(b[0]) | u64::from(b[1]) << 8 | u64::from(b[2]) << 16
            }
            0xFE => {
                let b = self.bytes(8, what)?;
                u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
            }
            0xFB | 0xFF => return Err(Error::Malformed { what, offset: self.pos - 1 }),
            n => u64::from(n),
        })
    }

    /// Bytes up to a NUL (consumed, not returned); without a NUL, the rest of the packet.
    pub fn nul_str(&mut self) -> &'a [u8] {
        let rest = &self.buf[self.pos.min(self.buf.len())..];
        match rest.iter().position(|&b| b == 0) {
            Some(i) => {
                self.pos += i + 1;
                &rest[..i]
            }
            None => {
                self.pos = self.buf.len();
                rest
            }
        }
    }

    pub fn rest(&mut self) -> &'a [u8] {
        let rest = &self.buf[self.pos.min(self.buf.len())..];
        self.pos = self.buf.len();
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_packet_round_trip() {
        let mut out = Vec::new();
        let mut seq = 7;
        write_packet(&mut out, &mut seq, &[b"\x0e"]);
        assert_eq!(out, [1, 0, 0, 7, 0x0e]);
        assert_eq!(seq, 8);
        assert_eq!(decode_packet(&out, 100).unwrap(), Some((7, vec![0x0e], 5)));
        assert_eq!(decode_packet(&out[..4], 100).unwrap(), None);
    }

    #[test]
    fn big_payloads_split_into_full_chunks_and_an_end_chunk() {
        for len in [MAX_CHUNK - 1, MAX_CHUNK, MAX_CHUNK + 1, 2 * MAX_CHUNK, 2 * MAX_CHUNK + 5] {
            let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let mut out = Vec::new();
            let mut seq = 255;
            let (a, b) = payload.split_at(len / 3);
            write_packet(&mut out, &mut seq, &[&a[..1], &a[1..], b]);
            let chunks = len / MAX_CHUNK + 1;
            assert_eq!(out.len(), len + 4 * chunks, "len {len}");
            assert_eq!(seq, 255u8.wrapping_add(chunks as u8));
            let (last_seq, got, used) = decode_packet(&out, 3 * MAX_CHUNK).unwrap().unwrap();
            assert_eq!((last_seq, used), (seq.wrapping_sub(1), out.len()));
            assert!(got == payload, "payload of {len} bytes differs");
            assert_eq!(decode_packet(&out[..out.len() - 1], 3 * MAX_CHUNK).unwrap(), None);
        }
    }

    #[test]
    fn oversized_client_packets_are_refused_early() {
        let header = [0xFF, 0xFF, 0xFF, 0];
        assert!(matches!(decode_packet(&header, 1 << 20), Err(Error::PacketTooLarge { .. })));
    }

    #[test]
    fn ok_and_err_match_mariadb_bytes() {
        assert_eq!(ok_payload(), [0, 0, 0, 2, 0, 0, 0]); // "S->C seq=2 OK raw: 00 00 00 02 00 00 00"
        let err = err_payload(1094, "HY000", "Unknown thread id: 174");
        assert_eq!(&err[..9], b"\xff\x46\x04#HY000");
    }

    #[test]
    fn lenenc_round_trip() {
        for v in [0u64, 250, 251, 0xFFFF, 0x1_0000, 0xFF_FFFF, 0x100_0000, u64::MAX] {
            let mut b = Vec::new();
            put_lenenc_int(&mut b, v);
            assert_eq!(Reader::new(&b).lenenc_int("v").unwrap(), v);
        }
    }

    #[test]
    fn result_set_uses_eof_unless_deprecated() {
        let rs = ResultSet { columns: vec![Column::text("x")], rows: vec![vec![Some("CRC32".into())]] };
        let (mut with_eof, mut seq) = (Vec::new(), 1);
        rs.write(&mut with_eof, &mut seq, 0);
        assert_eq!(seq, 6); // count, column, EOF, row, EOF — as "SELECT @master_binlog_checksum" in the capture
        let (mut without, mut seq) = (Vec::new(), 1);
        rs.write(&mut without, &mut seq, caps::DEPRECATE_EOF);
        assert_eq!(seq, 5);
    }
}
