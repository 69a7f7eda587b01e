//! A transaction that came through the global log in parts: served only once whole, its pieces read from disk,
//! dropped when its master's term ends before its last part, and cut off at open when a crash interrupted it.

use std::path::Path;

use paxsql_binlog::{Gtid, GtidSet};
use paxsql_repl_server::conformance::{group_member_events, read_all, transaction_events};
use paxsql_repl_server::EventSource;
use paxsql_served_binlog::{ServedBinlog, ServedBinlogConfig};

fn cfg(dir: &Path) -> ServedBinlogConfig {
    let mut c = ServedBinlogConfig::new(dir);
    c.segment_bytes = 8192;
    c.cache_bytes = 2000;
    c.retain_bytes = 1 << 30;
    c
}

/// One transaction of `queries` events after its GTID event: `queries` × ~`query_len` bytes.
fn big(gtid: Gtid, queries: usize, query_len: usize) -> Vec<u8> {
    let one = group_member_events(gtid, 0, query_len);
    let (gtid_event, query) = paxsql_binlog::split_event(&one).unwrap();
    let mut out = gtid_event.to_vec();
    for _ in 0..queries {
        out.extend_from_slice(query);
    }
    out
}

/// Every event the log serves from the start, back to back, per GTID sequence number in serving order.
fn served(log: &ServedBinlog) -> Vec<(u64, Vec<u8>)> {
    let start = log.locate(&GtidSet::new()).unwrap();
    let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
    for t in read_all(log, start, 64 * 1024) {
        let bytes: Vec<u8> = t.events.iter().flat_map(|e| e.iter().copied()).collect();
        match out.last_mut() {
            Some((seq, have)) if *seq == t.gtid.seq_no && t.continues => have.extend_from_slice(&bytes),
            _ => out.push((t.gtid.seq_no, bytes)),
        }
    }
    out
}

/// Sends `bytes` as parts of `part` bytes (cut anywhere), from instance `first` on; the last `held_back` parts
/// are not sent. Returns the next instance.
fn send_parts(log: &ServedBinlog, gtid: Gtid, bytes: &[u8], part: usize, first: u64, held_back: usize) -> u64 {
    let chunks: Vec<&[u8]> = bytes.chunks(part).collect();
    let n = chunks.len();
    let mut instance = first;
    let mut offset = 0u64;
    for (i, c) in chunks.into_iter().enumerate().take(n - held_back) {
        let done = log.append_part(instance, gtid, offset, i + 1 == n, c).unwrap();
        assert_eq!(done, i + 1 == n, "part {i} of {n}");
        offset += c.len() as u64;
        instance += 1;
    }
    instance
}

#[test]
fn a_transaction_in_parts_is_served_whole_only_after_its_last_part_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    log.append_instance(1, transaction_events(Gtid::new(0, 1, 1), 100).into()).unwrap();
    let trx = big(Gtid::new(0, 1, 2), 400, 300); // ~130 KB: many segments' worth, pieces of 10 KB
    let next = send_parts(&log, Gtid::new(0, 1, 2), &trx, 10_007, 2, 1);
    assert_eq!(served(&log).len(), 1, "nothing of it before its last part");
    assert_eq!(log.gtid_pos(), "0-1-1".parse().unwrap());
    let last_part = trx.chunks(10_007).last().unwrap();
    let offset = (trx.len() - last_part.len()) as u64;
    assert!(log.append_part(next, Gtid::new(0, 1, 2), offset, true, last_part).unwrap());
    log.append_instance(next + 1, transaction_events(Gtid::new(0, 1, 3), 100).into()).unwrap();
    let want = |s: &[(u64, Vec<u8>)]| {
        assert_eq!(s.iter().map(|(q, _)| *q).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert!(s[1].1 == trx, "transaction 2 is served byte for byte ({} vs {} bytes)", s[1].1.len(), trx.len());
    };
    want(&served(&log));
    assert!(log.holds(&"0-1-2".parse().unwrap()));
    // A replica at 0-1-2 resumes after the whole transaction; one at 0-1-1 reads all of it.
    let after = log.locate(&"0-1-2".parse().unwrap()).unwrap();
    assert_eq!(read_all(&log, after, 1 << 20).iter().map(|t| t.gtid.seq_no).collect::<Vec<_>>(), vec![3]);
    log.sync().unwrap();
    drop(log);
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    want(&served(&log));
    // The replay after the restart changes nothing.
    assert!(!log.append_part(2, Gtid::new(0, 1, 2), 0, false, &trx[..10_007]).unwrap());
    want(&served(&log));
}

#[test]
fn parts_dropped_by_a_master_change_leave_nothing_and_the_sequence_number_is_taken_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    log.append_instance(1, transaction_events(Gtid::new(0, 1, 1), 100).into()).unwrap();
    let trx = big(Gtid::new(0, 1, 2), 100, 300);
    send_parts(&log, Gtid::new(0, 1, 2), &trx, 5_000, 2, 2);
    log.drop_parts().unwrap();
    // The next master's transaction 2, whole.
    let other = transaction_events(Gtid::new(0, 2, 2), 50);
    log.append_instance(20, other.clone().into()).unwrap();
    let s = served(&log);
    assert_eq!(s.iter().map(|(q, _)| *q).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(s[1].1, other);
    drop(log);
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    assert_eq!(served(&log)[1].1, other);
}

#[test]
fn a_crash_between_two_parts_leaves_the_log_without_the_transaction_and_the_replay_completes_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    log.append_instance(1, transaction_events(Gtid::new(0, 1, 1), 100).into()).unwrap();
    let trx = big(Gtid::new(0, 1, 2), 200, 300);
    send_parts(&log, Gtid::new(0, 1, 2), &trx, 7_000, 2, 3);
    log.sync().unwrap();
    drop(log); // as a kill -9: the pieces written stay in the file
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    assert_eq!(served(&log).len(), 1, "a transaction cut by a crash is not served");
    // The global log's replay sends every part again, from the first.
    send_parts(&log, Gtid::new(0, 1, 2), &trx, 7_000, 2, 0);
    let s = served(&log);
    assert_eq!(s.len(), 2);
    assert!(s[1].1 == trx);
}

#[test]
fn parts_out_of_order_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    log.append_instance(1, transaction_events(Gtid::new(0, 1, 1), 100).into()).unwrap();
    let trx = big(Gtid::new(0, 1, 2), 50, 300);
    assert!(log.append_part(2, Gtid::new(0, 1, 2), 100, false, &trx[100..200]).is_err(), "no first part");
    assert!(log.append_part(2, Gtid::new(0, 1, 3), 0, false, &trx[..100]).is_err(), "a GTID gap");
    log.append_part(2, Gtid::new(0, 1, 2), 0, false, &trx[..100]).unwrap();
    assert!(log.append_part(3, Gtid::new(0, 1, 2), 150, false, &trx[150..200]).is_err(), "a gap in the bytes");
    assert!(log.append_part(3, Gtid::new(0, 1, 2), 100, true, &trx[100..110]).is_err(), "ends inside an event");
    assert_eq!(served(&log).len(), 1);
}
