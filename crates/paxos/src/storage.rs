//! Durable state of one Paxos member, behind one trait with two implementations: [`MemStorage`] here (the
//! simulator's disk, which can lose un-synced writes on a crash) and the raft-engine store used by the daemon.
//! [`conformance`] is the suite both must pass.

use std::collections::BTreeMap;

use crate::types::{Ballot, Instance, Membership, Value};

/// A state-machine snapshot: everything the log up to `last_included` produced, so that the chosen entries at or
/// below it may be discarded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub last_included: Instance,
    /// Membership in force for the instances after `last_included`.
    pub membership: Membership,
    /// The replicated state machine's own encoding of its state.
    pub data: Vec<u8>,
}

/// One atomic change to the durable state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    /// New promise of this acceptor (only ever raised).
    pub promised: Option<Ballot>,
    /// Accepted values to record (or overwrite), per instance.
    pub accepted: Vec<(Instance, Ballot, Value)>,
    /// Chosen values to append to the chosen log, contiguous and starting right after the last chosen entry.
    /// Appending through instance `c` discards the accepted entries at or below `c`.
    pub chosen: Vec<(Instance, Value)>,
    /// A snapshot to keep. When it is ahead of the chosen log, the chosen log restarts right after it (a member
    /// rebuilt from a healthy one); otherwise chosen entries at or below `last_included` may be discarded.
    pub snapshot: Option<Snapshot>,
}

impl WriteBatch {
    pub fn is_empty(&self) -> bool {
        self.promised.is_none() && self.accepted.is_empty() && self.chosen.is_empty() && self.snapshot.is_none()
    }

    /// Whether this batch must be durable before the node goes on: a promise and an acceptance are what a member
    /// vouches for to others (its Promise and Accepted replies wait for them), and a snapshot lets the log drop
    /// instances. Chosen entries alone need no sync: a value is chosen because a majority holds it durably
    /// accepted, so a crash that loses the record that it was chosen only makes the member learn it again (the
    /// accepted record it replaced is lost with it, batches being atomic, or was never this member's). Writing them
    /// without a sync saves each member one fsync per round; a later synced batch makes them durable too.
    pub fn needs_sync(&self) -> bool {
        self.promised.is_some() || !self.accepted.is_empty() || self.snapshot.is_some()
    }
}

/// What a member finds on its disk when it starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveredState {
    pub promised: Ballot,
    /// Accepted but not (known to be) chosen, above `last_chosen`.
    pub accepted: BTreeMap<Instance, (Ballot, Value)>,
    /// The newest snapshot, if any.
    pub snapshot: Option<Snapshot>,
    /// First instance still held in the chosen log (`snapshot.last_included + 1`, or 1).
    pub first_chosen: Instance,
    /// Last chosen instance held (0 if none and no snapshot).
    pub last_chosen: Instance,
}

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("chosen entries must be contiguous: expected instance {expected}, got {got}")]
    ChosenGap { expected: Instance, got: Instance },
    #[error("instance {instance} is below the first held instance {first} (discarded by a snapshot)")]
    Compacted { instance: Instance, first: Instance },
    #[error("corrupt storage: {0}")]
    Corrupt(String),
    #[error("storage I/O: {0}")]
    Io(String),
}

/// Durable acceptor and learner state of one member.
///
/// # Correctness
/// - `write` is atomic: after a crash a batch is visible whole or not at all.
/// - `write(batch, true)` returns only when that batch and every earlier one are durable.
/// - Batches written with `sync = false` may be lost in a crash, but only as a suffix of the write sequence.
/// - The chosen log is contiguous; a batch whose chosen entries do not continue it is refused with
///   [`StorageError::ChosenGap`] and changes nothing (raft-engine bricks itself on a gap, docs/ARCHITECTURE.md §6).
/// - Accepted entries at or below the last chosen instance are discarded, never returned by `recover`.
pub trait Storage {
    fn recover(&mut self) -> Result<RecoveredState, StorageError>;
    fn write(&mut self, batch: &WriteBatch, sync: bool) -> Result<(), StorageError>;
    /// Chosen entries from `from` onwards, at most `max_entries` of them and stopping once `max_bytes` is passed
    /// (at least one entry is returned if `from` is held).
    fn chosen(
        &self,
        from: Instance,
        max_entries: usize,
        max_bytes: usize,
    ) -> Result<Vec<(Instance, Value)>, StorageError>;
}

/// The read limit every reader of the chosen log applies (storage reads and catch-up replies): stop at
/// `max_entries`, or once `max_bytes` is passed, but always return at least one entry.
pub fn read_limit_reached(entries: usize, bytes: usize, max_entries: usize, max_bytes: usize) -> bool {
    entries >= max_entries || (entries > 0 && bytes >= max_bytes)
}

