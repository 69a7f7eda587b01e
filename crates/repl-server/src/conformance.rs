//! The conformance suite every appendable [`EventSource`] runs: [`MemoryEventSource`] here, the node's on-disk
//! served binlog in its own crate. It checks the contract written on [`EventSource`] with transactions built from
//! real event encodings.

use std::sync::Arc;

use paxsql_binlog::{BinlogEvent, Checksum, EventData, Gtid, GtidEvent, GtidSet};

use crate::error::{Error, Result};
use crate::source::{Cursor, EventSource, MemoryEventSource, Transaction};

/// What the suite needs beyond [`EventSource`]: appending the transactions of one chosen Paxos instance, starting
/// after a snapshot, and the alignment queries the node asks.
pub trait AppendableSource: EventSource {
    /// Appends `events` (one or more whole transactions back to back) as chosen instance `instance`.
    fn append_instance(&self, instance: u64, events: &[u8]) -> Result<usize>;
    /// Starts an empty log after `gtid`, the last transaction of the snapshot at `instance`.
    fn restore_base(&self, instance: u64, gtid: Gtid) -> Result<()>;
    fn holds(&self, state: &GtidSet) -> bool;
    fn gtid_pos(&self) -> GtidSet;
}

impl AppendableSource for MemoryEventSource {
    fn append_instance(&self, _instance: u64, mut events: &[u8]) -> Result<usize> {
        let mut trxs: Vec<Vec<bytes::Bytes>> = Vec::new();
        let mut index = 0;
        while !events.is_empty() {
            let (event, rest) = paxsql_binlog::split_event(events).map_err(|source| Error::CorruptEvent {
                gtid: None,
                index,
                source,
            })?;
            let gtid = paxsql_binlog::EventHeader::decode(event)
                .map_err(|source| Error::CorruptEvent { gtid: None, index, source })?
                .type_code
                == paxsql_binlog::event_type::GTID;
            match trxs.last_mut() {
                Some(t) if !gtid => t.push(bytes::Bytes::copy_from_slice(event)),
                _ => trxs.push(vec![bytes::Bytes::copy_from_slice(event)]),
            }
            events = rest;
            index += 1;
        }
        let trxs = trxs.into_iter().map(Transaction::from_events).collect::<Result<Vec<_>>>()?;
        // Checked whole first: nothing is added unless every transaction continues its domain.
        let mut pos = MemoryEventSource::gtid_pos(self);
        for t in &trxs {
            if let Some(have) = pos.get(t.gtid.domain_id).copied() {
                if have.seq_no >= t.gtid.seq_no {
                    return Err(Error::GtidOutOfOrder { have, got: t.gtid });
                }
            }
            pos.set(t.gtid);
        }
        let n = trxs.len();
        for t in trxs {
            self.append(t)?;
        }
        Ok(n)
    }

    fn restore_base(&self, _instance: u64, gtid: Gtid) -> Result<()> {
        self.set_base(gtid)
    }

    fn holds(&self, state: &GtidSet) -> bool {
        MemoryEventSource::holds(self, state)
    }

    fn gtid_pos(&self) -> GtidSet {
        MemoryEventSource::gtid_pos(self)
    }
}

/// One transaction's events as a master writes them: GTID (server id in the header), QUERY of `query_len` bytes.
pub fn transaction_events(gtid: Gtid, query_len: usize) -> Vec<u8> {
    group_member_events(gtid, gtid.seq_no, query_len)
}

/// [`transaction_events`] of a transaction in group commit `commit_id`, at arbitrary original binlog positions
/// (a server re-serving it must rewrite them).
pub fn group_member_events(gtid: Gtid, commit_id: u64, query_len: usize) -> Vec<u8> {
    let flags = paxsql_binlog::gtid_flags::GROUP_COMMIT_ID | 0x0c;
    let g = GtidEvent::new(gtid.domain_id, gtid.seq_no, flags, Some(commit_id));
    let g = BinlogEvent::new(1_700_000_000, gtid.server_id, 999_999, 8, EventData::Gtid(g), Checksum::Crc32);
    let q = paxsql_binlog::Query {
        thread_id: 5,
        exec_time: 0,
        error_code: 0,
        status_vars: vec![],
        db: b"t".to_vec(),
        query: (0..query_len).map(|i| b'a' + (i % 26) as u8).collect(),
    };
    let q = BinlogEvent::new(1_700_000_000, gtid.server_id, 7, 0, EventData::Query(q), Checksum::Crc32);
    let mut out = g.encode(Checksum::Crc32);
    out.extend_from_slice(&q.encode(Checksum::Crc32));
    out
}

fn pos(s: &str) -> GtidSet {
    s.parse().unwrap_or_else(|e| panic!("test position {s:?}: {e}"))
}

