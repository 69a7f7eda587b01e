//! What the served binlog keeps across restarts, torn writes, lost indexes, retention and a kill -9 mid-append.

use std::path::Path;

use paxsql_binlog::{Gtid, GtidSet};
use paxsql_repl_server::conformance::{read_all, transaction_events};
use paxsql_repl_server::EventSource;
use paxsql_served_binlog::{ServedBinlog, ServedBinlogConfig};

fn cfg(dir: &Path) -> ServedBinlogConfig {
    let mut c = ServedBinlogConfig::new(dir);
    c.segment_bytes = 8192;
    c.cache_bytes = 2000;
    c.retain_bytes = 1 << 30;
    c
}

fn pos(s: &str) -> GtidSet {
    s.parse().unwrap()
}

/// Instance `i` holds transaction 0-1-i, of a length that varies with `i`.
fn events(i: u64) -> Vec<u8> {
    transaction_events(Gtid::new(0, 1, i), 50 + (i as usize * 37) % 400)
}

fn fill(log: &ServedBinlog, instances: std::ops::RangeInclusive<u64>) {
    for i in instances {
        log.append_instance(i, events(i).into()).unwrap();
    }
}

fn all_seqs(log: &ServedBinlog) -> Vec<u64> {
    let start = log.locate(&GtidSet::new()).unwrap();
    read_all(log, start, 3000).iter().map(|t| t.gtid.seq_no).collect()
}

fn files(dir: &Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

/// A power cut in the middle of the last write: the newest segment loses its last `bytes`. Returns its path.
fn cut_active_segment(dir: &Path, bytes: u64) -> std::path::PathBuf {
    let active = files(dir, "seg").pop().unwrap();
    let len = std::fs::metadata(&active).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&active).unwrap().set_len(len - bytes).unwrap();
    active
}

#[test]
fn a_restart_serves_the_same_log_and_skips_the_replay() {
    let dir = tempfile::tempdir().unwrap();
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    fill(&log, 1..=300);
    let before = log.stats();
    assert!(before.segments > 5, "small segments roll: {before:?}");
    assert!(before.cache_bytes <= 2000 || before.cached_transactions == 1, "cache bounded: {before:?}");
    drop(log);
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    assert_eq!(all_seqs(&log), (1..=300).collect::<Vec<_>>());
    assert_eq!(log.gtid_pos(), pos("0-1-300"));
    assert_eq!(log.last_instance(), 300);
    // The Paxos log's replay after a restart hands back instances already held: nothing is added twice.
    for i in 250..=300 {
        assert_eq!(log.append_instance(i, events(i).into()).unwrap(), 0);
    }
    fill(&log, 301..=320);
    assert_eq!(all_seqs(&log), (1..=320).collect::<Vec<_>>());
    let c = log.locate(&pos("0-1-17")).unwrap();
    assert_eq!(read_all(&log, c, 1 << 20).first().map(|t| t.gtid.seq_no), Some(18));
}

/// A replica's alignment check looks its position up every second, often in a sealed segment not in memory: found
/// in the index on disk without loading it, and a GTID of the same seq_no from another server is not held.
#[test]
fn lookups_in_sealed_segments_not_in_memory_find_exactly_what_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    fill(&log, 1..=300);
    drop(log);
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    for seq in [2, 17, 100, 150, 151, 299, 300] {
        assert!(log.holds(&pos(&format!("0-1-{seq}"))), "0-1-{seq} is held");
    }
    for gtid in ["0-2-17", "0-2-150", "0-1-301"] {
        assert!(!log.holds(&pos(gtid)), "{gtid} is not held");
    }
}