/// Clones chosen entries from an in-memory log within [`read_limit_reached`].
pub fn take_within_limits<'a>(
    log: impl Iterator<Item = (&'a Instance, &'a Value)>,
    max_entries: usize,
    max_bytes: usize,
) -> Vec<(Instance, Value)> {
    let mut out = Vec::new();
    let mut bytes = 0;
    for (i, v) in log {
        if read_limit_reached(out.len(), bytes, max_entries, max_bytes) {
            break;
        }
        bytes += v.size_bytes();
        out.push((*i, v.clone()));
    }
    out
}

/// Checks a batch's chosen entries against the log it extends; shared by every implementation.
pub fn check_chosen_contiguous(last_chosen: Instance, batch: &WriteBatch) -> Result<(), StorageError> {
    let mut expected = match &batch.snapshot {
        Some(s) if s.last_included > last_chosen => s.last_included + 1,
        _ => last_chosen + 1,
    };
    for (i, _) in &batch.chosen {
        if *i != expected {
            return Err(StorageError::ChosenGap { expected, got: *i });
        }
        expected += 1;
    }
    Ok(())
}

#[derive(Clone, Debug, Default)]
struct MemState {
    promised: Ballot,
    accepted: BTreeMap<Instance, (Ballot, Value)>,
    chosen: BTreeMap<Instance, Value>,
    snapshot: Option<Snapshot>,
    last_chosen: Instance,
}

impl MemState {
    fn first_chosen(&self) -> Instance {
        self.snapshot.as_ref().map_or(1, |s| s.last_included + 1)
    }

    fn apply(&mut self, b: &WriteBatch) {
        if let Some(p) = b.promised {
            self.promised = self.promised.max(p);
        }
        if let Some(s) = &b.snapshot {
            if s.last_included > self.last_chosen {
                self.chosen.clear();
                self.last_chosen = s.last_included;
            } else {
                self.chosen = self.chosen.split_off(&(s.last_included + 1));
            }
            self.snapshot = Some(s.clone());
        }
        for (i, ballot, v) in &b.accepted {
            if *i > self.last_chosen {
                self.accepted.insert(*i, (*ballot, v.clone()));
            }
        }
        for (i, v) in &b.chosen {
            self.chosen.insert(*i, v.clone());
            self.last_chosen = *i;
        }
        self.accepted = self.accepted.split_off(&(self.last_chosen + 1));
    }
}

/// In-memory [`Storage`] for the simulator and tests. It keeps what was synced apart from what was only written,
/// so that [`MemStorage::crash`] loses exactly the un-synced suffix, as a real disk may.
#[derive(Clone, Debug, Default)]
pub struct MemStorage {
    durable: MemState,
    /// Batches written since the last sync, in order.
    pending: Vec<WriteBatch>,
    current: MemState,
}

impl MemStorage {
    pub fn new() -> Self {
        Self::default()
    }

    /// Loses every write that was not synced. `keep` of the pending batches survive (a prefix), modelling a crash
    /// part-way through the kernel writing them back.
    pub fn crash(&mut self, keep: usize) {
        for b in self.pending.iter().take(keep) {
            self.durable.apply(b);
        }
        self.pending.clear();
        self.current = self.durable.clone();
    }

    pub fn pending_batches(&self) -> usize {
        self.pending.len()
    }

    /// Makes every written batch durable.
    pub fn sync(&mut self) {
        for b in self.pending.drain(..) {
            self.durable.apply(&b);
        }
    }
}

impl Storage for MemStorage {
    fn recover(&mut self) -> Result<RecoveredState, StorageError> {
        let s = &self.current;
        Ok(RecoveredState {
            promised: s.promised,
            accepted: s.accepted.clone(),
            snapshot: s.snapshot.clone(),
            first_chosen: s.first_chosen(),
            last_chosen: s.last_chosen,
        })
    }

    fn write(&mut self, batch: &WriteBatch, sync: bool) -> Result<(), StorageError> {
        check_chosen_contiguous(self.current.last_chosen, batch)?;
        self.current.apply(batch);
        self.pending.push(batch.clone());
        if sync {
            self.sync();
        }
        Ok(())
    }

    fn chosen(
        &self,
        from: Instance,
        max_entries: usize,
        max_bytes: usize,
    ) -> Result<Vec<(Instance, Value)>, StorageError> {
        let first = self.current.first_chosen();
        if from < first {
            return Err(StorageError::Compacted { instance: from, first });
        }
        Ok(take_within_limits(self.current.chosen.range(from..), max_entries, max_bytes))
    }
}

/// The conformance suite every [`Storage`] implementation runs.
///
/// `open` returns the store for a directory key; calling it again with the same key must reopen the same data
/// (a restart). `crash` simulates losing un-synced writes before the reopen: for a real disk store it may simply
/// drop the handle without syncing; `MemStorage` loses its pending suffix.
pub mod conformance {
    use super::*;