/// Everything `read` returns from `cursor` on, in as many calls as it takes.
pub fn read_all<S: EventSource>(source: &S, mut cursor: Cursor, max_bytes: usize) -> Vec<Arc<Transaction>> {
    let mut out = Vec::new();
    for _ in 0..1_000_000 {
        let batch = source.read(&cursor, max_bytes).expect("read");
        if batch.transactions.is_empty() {
            return out;
        }
        out.extend(batch.transactions);
        cursor = batch.next;
    }
    panic!("read never reached the end of the log")
}

fn gtids(trxs: &[Arc<Transaction>]) -> Vec<String> {
    trxs.iter().map(|t| t.gtid.to_string()).collect()
}

/// Runs every check; `open(key)` gives a new, empty source for each.
pub fn run_all<S: AppendableSource>(mut open: impl FnMut(&str) -> S) {
    locate_finds_exact_gtids_and_names_every_miss(&open("locate"));
    read_returns_whole_transactions_in_order_within_limits(&open("read"));
    several_domains_skip_what_the_replica_has(&open("domains"));
    an_out_of_order_instance_adds_nothing(&open("order"));
    a_batched_instance_appends_every_command(&open("batched"));
    a_base_serves_from_the_snapshot_on(&open("base"));
    wait_wakes_on_append(&open("wait"));
}

fn fill<S: AppendableSource>(s: &S, instance: &mut u64, gtids: &[Gtid], query_len: usize) {
    for g in gtids {
        *instance += 1;
        s.append_instance(*instance, &transaction_events(*g, query_len)).expect("append");
    }
}

fn locate_finds_exact_gtids_and_names_every_miss<S: AppendableSource>(s: &S) {
    let mut instance = 0;
    let log: Vec<Gtid> = (1..=10).map(|n| Gtid::new(0, 1, n)).collect();
    fill(s, &mut instance, &log, 40);
    assert_eq!(gtids(&read_all(s, s.locate(&pos("")).expect("from the start"), 1 << 20)).len(), 10);
    let after5 = read_all(s, s.locate(&pos("0-1-5")).expect("held"), 1 << 20);
    assert_eq!(gtids(&after5), ["0-1-6", "0-1-7", "0-1-8", "0-1-9", "0-1-10"]);
    assert!(read_all(s, s.locate(&pos("0-1-10")).expect("the tail"), 1 << 20).is_empty());
    assert!(matches!(s.locate(&pos("0-2-5")), Err(Error::ReplicaDiverged { .. })), "same seq_no, other server");
    // The log's last seq_no, written by another server: a former master's own last transaction.
    assert!(matches!(s.locate(&pos("0-2-10")), Err(Error::ReplicaDiverged { .. })), "the last seq_no, other server");
    assert!(matches!(s.locate(&pos("0-1-11")), Err(Error::GtidNotInLog { .. })), "ahead of the log");
    assert!(matches!(s.locate(&pos("1-1-1")), Err(Error::GtidNotInLog { .. })), "unknown domain");
    assert!(s.holds(&pos("0-1-7")) && s.holds(&pos("")) && !s.holds(&pos("0-1-11")) && !s.holds(&pos("0-3-4")));
    assert_eq!(s.gtid_pos(), pos("0-1-10"));
}

fn read_returns_whole_transactions_in_order_within_limits<S: AppendableSource>(s: &S) {
    let mut instance = 0;
    // Instances of several transactions too, as a master's group commit proposes them.
    let mut events = Vec::new();
    for n in 1..=3 {
        events.extend(transaction_events(Gtid::new(0, 1, n), 100 * n as usize));
    }
    instance += 1;
    assert_eq!(s.append_instance(instance, &events).expect("append a group"), 3);
    let more: Vec<Gtid> = (4..=40).map(|n| Gtid::new(0, 1, n)).collect();
    fill(s, &mut instance, &more, 300);
    let start = s.locate(&pos("")).expect("start");
    // At least one transaction per read even when it alone exceeds the limit.
    let one = s.read(&start, 1).expect("read");
    assert_eq!(gtids(&one.transactions), ["0-1-1"]);
    let small = read_all(s, start.clone(), 1000);
    let big = read_all(s, start, 1 << 20);
    assert_eq!(gtids(&small), gtids(&big));
    assert_eq!(gtids(&big), (1..=40).map(|n| format!("0-1-{n}")).collect::<Vec<_>>());
    for (a, b) in small.iter().zip(&big) {
        assert_eq!(a.events, b.events, "{}: the same bytes on every read", a.gtid);
        Transaction::from_events(a.events.clone()).expect("whole, checksummed events");
    }
    assert_eq!(big[2].events.iter().map(|e| e.len()).sum::<usize>(), transaction_events(Gtid::new(0, 1, 3), 300).len());
}

