//! Builders for the synthetic events a master sends around a binlog dump, byte-compatible with what
//! MariaDB 10.11's dump thread (`mysql_binlog_send()` in `sql/sql_repl.cc`) sends. The paxsql binlog server
//! serves its global log with these (docs/ARCHITECTURE.md §4): a fake ROTATE, FORMAT_DESCRIPTION, GTID_LIST and
//! BINLOG_CHECKPOINT open every dump, an artificial GTID_LIST marks a resume point, heartbeats fill idle time.
//!
//! Positions: a real event's `log_pos` is the offset just past it in its binlog file, so builders for those take
//! the offset where the event starts (`start_pos`) and add the encoded size. Artificial events carry a fixed
//! `log_pos` instead (0 for the fake ROTATE, the resume point for the GTID_LIST, the end of the file for a
//! heartbeat).

use crate::event::{BinlogEvent, EventData, FormatDescription, GtidList, SERVER_VERSION_LEN};
use crate::gtid::Gtid;
use crate::header::{event_flags, Checksum, EVENT_HEADER_LEN};

/// Offset of the first event in a binlog file, after the 4-byte magic `fe 62 69 6e`.
pub const BINLOG_FIRST_EVENT_POS: u32 = 4;

/// Post-header length of each event type 1..=171 that MariaDB 10.11 announces in its FORMAT_DESCRIPTION
/// (observed in the lab capture `repl-handshake-and-stream.pcap` (docs/evidence/replication-protocol.md), server 10.11.19). Replicas look up e.g. the
/// QUERY post-header length (13) and TABLE_MAP's (8) here, so we announce exactly what a 10.11 master does.
pub const MARIADB_10_11_POST_HEADER_LENS: [u8; 171] = [
    0x38, 0x0d, 0x00, 0x08, 0x00, 0x12, 0x00, 0x04, 0x04, 0x04, 0x04, 0x12, 0x00, 0x00, 0xe4, 0x00, 0x04, 0x1a, 0x08,
    0x00, 0x00, 0x00, 0x08, 0x08, 0x08, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x0a, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x0a, 0x0a, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x13, 0x04, 0x00, 0x0d, 0x08, 0x08, 0x08, 0x0a, 0x0a, 0x0a,
];

/// Builds an event whose `log_pos` is `start_pos` plus its own encoded size.
fn at(timestamp: u32, server_id: u32, start_pos: u32, flags: u16, data: EventData, checksum: Checksum) -> BinlogEvent {
    let mut event = BinlogEvent::new(timestamp, server_id, 0, flags, data, checksum);
    event.header.log_pos = start_pos.saturating_add(event.header.event_size);
    event
}

/// The fake ROTATE that starts every dump: names the file the dump reads from and the position in it
/// (timestamp 0, log_pos 0, `LOG_EVENT_ARTIFICIAL_F`), so the replica knows where it is before any real event.
pub fn fake_rotate(server_id: u32, file_name: &[u8], position: u64, checksum: Checksum) -> BinlogEvent {
    let data = EventData::Rotate { position, file_name: file_name.to_vec() };
    BinlogEvent::new(0, server_id, 0, event_flags::ARTIFICIAL, data, checksum)
}

/// A FORMAT_DESCRIPTION as the first event of a binlog file (starting at offset 4), announcing `checksum` for
/// the following events and MariaDB 10.11's post-header lengths. `server_version` is cut to 49 bytes (the field
/// is NUL terminated); its major version must be 10 or later for a 10.11 replica to expect GTID events.
pub fn format_description(server_id: u32, timestamp: u32, server_version: &str, checksum: Checksum) -> BinlogEvent {
    let mut server_version_raw = [0u8; SERVER_VERSION_LEN];
    let version = server_version.as_bytes();
    let n = version.len().min(SERVER_VERSION_LEN - 1);
    server_version_raw[..n].copy_from_slice(&version[..n]);
    let fd = FormatDescription {
        binlog_version: 4,
        server_version_raw,
        create_timestamp: timestamp,
        header_len: EVENT_HEADER_LEN as u8,
        post_header_lens: MARIADB_10_11_POST_HEADER_LENS.to_vec(),
        checksum_alg: checksum.alg_byte(),
    };
    at(timestamp, server_id, BINLOG_FIRST_EVENT_POS, 0, EventData::FormatDescription(fd), checksum)
}

/// The GTID_LIST written after the FORMAT_DESCRIPTION of a binlog file: the binlog state (`gtids`, one per
/// domain and server_id) at the file's start.
pub fn gtid_list(server_id: u32, timestamp: u32, start_pos: u32, gtids: Vec<Gtid>, checksum: Checksum) -> BinlogEvent {
    at(timestamp, server_id, start_pos, 0, EventData::GtidList(GtidList::new(gtids)), checksum)
}

