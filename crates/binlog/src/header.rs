//! The common event header, event type codes, flags and the CRC32 footer.
//!
//! Layout (MariaDB `sql/log_event.h`, `LOG_EVENT_HEADER_LEN` = 19, all integers little-endian):
//! `timestamp u32 | type_code u8 | server_id u32 | event_size u32 | log_pos u32 | flags u16`.
//! `event_size` counts the whole event: header, body and, with `binlog_checksum=CRC32`, the 4-byte footer.

use crate::error::{Error, Result};

/// Length of the v4 common header (`LOG_EVENT_HEADER_LEN` in MariaDB's `log_event.h`).
pub const EVENT_HEADER_LEN: usize = 19;

/// Length of the CRC32 footer (`BINLOG_CHECKSUM_LEN`).
pub const CHECKSUM_LEN: usize = 4;

/// Event type codes (`enum Log_event_type` in MariaDB's `log_event.h`). Only the ones paxsql looks at are named;
/// every other code decodes to [`crate::EventData::Unknown`].
pub mod event_type {
    pub const QUERY: u8 = 2;
    pub const STOP: u8 = 3;
    pub const ROTATE: u8 = 4;
    pub const FORMAT_DESCRIPTION: u8 = 15;
    pub const XID: u8 = 16;
    pub const TABLE_MAP: u8 = 19;
    pub const WRITE_ROWS_V1: u8 = 23;
    pub const UPDATE_ROWS_V1: u8 = 24;
    pub const DELETE_ROWS_V1: u8 = 25;
    /// `HEARTBEAT_LOG_EVENT`: never written to a binlog file, only sent by a dump thread when idle.
    pub const HEARTBEAT: u8 = 27;
    /// MariaDB: the SQL text of the statement that produced the following row events (`binlog_annotate_row_events`).
    pub const ANNOTATE_ROWS: u8 = 160;
    /// MariaDB: names the oldest binlog file still needed for crash recovery.
    pub const BINLOG_CHECKPOINT: u8 = 161;
    /// MariaDB GTID event, opens every event group (transaction or DDL).
    pub const GTID: u8 = 162;
    /// MariaDB: the GTID binlog state at the start of a binlog file (or, artificial, at a dump's resume point).
    pub const GTID_LIST: u8 = 163;
}

/// Header flags (`LOG_EVENT_*_F` in `log_event.h`).
pub mod event_flags {
    /// `LOG_EVENT_BINLOG_IN_USE_F`: set in the FORMAT_DESCRIPTION of a binlog file that was not closed cleanly.
    pub const BINLOG_IN_USE: u16 = 0x0001;
    /// `LOG_EVENT_SUPPRESS_USE_F`: the QUERY's default database must not be `USE`d when applying.
    pub const SUPPRESS_USE: u16 = 0x0008;
    /// `LOG_EVENT_ARTIFICIAL_F`: made up by the dump thread, not read from a binlog file (the first ROTATE of a
    /// dump, the GTID_LIST at a resume point). A replica does not advance its position on these.
    pub const ARTIFICIAL: u16 = 0x0020;
}

/// Whether events carry the 4-byte CRC32 footer. The replication client learns it from
/// `SELECT @master_binlog_checksum`; inside a binlog it is announced by the FORMAT_DESCRIPTION event's
/// `checksum_alg` byte (`enum_binlog_checksum_alg`: 0 = OFF, 1 = CRC32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Checksum {
    /// `binlog_checksum=NONE`: events end right after their body.
    Off,
    /// `binlog_checksum=CRC32`: the last 4 bytes are the zlib CRC32 of everything before them.
    Crc32,
}

impl Checksum {
    /// The value of the FORMAT_DESCRIPTION's `checksum_alg` byte (`BINLOG_CHECKSUM_ALG_OFF` / `_CRC32`).
    pub fn alg_byte(self) -> u8 {
        match self {
            Checksum::Off => 0,
            Checksum::Crc32 => 1,
        }
    }

    /// Inverse of [`Checksum::alg_byte`]; `None` for any other algorithm (MariaDB knows no other).
    pub fn from_alg_byte(alg: u8) -> Option<Checksum> {
        match alg {
            0 => Some(Checksum::Off),
            1 => Some(Checksum::Crc32),
            _ => None,
        }
    }

    /// Footer length in bytes.
    pub fn footer_len(self) -> usize {
        match self {
            Checksum::Off => 0,
            Checksum::Crc32 => CHECKSUM_LEN,
        }
    }
}

/// CRC32 as MariaDB computes it (`my_checksum`, zlib's `crc32` with the IEEE polynomial, initial value 0).
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// Checks the CRC32 footer of a complete event and returns the bytes before it.
pub fn verify_checksum(event: &[u8]) -> Result<&[u8]> {
    let Some(split) = event.len().checked_sub(CHECKSUM_LEN) else {
        return Err(Error::Truncated { what: "checksum footer", offset: 0 });
    };
    let (covered, footer) = event.split_at(split);
    let expected = u32::from_le_bytes([footer[0], footer[1], footer[2], footer[3]]);
    let actual = crc32(covered);
    if expected != actual {
        return Err(Error::ChecksumMismatch { expected, actual });
    }
    Ok(covered)
}

