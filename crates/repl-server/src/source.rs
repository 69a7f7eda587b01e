//! Where the served events come from: the [`EventSource`] trait (the paxsql node implements it over the global
//! log) and [`MemoryEventSource`] for tests and benchmarks.

use std::future::Future;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use paxsql_binlog::{event_type, BinlogEvent, Checksum, EventHeader, Gtid, GtidSet};
use tokio::sync::watch;

use crate::error::{Error, Result};

/// One whole transaction (event group) of the log, as a real master wrote it to its binlog: a GTID event first,
/// then QUERY / ANNOTATE_ROWS / TABLE_MAP / *_ROWS / XID events. Each event is complete, with its CRC32 footer.
/// The server re-serves the bytes unchanged except `log_pos` (and so the CRC): flags2 and commit_id of the GTID
/// event reach the replica intact, which MariaDB's parallel applier needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    /// The GTID of its GTID event (domain, server_id from the event header, seq_no).
    pub gtid: Gtid,
    /// Raw events, CRC32 checksummed (`binlog_checksum=CRC32`, MariaDB's default). Usually slices of one buffer
    /// (the transaction as the log holds it), so serving shares the bytes instead of copying them.
    pub events: Vec<Bytes>,
    /// A later piece of a transaction too large to serve in one (it went into the log in parts): its events
    /// continue the previous piece's, and it has no GTID event of its own. A dump never rotates before one.
    pub continues: bool,
}

impl Transaction {
    /// Builds a transaction from raw events; the first must be a GTID event, every event must pass its checksum.
    pub fn from_events<E: Into<Bytes>>(events: impl IntoIterator<Item = E>) -> Result<Transaction> {
        let events: Vec<Bytes> = events.into_iter().map(Into::into).collect();
        let corrupt = |index, source| Error::CorruptEvent { gtid: None, index, source };
        let first = events.first().ok_or(Error::CorruptEvent {
            gtid: None,
            index: 0,
            source: paxsql_binlog::Error::Truncated { what: "transaction without events", offset: 0 },
        })?;
        let decoded = BinlogEvent::decode(first, Checksum::Crc32).map_err(|e| corrupt(0, e))?;
        let gtid = decoded.gtid().ok_or_else(|| {
            corrupt(
                0,
                paxsql_binlog::Error::Malformed { what: "first event of a transaction is not a GTID", offset: 4 },
            )
        })?;
        for (index, event) in events.iter().enumerate().skip(1) {
            paxsql_binlog::verify_checksum(event).map_err(|e| corrupt(index, e))?;
        }
        Ok(Transaction { gtid, events, continues: false })
    }

    /// Builds a transaction from its events back to back in one buffer, which the events then share (no copy).
    pub fn from_contiguous(bytes: Bytes) -> Result<Transaction> {
        let mut events = Vec::new();
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let (event, tail) = paxsql_binlog::split_event(rest).map_err(|e| Error::CorruptEvent {
                gtid: None,
                index: events.len(),
                source: e,
            })?;
            events.push(bytes.slice_ref(event));
            rest = tail;
        }
        Transaction::from_events(events)
    }

    /// A later piece of transaction `gtid`: its events back to back in `bytes` (shared, not copied), each checked.
    pub fn continuation(gtid: Gtid, bytes: Bytes) -> Result<Transaction> {
        let mut events = Vec::new();
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let index = events.len();
            let corrupt = |source| Error::CorruptEvent { gtid: Some(gtid), index, source };
            let (event, tail) = paxsql_binlog::split_event(rest).map_err(corrupt)?;
            paxsql_binlog::verify_checksum(event).map_err(corrupt)?;
            events.push(bytes.slice_ref(event));
            rest = tail;
        }
        Ok(Transaction { gtid, events, continues: true })
    }

    /// Total size of its events in bytes.
    pub fn byte_len(&self) -> usize {
        self.events.iter().map(Bytes::len).sum()
    }
}

/// A place in the log, produced by [`EventSource::locate`] and by each [`EventSource::read`]. The server treats
/// it as opaque and only hands it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// Index (in the source's own numbering, e.g. transaction number in the global log) of the next transaction
    /// to look at.
    pub index: u64,
    /// The replica's position at connect time: transactions it already has (per domain, by seq_no) are skipped
    /// even when they come after `index` (a replica can be at different points in different domains).
    pub skip: GtidSet,
}