fn several_domains_skip_what_the_replica_has<S: AppendableSource>(s: &S) {
    let mut instance = 0;
    let log = [Gtid::new(0, 1, 1), Gtid::new(1, 1, 1), Gtid::new(0, 1, 2), Gtid::new(1, 1, 2), Gtid::new(0, 1, 3)];
    fill(s, &mut instance, &log, 20);
    // Ahead in domain 0, behind in domain 1: gets only domain 1's rest and 0-1-3.
    let c = s.locate(&pos("0-1-2,1-1-1")).expect("both held");
    assert_eq!(gtids(&read_all(s, c, 1 << 20)), ["1-1-2", "0-1-3"]);
    // Knows only domain 0: domain 1 from its start.
    let c = s.locate(&pos("0-1-1")).expect("held");
    assert_eq!(gtids(&read_all(s, c, 1 << 20)), ["1-1-1", "0-1-2", "1-1-2", "0-1-3"]);
    assert_eq!(s.gtid_pos(), pos("0-1-3,1-1-2"));
}

fn an_out_of_order_instance_adds_nothing<S: AppendableSource>(s: &S) {
    let mut instance = 0;
    fill(s, &mut instance, &[Gtid::new(0, 1, 1), Gtid::new(0, 1, 2)], 10);
    let mut events = transaction_events(Gtid::new(0, 1, 3), 10);
    events.extend(transaction_events(Gtid::new(0, 1, 2), 10));
    assert!(s.append_instance(instance + 1, &events).is_err());
    assert!(s.append_instance(instance + 1, &transaction_events(Gtid::new(0, 1, 3), 10)[..30]).is_err());
    assert_eq!(s.gtid_pos(), pos("0-1-2"), "a refused instance leaves no transaction behind");
    assert_eq!(gtids(&read_all(s, s.locate(&pos("")).expect("start"), 1 << 20)), ["0-1-1", "0-1-2"]);
    fill(s, &mut instance, &[Gtid::new(0, 1, 3)], 10);
    assert_eq!(s.gtid_pos(), pos("0-1-3"));
}

/// A chosen value may batch several `AppendBinlog` commands: each is appended under the same instance, and none
/// may be taken for a replay of the one before.
fn a_batched_instance_appends_every_command<S: AppendableSource>(s: &S) {
    let mut instance = 0;
    fill(s, &mut instance, &[Gtid::new(0, 1, 1)], 10);
    for seq in 2..=4 {
        assert_eq!(s.append_instance(instance + 1, &transaction_events(Gtid::new(0, 1, seq), 10)).expect("append"), 1);
    }
    assert_eq!(gtids(&read_all(s, s.locate(&pos("0-1-1")).expect("held"), 1 << 20)), ["0-1-2", "0-1-3", "0-1-4"]);
    fill(s, &mut instance, &[Gtid::new(0, 1, 5)], 10);
    assert_eq!(s.gtid_pos(), pos("0-1-5"));
}

fn a_base_serves_from_the_snapshot_on<S: AppendableSource>(s: &S) {
    s.restore_base(50, Gtid::new(0, 2, 5)).expect("base on an empty log");
    assert!(s.holds(&pos("0-2-5")));
    assert_eq!(s.gtid_pos(), pos("0-2-5"));
    assert!(read_all(s, s.locate(&pos("0-2-5")).expect("at the base"), 1 << 20).is_empty());
    assert!(matches!(s.locate(&pos("0-2-4")), Err(Error::GtidPurged { .. })));
    assert!(matches!(s.locate(&pos("0-3-5")), Err(Error::ReplicaDiverged { .. })));
    assert!(matches!(s.locate(&pos("0-2-6")), Err(Error::GtidNotInLog { .. })));
    assert!(s.append_instance(51, &transaction_events(Gtid::new(0, 3, 5), 10)).is_err());
    let mut instance = 51;
    fill(s, &mut instance, &[Gtid::new(0, 3, 6), Gtid::new(0, 3, 7)], 10);
    assert_eq!(gtids(&read_all(s, s.locate(&pos("0-2-5")).expect("base"), 1 << 20)), ["0-3-6", "0-3-7"]);
    assert_eq!(gtids(&read_all(s, s.locate(&pos("0-3-6")).expect("held"), 1 << 20)), ["0-3-7"]);
}

fn wait_wakes_on_append<S: AppendableSource>(s: &S) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
    rt.block_on(async {
        let mut instance = 0;
        fill(s, &mut instance, &[Gtid::new(0, 1, 1)], 10);
        let tail = s.read(&s.locate(&pos("0-1-1")).expect("tail"), 1 << 20).expect("read").next;
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), s.wait(&tail)).await;
        assert!(waiting.is_err(), "nothing new: wait must not resolve");
        let wait = s.wait(&tail);
        fill(s, &mut instance, &[Gtid::new(0, 1, 2)], 10);
        tokio::time::timeout(std::time::Duration::from_secs(5), wait).await.expect("woken by the append");
        assert_eq!(gtids(&s.read(&tail, 1 << 20).expect("read").transactions), ["0-1-2"]);
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn memory_event_source_conforms() {
        super::run_all(|_| crate::MemoryEventSource::new());
    }
}
