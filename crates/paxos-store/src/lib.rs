//! The durable store of the global log: [`RaftEngineStorage`] implements [`paxsql_paxos::Storage`] on disk with
//! raft-engine 0.4.2. The paxsql daemon persists every `WriteBatch` its Paxos node emits here (and sends the
//! replies that must wait for it only after `write(batch, true)` returns); the simulator uses `MemStorage` instead,
//! and both pass the same conformance suite.
//!
//! Layout, all in one raft-engine region ([`LOG_REGION`]):
//! - the chosen log is raft-engine's entry log, raft-engine index == Paxos instance;
//! - promise, accepted-but-not-chosen values and the snapshot live in the region's key-value side (see `keys.rs`).
//!
//! Every `WriteBatch` becomes exactly one raft-engine `LogBatch`, so it is atomic on disk.
//!
//! raft-engine hazards this crate guards against (docs/ARCHITECTURE.md §6):
//! - appending a non-contiguous index panics after the batch is written, and every later open panics too: the
//!   contiguity check runs before anything reaches raft-engine;
//! - purge is manual: a snapshot that compacts the log is followed by `purge_expired_files`, on a thread of its own
//!   (it may rewrite live records forward for seconds, see `purge.rs`);
//! - raft-engine panics (by design) when `fsync` fails, because the page cache may have dropped the data
//!   (the "fsyncgate" problem): such a store must not go on, and the daemon restarts from disk.
//!
//! What damage and a full disk do (each observed in `tests/durability.rs`):
//! - a torn or garbled tail of the last file is cut off at open, whole batches only;
//! - a damaged batch in an older file: `open` fails with `Corrupt`;
//! - a damaged batch inside the last file is taken for a torn tail: the store opens on the batches before it,
//!   dropping later synced ones (raft-engine cannot tell the two apart). Replication from the other members must
//!   make up for it, as for a lost disk;
//! - a damaged entry payload (not the last batch) is found only when read: `chosen` returns `Corrupt`;
//! - a full disk makes `write` return `Io` ("nospace") and leaves the store as it was; a snapshot cannot free
//!   space then (it is a write too), and `open` on a full disk fails. Once space is freed the same handle goes on.
//!
//! ```
//! use paxsql_paxos::{Storage, Value, WriteBatch};
//! use paxsql_paxos_store::RaftEngineStorage;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let mut store = RaftEngineStorage::open(dir.path()).unwrap();
//! assert_eq!(store.recover().unwrap().last_chosen, 0);
//! store.write(&WriteBatch { chosen: vec![(1, Value::Noop)], ..Default::default() }, true).unwrap();
//! assert_eq!(store.chosen(1, 10, usize::MAX).unwrap(), vec![(1, Value::Noop)]);
//! ```

mod entry;
mod keys;
mod purge;

use std::path::Path;
use std::sync::Arc;

use raft_engine::{Command, Config, Engine, LogBatch, ReadableSize, RecoveryMode};

use paxsql_paxos::storage::{check_chosen_contiguous, read_limit_reached};
use paxsql_paxos::{Ballot, Instance, RecoveredState, Snapshot, Storage, StorageError, Value, WriteBatch};

use entry::{ChosenEntry, ChosenLog};

/// The raft-engine region ("raft group") that holds the global log. One store holds one log.
pub const LOG_REGION: u64 = 1;

/// How many chosen entries [`Storage::chosen`] reads from raft-engine at a time while it looks for its size limit.
const READ_CHUNK_ENTRIES: u64 = 64;

/// Tuning of a [`RaftEngineStorage`]. `Default` suits the daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// Size at which raft-engine starts a new log file. Purging frees whole files, so this is also the
    /// granularity at which disk space comes back after a snapshot.
    pub target_file_size_bytes: u64,
    /// Total size of the log files above which `purge_expired_files` actually does work (below it, it returns
    /// at once). Must be at least `target_file_size_bytes`. Live data in the oldest files is copied forward
    /// ("rewritten") when they are purged.
    pub purge_threshold_bytes: u64,
    /// After a crash the last log file may end in a torn write. `true` truncates such a torn tail (the batch being
    /// written was never acknowledged as synced, so dropping it is allowed by the `Storage` contract); `false`
    /// refuses to open. Either way a damaged non-last file makes `open` fail.
    ///
    /// Keep `true`: raft-engine preallocates files and trims them only on a clean close, so after ANY crash the
    /// last file ends in zeros that strict mode reports as corruption (tested). The price: raft-engine cannot tell
    /// a torn tail from a damaged batch in the middle of the last file, and truncates there too, dropping later
    /// synced batches (tested, `damage_to_batch_metadata_in_the_last_file_truncates_there`).
    pub tolerate_torn_tail: bool,
    /// Keep purged files for reuse instead of deleting them (raft-engine's log recycling: fewer file creations, but
    /// disk space is held up to about 1.5 × `purge_threshold_bytes`). Off by default so that purging frees space.
    pub recycle_log_files: bool,
    /// Threads used to replay the log files at open.
    pub recovery_threads: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            target_file_size_bytes: 64 << 20,
            purge_threshold_bytes: 1 << 30,
            tolerate_torn_tail: true,
            recycle_log_files: false,
            recovery_threads: 2,
        }
    }
}