#[test]
fn a_torn_tail_is_cut_to_the_last_whole_instance_and_the_replay_refills_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    fill(&log, 1..=40);
    // One instance of three transactions at the end, then a power cut in the middle of its write.
    let mut group = Vec::new();
    for s in 41..=43 {
        group.extend(events(s));
    }
    log.append_instance(41, group.clone().into()).unwrap();
    drop(log);
    let active = cut_active_segment(dir.path(), 100);
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    assert_eq!(*all_seqs(&log).last().unwrap(), 40, "the whole cut instance is gone, not a part of it");
    assert_eq!(log.last_instance(), 40);
    log.append_instance(41, group.clone().into()).unwrap();
    assert_eq!(all_seqs(&log), (1..=43).collect::<Vec<_>>());

    // Garbage after the last record (a write that reached the disk as zeros or noise) is cut too.
    drop(log);
    let mut raw = std::fs::read(&active).unwrap();
    raw.extend_from_slice(&[0x5a; 64]);
    std::fs::write(&active, &raw).unwrap();
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    assert_eq!(all_seqs(&log), (1..=43).collect::<Vec<_>>());
}

#[test]
fn a_batched_instance_survives_a_torn_second_command_and_its_replay_adds_each_command_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    fill(&log, 1..=20);
    // Instance 21 batches two AppendBinlog commands: 0-1-21 and 0-1-22..23.
    let second = [events(22), events(23)].concat();
    assert_eq!(log.append_instance(21, events(21).into()).unwrap(), 1);
    assert_eq!(log.append_instance(21, second.clone().into()).unwrap(), 2);
    drop(log);
    // A restart replays both commands of the last instance: nothing is added twice.
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    assert_eq!(log.append_instance(21, events(21).into()).unwrap(), 0);
    assert_eq!(log.append_instance(21, second.clone().into()).unwrap(), 0);
    assert_eq!(all_seqs(&log), (1..=23).collect::<Vec<_>>());
    drop(log);
    // The second command's write torn: the first stays, the replay adds the second.
    cut_active_segment(dir.path(), 30);
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    assert_eq!(*all_seqs(&log).last().unwrap(), 21);
    assert_eq!(log.append_instance(21, events(21).into()).unwrap(), 0);
    assert_eq!(log.append_instance(21, second.clone().into()).unwrap(), 2);
    assert_eq!(all_seqs(&log), (1..=23).collect::<Vec<_>>());
    fill(&log, 24..=25);
    assert_eq!(all_seqs(&log), (1..=25).collect::<Vec<_>>());
}

#[test]
fn a_lost_index_is_rebuilt_and_a_damaged_sealed_record_is_refused_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    fill(&log, 1..=200);
    drop(log);
    let idx = files(dir.path(), "idx");
    std::fs::remove_file(&idx[1]).unwrap();
    std::fs::write(idx[2].with_extension("idx.tmp"), b"half an index").unwrap();
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    assert_eq!(all_seqs(&log), (1..=200).collect::<Vec<_>>());
    assert!(files(dir.path(), "tmp").is_empty());
    drop(log);

    // Opening reads only sealed segments' summaries: a flipped byte inside an old segment's records does not stop
    // the node, but the read that reaches it fails instead of serving altered bytes.
    let seg = &files(dir.path(), "seg")[0];
    let mut raw = std::fs::read(seg).unwrap();
    let at = raw.len() / 2;
    raw[at] ^= 0x01;
    std::fs::write(seg, &raw).unwrap();
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    let start = log.locate(&GtidSet::new()).unwrap();
    let mut cursor = start;
    let mut failed = false;
    for _ in 0..1000 {
        match log.read(&cursor, 3000) {
            Ok(b) if b.transactions.is_empty() => break,
            Ok(b) => cursor = b.next,
            Err(e) => {
                assert!(e.to_string().contains("checksum") || e.to_string().contains("corrupt"), "{e}");
                failed = true;
                break;
            }
        }
    }
    assert!(failed, "the damaged record was served");
    // A replica past the damage is served normally.
    assert_eq!(read_all(&log, log.locate(&pos("0-1-150")).unwrap(), 1 << 20).len(), 50);
}

