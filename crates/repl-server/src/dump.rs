//! The sans-IO binlog stream of one dump: turns transactions of the log into replication packets at positions
//! of a virtual binlog file of our own.
//!
//! Like MariaDB's dump thread (`mysql_binlog_send()`, `sql/sql_repl.cc`) it opens with a fake ROTATE (timestamp
//! 0, log_pos 0, `LOG_EVENT_ARTIFICIAL_F`), a FORMAT_DESCRIPTION announcing CRC32, a GTID_LIST of the replica's
//! position and a BINLOG_CHECKPOINT; each event then travels as one packet `0x00 <event>` (with `0xEF 0x00`
//! after the 0x00 when the replica asked for semi-sync framing), split in 16 MiB chunks when longer. Every
//! dump starts a fresh virtual file, so positions are ours and independent of where the events were first
//! written: each event's `log_pos` is rewritten to the offset just past it in that file and its CRC32
//! recomputed ([`paxsql_binlog::patch_log_pos`]); nothing else changes (GTID flags2 and commit_id stay intact for
//! parallel apply). Before positions would pass `file_bytes_max`, the stream rotates to the next file as a
//! master does: a ROTATE event, then the four opening events of the new file.

use paxsql_binlog::{event_flags, event_type, synth, BinlogEvent, Checksum, EventData, EventHeader, GtidSet};

use crate::error::{Error, Result};
use crate::session::DumpRequest;
use crate::source::Transaction;
use paxsql_mysql_wire::eof_payload;
use paxsql_mysql_wire::packet::write as write_packet;

/// What every dump of this server shares.
#[derive(Debug, Clone)]
pub struct DumpConfig {
    /// Our server_id, on the synthetic events.
    pub server_id: u32,
    /// server_version in the FORMAT_DESCRIPTION (major version 10+: the replica then expects GTID events).
    pub server_version: String,
    /// Base name of the virtual binlog files (`<base>.000001`, ...).
    pub file_base: String,
    /// Rotate before a file would grow past this many bytes (at most u32::MAX: `log_pos` is 32-bit).
    pub file_bytes_max: u64,
}

/// One dump's stream state.
#[derive(Debug)]
pub struct DumpStream {
    config: DumpConfig,
    file_index: u32,
    /// Offset in the current virtual file where the next event starts.
    pos: u64,
    /// Sequence id of our next packet.
    seq: u8,
    /// The replica's position after what we sent.
    state: GtidSet,
    semi_sync: bool,
    send_annotate_rows: bool,
    /// Timestamp of the synthetic FORMAT_DESCRIPTION etc. (dump start).
    timestamp: u32,
    /// Where the events of the current file start (after the opening).
    first_event_pos: u64,
    /// Statistics.
    pub events_sent: u64,
    pub event_bytes_sent: u64,
}

impl DumpStream {
    /// Starts a dump for `request` whose replica is at `state`, and appends the four opening events. `first_seq`
    /// is the session's next sequence id (1 after COM_BINLOG_DUMP).
    pub fn start(
        config: &DumpConfig,
        request: &DumpRequest,
        now_unix: u32,
        first_seq: u8,
        out: &mut Vec<u8>,
    ) -> DumpStream {
        let mut stream = DumpStream {
            config: config.clone(),
            file_index: 1,
            pos: 0,
            seq: first_seq,
            state: request.state.clone(),
            semi_sync: request.semi_sync,
            send_annotate_rows: request.send_annotate_rows(),
            timestamp: now_unix,
            first_event_pos: 0,
            events_sent: 0,
            event_bytes_sent: 0,
        };
        stream.open_file(out);
        stream
    }

    /// Name of the current virtual binlog file.
    pub fn file_name(&self) -> String {
        format!("{}.{:06}", self.config.file_base, self.file_index)
    }

    /// Offset in the current file after the last event sent.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The replica's GTID position after everything sent so far.
    pub fn state(&self) -> &GtidSet {
        &self.state
    }

    fn open_file(&mut self, out: &mut Vec<u8>) {
        let file = self.file_name();
        let gtids = self.state.iter().copied().collect();
        let opening = synth::dump_opening(
            self.config.server_id,
            self.timestamp,
            &self.config.server_version,
            file.as_bytes(),
            gtids,
            Checksum::Crc32,
        );
        for event in &opening {
            self.send_event_bytes(&event.encode(Checksum::Crc32), out);
        }
        self.pos = u64::from(opening[3].header.log_pos);
        self.first_event_pos = self.pos;
    }

    /// A real (not artificial) ROTATE closing the current file, then the next file's opening.
    fn rotate(&mut self, out: &mut Vec<u8>) {
        self.file_index += 1;
        let data = EventData::Rotate {
            position: u64::from(synth::BINLOG_FIRST_EVENT_POS),
            file_name: self.file_name().into_bytes(),
        };
        let mut event = BinlogEvent::new(self.timestamp, self.config.server_id, 0, 0, data, Checksum::Crc32);
        event.header.log_pos = (self.pos + u64::from(event.header.event_size)) as u32;
        self.send_event_bytes(&event.encode(Checksum::Crc32), out);
        self.open_file(out);
    }

