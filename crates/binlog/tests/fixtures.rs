//! Events captured from a real MariaDB 10.11.19 master (the lab captures of docs/evidence/replication-protocol.md, extracted into testdata/ by
//! testdata/extract_events.py): every one decodes, carries the field values the capture's decoded text shows,
//! and re-encodes to the same bytes; the synthetic-event builders reproduce the master's bytes exactly.

mod common;

use common::{annotated, captured, CAPTURES};
use paxsql_binlog::synth::{self, MARIADB_10_11_POST_HEADER_LENS};
use paxsql_binlog::{
    event_flags, event_type, gtid_flags, BinlogEvent, Checksum, Error, EventData, EventDecoder, Gtid, GtidSet, RowsKind,
};

const N1_BIN: &[u8] = b"n1-bin.000001";
const SERVER_VERSION: &str = "10.11.19-MariaDB-0+deb12u1-log";

fn decode(name: &str) -> (Vec<u8>, BinlogEvent) {
    let bytes = annotated(name);
    let event = BinlogEvent::decode(&bytes, Checksum::Crc32).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(event.encode(Checksum::Crc32), bytes, "{name} does not re-encode byte for byte");
    assert_eq!(event.header.event_size as usize, bytes.len());
    (bytes, event)
}

#[test]
fn every_captured_event_round_trips() {
    let mut seen = std::collections::BTreeMap::<u8, usize>::new();
    for stem in CAPTURES {
        let events = captured(stem);
        assert!(!events.is_empty(), "{stem}: no events");
        let mut decoder = EventDecoder::new(Checksum::Crc32);
        for (comment, bytes) in &events {
            let event = decoder.decode(bytes).unwrap_or_else(|e| panic!("{stem}: {comment}: {e}"));
            assert_eq!(&event.encode(decoder.checksum()), bytes, "{stem}: {comment}");
            assert!(comment.contains(&format!("({})", event.header.type_code)), "{comment}");
            assert!(!matches!(event.data, EventData::Unknown { .. }), "{comment} decoded as Unknown");
            *seen.entry(event.header.type_code).or_default() += 1;
        }
    }
    // The two captures hold 153 events of 12 types (see the .decoded.txt files).
    assert_eq!(seen.values().sum::<usize>(), 26 + 127);
    let types: Vec<u8> = seen.keys().copied().collect();
    assert_eq!(types, [2, 4, 15, 16, 19, 23, 24, 25, 27, 160, 161, 162, 163]);
}

#[test]
fn captured_gtids_are_gapless_per_stream() {
    // repl-handshake-and-stream: GTIDs 0-1-1 .. 0-1-5 in order.
    let gtids: Vec<Gtid> = captured("repl-handshake-and-stream")
        .iter()
        .filter_map(|(_, b)| BinlogEvent::decode(b, Checksum::Crc32).unwrap().gtid())
        .collect();
    assert_eq!(gtids, (1..=5).map(|n| Gtid::new(0, 1, n)).collect::<Vec<_>>());
}

#[test]
fn format_description() {
    let (_, event) = decode("format-description");
    assert_eq!((event.header.timestamp, event.header.log_pos, event.header.event_size), (1_796_221_858, 256, 252));
    let EventData::FormatDescription(fd) = &event.data else { panic!("{event:?}") };
    assert_eq!(fd.binlog_version, 4);
    assert_eq!(fd.server_version(), SERVER_VERSION);
    assert!(fd.server_version().starts_with("10.11.19-MariaDB-"));
    assert_eq!(fd.create_timestamp, 1_796_221_858);
    assert_eq!(fd.header_len, 19);
    assert_eq!(fd.checksum(), Some(Checksum::Crc32));
    assert_eq!(fd.post_header_lens, MARIADB_10_11_POST_HEADER_LENS);
    assert_eq!(fd.post_header_len(event_type::QUERY), Some(13));
    assert_eq!(fd.post_header_len(event_type::TABLE_MAP), Some(8));
    assert_eq!(fd.post_header_len(event_type::GTID), Some(19));
    assert_eq!(fd.post_header_len(0), None);
}