#[test]
fn retention_purges_old_segments_and_sends_replicas_behind_it_to_a_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.retain_bytes = 40_000;
    let log = ServedBinlog::open(c.clone()).unwrap();
    fill(&log, 1..=2000);
    let s = log.stats();
    assert!(s.disk_bytes <= 40_000 + 8192 + 1000, "disk bounded by retention: {s:?}");
    assert!(s.first_index > 1000, "{s:?}");
    let on_disk: u64 = files(dir.path(), "seg").iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    assert_eq!(on_disk, s.disk_bytes);
    let first = all_seqs(&log)[0];
    assert!(matches!(log.locate(&pos("0-1-5")), Err(paxsql_repl_server::Error::GtidPurged { .. })));
    let base = format!("0-1-{}", first - 1);
    assert!(log.holds(&pos(&base)), "the GTID just before the first held one is the base");
    assert_eq!(read_all(&log, log.locate(&pos(&base)).unwrap(), 1 << 20).len() as u64, 2000 - first + 1);
    // A dump that was reading below the purge point gets an error, not a skip.
    let stale = paxsql_repl_server::Cursor { index: 0, skip: GtidSet::new() };
    assert!(log.read(&stale, 1000).is_err());
    drop(log);
    let log = ServedBinlog::open(c).unwrap();
    assert_eq!(all_seqs(&log)[0], first, "the base survives a restart");
    assert!(log.holds(&pos(&base)));
}

#[test]
fn a_snapshot_base_after_a_gap_discards_the_old_history_and_one_after_renewals_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    fill(&log, 1..=50);
    // Instances 51..=60 were lease renewals: the snapshot's last GTID is still ours.
    log.restore_base(60, Some(Gtid::new(0, 1, 50))).unwrap();
    assert_eq!(all_seqs(&log).len(), 50);
    log.append_instance(61, transaction_events(Gtid::new(0, 1, 51), 10).into()).unwrap();
    // The log lost its tail while the Paxos log compacted past it: serving across the gap would skip transactions.
    log.restore_base(100, Some(Gtid::new(0, 1, 80))).unwrap();
    assert!(all_seqs(&log).is_empty());
    assert!(matches!(log.locate(&pos("0-1-51")), Err(paxsql_repl_server::Error::GtidPurged { .. })));
    assert!(log.holds(&pos("0-1-80")));
    log.append_instance(101, transaction_events(Gtid::new(0, 1, 81), 10).into()).unwrap();
    drop(log);
    let log = ServedBinlog::open(cfg(dir.path())).unwrap();
    assert_eq!(all_seqs(&log), [81]);
    assert_eq!(log.gtid_pos(), pos("0-1-81"));
}

/// Child mode: appends forever (with rolls and purges) until killed.
#[test]
fn kill_9_during_appends_and_purges_leaves_a_prefix_the_replay_completes() {
    if let Ok(dir) = std::env::var("PAXSQL_SERVED_BINLOG_CHILD") {
        let mut c = cfg(Path::new(&dir));
        c.retain_bytes = 30_000;
        let log = ServedBinlog::open(c).unwrap();
        let from = log.last_instance() + 1;
        for i in from..from + 1_000_000 {
            log.append_instance(i, events(i).into()).unwrap();
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let me = std::env::current_exe().unwrap();
    for round in 0..5u64 {
        let mut child = std::process::Command::new(&me)
            .args(["--exact", "kill_9_during_appends_and_purges_leaves_a_prefix_the_replay_completes", "--nocapture"])
            .env("PAXSQL_SERVED_BINLOG_CHILD", dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(150 + 70 * round));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let mut c = cfg(dir.path());
        c.retain_bytes = 30_000;
        let log = ServedBinlog::open(c).unwrap();
        let seqs = all_seqs(&log);
        let last = log.last_instance();
        assert!(last > 0, "round {round}: the child appended nothing");
        let first = *seqs.first().unwrap();
        assert_eq!(
            seqs,
            (first..=last).collect::<Vec<_>>(),
            "round {round}: a contiguous run ending at the last instance"
        );
        assert_eq!(log.gtid_pos(), pos(&format!("0-1-{last}")));
        // The replay of the next instances continues it.
        fill(&log, last + 1..=last + 3);
        assert_eq!(log.last_instance(), last + 3);
    }
}