/// Transactions returned by one [`EventSource::read`] and the cursor after them.
#[derive(Debug, Clone)]
pub struct Batch {
    pub transactions: Vec<Arc<Transaction>>,
    pub next: Cursor,
}

impl Batch {
    /// What a read from `after` returns out of `log`, the source's transactions from `after.index` on in order:
    /// whole transactions up to `max_bytes` (at least one), skipping those the replica already has.
    pub fn take<'a>(after: &Cursor, log: impl IntoIterator<Item = &'a Arc<Transaction>>, max_bytes: usize) -> Batch {
        let mut transactions = Vec::new();
        let mut bytes = 0usize;
        let mut index = after.index;
        for trx in log {
            if !transactions.is_empty() && bytes + trx.byte_len() > max_bytes {
                break;
            }
            index += 1;
            if after.skip.contains(&trx.gtid) {
                continue;
            }
            bytes += trx.byte_len();
            transactions.push(Arc::clone(trx));
        }
        Batch { transactions, next: Cursor { index, skip: after.skip.clone() } }
    }
}

/// Why a replica's GTID `want` is not in a log: `base` is where that log's history starts in `want`'s domain (the
/// last compacted transaction, if any), `last_seq` the newest sequence number it holds in that domain. The one rule
/// every [`EventSource::locate`] applies.
pub fn missing_gtid_error(want: Gtid, base: Option<Gtid>, last_seq: Option<u64>) -> Error {
    if base.is_some_and(|b| b.seq_no > want.seq_no) {
        // Behind the compacted start: what follows it is gone from this log (a rebuild provisions past it).
        return Error::GtidPurged { gtid: want };
    }
    // Sequence numbers are gapless and unique in a domain of the log: a log that reaches `want`'s sequence number
    // without holding `want` holds another transaction there (the base counts too). A replica at that number wrote
    // its own — typically a former master whose last transaction never reached the log, while the new master's
    // first one took its number: waiting for the log to go past it would keep that replica out of service until
    // the next write.
    let higher = last_seq.is_some_and(|s| s >= want.seq_no) || base.is_some_and(|b| b.seq_no >= want.seq_no);
    if higher {
        Error::ReplicaDiverged { gtid: want }
    } else {
        Error::GtidNotInLog { gtid: want }
    }
}

/// The log the server streams from.
///
/// # Correctness
/// - `locate(state)` must find the exact GTID of every domain in `state` (domain, server_id and seq_no); if a
///   domain's GTID is missing it must fail: [`Error::ReplicaDiverged`] when the log holds the same or a higher
///   seq_no in that domain, [`Error::GtidNotInLog`] when it does not (the replica is ahead, or the domain is unknown),
///   [`Error::GtidPurged`] when the log was compacted past it. Skipping silently would lose or duplicate
///   transactions on the replica.
/// - `read` returns whole transactions in log order, none already in `after.skip`, never waits, and returns at
///   least one transaction if any is available (even if it alone exceeds `max_bytes`). An empty batch means
///   "nothing yet".
/// - `wait` resolves once `read(after)` may return something new (spurious wake-ups are allowed). It must be
///   cancel-safe: the server drops it when a heartbeat, a KILL or shutdown comes first.
/// - Transactions are immutable once readable: a reconnecting replica must see the same bytes again.
pub trait EventSource: Send + Sync + 'static {
    /// Where a replica whose `@slave_connect_state` is `state` resumes.
    fn locate(&self, state: &GtidSet) -> Result<Cursor>;

    /// Up to about `max_bytes` of transactions after `after`, without waiting.
    fn read(&self, after: &Cursor, max_bytes: usize) -> Result<Batch>;

    /// Waits until something after `after` may be readable.
    fn wait(&self, after: &Cursor) -> impl Future<Output = ()> + Send;
}

/// An in-memory log of whole transactions; appends wake waiting dumps. For tests and benchmarks: feed it events
/// captured from a real master.
#[derive(Debug)]
pub struct MemoryEventSource {
    log: Mutex<Vec<Arc<Transaction>>>,
    /// The last transaction before the first one held, when the log was compacted: the history up to it is covered
    /// (a replica standing exactly there continues with the first held transaction), its bytes are gone.
    base: std::sync::OnceLock<Gtid>,
    /// Number of transactions in `log`; dumps waiting for more subscribe to it.
    len_tx: watch::Sender<u64>,
}

