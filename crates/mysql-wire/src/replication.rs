//! The replication commands and the dump stream's framing: what a replica sends to start a binlog dump
//! (`COM_REGISTER_SLAVE`, `COM_BINLOG_DUMP`), how each event packet is framed (with or without the semi-sync
//! header) and the semi-sync reply. Layouts from MariaDB's `sql/sql_repl.cc` and `sql/semisync_master.cc`,
//! checked against the replication capture (docs/evidence/replication-protocol.md).

use crate::command::{COM_BINLOG_DUMP, COM_REGISTER_SLAVE};
use crate::error::WireError;
use crate::reader::Reader;
use crate::{ErrPacket, Result};

/// `COM_BINLOG_DUMP` flag: at the end of the log send EOF and stop instead of waiting (mariadb-binlog without
/// --stop-never).
pub const BINLOG_DUMP_NON_BLOCK: u16 = 0x0001;
/// `COM_BINLOG_DUMP` flag `BINLOG_SEND_ANNOTATE_ROWS_EVENT`: send ANNOTATE_ROWS events (a 10.11 replica sets it).
pub const BINLOG_SEND_ANNOTATE_ROWS_EVENT: u16 = 0x0002;

/// First byte of a semi-sync header and of a semi-sync reply (`k_packet_magic_num`).
pub const SEMI_SYNC_MAGIC: u8 = 0xEF;
/// Semi-sync header flag: the master waits for a reply to this event (`k_packet_flag_sync`).
pub const SEMI_SYNC_FLAG_ACK: u8 = 0x01;

/// What precedes each event in a dump packet: the OK byte, and for a semi-sync replica the magic and a flags byte
/// (no ACK asked: paxsql's replicas are never waited for).
pub fn event_prefix(semi_sync: bool) -> &'static [u8] {
    if semi_sync {
        &[0x00, SEMI_SYNC_MAGIC, 0x00]
    } else {
        &[0x00]
    }
}

/// `COM_REGISTER_SLAVE`: server_id, then report_host / report_user / report_password (u8-length strings, empty
/// like a replica without `report_host`), report_port, rank (unused), master_id (filled by the master).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisterSlave {
    pub server_id: u32,
    pub report_port: u16,
}

impl RegisterSlave {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(18);
        out.push(COM_REGISTER_SLAVE);
        out.extend_from_slice(&self.server_id.to_le_bytes());
        out.extend_from_slice(&[0, 0, 0]);
        out.extend_from_slice(&self.report_port.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out
    }

    /// Decodes the body (after the command byte). Only the server id matters to a master; the rest may be cut.
    pub fn decode(body: &[u8]) -> Result<RegisterSlave> {
        let mut r = Reader::new(body, "COM_REGISTER_SLAVE");
        let server_id = r.u32("replica server_id")?;
        let mut report = || -> Result<u16> {
            for what in ["report host", "report user", "report password"] {
                let n = r.u8(what)?;
                r.bytes(usize::from(n), what)?;
            }
            r.u16("report port")
        };
        let report_port = report().unwrap_or(0);
        Ok(RegisterSlave { server_id, report_port })
    }
}

/// `COM_BINLOG_DUMP`: position, flags, server_id, file name. For a GTID dump (`@slave_connect_state` set) the
/// master ignores file and position, so like MariaDB's replica on a fresh start paxsql sends position 4 and no
/// file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinlogDump {
    pub position: u32,
    pub flags: u16,
    pub server_id: u32,
    pub file_name: Vec<u8>,
}

impl BinlogDump {
    /// A GTID dump request.
    pub fn gtid(server_id: u32, flags: u16) -> BinlogDump {
        BinlogDump { position: 4, flags, server_id, file_name: Vec::new() }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(11 + self.file_name.len());
        out.push(COM_BINLOG_DUMP);
        out.extend_from_slice(&self.position.to_le_bytes());
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&self.server_id.to_le_bytes());
        out.extend_from_slice(&self.file_name);
        out
    }

    /// Decodes the body (after the command byte).
    pub fn decode(body: &[u8]) -> Result<BinlogDump> {
        let mut r = Reader::new(body, "COM_BINLOG_DUMP");
        let position = r.u32("binlog position")?;
        let flags = r.u16("dump flags")?;
        let server_id = r.u32("replica server_id")?;
        Ok(BinlogDump { position, flags, server_id, file_name: r.rest().to_vec() })
    }
}

/// The semi-sync reply: `0xEF | position u64 LE | file name` (no NUL), sent with sequence id 0
/// (`Repl_semi_sync_slave::slave_reply`).
pub fn semi_sync_ack(file: &str, pos: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + file.len());
    out.push(SEMI_SYNC_MAGIC);
    out.extend_from_slice(&pos.to_le_bytes());
    out.extend_from_slice(file.as_bytes());
    out
}