/// The durable [`Storage`] of one member, on raft-engine.
///
/// Not meant to be shared between threads: the `Storage` trait takes `&mut self` to write, and the daemon owns one
/// store per node. raft-engine locks its directory, so a second `open` of the same directory fails.
pub struct RaftEngineStorage {
    engine: Arc<Engine>,
    purger: purge::Purger,
    /// Cached durable state, updated only after raft-engine accepted a write.
    promised: Ballot,
    /// `last_included` of the newest snapshot (0 if none).
    snapshot_last: Instance,
    last_chosen: Instance,
}

impl RaftEngineStorage {
    /// Opens (creating if needed) the store in `dir` with the default [`StoreOptions`].
    pub fn open(dir: &Path) -> Result<Self, StorageError> {
        Self::open_with(dir, &StoreOptions::default())
    }

    pub fn open_with(dir: &Path, opts: &StoreOptions) -> Result<Self, StorageError> {
        let dir_str = dir.to_str().ok_or_else(|| {
            StorageError::Io(format!("store path {} is not valid UTF-8 (raft-engine needs a str)", dir.display()))
        })?;
        let cfg = Config {
            dir: dir_str.to_owned(),
            recovery_mode: if opts.tolerate_torn_tail {
                RecoveryMode::TolerateTailCorruption
            } else {
                RecoveryMode::AbsoluteConsistency
            },
            recovery_threads: opts.recovery_threads.max(1),
            target_file_size: ReadableSize(opts.target_file_size_bytes),
            purge_threshold: ReadableSize(opts.purge_threshold_bytes),
            enable_log_recycle: opts.recycle_log_files,
            ..Config::default()
        };
        let engine = Arc::new(Engine::open(cfg).map_err(|e| engine_error(&format!("opening {}", dir.display()), e))?);
        let purger = purge::Purger::start(engine.clone())
            .map_err(|e| StorageError::Io(format!("starting the purge thread of {}: {e}", dir.display())))?;
        let mut store = RaftEngineStorage { engine, purger, promised: Ballot::ZERO, snapshot_last: 0, last_chosen: 0 };
        match store.engine.get(LOG_REGION, keys::FORMAT) {
            Some(v) if v == [keys::FORMAT_VERSION] => {}
            Some(v) => {
                return Err(StorageError::Corrupt(format!(
                    "{}: store format {v:?}, this build reads format [{}]",
                    dir.display(),
                    keys::FORMAT_VERSION
                )))
            }
            None if store.engine.is_empty() => {
                let mut lb = LogBatch::default();
                lb.put(LOG_REGION, keys::FORMAT.to_vec(), vec![keys::FORMAT_VERSION])
                    .map_err(|e| engine_error("marking a new store", e))?;
                store.engine.write(&mut lb, true).map_err(|e| engine_error("marking a new store", e))?;
            }
            None => {
                return Err(StorageError::Corrupt(format!(
                    "{}: raft-engine data without a paxsql format marker",
                    dir.display()
                )))
            }
        }
        store.recover()?;
        Ok(store)
    }

    /// The directory the store lives in.
    pub fn dir(&self) -> &Path {
        Path::new(self.engine.path())
    }

    /// Bytes of live log files (what raft-engine would have to replay), for metrics and tests.
    pub fn used_bytes(&self) -> u64 {
        self.engine.get_used_size() as u64
    }

    fn first_chosen(&self) -> Instance {
        self.snapshot_last + 1
    }

    /// Waits until the files freed by every compaction so far have been purged (which raft-engine does only once
    /// they exceed `purge_threshold_bytes`); the last purge failure since the previous call, if any. Purges run in
    /// the background: this is for tests and tools that measure the disk.
    pub fn settle_purge(&self) -> Result<(), StorageError> {
        // raft-engine's list of regions it would like compacted is not acted on: ours is compacted by snapshots
        // only, when the state machine allows.
        match self.purger.settle() {
            None => Ok(()),
            Some(e) => Err(StorageError::Io(format!("purging log files: {e}"))),
        }
    }

    fn read_snapshot(&self) -> Result<Option<Snapshot>, StorageError> {
        self.engine.get(LOG_REGION, keys::SNAPSHOT).map(|v| keys::decode_snapshot(&v)).transpose()
    }

