//! Grouping the event stream into whole transactions (MariaDB "event groups"), sans IO.
//!
//! paxsql proposes whole transactions to Paxos and ACKs the end of the last one of a batch, so it needs to know
//! where a group ends. The rules are the ones MariaDB's own parallel applier uses (`rpl_parallel.cc`,
//! `Log_event::is_part_of_group`, `is_group_ending`):
//! - a GTID event opens a group;
//! - if its flags2 has `FL_STANDALONE` (DDL, no BEGIN), the group ends at the first event that is not one of the
//!   statement's prefixes (INTVAR, RAND, USER_VAR, TABLE_MAP, ANNOTATE_ROWS): normally the QUERY itself;
//! - otherwise it ends at XID, XA_PREPARE, or a QUERY that is exactly `COMMIT` / `ROLLBACK`, or starts with
//!   `XA COMMIT` / `XA ROLLBACK`.
//!
//! Events that never belong to a group (ROTATE, FORMAT_DESCRIPTION, GTID_LIST, BINLOG_CHECKPOINT, HEARTBEAT,
//! STOP, START_ENCRYPTION) are skipped: the binlog server synthesises its own for replicas.

use std::sync::Arc;

use paxsql_binlog::{event_type, gtid_flags, EventData, Gtid};

use crate::client::ReplicationEvent;
use crate::error::{Error, Result};

/// MariaDB event types the group rules name but paxsql-binlog does not (`log_event.h`).
const INTVAR: u8 = 5;
const RAND: u8 = 13;
const USER_VAR: u8 = 14;
const XA_PREPARE: u8 = 38;
const START_ENCRYPTION: u8 = 164;

/// One complete event group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    pub gtid: Gtid,
    /// The group's events back to back, each exactly as received (GTID event first).
    pub events: Vec<u8>,
    pub event_count: usize,
    /// Where the group ends: the ACK position for it.
    pub end_file: Arc<str>,
    pub end_pos: u64,
    /// The master waits for an ACK covering `end_file`:`end_pos` (semi-sync flag on the last event).
    pub ack_requested: bool,
}

#[derive(Debug)]
struct OpenGroup {
    gtid: Gtid,
    standalone: bool,
    events: Vec<u8>,
    event_count: usize,
    ack_requested: bool,
}

/// Feeds on [`ReplicationEvent`]s, yields [`Transaction`]s. Reset it after reconnecting: the master resends
/// a partly received group from its GTID event.
#[derive(Debug, Default)]
pub struct TransactionAssembler {
    open: Option<OpenGroup>,
}

impl TransactionAssembler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a group has started and not ended.
    pub fn in_transaction(&self) -> bool {
        self.open.is_some()
    }

    /// Drops a partly assembled group.
    pub fn reset(&mut self) {
        self.open = None;
    }

    /// Takes the events buffered so far of the open group once they reach `at_least` bytes (its GTID and the
    /// bytes): a transaction too large for one log entry goes on in parts while it is still being read, so memory
    /// holds one part, not the transaction. The group stays open; what it completes later holds only the events
    /// after this.
    pub fn take_open_events(&mut self, at_least: usize) -> Option<(Gtid, Vec<u8>)> {
        let open = self.open.as_mut().filter(|o| o.events.len() >= at_least.max(1))?;
        Some((open.gtid, std::mem::take(&mut open.events)))
    }

    /// Adds one event; returns the transaction it completes, if any. Errors (and stays unchanged) on a GTID
    /// event inside an open group or a group event outside one: the stream is not a valid binlog.
    pub fn push(&mut self, event: &ReplicationEvent) -> Result<Option<Transaction>> {
        let t = event.type_code();
        if let Some(gtid) = event.gtid() {
            if let Some(open) = &self.open {
                return Err(Error::UnterminatedGroup { open: open.gtid, next: gtid });
            }
            let standalone = matches!(&event.data, Some(EventData::Gtid(g)) if g.flags2 & gtid_flags::STANDALONE != 0);
            self.open = Some(OpenGroup {
                gtid,
                standalone,
                events: event.raw.to_vec(),
                event_count: 1,
                ack_requested: event.ack_requested,
            });
            return Ok(None);
        }
        if is_outside_groups(t) {
            return Ok(None);
        }
        let Some(open) = &mut self.open else {
            return Err(Error::EventOutsideGroup {
                type_code: t,
                file: event.file.to_string(),
                end_pos: event.end_pos,
            });
        };
        open.events.extend_from_slice(&event.raw);
        open.event_count += 1;
        open.ack_requested |= event.ack_requested;
        let ends = if open.standalone { !is_statement_prefix(t) } else { ends_transaction(event) };
        if !ends {
            return Ok(None);
        }
        let Some(open) = self.open.take() else { return Ok(None) };
        Ok(Some(Transaction {
            gtid: open.gtid,
            events: open.events,
            event_count: open.event_count,
            end_file: event.file.clone(),
            end_pos: event.end_pos,
            ack_requested: open.ack_requested,
        }))
    }
}

fn is_outside_groups(type_code: u8) -> bool {
    matches!(
        type_code,
        event_type::ROTATE
            | event_type::FORMAT_DESCRIPTION
            | event_type::GTID_LIST
            | event_type::BINLOG_CHECKPOINT
            | event_type::HEARTBEAT
            | event_type::STOP
            | START_ENCRYPTION
    )
}

