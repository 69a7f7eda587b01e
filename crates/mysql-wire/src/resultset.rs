//! Text-protocol result sets: written by paxsql's own endpoints (the replication server's answers to a replica's
//! setup queries, the admin port), read by the binlog client (the master's answers to its setup queries).

use crate::error::WireError;
use crate::packet::write;
use crate::reader::{put_lenenc_int, put_lenenc_str, Reader};
use crate::{caps, eof_payload, result_end_ok_payload, Result};

/// Column types paxsql answers with (MySQL `enum_field_types`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// BIGINT (`MYSQL_TYPE_LONGLONG`, 0x08), binary charset.
    LongLong,
    /// BIGINT UNSIGNED: the same with `UNSIGNED_FLAG`, for counters and ids.
    UnsignedLongLong,
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
    pub fn unsigned(name: impl Into<String>) -> Column {
        Column { name: name.into(), kind: ColumnType::UnsignedLongLong }
    }
}

/// A text-protocol result set: column definitions and rows of optional (NULL) text values.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResultSet {
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Option<String>>>,
}

impl ResultSet {
    /// Appends the whole result set as packets: column count, definitions, [EOF], rows, EOF — or, when the client
    /// negotiated `CLIENT_DEPRECATE_EOF`, no middle EOF and an OK (0xFE header) at the end.
    pub fn write(&self, out: &mut Vec<u8>, seq: &mut u8, client_caps: u32) {
        let deprecate_eof = client_caps & caps::DEPRECATE_EOF != 0;
        let mut p = Vec::new();
        put_lenenc_int(&mut p, self.columns.len() as u64);
        write(out, seq, &[&p]);
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
                // binary charset, 21 digits, BINARY (as UNIX_TIMESTAMP() in the capture: 0x0080).
                ColumnType::LongLong => (63, 21, 0x08, 0x0080),
                // ... and UNSIGNED (0x0020), 20 digits.
                ColumnType::UnsignedLongLong => (63, 20, 0x08, 0x00A0),
                // utf8mb4_general_ci, 4 * 1024 bytes.
                ColumnType::VarString => (45, 4096, 0xFD, 0x0000),
            };
            p.extend_from_slice(&charset.to_le_bytes());
            p.extend_from_slice(&length.to_le_bytes());
            p.push(type_code);
            p.extend_from_slice(&flags.to_le_bytes());
            p.push(if column.kind == ColumnType::VarString { 0x27 } else { 0 }); // decimals (0x27: not fixed)
            p.extend_from_slice(&[0, 0]);
            write(out, seq, &[&p]);
        }
        if !deprecate_eof {
            write(out, seq, &[&eof_payload()]);
        }
        for row in &self.rows {
            p.clear();
            for value in row {
                match value {
                    Some(v) => put_lenenc_str(&mut p, v.as_bytes()),
                    None => p.push(0xFB),
                }
            }
            write(out, seq, &[&p]);
        }
        let end = if deprecate_eof { result_end_ok_payload() } else { eof_payload() };
        write(out, seq, &[&end]);
    }
}

/// The column count that opens a result set.
pub fn parse_column_count(payload: &[u8]) -> Result<u64> {
    let mut r = Reader::new(payload, "result set header");
    let n = r.lenenc_len("column count")?;
    if n == 0 || r.remaining() != 0 {
        return Err(WireError::Malformed { during: "result set header", what: "bad column count", offset: 0 });
    }
    Ok(n)
}

/// One text-protocol row: `columns` length-encoded strings or NULLs.
pub fn parse_text_row(payload: &[u8], columns: usize) -> Result<Vec<Option<Vec<u8>>>> {
    let mut r = Reader::new(payload, "text row");
    let mut row = Vec::with_capacity(columns.min(payload.len()));
    for _ in 0..columns {
        row.push(r.lenenc_bytes("column value")?.map(<[u8]>::to_vec));
    }
    if r.remaining() != 0 {
        return Err(WireError::Malformed {
            during: "text row",
            what: "bytes after the last column",
            offset: payload.len(),
        });
    }
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn written_result_sets_read_back() {
        let rs = ResultSet {
            columns: vec![Column::text("name"), Column::int("value")],
            rows: vec![vec![Some("applied".into()), Some("42".into())], vec![Some("lag".into()), None]],
        };
        let (mut out, mut seq) = (Vec::new(), 1);
        rs.write(&mut out, &mut seq, 0);
        let mut packets = Vec::new();
        let mut rest = &out[..];
        while let Some((_, payload, used)) = crate::packet::decode(rest, 1 << 20).unwrap() {
            packets.push(payload);
            rest = &rest[used..];
        }
        assert_eq!(parse_column_count(&packets[0]).unwrap(), 2);
        assert!(crate::is_eof(&packets[3]));
        assert_eq!(parse_text_row(&packets[4], 2).unwrap(), vec![Some(b"applied".to_vec()), Some(b"42".to_vec())]);
        assert_eq!(parse_text_row(&packets[5], 2).unwrap(), vec![Some(b"lag".to_vec()), None]);
        assert!(crate::is_eof(&packets[6]));
    }

    #[test]
    fn text_rows_from_the_capture() {
        // S->C data raw: 05 43 52 43 33 32 = 'CRC32'
        assert_eq!(parse_text_row(b"\x05CRC32", 1).unwrap(), vec![Some(b"CRC32".to_vec())]);
        assert_eq!(parse_text_row(&[0xFB, 1, b'x'], 2).unwrap(), vec![None, Some(b"x".to_vec())]);
        assert!(parse_text_row(&[5, b'a'], 1).is_err());
        assert_eq!(parse_column_count(&[1]).unwrap(), 1);
        assert!(parse_column_count(&[0]).is_err());
        assert!(parse_column_count(&[0xFB]).is_err());
    }
}