    /// Keys of the accepted entries at instances `from..to`.
    fn accepted_keys(&self, from: Instance, to: Instance) -> Result<Vec<Vec<u8>>, StorageError> {
        let mut out = Vec::new();
        if from >= to {
            return Ok(out);
        }
        let (start, end) = (keys::accepted_key(from), keys::accepted_key(to));
        self.engine
            .scan_raw_messages(LOG_REGION, Some(&start), Some(&end), false, |k, _| {
                out.push(k.to_vec());
                true
            })
            .map_err(|e| engine_error("scanning accepted entries", e))?;
        Ok(out)
    }
}

impl Storage for RaftEngineStorage {
    fn recover(&mut self) -> Result<RecoveredState, StorageError> {
        let promised = match self.engine.get(LOG_REGION, keys::PROMISED) {
            Some(v) => keys::decode_promised(&v)?,
            None => Ballot::ZERO,
        };
        let snapshot = self.read_snapshot()?;
        let snapshot_last = snapshot.as_ref().map_or(0, |s| s.last_included);
        let first_chosen = snapshot_last + 1;
        let last_chosen = match (self.engine.first_index(LOG_REGION), self.engine.last_index(LOG_REGION)) {
            (Some(first), Some(last)) => {
                // Entries start right after the snapshot; one that starts later means entries went missing.
                // (Starting earlier cannot happen: a snapshot compacts the log in the batch that records it.)
                if first > first_chosen || last < snapshot_last {
                    return Err(StorageError::Corrupt(format!(
                        "chosen log holds {first}..={last} but the snapshot ends at {snapshot_last}"
                    )));
                }
                last
            }
            _ => snapshot_last,
        };

        let mut accepted = std::collections::BTreeMap::new();
        let mut bad = None;
        let (start, end) = (keys::accepted_key(0), keys::accepted_key_end());
        self.engine
            .scan_raw_messages(LOG_REGION, Some(&start), Some(&end), false, |k, v| {
                let decoded = keys::decode_accepted_key(k).and_then(|i| Ok((i, keys::decode_accepted(i, v)?)));
                match decoded {
                    Ok((i, entry)) => {
                        // Written batches never leave any at or below last chosen; stay safe if one did.
                        if i > last_chosen {
                            accepted.insert(i, entry);
                        }
                        true
                    }
                    Err(e) => {
                        bad = Some(e);
                        false
                    }
                }
            })
            .map_err(|e| engine_error("scanning accepted entries", e))?;
        if let Some(e) = bad {
            return Err(e);
        }

        self.promised = promised;
        self.snapshot_last = snapshot_last;
        self.last_chosen = last_chosen;
        Ok(RecoveredState { promised, accepted, snapshot, first_chosen, last_chosen })
    }