    fn v(n: u8) -> Value {
        Value::Batch(vec![vec![n; n as usize + 1].into()])
    }

    fn b(round: u64) -> Ballot {
        Ballot::new(round, 1)
    }

    /// Runs every check. `open(key)` opens (or reopens) the store named `key`; `crash(store)` ends a store as a
    /// power cut would.
    pub fn run_all<S: Storage>(mut open: impl FnMut(&str) -> S, mut crash: impl FnMut(S)) {
        empty_store(&mut open);
        promise_and_accepted_survive_restart(&mut open);
        chosen_log_contiguous_and_gap_refused(&mut open);
        chosen_discards_accepted(&mut open);
        snapshot_compacts_and_installs(&mut open);
        synced_survives_crash(&mut open, &mut crash);
        read_limits(&mut open);
    }

    fn empty_store<S: Storage>(open: &mut impl FnMut(&str) -> S) {
        let mut s = open("empty");
        let r = s.recover().expect("recover empty");
        assert_eq!(r.promised, Ballot::ZERO);
        assert!(r.accepted.is_empty());
        assert_eq!((r.first_chosen, r.last_chosen), (1, 0));
        assert!(r.snapshot.is_none());
    }

    fn promise_and_accepted_survive_restart<S: Storage>(open: &mut impl FnMut(&str) -> S) {
        {
            let mut s = open("promise");
            s.write(&WriteBatch { promised: Some(b(3)), ..Default::default() }, true).unwrap();
            let batch = WriteBatch { accepted: vec![(1, b(3), v(1)), (5, b(3), v(5))], ..Default::default() };
            s.write(&batch, true).unwrap();
            // Overwrite instance 5 at a higher ballot.
            let batch = WriteBatch { promised: Some(b(4)), accepted: vec![(5, b(4), v(6))], ..Default::default() };
            s.write(&batch, true).unwrap();
        }
        let mut s = open("promise");
        let r = s.recover().unwrap();
        assert_eq!(r.promised, b(4));
        assert_eq!(r.accepted.get(&1), Some(&(b(3), v(1))));
        assert_eq!(r.accepted.get(&5), Some(&(b(4), v(6))));
        assert_eq!(r.accepted.len(), 2);
    }

    fn chosen_log_contiguous_and_gap_refused<S: Storage>(open: &mut impl FnMut(&str) -> S) {
        {
            let mut s = open("chosen");
            let batch = WriteBatch { chosen: vec![(1, v(1)), (2, v(2))], ..Default::default() };
            s.write(&batch, true).unwrap();
            let gap = WriteBatch { chosen: vec![(4, v(4))], ..Default::default() };
            match s.write(&gap, true) {
                Err(StorageError::ChosenGap { expected: 3, got: 4 }) => {}
                other => panic!("a gap must be refused, got {other:?}"),
            }
            s.write(&WriteBatch { chosen: vec![(3, v(3))], ..Default::default() }, true).unwrap();
        }
        // The refused gap must not have bricked or changed the store.
        let mut s = open("chosen");
        let r = s.recover().unwrap();
        assert_eq!((r.first_chosen, r.last_chosen), (1, 3));
        let got = s.chosen(1, 100, usize::MAX).unwrap();
        assert_eq!(got, vec![(1, v(1)), (2, v(2)), (3, v(3))]);
    }

    fn chosen_discards_accepted<S: Storage>(open: &mut impl FnMut(&str) -> S) {
        {
            let mut s = open("discard");
            let batch =
                WriteBatch { accepted: vec![(1, b(1), v(1)), (2, b(1), v(2)), (3, b(1), v(3))], ..Default::default() };
            s.write(&batch, true).unwrap();
            let batch = WriteBatch { chosen: vec![(1, v(1)), (2, v(2))], ..Default::default() };
            s.write(&batch, true).unwrap();
        }
        let mut s = open("discard");
        let r = s.recover().unwrap();
        assert_eq!(r.accepted.keys().copied().collect::<Vec<_>>(), vec![3]);
        assert_eq!(r.last_chosen, 2);
    }

