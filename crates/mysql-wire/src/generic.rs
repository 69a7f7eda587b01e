//! The generic answers: OK, ERR, EOF.

use crate::reader::Reader;
use crate::{Result, STATUS_AUTOCOMMIT};

/// MariaDB's `MYSQL_ERRMSG_SIZE`: clients keep at most this many bytes of a message.
const MESSAGE_BYTES_MAX: usize = 511;

/// An ERR packet: `0xFF`, code, then (protocol 4.1) `#` and a five-character SQLSTATE, then the message.
///
/// Before the handshake a client has not announced `CLIENT_PROTOCOL_41`, and MariaDB itself then leaves the
/// `#SQLSTATE` marker out; paxsql's endpoints put it in anyway, because libmariadb (the `mariadb` CLI,
/// Connector/C and everything built on it), Connector/J, Go's driver and PyMySQL all look for the `#` and so
/// report the SQLSTATE; `mysql_async` shows `#08S01` at the start of the message instead (code intact).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrPacket {
    /// MariaDB error code.
    pub code: u16,
    /// Five ASCII characters; `None` in a decoded packet that carried no `#` marker.
    pub sql_state: Option<[u8; 5]>,
    /// Human-readable message; cut to 511 bytes (at a char boundary) when encoded.
    pub message: String,
}

impl ErrPacket {
    /// An error with `sql_state` ("HY000" when it is not five characters).
    pub fn new(code: u16, sql_state: &str, message: impl Into<String>) -> ErrPacket {
        let state = <[u8; 5]>::try_from(sql_state.as_bytes()).unwrap_or(*b"HY000");
        ErrPacket { code, sql_state: Some(state), message: message.into() }
    }

    /// The SQLSTATE as text ("" when the packet carried none).
    pub fn sql_state_text(&self) -> String {
        self.sql_state.map(|s| String::from_utf8_lossy(&s).into_owned()).unwrap_or_default()
    }

    /// The payload (frame it with [`crate::packet::write`]).
    pub fn payload(&self) -> Vec<u8> {
        let mut cut = self.message.len().min(MESSAGE_BYTES_MAX);
        while !self.message.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut p = Vec::with_capacity(9 + cut);
        p.push(0xFF);
        p.extend_from_slice(&self.code.to_le_bytes());
        p.push(b'#');
        p.extend_from_slice(&self.sql_state.unwrap_or(*b"HY000"));
        p.extend_from_slice(&self.message.as_bytes()[..cut]);
        p
    }

    /// One whole packet with sequence id `seq`.
    pub fn packet(&self, seq: u8) -> Vec<u8> {
        let mut out = Vec::new();
        crate::packet::encode(seq, &self.payload(), &mut out);
        out
    }

    /// Parses an ERR payload. The message is taken as UTF-8, invalid bytes replaced (it is for people).
    pub fn decode(payload: &[u8]) -> Result<ErrPacket> {
        let mut r = Reader::new(payload, "ERR packet");
        if r.u8("ERR marker")? != 0xFF {
            return Err(crate::WireError::Malformed {
                during: "ERR packet",
                what: "header byte is not 0xFF",
                offset: 0,
            });
        }
        let code = r.u16("error code")?;
        let mut sql_state = None;
        if r.remaining() >= 6 && payload.get(3) == Some(&b'#') {
            r.u8("SQLSTATE marker")?;
            sql_state = Some(r.array::<5>("SQLSTATE")?);
        }
        let message = String::from_utf8_lossy(r.rest()).into_owned();
        Ok(ErrPacket { code, sql_state, message })
    }
}

/// OK payload: header 0x00, no affected rows, no insert id, autocommit status, no warnings.
pub fn ok_payload() -> Vec<u8> {
    vec![0x00, 0x00, 0x00, STATUS_AUTOCOMMIT as u8, (STATUS_AUTOCOMMIT >> 8) as u8, 0x00, 0x00]
}

/// EOF payload (`0xFE warnings status`).
pub fn eof_payload() -> Vec<u8> {
    vec![0xFE, 0x00, 0x00, STATUS_AUTOCOMMIT as u8, (STATUS_AUTOCOMMIT >> 8) as u8]
}

/// The OK that ends a result set under `CLIENT_DEPRECATE_EOF`: header 0xFE, then the OK fields.
pub fn result_end_ok_payload() -> Vec<u8> {
    vec![0xFE, 0x00, 0x00, STATUS_AUTOCOMMIT as u8, (STATUS_AUTOCOMMIT >> 8) as u8, 0x00, 0x00]
}

/// An EOF packet: `0xFE` with fewer than 9 bytes (a longer one starting with 0xFE is a row or a length).
pub fn is_eof(payload: &[u8]) -> bool {
    payload.first() == Some(&0xFE) && payload.len() < 9
}

/// An OK packet (`0x00 | affected_rows lenenc | last_insert_id lenenc | ...`); one that starts like an OK but
/// is cut short is an error.
pub fn is_ok(payload: &[u8]) -> Result<bool> {
    if payload.first() != Some(&0x00) {
        return Ok(false);
    }
    let mut r = Reader::new(payload, "OK packet");
    r.u8("OK marker")?;
    r.lenenc_int("affected rows")?;
    r.lenenc_int("last insert id")?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ok_and_eof_match_mariadb_bytes() {
        // From the replication capture: OK `00 00 00 02 00 00 00`, EOF `fe 00 00 02 00`.
        assert_eq!(ok_payload(), [0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(eof_payload(), [0xFE, 0, 0, 2, 0]);
        assert!(is_ok(&ok_payload()).unwrap() && is_eof(&eof_payload()) && is_eof(&result_end_ok_payload()));
        assert!(!is_ok(&eof_payload()).unwrap());
        assert!(is_ok(&[0x00]).is_err());
    }

    #[test]
    fn err_packet_bytes_field_by_field() {
        let p = ErrPacket::new(1053, "08S01", "paxsql: no master").packet(0);
        assert_eq!(&p[..4], &[26, 0, 0, 0]);
        assert_eq!(p[4], 0xFF);
        assert_eq!(&p[5..7], &1053u16.to_le_bytes());
        assert_eq!(&p[7..13], b"#08S01");
        assert_eq!(&p[13..], b"paxsql: no master");
    }

    #[test]
    fn err_packet_round_trip_and_cut() {
        let e = ErrPacket::new(1236, "HY000", "x".repeat(600) + "é");
        let back = ErrPacket::decode(&e.payload()).unwrap();
        assert_eq!((back.code, back.sql_state, back.message.len()), (1236, Some(*b"HY000"), 511));
        let e = ErrPacket::new(1045, "28000", format!("{}é", "a".repeat(510)));
        assert_eq!(ErrPacket::decode(&e.payload()).unwrap().message, "a".repeat(510), "cut at a char boundary");
        assert_eq!(ErrPacket::new(1, "bad", "m").sql_state, Some(*b"HY000"));
        // A pre-handshake ERR without the marker (MariaDB's "Host is blocked").
        let mut raw = vec![0xFF, 0x69, 0x04];
        raw.extend_from_slice(b"Host blocked");
        let e = ErrPacket::decode(&raw).unwrap();
        assert_eq!(
            (e.code, e.sql_state, e.message.as_str(), e.sql_state_text()),
            (1129, None, "Host blocked", String::new())
        );
        assert!(ErrPacket::decode(&[0x00, 1, 2]).is_err());
        assert!(ErrPacket::decode(&[0xFF, 1]).is_err());
    }
}