#[test]
fn fake_rotate() {
    let (bytes, event) = decode("rotate-fake");
    assert_eq!((event.header.timestamp, event.header.log_pos), (0, 0));
    assert_eq!(event.header.flags, event_flags::ARTIFICIAL);
    assert!(event.header.is_artificial());
    assert_eq!(event.data, EventData::Rotate { position: 4, file_name: N1_BIN.to_vec() });
    // The decoded capture prints the footer's raw bytes: crc32=1c6a31f3.
    assert_eq!(bytes[bytes.len() - 4..], [0x1c, 0x6a, 0x31, 0xf3]);
}

#[test]
fn gtid_events() {
    let (_, ddl) = decode("gtid-ddl");
    assert_eq!(ddl.gtid(), Some("0-1-1".parse().unwrap()));
    assert_eq!((ddl.header.event_size, ddl.header.log_pos, ddl.header.flags), (42, 367, 0x0008));
    let EventData::Gtid(g) = &ddl.data else { panic!("{ddl:?}") };
    assert_eq!((g.seq_no, g.domain_id, g.flags2), (1, 0, 0x29));
    assert_eq!(g.flags2, gtid_flags::STANDALONE | gtid_flags::ALLOW_PARALLEL | gtid_flags::DDL);
    assert_eq!(g.commit_id, None);
    assert_eq!(g.rest, [0u8; 6], "zero padding to GTID_HEADER_LEN kept");

    let (_, trx) = decode("gtid-trx");
    assert_eq!(trx.gtid(), Some(Gtid::new(0, 1, 4)));
    let EventData::Gtid(g) = &trx.data else { panic!("{trx:?}") };
    assert_eq!(g.flags2, gtid_flags::TRANSACTIONAL | gtid_flags::ALLOW_PARALLEL);
}

#[test]
fn gtid_list_events() {
    let (_, empty) = decode("gtid-list-empty");
    assert_eq!((empty.header.event_size, empty.header.log_pos), (29, 285));
    let EventData::GtidList(list) = &empty.data else { panic!("{empty:?}") };
    assert!(list.gtids.is_empty());
    assert_eq!(list.padding, [0, 0], "MariaDB pads an empty GTID_LIST");

    let (_, resume) = decode("gtid-list-artificial");
    assert_eq!((resume.header.timestamp, resume.header.log_pos, resume.header.flags), (0, 1438, 0x20));
    let EventData::GtidList(list) = &resume.data else { panic!("{resume:?}") };
    assert_eq!((list.flags, list.gtids.as_slice()), (0, &[Gtid::new(0, 1, 6)][..]));
    assert_eq!(GtidSet::from_state(list.gtids.iter().copied()).to_string(), "0-1-6");
}

#[test]
fn binlog_checkpoint() {
    let (_, event) = decode("binlog-checkpoint");
    assert_eq!((event.header.event_size, event.header.log_pos), (40, 325));
    assert_eq!(event.data, EventData::BinlogCheckpoint { file_name: N1_BIN.to_vec() });
}

#[test]
fn query_events() {
    let (_, event) = decode("query-with-db");
    assert_eq!(event.header.flags, event_flags::SUPPRESS_USE);
    let EventData::Query(q) = &event.data else { panic!("{event:?}") };
    assert_eq!((q.thread_id, q.exec_time, q.error_code), (9, 0, 0));
    assert_eq!((q.db.as_slice(), q.query.as_slice()), (&b"t"[..], &b"CREATE DATABASE t"[..]));
    assert_eq!(q.status_vars.len(), 26);

    let (_, event) = decode("query-no-db");
    let EventData::Query(q) = &event.data else { panic!("{event:?}") };
    assert!(q.db.is_empty());
    assert_eq!(q.query, b"CREATE TABLE t.a (id INT PRIMARY KEY, v VARCHAR(40)) ENGINE=InnoDB");
}