impl Default for MemoryEventSource {
    fn default() -> Self {
        MemoryEventSource::new()
    }
}

impl MemoryEventSource {
    pub fn new() -> MemoryEventSource {
        MemoryEventSource { log: Mutex::new(Vec::new()), base: std::sync::OnceLock::new(), len_tx: watch::channel(0).0 }
    }

    /// Declares the log compacted: history up to and including `gtid` is covered, and held transactions follow it.
    /// Set once, before the first append (at a restart from a snapshot); a second call is refused.
    pub fn set_base(&self, gtid: Gtid) -> Result<()> {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        if !log.is_empty() {
            return Err(Error::GtidOutOfOrder { have: log[0].gtid, got: gtid });
        }
        self.base
            .set(gtid)
            .map_err(|_| Error::GtidOutOfOrder { have: self.base.get().copied().unwrap_or(gtid), got: gtid })
    }

    /// Appends one transaction. Its seq_no must be higher than the last one of its domain (gtid_strict_mode).
    pub fn append(&self, trx: Transaction) -> Result<()> {
        let len = {
            let mut log = self.log.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let last =
                log.iter().rev().map(|t| &t.gtid).chain(self.base.get()).find(|g| g.domain_id == trx.gtid.domain_id);
            if let Some(last) = last {
                if last.seq_no >= trx.gtid.seq_no {
                    return Err(Error::GtidOutOfOrder { have: *last, got: trx.gtid });
                }
            }
            log.push(Arc::new(trx));
            log.len() as u64
        };
        self.len_tx.send_replace(len);
        Ok(())
    }

    /// Whether the log holds every GTID of `state` (a replica's `gtid_binlog_pos`). Searches from the tail, where a
    /// replica's position normally is, and stops as soon as its domain's sequence numbers fall below the one
    /// sought (they only grow along the log): cheap enough to ask every half second under the append lock.
    pub fn holds(&self, state: &GtidSet) -> bool {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        state.iter().all(|want| {
            if self.base.get() == Some(want) {
                return true;
            }
            for t in log.iter().rev() {
                if t.gtid == *want {
                    return true;
                }
                if t.gtid.domain_id == want.domain_id && t.gtid.seq_no < want.seq_no {
                    return false;
                }
            }
            false
        })
    }

    /// Appends a transaction given as raw events (see [`Transaction::from_events`]).
    pub fn append_events<E: Into<Bytes>>(&self, events: impl IntoIterator<Item = E>) -> Result<Gtid> {
        let trx = Transaction::from_events(events)?;
        let gtid = trx.gtid;
        self.append(trx)?;
        Ok(gtid)
    }

    /// Number of transactions.
    pub fn len(&self) -> usize {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The position after the whole log (last GTID per domain), like `@@gtid_binlog_pos`.
    pub fn gtid_pos(&self) -> GtidSet {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        GtidSet::from_state(self.base.get().copied().into_iter().chain(log.iter().map(|t| t.gtid)))
    }
}

impl EventSource for MemoryEventSource {
    fn locate(&self, state: &GtidSet) -> Result<Cursor> {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let base = self.base.get();
        for want in state {
            if log.iter().any(|t| t.gtid == *want) || base == Some(want) {
                continue;
            }
            let base = base.filter(|b| b.domain_id == want.domain_id).copied();
            // Sequence numbers only grow along the log: its newest in the domain is its highest.
            let last_seq = log.iter().rev().find(|t| t.gtid.domain_id == want.domain_id).map(|t| t.gtid.seq_no);
            return Err(missing_gtid_error(*want, base, last_seq));
        }
        let index = log.iter().position(|t| !state.contains(&t.gtid)).unwrap_or(log.len());
        Ok(Cursor { index: index as u64, skip: state.clone() })
    }

    fn read(&self, after: &Cursor, max_bytes: usize) -> Result<Batch> {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let from = usize::try_from(after.index).map_or(&[][..], |i| log.get(i..).unwrap_or(&[]));
        Ok(Batch::take(after, from, max_bytes))
    }