/// Whether dump packets carry the 2-byte semi-sync header after the 0x00 status byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SemiSyncFraming {
    /// `@rpl_semi_sync_slave=1` was sent: decided by the first event. The first event of every dump is the fake
    /// ROTATE whose timestamp is 0, so its first byte is 0x00 without a header and 0xEF with one.
    Detect,
    On,
    Off,
}

/// One packet of the dump stream, as a replica reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamPacket {
    /// `payload[offset..]` is one binlog event.
    Event { ack_requested: bool, offset: usize },
    /// An ERR packet (e.g. 1236 when the GTID is not in the master's binlog).
    Error(ErrPacket),
    /// An EOF packet: the master ended the dump.
    Eof,
}

impl StreamPacket {
    pub fn decode(payload: &[u8], framing: &mut SemiSyncFraming) -> Result<StreamPacket> {
        let err = |what, offset| WireError::Malformed { during: "binlog stream", what, offset };
        match payload.first() {
            Some(0x00) => {}
            Some(0xFF) => return Ok(StreamPacket::Error(ErrPacket::decode(payload)?)),
            Some(0xFE) if payload.len() < 9 => return Ok(StreamPacket::Eof),
            Some(_) => return Err(err("packet is neither event, ERR nor EOF", 0)),
            None => return Err(err("empty packet", 0)),
        }
        if *framing == SemiSyncFraming::Detect {
            *framing =
                if payload.get(1) == Some(&SEMI_SYNC_MAGIC) { SemiSyncFraming::On } else { SemiSyncFraming::Off };
        }
        if *framing == SemiSyncFraming::Off {
            return Ok(StreamPacket::Event { ack_requested: false, offset: 1 });
        }
        if payload.get(1) != Some(&SEMI_SYNC_MAGIC) {
            return Err(err("missing semi-sync magic 0xEF", 1));
        }
        match payload.get(2) {
            Some(&SEMI_SYNC_FLAG_ACK) => Ok(StreamPacket::Event { ack_requested: true, offset: 3 }),
            Some(0) => Ok(StreamPacket::Event { ack_requested: false, offset: 3 }),
            Some(_) => Err(err("unknown semi-sync flag", 2)),
            None => Err(err("truncated semi-sync header", 2)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_match_the_capture() {
        // C->S COM_REGISTER_SLAVE raw: 15 02 00 00 00 00 00 00 0b 5b 00 00 00 00 00 00 00 00
        let register = RegisterSlave { server_id: 2, report_port: 23307 };
        assert_eq!(register.encode(), [0x15, 2, 0, 0, 0, 0, 0, 0, 0x0b, 0x5b, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(RegisterSlave::decode(&register.encode()[1..]).unwrap(), register);
        assert_eq!(RegisterSlave::decode(&[7, 0, 0, 0]).unwrap(), RegisterSlave { server_id: 7, report_port: 0 });
        assert!(RegisterSlave::decode(&[7, 0]).is_err());
        // C->S COM_BINLOG_DUMP raw: 12 04 00 00 00 02 00 02 00 00 00
        let dump = BinlogDump::gtid(2, BINLOG_SEND_ANNOTATE_ROWS_EVENT);
        assert_eq!(dump.encode(), [0x12, 4, 0, 0, 0, 2, 0, 2, 0, 0, 0]);
        assert_eq!(BinlogDump::decode(&dump.encode()[1..]).unwrap(), dump);
        assert!(BinlogDump::decode(&[4, 0, 0, 0, 2]).is_err());
        // C->S SEMISYNC_ACK raw: ef c0 01 00 00 00 00 00 00 6e 31 2d 62 69 6e 2e 30 30 30 30 30 31
        let mut want = vec![0xef, 0xc0, 0x01, 0, 0, 0, 0, 0, 0];
        want.extend_from_slice(b"n1-bin.000001");
        assert_eq!(semi_sync_ack("n1-bin.000001", 448), want);
    }

    #[test]
    fn stream_packet_framing() {
        let mut f = SemiSyncFraming::Detect;
        let decode = StreamPacket::decode;
        assert_eq!(
            decode(&[0, 0xEF, 0, 0, 0], &mut f).unwrap(),
            StreamPacket::Event { ack_requested: false, offset: 3 }
        );
        assert_eq!(f, SemiSyncFraming::On);
        assert_eq!(decode(&[0, 0xEF, 1, 9], &mut f).unwrap(), StreamPacket::Event { ack_requested: true, offset: 3 });
        assert!(decode(&[0, 0xEF, 2], &mut f).is_err());
        assert!(decode(&[0, 0xEE, 0], &mut f).is_err());
        assert_eq!(decode(&[0xFE, 0, 0, 2, 0], &mut f).unwrap(), StreamPacket::Eof);
        let mut f = SemiSyncFraming::Detect;
        assert_eq!(decode(&[0, 0, 0, 0, 0], &mut f).unwrap(), StreamPacket::Event { ack_requested: false, offset: 1 });
        assert_eq!(f, SemiSyncFraming::Off);
        assert_eq!(event_prefix(true), [0, 0xEF, 0]);
        assert_eq!(event_prefix(false), [0]);
    }
}