/// The 19-byte common header of every binlog event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventHeader {
    /// Seconds since the epoch when the statement started; 0 on artificial events and heartbeats.
    pub timestamp: u32,
    pub type_code: u8,
    /// server_id of the server that first wrote the event (MariaDB skips events with its own id on apply).
    pub server_id: u32,
    /// Length of the whole event including header and checksum footer.
    pub event_size: u32,
    /// Binlog position just after this event on the originating server (0 on the dump's fake ROTATE, the
    /// resume point on an artificial GTID_LIST, the current end of the binlog on a heartbeat).
    pub log_pos: u32,
    /// `LOG_EVENT_*_F` bits, see [`event_flags`].
    pub flags: u16,
}

impl EventHeader {
    /// Reads the header from the first 19 bytes of `buf` (which may hold more).
    pub fn decode(buf: &[u8]) -> Result<EventHeader> {
        let Some(h) = buf.get(..EVENT_HEADER_LEN) else {
            return Err(Error::Incomplete { have: buf.len(), need: EVENT_HEADER_LEN });
        };
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        Ok(EventHeader {
            timestamp: u32_at(0),
            type_code: h[4],
            server_id: u32_at(5),
            event_size: u32_at(9),
            log_pos: u32_at(13),
            flags: u16::from_le_bytes([h[17], h[18]]),
        })
    }

    /// The 19 header bytes.
    pub fn to_bytes(&self) -> [u8; EVENT_HEADER_LEN] {
        let mut b = [0u8; EVENT_HEADER_LEN];
        b[0..4].copy_from_slice(&self.timestamp.to_le_bytes());
        b[4] = self.type_code;
        b[5..9].copy_from_slice(&self.server_id.to_le_bytes());
        b[9..13].copy_from_slice(&self.event_size.to_le_bytes());
        b[13..17].copy_from_slice(&self.log_pos.to_le_bytes());
        b[17..19].copy_from_slice(&self.flags.to_le_bytes());
        b
    }

    /// Appends the 19 header bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }

    /// Whether [`event_flags::ARTIFICIAL`] is set.
    pub fn is_artificial(&self) -> bool {
        self.flags & event_flags::ARTIFICIAL != 0
    }
}

/// Framing for a byte stream of back-to-back events (a binlog file after its 4-byte magic, or a buffer of
/// several events): splits off the first complete event. Checks only the header's `event_size`, not the body.
///
/// Returns [`Error::Incomplete`] when `buf` does not yet hold the whole first event.
pub fn split_event(buf: &[u8]) -> Result<(&[u8], &[u8])> {
    let header = EventHeader::decode(buf)?;
    let size = header.event_size as usize;
    if size < EVENT_HEADER_LEN {
        return Err(Error::Malformed { what: "event_size smaller than the header", offset: 9 });
    }
    if buf.len() < size {
        return Err(Error::Incomplete { have: buf.len(), need: size });
    }
    Ok(buf.split_at(size))
}

/// Rewrites the header's `log_pos` of an encoded event in place and refreshes its CRC32 footer, without
/// decoding the body. The binlog server uses this when it re-serves events at positions of its own.
pub fn patch_log_pos(event: &mut [u8], log_pos: u32, checksum: Checksum) -> Result<()> {
    let header = EventHeader::decode(event)?;
    if header.event_size as usize != event.len() {
        return Err(Error::Malformed { what: "event_size differs from the event's length", offset: 9 });
    }
    let min_len = EVENT_HEADER_LEN + checksum.footer_len();
    if event.len() < min_len {
        return Err(Error::Truncated { what: "checksum footer", offset: event.len() });
    }
    event[13..17].copy_from_slice(&log_pos.to_le_bytes());
    if checksum == Checksum::Crc32 {
        let split = event.len() - CHECKSUM_LEN;
        let crc = crc32(&event[..split]);
        event[split..].copy_from_slice(&crc.to_le_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = EventHeader {
            timestamp: 0x6b10_2bae,
            type_code: event_type::GTID,
            server_id: 1,
            event_size: 42,
            log_pos: 367,
            flags: event_flags::SUPPRESS_USE,
        };
        let bytes = h.to_bytes();
        assert_eq!(EventHeader::decode(&bytes).unwrap(), h);
        assert_eq!(EventHeader::decode(&bytes[..18]), Err(Error::Incomplete { have: 18, need: 19 }));
    }

    #[test]
    fn crc32_matches_zlib() {
        // zlib.crc32(b"123456789") == 0xcbf43926, the standard IEEE check value.
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn split_event_waits_for_the_whole_event() {
        let mut h = EventHeader { timestamp: 0, type_code: 3, server_id: 1, event_size: 23, log_pos: 0, flags: 0 }
            .to_bytes()
            .to_vec();
        assert_eq!(split_event(&h), Err(Error::Incomplete { have: 19, need: 23 }));
        h.extend_from_slice(&[0, 0, 0, 0, 9]);
        let (event, rest) = split_event(&h).unwrap();
        assert_eq!((event.len(), rest), (23, &[9u8][..]));
        h[9] = 3;
        assert!(matches!(split_event(&h), Err(Error::Malformed { offset: 9, .. })));
    }
}