/// `Log_event::is_part_of_group`: events that precede the statement of a standalone group.
fn is_statement_prefix(type_code: u8) -> bool {
    matches!(type_code, INTVAR | RAND | USER_VAR | event_type::TABLE_MAP | event_type::ANNOTATE_ROWS)
}

fn ends_transaction(event: &ReplicationEvent) -> bool {
    match (&event.data, event.type_code()) {
        (_, event_type::XID | XA_PREPARE) => true,
        (Some(EventData::Query(q)), _) => {
            // MariaDB compares exactly (strcmp) for COMMIT / ROLLBACK: "COMMIT /* ... */" would not end a group.
            q.query == b"COMMIT"
                || q.query == b"ROLLBACK"
                || q.query.starts_with(b"XA COMMIT")
                || q.query.starts_with(b"XA ROLLBACK")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use paxsql_binlog::{BinlogEvent, Checksum, GtidEvent, OpaqueBody, Query, RowsKind};

    fn ev(data: EventData, log_pos: u32, ack: bool) -> ReplicationEvent {
        let e = BinlogEvent::new(1_796_220_405, 1, log_pos, 0, data, Checksum::Crc32);
        ReplicationEvent {
            raw: Bytes::from(e.encode(Checksum::Crc32)),
            header: e.header,
            data: Some(e.data),
            file: Arc::from("n1-bin.000001"),
            end_pos: u64::from(log_pos),
            ack_requested: ack,
        }
    }

    fn gtid(seq: u64, flags2: u8) -> EventData {
        EventData::Gtid(GtidEvent::new(0, seq, flags2, None))
    }

    fn query(sql: &str) -> EventData {
        EventData::Query(Query { query: sql.as_bytes().to_vec(), ..Query::default() })
    }

    fn rows() -> EventData {
        EventData::Rows { kind: RowsKind::Write, body: OpaqueBody(vec![18, 0, 0, 0, 0, 0, 1, 0]) }
    }

    #[test]
    fn ddl_row_trx_and_statement_trx() {
        let mut a = TransactionAssembler::new();
        let standalone = gtid_flags::STANDALONE | gtid_flags::DDL;
        // The capture's opening: GTID 0-1-3 standalone DDL, then GTID 0-1-5 ANNOTATE/TABLE_MAP/WRITE/XID.
        let stream = [
            (ev(EventData::Rotate { position: 4, file_name: b"n1-bin.000001".to_vec() }, 0, false), None),
            (ev(gtid(3, standalone), 858, false), None),
            (ev(query("CREATE DATABASE t"), 939, true), Some((3, 939, true, 2))),
            (ev(gtid(5, gtid_flags::TRANSACTIONAL), 1038, false), None),
            (ev(EventData::AnnotateRows { sql: b"INSERT INTO t.a VALUES (1)".to_vec() }, 1095, false), None),
            (ev(EventData::TableMap(OpaqueBody(vec![18, 0, 0, 0, 0, 0])), 1139, false), None),
            (ev(EventData::Heartbeat { file_name: b"n1-bin.000001".to_vec() }, 1139, false), None),
            (ev(rows(), 1183, false), None),
            (ev(EventData::Xid { xid: 12 }, 1214, true), Some((5, 1214, true, 5))),
            (ev(gtid(6, 0), 1300, false), None),
            (ev(query("BEGIN"), 1350, false), None),
            (ev(query("INSERT INTO t.m VALUES (1)"), 1400, false), None),
            (ev(query("COMMIT"), 1450, false), Some((6, 1450, false, 4))),
        ];
        for (event, want) in stream {
            let got = a.push(&event).unwrap();
            assert_eq!(got.as_ref().map(|t| (t.gtid.seq_no, t.end_pos, t.ack_requested, t.event_count)), want);
            if let Some(t) = got {
                assert_eq!(t.gtid, Gtid::new(0, 1, t.gtid.seq_no));
                assert!(t.events.starts_with(&[0xF5, 0x2E, 0x0E, 0x6B, event_type::GTID]) || !t.events.is_empty());
            }
        }
        assert!(!a.in_transaction());
    }

    #[test]
    fn standalone_group_ends_after_its_statement_prefixes() {
        let mut a = TransactionAssembler::new();
        a.push(&ev(gtid(1, gtid_flags::STANDALONE), 100, false)).unwrap();
        assert!(a.push(&ev(EventData::Unknown { type_code: INTVAR, body: vec![1; 9] }, 129, false)).unwrap().is_none());
        let t = a.push(&ev(query("INSERT INTO myisam_t VALUES (NULL)"), 200, false)).unwrap().unwrap();
        assert_eq!((t.event_count, t.end_pos), (3, 200));
    }

    #[test]
    fn broken_streams_are_errors() {
        let mut a = TransactionAssembler::new();
        assert!(matches!(a.push(&ev(EventData::Xid { xid: 1 }, 50, false)), Err(Error::EventOutsideGroup { .. })));
        a.push(&ev(gtid(1, 0), 100, false)).unwrap();
        assert!(matches!(a.push(&ev(gtid(2, 0), 150, false)), Err(Error::UnterminatedGroup { .. })));
        // "COMMIT" must match exactly, as in MariaDB.
        assert!(a.push(&ev(query("COMMIT /* x */"), 160, false)).unwrap().is_none());
        assert!(a.in_transaction());
        a.reset();
        assert!(!a.in_transaction());
    }
}