    fn send_event_bytes(&mut self, event: &[u8], out: &mut Vec<u8>) {
        let prefix = paxsql_mysql_wire::replication::event_prefix(self.semi_sync);
        write_packet(out, &mut self.seq, &[prefix, event]);
    }

    /// Appends one transaction's events, positions rewritten. Checks every event's CRC first: a corrupt event
    /// is never re-checksummed and forwarded.
    pub fn push_transaction(&mut self, trx: &Transaction, out: &mut Vec<u8>) -> Result<()> {
        let corrupt = |index, source| Error::CorruptEvent { gtid: Some(trx.gtid), index, source };
        let mut bytes = 0u64;
        for (index, event) in trx.events.iter().enumerate() {
            let header = EventHeader::decode(event).map_err(|e| corrupt(index, e))?;
            if header.event_size as usize != event.len() {
                return Err(corrupt(
                    index,
                    paxsql_binlog::Error::Malformed { what: "event_size differs from the event's length", offset: 9 },
                ));
            }
            paxsql_binlog::verify_checksum(event).map_err(|e| corrupt(index, e))?;
            if self.wanted(&header) {
                bytes += event.len() as u64;
            }
        }
        // Never between two pieces of one transaction: a master's binlog rotates only between transactions.
        if !trx.continues && self.pos > self.first_event_pos && self.pos + bytes > self.config.file_bytes_max {
            self.rotate(out);
        }
        if self.pos + bytes > u64::from(u32::MAX) {
            return Err(Error::TransactionTooLarge { gtid: trx.gtid, bytes });
        }
        let prefix = paxsql_mysql_wire::replication::event_prefix(self.semi_sync);
        for event in &trx.events {
            // Cannot fail: decoded above.
            let Ok(header) = EventHeader::decode(event) else { continue };
            if !self.wanted(&header) {
                continue;
            }
            self.pos += event.len() as u64;
            let log_pos = self.pos as u32;
            if event.len() + prefix.len() < paxsql_mysql_wire::packet::MAX_CHUNK {
                // Common case: copy once into the output and patch there.
                let start = out.len() + 4 + prefix.len();
                write_packet(out, &mut self.seq, &[prefix, event]);
                paxsql_binlog::patch_log_pos(&mut out[start..start + event.len()], log_pos, Checksum::Crc32)
                    .map_err(|e| corrupt(0, e))?;
            } else {
                // Split packet: patch a copy, then chunk it.
                let mut copy = event.to_vec();
                paxsql_binlog::patch_log_pos(&mut copy, log_pos, Checksum::Crc32).map_err(|e| corrupt(0, e))?;
                write_packet(out, &mut self.seq, &[prefix, &copy]);
            }
            self.events_sent += 1;
            self.event_bytes_sent += event.len() as u64;
        }
        self.state.set(trx.gtid);
        Ok(())
    }

    /// ANNOTATE_ROWS only when the replica asked for them (COM_BINLOG_DUMP flag 0x02), as MariaDB does.
    fn wanted(&self, header: &EventHeader) -> bool {
        header.type_code != event_type::ANNOTATE_ROWS || self.send_annotate_rows
    }

    /// Appends a HEARTBEAT (timestamp 0, log_pos = current end, body = file name) for an idle replica.
    pub fn heartbeat(&mut self, out: &mut Vec<u8>) {
        let event =
            synth::heartbeat(self.config.server_id, self.pos as u32, self.file_name().as_bytes(), Checksum::Crc32);
        debug_assert_eq!(event.header.flags & event_flags::ARTIFICIAL, 0);
        self.send_event_bytes(&event.encode(Checksum::Crc32), out);
    }