    fn wait(&self, after: &Cursor) -> impl Future<Output = ()> + Send {
        let mut rx = self.len_tx.subscribe();
        let index = after.index;
        async move {
            // `wait_for` checks the current value first, so an append between read() and here is not missed.
            let _ = rx.wait_for(|&len| len > index).await;
        }
    }
}

/// Splits raw binlog bytes (a binlog file after its 4-byte magic, or back-to-back events) into transactions:
/// each GTID event starts one, which runs until the next GTID event or a non-transaction event (FORMAT_DESCRIPTION,
/// ROTATE, STOP, GTID_LIST, BINLOG_CHECKPOINT). Those file-level events are dropped: the server makes its own.
/// For tests and benchmarks that read a real master's binlog files.
pub fn transactions_from_binlog(mut bytes: &[u8]) -> Result<Vec<Transaction>> {
    let mut out = Vec::new();
    let mut current: Vec<Bytes> = Vec::new();
    let mut index = 0usize;
    let flush = |current: &mut Vec<Bytes>, out: &mut Vec<Transaction>| -> Result<()> {
        if !current.is_empty() {
            out.push(Transaction::from_events(std::mem::take(current))?);
        }
        Ok(())
    };
    while !bytes.is_empty() {
        let (event, rest) =
            paxsql_binlog::split_event(bytes).map_err(|e| Error::CorruptEvent { gtid: None, index, source: e })?;
        let header = EventHeader::decode(event).map_err(|e| Error::CorruptEvent { gtid: None, index, source: e })?;
        match header.type_code {
            event_type::GTID => {
                flush(&mut current, &mut out)?;
                current.push(Bytes::copy_from_slice(event));
            }
            event_type::FORMAT_DESCRIPTION
            | event_type::ROTATE
            | event_type::STOP
            | event_type::GTID_LIST
            | event_type::BINLOG_CHECKPOINT
            | event_type::HEARTBEAT => flush(&mut current, &mut out)?,
            _ if !current.is_empty() => current.push(Bytes::copy_from_slice(event)),
            // Anything else outside a GTID group (START_ENCRYPTION, ...) is not served.
            _ => {}
        }
        bytes = rest;
        index += 1;
    }
    flush(&mut current, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_finds_logged_positions_and_nothing_else() {
        let log = MemoryEventSource::new();
        for seq in 1..=50 {
            log.append(Transaction { gtid: Gtid::new(0, 1_100_001, seq), events: Vec::new(), continues: false })
                .unwrap();
        }
        let pos = |s: &str| s.parse::<GtidSet>().unwrap();
        assert!(log.holds(&pos("")));
        assert!(log.holds(&pos("0-1100001-50")));
        assert!(log.holds(&pos("0-1100001-7")));
        // Written on a replica outside the log: its own server id, at the next sequence number or behind the tail.
        assert!(!log.holds(&pos("0-2-51")));
        assert!(!log.holds(&pos("0-2-20")));
        assert!(!log.holds(&pos("0-1100001-51")));
        assert!(!log.holds(&pos("1-1100001-3")));
        assert!(!log.holds(&pos("0-1100001-50,1-2-1")));
    }

    #[test]
    fn a_compacted_log_serves_from_its_base_and_sends_older_positions_to_a_rebuild() {
        let log = MemoryEventSource::new();
        log.set_base(Gtid::new(0, 1_100_002, 5)).unwrap();
        let pos = |s: &str| s.parse::<GtidSet>().unwrap();
        // Idle since the compaction: nothing held, the base alone.
        assert_eq!(log.locate(&pos("0-1100002-5")).unwrap().index, 0);
        assert!(log.holds(&pos("0-1100002-5")));
        assert_eq!(log.gtid_pos(), pos("0-1100002-5"));
        assert!(matches!(log.locate(&pos("0-1100002-4")), Err(Error::GtidPurged { .. })));
        assert!(matches!(log.locate(&pos("0-2-5")), Err(Error::ReplicaDiverged { .. })));
        assert!(matches!(log.locate(&pos("0-1100002-6")), Err(Error::GtidNotInLog { .. })));
        assert!(log
            .append(Transaction { gtid: Gtid::new(0, 1_100_003, 5), events: Vec::new(), continues: false })
            .is_err());
        log.append(Transaction { gtid: Gtid::new(0, 1_100_003, 6), events: Vec::new(), continues: false }).unwrap();
        assert_eq!(log.locate(&pos("0-1100002-5")).unwrap().index, 0);
        assert_eq!(log.locate(&pos("0-1100003-6")).unwrap().index, 1);
        assert!(log.set_base(Gtid::new(0, 1, 1)).is_err(), "the base is set once, before any append");
    }
}