/// The artificial GTID_LIST MariaDB sends when a dump resumes inside a file (timestamp 0,
/// `LOG_EVENT_ARTIFICIAL_F`, `log_pos` = the resume position): the GTID state the replica has reached there.
pub fn artificial_gtid_list(server_id: u32, resume_pos: u32, gtids: Vec<Gtid>, checksum: Checksum) -> BinlogEvent {
    let data = EventData::GtidList(GtidList::new(gtids));
    BinlogEvent::new(0, server_id, resume_pos, event_flags::ARTIFICIAL, data, checksum)
}

/// BINLOG_CHECKPOINT naming `file_name` (MariaDB writes one after the GTID_LIST of each new file).
pub fn binlog_checkpoint(
    server_id: u32,
    timestamp: u32,
    start_pos: u32,
    file_name: &[u8],
    checksum: Checksum,
) -> BinlogEvent {
    let data = EventData::BinlogCheckpoint { file_name: file_name.to_vec() };
    at(timestamp, server_id, start_pos, 0, data, checksum)
}

/// HEARTBEAT sent to an idle replica every `@master_heartbeat_period`: timestamp 0, `log_pos` = the current end of
/// `file_name`, body = the file name (MariaDB 10.11; MySQL's heartbeat v2 differs).
pub fn heartbeat(server_id: u32, log_pos: u32, file_name: &[u8], checksum: Checksum) -> BinlogEvent {
    let data = EventData::Heartbeat { file_name: file_name.to_vec() };
    BinlogEvent::new(0, server_id, log_pos, 0, data, checksum)
}

/// The four events that open a dump of `file_name` from its start, in order and with chained positions: fake
/// ROTATE, FORMAT_DESCRIPTION (offset 4), GTID_LIST of `state`, BINLOG_CHECKPOINT. `timestamp` is the file's
/// creation time (MariaDB stamps all three real events with it).
pub fn dump_opening(
    server_id: u32,
    timestamp: u32,
    server_version: &str,
    file_name: &[u8],
    state: Vec<Gtid>,
    checksum: Checksum,
) -> [BinlogEvent; 4] {
    let rotate = fake_rotate(server_id, file_name, u64::from(BINLOG_FIRST_EVENT_POS), checksum);
    let fd = format_description(server_id, timestamp, server_version, checksum);
    let list = gtid_list(server_id, timestamp, fd.header.log_pos, state, checksum);
    let checkpoint = binlog_checkpoint(server_id, timestamp, list.header.log_pos, file_name, checksum);
    [rotate, fd, list, checkpoint]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::event_type;

    #[test]
    fn builders_set_sizes_and_positions() {
        let [rotate, fd, list, cp] =
            dump_opening(1, 1_796_221_858, "10.11.19-MariaDB-0+deb12u1-log", b"n1-bin.000001", vec![], Checksum::Crc32);
        // Sizes and positions seen in repl-handshake-and-stream.decoded.txt.
        assert_eq!((rotate.header.event_size, rotate.header.log_pos, rotate.header.flags), (44, 0, 0x20));
        assert_eq!((fd.header.event_size, fd.header.log_pos), (252, 256));
        assert_eq!((list.header.event_size, list.header.log_pos), (29, 285));
        assert_eq!((cp.header.event_size, cp.header.log_pos), (40, 325));
        assert_eq!(list.header.type_code, event_type::GTID_LIST);
        let hb = heartbeat(1, 1214, b"n1-bin.000001", Checksum::Crc32);
        assert_eq!((hb.header.timestamp, hb.header.event_size, hb.header.log_pos), (0, 36, 1214));
        let resume = artificial_gtid_list(1, 1438, vec![Gtid::new(0, 1, 6)], Checksum::Crc32);
        assert_eq!((resume.header.event_size, resume.header.log_pos, resume.header.flags), (43, 1438, 0x20));
    }

    #[test]
    fn builders_without_checksum_are_four_bytes_shorter() {
        let hb = heartbeat(1, 1214, b"n1-bin.000001", Checksum::Off);
        assert_eq!(hb.header.event_size, 32);
        assert_eq!(hb.encode(Checksum::Off).len(), 32);
        // The FORMAT_DESCRIPTION keeps its footer even when it announces OFF.
        let fd = format_description(1, 0, "10.11.19-MariaDB", Checksum::Off);
        assert_eq!(fd.header.event_size, 252);
        assert_eq!(fd.encode(Checksum::Off).len(), 252);
    }
}