#[test]
fn row_events() {
    let (_, annotate) = decode("annotate-rows");
    assert_eq!(annotate.data, EventData::AnnotateRows { sql: b"INSERT INTO t.a VALUES (1,'one')".to_vec() });

    let (_, map) = decode("table-map");
    let EventData::TableMap(body) = &map.data else { panic!("{map:?}") };
    assert_eq!(body.table_id(), Some(19));

    for (name, want) in
        [("write-rows-v1", RowsKind::Write), ("update-rows-v1", RowsKind::Update), ("delete-rows-v1", RowsKind::Delete)]
    {
        let (_, event) = decode(name);
        let EventData::Rows { kind, body } = &event.data else { panic!("{event:?}") };
        assert_eq!((*kind, body.table_id()), (want, Some(19)), "{name}");
    }

    let (_, xid) = decode("xid");
    assert_eq!((xid.data.clone(), xid.header.log_pos), (EventData::Xid { xid: 29 }, 1007));
}

#[test]
fn heartbeat() {
    let (_, event) = decode("heartbeat");
    assert_eq!((event.header.timestamp, event.header.log_pos, event.header.event_size), (0, 1214, 36));
    assert_eq!(event.data, EventData::Heartbeat { file_name: N1_BIN.to_vec() });
}

#[test]
fn builders_reproduce_the_masters_bytes() {
    let ts = 1_796_221_858;
    let [rotate, fd, list, checkpoint] = synth::dump_opening(1, ts, SERVER_VERSION, N1_BIN, vec![], Checksum::Crc32);
    assert_eq!(rotate.encode(Checksum::Crc32), annotated("rotate-fake"));
    assert_eq!(fd.encode(Checksum::Crc32), annotated("format-description"));
    assert_eq!(list.encode(Checksum::Crc32), annotated("gtid-list-empty"));
    assert_eq!(checkpoint.encode(Checksum::Crc32), annotated("binlog-checkpoint"));
    let hb = synth::heartbeat(1, 1214, N1_BIN, Checksum::Crc32);
    assert_eq!(hb.encode(Checksum::Crc32), annotated("heartbeat"));
    let resume = synth::artificial_gtid_list(1, 1438, vec![Gtid::new(0, 1, 6)], Checksum::Crc32);
    assert_eq!(resume.encode(Checksum::Crc32), annotated("gtid-list-artificial"));
}

#[test]
fn builders_reproduce_a_dump_of_a_second_binlog_file() {
    // repl-setup.pcap stream 6: after a restart the master switched to mysqld-bin.000001 with state 0-1-13.
    let events = captured("repl-setup");
    let file = b"mysqld-bin.000001";
    let start = events
        .iter()
        .position(|(c, b)| c.contains("ROTATE(4)") && b.windows(file.len()).any(|w| w == file))
        .expect("rotate to mysqld-bin.000001");
    let opening =
        synth::dump_opening(1, 1_796_221_147, SERVER_VERSION, file, vec![Gtid::new(0, 1, 13)], Checksum::Crc32);
    for (i, built) in opening.iter().enumerate() {
        assert_eq!(built.encode(Checksum::Crc32), events[start + i].1, "event {i}: {}", events[start + i].0);
    }
    let hb = synth::heartbeat(1, 343, file, Checksum::Crc32);
    assert_eq!(hb.encode(Checksum::Crc32), events[start + 4].1, "{}", events[start + 4].0);
}

#[test]
fn corrupted_capture_reports_checksum_mismatch() {
    let mut bytes = annotated("gtid-trx");
    bytes[19] ^= 0x01; // seq_no 4 -> 5
    match BinlogEvent::decode(&bytes, Checksum::Crc32) {
        Err(Error::ChecksumMismatch { expected, actual }) => assert_ne!(expected, actual),
        other => panic!("{other:?}"),
    }
    // Without checksum checking the footer is body: the GTID keeps it in `rest` and still round-trips.
    let event = BinlogEvent::decode(&bytes, Checksum::Off).unwrap();
    assert_eq!(event.gtid(), Some(Gtid::new(0, 1, 5)));
    assert_eq!(event.encode(Checksum::Off), bytes);
}