    fn write(&mut self, batch: &WriteBatch, sync: bool) -> Result<(), StorageError> {
        // Before anything reaches raft-engine: a gap there panics after writing and bricks the store (docs/ARCHITECTURE.md §6).
        check_chosen_contiguous(self.last_chosen, batch)?;
        if let Some(s) = &batch.snapshot {
            // An older snapshot would claim instances that are already discarded as the start of the log. The
            // core never installs one; refuse it rather than record a state `recover` could not make sense of.
            if s.last_included < self.snapshot_last {
                return Err(StorageError::Compacted { instance: s.last_included, first: self.first_chosen() });
            }
        }

        let mut lb = LogBatch::default();
        let mut promised = self.promised;
        if let Some(p) = batch.promised {
            if p > promised {
                promised = p;
                let mut v = Vec::with_capacity(16);
                keys::encode_ballot(&mut v, p);
                lb.put(LOG_REGION, keys::PROMISED.to_vec(), v).map_err(|e| engine_error("batching the promise", e))?;
            }
        }

        let mut snapshot_last = self.snapshot_last;
        let mut last_chosen = self.last_chosen;
        if let Some(s) = &batch.snapshot {
            lb.put(LOG_REGION, keys::SNAPSHOT.to_vec(), keys::encode_snapshot(s))
                .map_err(|e| engine_error("batching the snapshot", e))?;
            // The other small records are written again with every snapshot: raft-engine purges log files only up
            // to the oldest one a live record is in, and the format marker (written once, when the store was made)
            // or a promise unchanged for days would otherwise keep every file since then. With them pinned, a
            // compaction that keeps a long window frees nothing, and after nine purges raft-engine rewrites the
            // window itself, inside the purge, for seconds (the soak's master lost its lease there).
            lb.put(LOG_REGION, keys::FORMAT.to_vec(), vec![keys::FORMAT_VERSION])
                .map_err(|e| engine_error("batching the format marker", e))?;
            if promised != Ballot::ZERO {
                let mut v = Vec::with_capacity(16);
                keys::encode_ballot(&mut v, promised);
                lb.put(LOG_REGION, keys::PROMISED.to_vec(), v).map_err(|e| engine_error("batching the promise", e))?;
            }
            // Before the entries of this batch: compacting to last_included + 1 removes every entry up to the
            // snapshot; when the snapshot is ahead of the log that is all of them, and raft-engine then accepts
            // the next append at last_included + 1 as the log's new start (an empty region has no "hole").
            lb.add_command(LOG_REGION, Command::Compact { index: s.last_included + 1 });
            snapshot_last = s.last_included;
            last_chosen = last_chosen.max(s.last_included);
        }

        if !batch.chosen.is_empty() {
            let entries: Vec<ChosenEntry> =
                batch.chosen.iter().map(|(i, v)| ChosenEntry::new(*i, v.encode())).collect();
            lb.add_entries::<ChosenLog>(LOG_REGION, &entries)
                .map_err(|e| engine_error("batching chosen entries", e))?;
            last_chosen = batch.chosen.last().map_or(last_chosen, |(i, _)| *i);
        }

        // Accepted entries live only above the last chosen instance: drop the ones this batch passes, and do not
        // record new ones it already passed.
        for key in self.accepted_keys(self.last_chosen + 1, last_chosen.saturating_add(1))? {
            lb.delete(LOG_REGION, key);
        }
        for (i, ballot, v) in &batch.accepted {
            if *i > last_chosen {
                lb.put(LOG_REGION, keys::accepted_key(*i), keys::encode_accepted(*ballot, v))
                    .map_err(|e| engine_error("batching accepted entries", e))?;
            }
        }

        if lb.is_empty() {
            // Nothing to write, but a synced write still promises that earlier unsynced ones are durable.
            if sync {
                self.engine.sync().map_err(|e| engine_error("syncing", e))?;
            }
            return Ok(());
        }
        self.engine.write(&mut lb, sync).map_err(|e| engine_error("writing a batch", e))?;
        let compacted = snapshot_last > self.snapshot_last;
        self.promised = promised;
        self.snapshot_last = snapshot_last;
        self.last_chosen = last_chosen;
        if compacted {
            self.purger.request();
        }
        Ok(())
    }

    fn chosen(
        &self,
        from: Instance,
        max_entries: usize,
        max_bytes: usize,
    ) -> Result<Vec<(Instance, Value)>, StorageError> {
        let first = self.first_chosen();
        if from < first {
            return Err(StorageError::Compacted { instance: from, first });
        }
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut next = from;
        let mut buf = Vec::new();
        while next <= self.last_chosen && !read_limit_reached(out.len(), bytes, max_entries, max_bytes) {
            // Never read past what may be returned: a damaged entry beyond the limit must not fail this read.
            let wanted = (max_entries - out.len()) as u64;
            let end = (next + READ_CHUNK_ENTRIES.min(wanted)).min(self.last_chosen + 1);
            buf.clear();
            self.engine
                .fetch_entries_to::<ChosenLog>(LOG_REGION, next, end, None, &mut buf)
                .map_err(|e| engine_error(&format!("reading chosen entries {next}..{end}"), e))?;
            if buf.len() as u64 != end - next {
                return Err(StorageError::Corrupt(format!(
                    "chosen log returned {} entries for {next}..{end}",
                    buf.len()
                )));
            }
            for mut e in buf.drain(..) {
                if read_limit_reached(out.len(), bytes, max_entries, max_bytes) {
                    break;
                }
                if e.instance != next {
                    return Err(StorageError::Corrupt(format!(
                        "chosen entry at index {next} says instance {}",
                        e.instance
                    )));
                }
                let v = Value::decode(&bytes::Bytes::from(std::mem::take(&mut e.value)))
                    .map_err(|err| StorageError::Corrupt(format!("chosen value of instance {next}: {err}")))?;
                bytes += v.size_bytes();
                out.push((next, v));
                next += 1;
            }
        }
        Ok(out)
    }
}

/// The read limits of [`Storage::chosen`], as `MemStorage` applies them: the entry that passes `max_bytes` is
/// still returned, and so is a first entry larger than it.
/// Maps a raft-engine error to the storage error the core understands; `doing` says what we were about.
fn engine_error(doing: &str, e: raft_engine::Error) -> StorageError {
    use raft_engine::Error as E;
    match e {
        E::Corruption(_) | E::Codec(_) | E::Protobuf(_) => StorageError::Corrupt(format!("{doing}: {e}")),
        // Entries the memtable says exist but cannot be found: the files do not match their index.
        E::EntryCompacted | E::EntryNotFound => StorageError::Corrupt(format!("{doing}: {e}")),
        _ => StorageError::Io(format!("{doing}: {e}")),
    }
}