    /// Appends the EOF that ends a non-blocking dump at the end of the log.
    pub fn end_of_log(&mut self, out: &mut Vec<u8>) {
        write_packet(out, &mut self.seq, &[&eof_payload()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paxsql_binlog::{EventDecoder, Gtid};
    use paxsql_mysql_wire::packet::decode as decode_packet;

    fn config(file_bytes_max: u64) -> DumpConfig {
        DumpConfig {
            server_id: 100,
            server_version: "10.11.19-MariaDB-paxsql".into(),
            file_base: "paxsql-bin".into(),
            file_bytes_max,
        }
    }

    fn request(state: &str) -> DumpRequest {
        DumpRequest {
            state: state.parse().unwrap(),
            replica_server_id: 2,
            flags: 2,
            heartbeat_period_ns: None,
            semi_sync: false,
        }
    }

    /// A transaction as a master writes it: GTID (with a commit_id), QUERY, with arbitrary original positions.
    pub(crate) fn trx(seq_no: u64, commit_id: u64, query_len: usize) -> Transaction {
        let events = crate::conformance::group_member_events(Gtid::new(0, 1, seq_no), commit_id, query_len);
        Transaction::from_contiguous(events.into()).unwrap()
    }

    fn packets(mut out: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let mut v = Vec::new();
        while let Some((seq, payload, used)) = decode_packet(out, usize::MAX).unwrap() {
            v.push((seq, payload));
            out = &out[used..];
        }
        assert!(out.is_empty());
        v
    }

    #[test]
    fn opening_then_events_at_our_positions_with_commit_id_intact() {
        let mut out = Vec::new();
        let mut s = DumpStream::start(&config(1 << 30), &request(""), 1_796_221_858, 1, &mut out);
        let t = trx(1, 77, 10);
        s.push_transaction(&t, &mut out).unwrap();
        let p = packets(&out);
        assert_eq!(p.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6]);
        let mut dec = EventDecoder::new(Checksum::Crc32);
        let events: Vec<BinlogEvent> = p
            .iter()
            .map(|(_, payload)| {
                assert_eq!(payload[0], 0);
                dec.decode(&payload[1..]).unwrap()
            })
            .collect();
        let h: Vec<(u8, u32, u32, u16)> =
            events.iter().map(|e| (e.header.type_code, e.header.timestamp, e.header.log_pos, e.header.flags)).collect();
        // Sizes as in the capture: ROTATE(4) 0/0/0x20, FD ends at 256, GTID_LIST(empty) 285, CHECKPOINT 326 for a
        // 14-byte name.
        assert_eq!(h[0], (event_type::ROTATE, 0, 0, 0x20));
        assert_eq!(h[1].2, 256);
        assert_eq!(h[2].2, 285);
        let cp_end = h[3].2;
        assert_eq!(h[4].2, cp_end + t.events[0].len() as u32);
        assert_eq!(h[5].2, h[4].2 + t.events[1].len() as u32);
        // Only log_pos and the CRC differ from the source bytes.
        let served = &p[4].1[1..];
        assert_eq!(served[..13], t.events[0][..13]);
        assert_eq!(served[17..served.len() - 4], t.events[0][17..t.events[0].len() - 4]);
        match &events[4].data {
            EventData::Gtid(g) => assert_eq!((g.commit_id, g.flags2), (Some(77), 0x0e)),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.state().to_string(), "0-1-1");
        let before = out.len();
        s.heartbeat(&mut out);
        let hb = &packets(&out[before..])[0].1;
        let hb = dec.decode(&hb[1..]).unwrap();
        assert_eq!((hb.header.type_code, hb.header.timestamp, hb.header.log_pos), (27, 0, h[5].2));
    }

    #[test]
    fn rotates_between_transactions_and_reopens() {
        let mut out = Vec::new();
        let mut s = DumpStream::start(&config(700), &request("0-1-0"), 5, 1, &mut out);
        for seq_no in 1..=6 {
            s.push_transaction(&trx(seq_no, seq_no, 100), &mut out).unwrap();
        }
        assert!(s.file_name() > "paxsql-bin.000002".to_string(), "{}", s.file_name());
        let mut dec = EventDecoder::new(Checksum::Crc32);
        let mut last_pos = 0;
        let mut file = String::new();
        for (_, payload) in packets(&out) {
            let e = dec.decode(&payload[1..]).unwrap();
            match &e.data {
                EventData::Rotate { file_name, .. } => {
                    file = String::from_utf8(file_name.clone()).unwrap();
                    last_pos = 4;
                }
                _ => {
                    assert!(e.header.log_pos > last_pos, "{file}: {} after {last_pos}", e.header.log_pos);
                    assert!(u64::from(e.header.log_pos) <= 700 || e.header.type_code != event_type::QUERY);
                    last_pos = e.header.log_pos;
                }
            }
        }
    }

    #[test]
    fn big_events_are_split_and_annotate_rows_filtered() {
        let mut out = Vec::new();
        let mut req = request("");
        req.flags = 0;
        let mut s = DumpStream::start(&config(1 << 31), &req, 5, 1, &mut out);
        out.clear();
        let t = trx(1, 1, 17 << 20);
        s.push_transaction(&t, &mut out).unwrap();
        let p = packets(&out);
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].1.len(), 1 + t.events[1].len());
        // Opening took seq 1..=4, the GTID 5, the 17 MiB event two chunks (6, 7); the last chunk's id is reported.
        assert_eq!((p[0].0, p[1].0), (5, 7));
        assert!(paxsql_binlog::verify_checksum(&p[1].1[1..]).is_ok());
        let _ = Gtid::new(0, 0, 0);
    }

    #[test]
    fn corrupt_events_are_refused() {
        let mut out = Vec::new();
        let mut s = DumpStream::start(&config(1 << 30), &request(""), 5, 1, &mut out);
        let mut t = trx(1, 1, 10);
        let mut bad = t.events[1].to_vec();
        let last = bad.len() - 5;
        bad[last] ^= 1;
        t.events[1] = bad.into();
        assert!(matches!(s.push_transaction(&t, &mut out), Err(Error::CorruptEvent { index: 1, .. })));
    }
}