    fn snapshot_compacts_and_installs<S: Storage>(open: &mut impl FnMut(&str) -> S) {
        let snap = |at: Instance| Snapshot {
            last_included: at,
            membership: Membership::new([1, 2, 3]),
            data: vec![at as u8; 3],
        };
        {
            let mut s = open("snap");
            let chosen = (1..=10).map(|i| (i, v(i as u8))).collect();
            s.write(&WriteBatch { chosen, ..Default::default() }, true).unwrap();
            s.write(&WriteBatch { snapshot: Some(snap(6)), ..Default::default() }, true).unwrap();
            assert!(matches!(s.chosen(3, 10, usize::MAX), Err(StorageError::Compacted { instance: 3, first: 7 })));
            assert_eq!(s.chosen(7, 10, usize::MAX).unwrap().len(), 4);
        }
        {
            let mut s = open("snap");
            let r = s.recover().unwrap();
            assert_eq!((r.first_chosen, r.last_chosen), (7, 10));
            assert_eq!(r.snapshot, Some(snap(6)));
            // Installing a snapshot ahead of the log restarts the log after it (a rebuilt member), in the same
            // batch as the first entries after it.
            let batch = WriteBatch {
                snapshot: Some(snap(20)),
                chosen: vec![(21, v(21))],
                accepted: vec![(25, b(9), v(25))],
                ..Default::default()
            };
            s.write(&batch, true).unwrap();
        }
        let mut s = open("snap");
        let r = s.recover().unwrap();
        assert_eq!((r.first_chosen, r.last_chosen), (21, 21));
        assert_eq!(r.snapshot, Some(snap(20)));
        assert_eq!(r.accepted.keys().copied().collect::<Vec<_>>(), vec![25]);
        assert_eq!(s.chosen(21, 10, usize::MAX).unwrap(), vec![(21, v(21))]);
    }

    fn synced_survives_crash<S: Storage>(open: &mut impl FnMut(&str) -> S, crash: &mut impl FnMut(S)) {
        let mut s = open("crash");
        s.write(&WriteBatch { promised: Some(b(2)), chosen: vec![(1, v(1))], ..Default::default() }, true).unwrap();
        s.write(
            &WriteBatch {
                promised: Some(b(7)),
                chosen: vec![(2, v(2))],
                accepted: vec![(3, b(7), v(3))],
                ..Default::default()
            },
            false,
        )
        .unwrap();
        crash(s);
        let mut s = open("crash");
        let r = s.recover().unwrap();
        // The synced batch is there; the un-synced one is there whole or not at all.
        assert!(r.promised == b(2) || r.promised == b(7), "promise {:?}", r.promised);
        if r.promised == b(7) {
            assert_eq!(r.last_chosen, 2);
            assert_eq!(r.accepted.get(&3), Some(&(b(7), v(3))));
        } else {
            assert_eq!(r.last_chosen, 1);
            assert!(r.accepted.is_empty());
        }
        // The store keeps working after the crash: the next append continues the recovered log.
        let next = r.last_chosen + 1;
        s.write(&WriteBatch { chosen: vec![(next, v(9))], ..Default::default() }, true).unwrap();
        assert_eq!(s.chosen(next, 1, usize::MAX).unwrap(), vec![(next, v(9))]);
    }

    fn read_limits<S: Storage>(open: &mut impl FnMut(&str) -> S) {
        let mut s = open("limits");
        let chosen = (1..=20).map(|i| (i, Value::Batch(vec![vec![0; 100].into()]))).collect();
        s.write(&WriteBatch { chosen, ..Default::default() }, true).unwrap();
        assert_eq!(s.chosen(1, 5, usize::MAX).unwrap().len(), 5);
        assert_eq!(s.chosen(1, 100, 250).unwrap().len(), 3, "stops once max_bytes is passed");
        assert_eq!(s.chosen(1, 100, 0).unwrap().len(), 1, "at least one entry");
        assert!(s.chosen(21, 5, usize::MAX).unwrap().is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::rc::Rc;

    #[test]
    fn mem_storage_conforms() {
        // A "directory" is a shared MemStorage; reopening after a crash sees only what was synced.
        let dirs: Rc<RefCell<HashMap<String, MemStorage>>> = Rc::default();
        let open_dirs = dirs.clone();
        let open = move |key: &str| Handle { key: key.to_string(), dirs: open_dirs.clone() };
        let crash = |h: Handle| h.dirs.borrow_mut().get_mut(&h.key).unwrap().crash(0);
        conformance::run_all(open, crash);
    }

    struct Handle {
        key: String,
        dirs: Rc<RefCell<HashMap<String, MemStorage>>>,
    }

    impl Storage for Handle {
        fn recover(&mut self) -> Result<RecoveredState, StorageError> {
            self.dirs.borrow_mut().entry(self.key.clone()).or_default().recover()
        }
        fn write(&mut self, batch: &WriteBatch, sync: bool) -> Result<(), StorageError> {
            self.dirs.borrow_mut().entry(self.key.clone()).or_default().write(batch, sync)
        }
        fn chosen(
            &self,
            from: Instance,
            max_entries: usize,
            max_bytes: usize,
        ) -> Result<Vec<(Instance, Value)>, StorageError> {
            self.dirs.borrow_mut().entry(self.key.clone()).or_default().chosen(from, max_entries, max_bytes)
        }
    }
}
