//! [`ServedBinlog`]: the log of whole transactions a node serves to its local mariadbd, kept in segment files.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use paxsql_binlog::{event_type, EventHeader, Gtid, GtidSet};
use paxsql_repl_server::{Batch, Cursor, EventSource, Transaction};
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::lookup_clock::{LookupClock, LookupTime};
use crate::segment::{
    self, decode_record, encode_record, Entry, SegmentHeader, Summary, CONTINUES, END_OF_APPEND, RECORD_HEADER,
};

/// Sizes and retention of the served binlog.
#[derive(Debug, Clone)]
pub struct ServedBinlogConfig {
    /// Where the segment and index files live (created if missing; owned by one node).
    pub dir: PathBuf,
    /// A segment is sealed (indexed, synced) once it holds this many bytes. Opening reads the newest segment whole,
    /// so this bounds the work of a restart.
    pub segment_bytes: u64,
    /// Newest transactions kept in memory: most reads (replicas near the tail) never touch the disk.
    pub cache_bytes: usize,
    /// Sealed segments are purged, oldest first, while all segments together exceed this many bytes ...
    pub retain_bytes: u64,
    /// ... or once a segment was sealed longer ago than this.
    pub retain_time: Option<Duration>,
}

impl ServedBinlogConfig {
    /// Defaults for `dir`: 16 MiB segments, a 32 MiB cache, 2 GiB and 7 days of retention.
    pub fn new(dir: impl Into<PathBuf>) -> ServedBinlogConfig {
        ServedBinlogConfig {
            dir: dir.into(),
            segment_bytes: 16 << 20,
            cache_bytes: 32 << 20,
            retain_bytes: 2 << 30,
            retain_time: Some(Duration::from_secs(7 * 24 * 3600)),
        }
    }

    fn validate(&self) -> Result<()> {
        if self.segment_bytes < 4096 {
            return Err(Error::Config(format!("segment_bytes {} is below 4096", self.segment_bytes)));
        }
        if self.retain_bytes < self.segment_bytes {
            return Err(Error::Config(format!(
                "retain_bytes {} is below one segment ({} bytes)",
                self.retain_bytes, self.segment_bytes
            )));
        }
        Ok(())
    }
}

/// Figures for status and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServedBinlogStats {
    /// Index of the oldest transaction still held.
    pub first_index: u64,
    /// Index the next appended transaction gets (transactions appended since the log began).
    pub next_index: u64,
    pub segments: usize,
    pub disk_bytes: u64,
    pub cached_transactions: usize,
    pub cache_bytes: usize,
    /// Last Paxos instance whose transactions are held.
    pub last_instance: u64,
}

/// The served global binlog on disk: appended in log order by the node's apply path, read by the replication
/// server's dumps (see [`EventSource`] for the contract).
pub struct ServedBinlog {
    cfg: ServedBinlogConfig,
    /// Held by every change for its whole length (one writer at a time: the node's apply path), so that a change
    /// can do its file IO (writes, fsyncs, sealing a segment) without holding `inner`, which lookups and dumps
    /// take: a GTID lookup never waits for the disk.
    writer: Mutex<()>,
    inner: Mutex<Inner>,
    /// Index of the next transaction; dumps waiting for more subscribe to it.
    next_tx: watch::Sender<u64>,
    /// Durations of GTID lookups (`locate`, `holds`) not yet taken by [`ServedBinlog::take_lookup_times`].
    lookups: Mutex<Vec<LookupTime>>,
}

/// Lookup durations kept between two takes; beyond this the newest are dropped (only figures are lost).
const LOOKUPS_KEPT: usize = 4096;

struct Segment {
    header: SegmentHeader,
    path: PathBuf,
    file: Arc<File>,
    count: u64,
    /// End of the valid records: where the next one is written.
    data_end: u64,
    last_instance: u64,
    /// Per domain, first and last GTID, ordered by domain.
    domains: Vec<(Gtid, Gtid)>,
    /// Every transaction's place: always held for the active segment, loaded on demand for sealed ones.
    entries: Option<Arc<Vec<Entry>>>,
    /// Where the entries start in the index file (sealed segments).
    entries_at: u64,
    sealed_at: Option<SystemTime>,
}

impl Segment {
    fn end_index(&self) -> u64 {
        self.header.first_index + self.count
    }

    fn summary(&self) -> Summary {
        Summary {
            first_index: self.header.first_index,
            count: self.count,
            data_end: self.data_end,
            last_instance: self.last_instance,
            domains: self.domains.clone(),
        }
    }

    fn note(&mut self, entry: Entry) {
        self.count += 1;
        self.data_end = entry.end();
        self.last_instance = entry.instance;
        let g = entry.gtid;
        match self.domains.binary_search_by_key(&g.domain_id, |(first, _)| first.domain_id) {
            Ok(i) => self.domains[i].1 = g,
            Err(i) => self.domains.insert(i, (g, g)),
        }
        if let Some(entries) = &mut self.entries {
            Arc::make_mut(entries).push(entry);
        }
    }
}

struct Inner {
    dir: PathBuf,
    /// Oldest first; never empty: the last one is the active segment appends go to.
    segments: VecDeque<Segment>,
    /// The newest transactions; `cache[0]` has index `cache_first`.
    cache: VecDeque<Arc<Transaction>>,
    cache_first: u64,
    cache_bytes: usize,
    next_index: u64,
    last_instance: u64,
    /// Last GTID per domain, including the history before the first held transaction.
    last: GtidSet,
    disk_bytes: u64,
    unsynced: bool,
    /// Sealed segments whose entries are in memory, most recently used last.
    loaded: VecDeque<u64>,
    /// The transaction whose parts are arriving, written past the active segment's end but not yet in the log.
    open: Option<OpenParts>,
}

/// A transaction coming through the log in parts: its pieces go to disk as they arrive (memory holds at most one
/// event cut by a part boundary), and enter the index together when the last part does.
struct OpenParts {
    gtid: Gtid,
    next_offset: u64,
    /// The start of an event a part boundary cut, waiting for the rest.
    carry: Vec<u8>,
    /// Where the next piece's record goes in the active segment.
    write_at: u64,
    /// The pieces written: (record offset, payload length, instance).
    pieces: Vec<(u64, u32, u64)>,
}

impl OpenParts {
    /// Adds the next part's bytes: its whole events, after the event the previous part cut (completed from the start
    /// of this one), go to the segment file as one record; the start of an event this part cuts waits for the next.
    /// Only that cut event is copied. Returns whether a record was written.
    fn add(&mut self, instance: u64, last: bool, bytes: &[u8], file: &File, path: &Path) -> Result<bool> {
        self.next_offset += bytes.len() as u64;
        let (gtid, at_byte) = (self.gtid, self.next_offset);
        let corrupt =
            |what| Error::Corrupt { path: PathBuf::from(format!("transaction {gtid}")), what, offset: at_byte };
        let mut used = 0;
        loop {
            match paxsql_binlog::split_event(&self.carry) {
                _ if self.carry.is_empty() => break,
                Ok(_) => break,
                Err(paxsql_binlog::Error::Incomplete { have, need }) => {
                    let take = need.saturating_sub(have).min(bytes.len() - used);
                    if take == 0 {
                        break;
                    }
                    self.carry.extend_from_slice(&bytes[used..used + take]);
                    used += take;
                }
                Err(_) => return Err(corrupt("an event shorter than its header")),
            }
        }
        if !self.carry.is_empty() && paxsql_binlog::split_event(&self.carry).is_err() {
            // The whole part went into the cut event, which goes on in the next.
            if last {
                return Err(corrupt("its last part ends inside an event"));
            }
            return Ok(false);
        }
        let rest = &bytes[used..];
        let whole = whole_events_len(rest).map_err(corrupt)?;
        if last && whole != rest.len() {
            return Err(corrupt("its last part ends inside an event"));
        }
        let len = self.carry.len() + whole;
        if len == 0 && !last {
            self.carry = rest.to_vec();
            return Ok(false);
        }
        let flags = if self.pieces.is_empty() { 0 } else { CONTINUES } | if last { END_OF_APPEND } else { 0 };
        let pieces = [&self.carry[..], &rest[..whole]];
        let header = segment::record_header(instance, flags, &pieces);
        let mut at = self.write_at;
        for piece in std::iter::once(&header[..]).chain(pieces) {
            file.write_all_at(piece, at).map_err(|source| Error::Io { path: path.to_owned(), source })?;
            at += piece.len() as u64;
        }
        self.pieces.push((self.write_at, len as u32, instance));
        self.write_at = at;
        self.carry = rest[whole..].to_vec();
        Ok(true)
    }
}

/// Sealed segments whose entries stay loaded at once (a replica catching up reads one at a time).
const LOADED_SEALED: usize = 2;

impl ServedBinlog {
    /// Opens (or creates) the log in `cfg.dir`. Reads the summaries of sealed segments and the active segment whole;
    /// a torn tail left by a crash is cut back to the last complete Paxos instance.
    pub fn open(cfg: ServedBinlogConfig) -> Result<ServedBinlog> {
        cfg.validate()?;
        let dir = cfg.dir.clone();
        std::fs::create_dir_all(&dir).map_err(|source| Error::Io { path: dir.clone(), source })?;
        let mut firsts = Vec::new();
        let listing = std::fs::read_dir(&dir).map_err(|source| Error::Io { path: dir.clone(), source })?;
        for item in listing {
            let item = item.map_err(|source| Error::Io { path: dir.clone(), source })?;
            let name = item.file_name().to_string_lossy().into_owned();
            if let Some(first) = segment::parse_segment_name(&name) {
                firsts.push(first);
            } else if name.ends_with(".idx.tmp") || name.ends_with(".seg.tmp") {
                // A write cut by a crash: a segment without its index is re-scanned below; a segment that was
                // never renamed into place held nothing yet.
                let _ = std::fs::remove_file(item.path());
            }
        }
        firsts.sort_unstable();
        let mut segments = VecDeque::new();
        let n = firsts.len();
        for (i, first) in firsts.into_iter().enumerate() {
            let seg = if i + 1 < n { open_sealed(&dir, first)? } else { open_active(&dir, first)? };
            if let Some(prev) = segments.back() {
                let prev: &Segment = prev;
                if prev.end_index() != seg.header.first_index {
                    return Err(Error::Corrupt {
                        path: seg.path.clone(),
                        what: "segment does not continue the one before it (a segment file is missing)",
                        offset: 0,
                    });
                }
            }
            segments.push_back(seg);
        }
        if segments.is_empty() {
            segments.push_back(create_segment(&dir, SegmentHeader { first_index: 0, prev_instance: 0, prev: vec![] })?);
        }
        let Some(active) = segments.back() else { unreachable!("pushed above") };
        let next_index = active.end_index();
        let last_instance = active.last_instance;
        let mut last = GtidSet::from_state(segments.front().map(|s| s.header.prev.clone()).unwrap_or_default());
        for s in &segments {
            for (_, l) in &s.domains {
                last.set(*l);
            }
        }
        let disk_bytes = segments.iter().map(|s| s.data_end).sum();
        // The cache starts with the active segment's newest transactions (already read by the scan).
        let mut inner = Inner {
            dir,
            segments,
            cache: VecDeque::new(),
            cache_first: next_index,
            cache_bytes: 0,
            next_index,
            last_instance,
            last,
            disk_bytes,
            unsynced: false,
            loaded: VecDeque::new(),
            open: None,
        };
        inner.warm_cache(cfg.cache_bytes)?;
        tracing::info!(
            dir = %inner.dir.display(),
            first_index = inner.first_index(),
            next_index,
            segments = inner.segments.len(),
            disk_bytes,
            "served binlog opened"
        );
        Ok(ServedBinlog {
            cfg,
            writer: Mutex::new(()),
            inner: Mutex::new(inner),
            next_tx: watch::channel(next_index).0,
            lookups: Mutex::new(Vec::new()),
        })
    }

    /// The durations of the GTID lookups since the last call (for the node's latency histogram).
    pub fn take_lookup_times(&self) -> Vec<LookupTime> {
        std::mem::take(&mut *self.lookups.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn note_lookup(&self, clock: LookupClock) {
        let time = clock.finish();
        let mut l = self.lookups.lock().unwrap_or_else(|p| p.into_inner());
        if l.len() < LOOKUPS_KEPT {
            l.push(time);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn writer(&self) -> MutexGuard<'_, ()> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends transactions chosen in Paxos instance `instance` (their events back to back, as the log holds
    /// them): one `AppendBinlog` command, so a batched instance is appended once per command. A replay after a
    /// restart is skipped: an instance below the last one held, or the last one's commands already held (an append
    /// is written whole or cut off at open, so a command is held whole or not at all). Returns how many
    /// transactions were added. Nothing is added if any transaction is malformed or out of GTID order. The cache
    /// keeps slices of `events` (the chosen value's buffer), not a copy.
    pub fn append_instance(&self, instance: u64, events: Bytes) -> Result<usize> {
        let _writer = self.writer();
        // Only a holder of `writer` changes the state, so what is read here stays true until `publish`; the events
        // are parsed and checked outside `inner`, which GTID lookups and dumps wait for.
        let (last_instance, mut last, file, path, at) = {
            let inner = self.lock();
            let active = inner.active();
            (inner.last_instance, inner.last.clone(), active.file.clone(), active.path.clone(), active.data_end)
        };
        if instance < last_instance {
            return Ok(0);
        }
        let trxs = split_transactions(events)?;
        if instance == last_instance && trxs.iter().all(|(_, t)| last.contains(&t.gtid)) {
            return Ok(0);
        }
        for (_, t) in &trxs {
            if let Some(have) = last.get(t.gtid.domain_id) {
                if have.seq_no >= t.gtid.seq_no {
                    return Err(paxsql_repl_server::Error::GtidOutOfOrder { have: *have, got: t.gtid }.into());
                }
            }
            last.set(t.gtid);
        }
        // Past the active segment's end, which readers do not go beyond until `publish`.
        let mut buf = Vec::with_capacity(trxs.iter().map(|(p, _)| p.len() + RECORD_HEADER).sum());
        let n = trxs.len();
        for (i, (payload, _)) in trxs.iter().enumerate() {
            let flags = if i + 1 == n { END_OF_APPEND } else { 0 };
            encode_record(&mut buf, instance, flags, payload);
        }
        file.write_all_at(&buf, at).map_err(|source| Error::Io { path, source })?;
        let added = trxs.len();
        let (next_index, seal) = self.lock().publish(instance, trxs, last, at, buf.len() as u64, &self.cfg);
        if seal {
            self.roll();
        }
        self.next_tx.send_replace(next_index);
        Ok(added)
    }

    /// Adds one part of a transaction too large for one log entry (`AppendBinlogPart` applied at `instance`): bytes
    /// `offset..` of its events, cut anywhere. Its pieces are written as they come (cut at event boundaries) and
    /// the transaction enters the log, and replicas see it, only with the part flagged `last`. A replay of parts
    /// already held is skipped. Returns whether the transaction is now in the log.
    pub fn append_part(&self, instance: u64, gtid: Gtid, offset: u64, last: bool, bytes: &[u8]) -> Result<bool> {
        let _writer = self.writer();
        let (mut open, file, path) = {
            let mut inner = self.lock();
            if inner.last.contains(&gtid) {
                return Ok(false);
            }
            if offset == 0 {
                if let Some(have) = inner.last.get(gtid.domain_id) {
                    if have.seq_no + 1 != gtid.seq_no {
                        return Err(paxsql_repl_server::Error::GtidOutOfOrder { have: *have, got: gtid }.into());
                    }
                }
                inner.drop_parts()?;
                let write_at = inner.active().data_end;
                inner.open = Some(OpenParts { gtid, next_offset: 0, carry: Vec::new(), write_at, pieces: Vec::new() });
            }
            let out_of_order = |open: Option<&OpenParts>| Error::PartOutOfOrder {
                gtid,
                offset,
                open: open.map_or("no transaction".into(), |o| format!("{} at byte {}", o.gtid, o.next_offset)),
            };
            match inner.open.as_ref() {
                Some(o) if o.gtid == gtid && o.next_offset == offset => {}
                // A part replayed after a restart that already went in before it: nothing to do.
                Some(o) if o.gtid == gtid && offset < o.next_offset => return Ok(false),
                other => return Err(out_of_order(other)),
            }
            let Some(open) = inner.open.take() else { unreachable!("matched above") };
            let active = inner.active();
            (open, active.file.clone(), active.path.clone())
        };
        // The piece goes to the file outside the state lock (readers never go past the indexed end of the segment);
        // meanwhile the open transaction is the writer's alone.
        let added = open.add(instance, last, bytes, &file, &path);
        let mut inner = self.lock();
        inner.open = Some(open);
        if added? {
            inner.unsynced = true;
        }
        if !last {
            return Ok(false);
        }
        let seal = inner.close_parts(&self.cfg);
        let next_index = inner.next_index;
        drop(inner);
        if seal {
            self.roll();
        }
        self.next_tx.send_replace(next_index);
        Ok(true)
    }

    /// The parts received of the open transaction are void (its master's term ended before its last part).
    pub fn drop_parts(&self) -> Result<()> {
        let _writer = self.writer();
        self.lock().drop_parts()
    }

    /// At a restart from a snapshot: the Paxos log holds nothing up to `instance`, whose last transaction was
    /// `gtid`. If this log already holds that instance nothing changes (the replay that follows is skipped). If it
    /// ends before it (its tail was lost, or this node's data was replaced), the history it holds has a gap after
    /// it: it is discarded and the log restarts after `gtid`, so a replica behind it is sent to a rebuild instead of
    /// being served across the gap.
    pub fn restore_base(&self, instance: u64, gtid: Option<Gtid>) -> Result<()> {
        let _writer = self.writer();
        let next = {
            let mut inner = self.lock();
            if inner.last_instance >= instance {
                return Ok(());
            }
            inner.drop_parts()?;
            // Instances after the last transaction held may carry no transaction (lease renewals): no gap then.
            let gap = gtid.is_some_and(|g| inner.last.get(g.domain_id) != Some(&g));
            if !gap {
                inner.last_instance = instance;
                return Ok(());
            }
            let held = inner.next_index - inner.first_index();
            if held > 0 {
                tracing::warn!(
                    held,
                    last_instance = inner.last_instance,
                    snapshot_instance = instance,
                    "served binlog ends before the global log's snapshot: its history is discarded"
                );
            }
            let mut prev = inner.last.clone();
            if let Some(g) = gtid {
                prev.set(g);
            }
            let header = SegmentHeader {
                first_index: inner.next_index,
                prev_instance: instance,
                prev: prev.iter().copied().collect(),
            };
            for s in std::mem::take(&mut inner.segments) {
                remove_segment_files(&inner.dir, &s);
            }
            let seg = create_segment(&inner.dir, header)?;
            inner.disk_bytes = seg.data_end;
            inner.segments.push_back(seg);
            inner.last = prev;
            inner.last_instance = instance;
            inner.cache.clear();
            inner.cache_first = inner.next_index;
            inner.cache_bytes = 0;
            inner.loaded.clear();
            inner.next_index
        };
        self.next_tx.send_replace(next);
        Ok(())
    }

    /// Makes every appended transaction durable. The node calls it before the Paxos log drops instances, so the
    /// replay after a crash always covers what this log may have lost.
    pub fn sync(&self) -> Result<()> {
        let _writer = self.writer();
        let (file, path) = {
            let inner = self.lock();
            if !inner.unsynced {
                return Ok(());
            }
            (inner.active().file.clone(), inner.active().path.clone())
        };
        file.sync_data().map_err(|source| Error::Io { path, source })?;
        // Nothing was written meanwhile: the writer lock is held.
        self.lock().unsynced = false;
        Ok(())
    }

    /// Seals the active segment (synced, indexed) and starts the next one, then applies retention. The caller holds
    /// the writer lock (nothing is appended meanwhile); the fsyncs and file writes run outside the state lock. A
    /// failure leaves the segment active, to be sealed after a later append.
    fn roll(&self) {
        if let Err(e) = self.try_roll() {
            tracing::error!(error = %e, "served binlog cannot seal its active segment");
        }
    }

    fn try_roll(&self) -> Result<()> {
        let (dir, file, path, summary, entries, next) = {
            let inner = self.lock();
            let active = inner.active();
            let next = SegmentHeader {
                first_index: inner.next_index,
                prev_instance: inner.last_instance,
                prev: inner.last.iter().copied().collect(),
            };
            let entries = active.entries.clone().unwrap_or_default();
            (inner.dir.clone(), active.file.clone(), active.path.clone(), active.summary(), entries, next)
        };
        // The sealed segment's records are durable before the next segment exists: after a crash, every segment
        // but the last ends where the next one starts.
        file.sync_data().map_err(|source| Error::Io { path, source })?;
        segment::write_index(&dir, &summary, &entries)?;
        let (_, entries_at) = segment::read_summary(&dir, summary.first_index)?;
        let seg = create_segment(&dir, next)?;
        let purged = {
            let mut inner = self.lock();
            let active = inner.active_mut();
            active.sealed_at = Some(SystemTime::now());
            active.entries_at = entries_at;
            inner.unsynced = false;
            inner.disk_bytes += seg.data_end;
            inner.segments.push_back(seg);
            inner.loaded.push_back(summary.first_index);
            inner.unload_beyond(LOADED_SEALED);
            inner.purge(&self.cfg)
        };
        // A dump still reading a purged segment keeps its open file.
        for s in purged {
            remove_segment_files(&dir, &s);
            tracing::info!(
                first_index = s.header.first_index,
                transactions = s.count,
                "served binlog purged a segment"
            );
        }
        Ok(())
    }

    /// Whether the log holds every GTID of `state` (a replica's `gtid_binlog_pos`), or it is exactly where the held
    /// history starts.
    pub fn holds(&self, state: &GtidSet) -> bool {
        let mut clock = LookupClock::start();
        let held = {
            let mut inner = self.lock();
            clock.locked();
            state.iter().all(|want| matches!(inner.find(want), Ok(Some(_))))
        };
        self.note_lookup(clock);
        held
    }

    /// The position after the whole log (last GTID per domain), like `@@gtid_binlog_pos`.
    pub fn gtid_pos(&self) -> GtidSet {
        self.lock().last.clone()
    }

    /// Last Paxos instance whose transactions are held.
    pub fn last_instance(&self) -> u64 {
        self.lock().last_instance
    }

    pub fn stats(&self) -> ServedBinlogStats {
        let inner = self.lock();
        ServedBinlogStats {
            first_index: inner.first_index(),
            next_index: inner.next_index,
            segments: inner.segments.len(),
            disk_bytes: inner.disk_bytes,
            cached_transactions: inner.cache.len(),
            cache_bytes: inner.cache_bytes,
            last_instance: inner.last_instance,
        }
    }
}

impl Inner {
    fn active(&self) -> &Segment {
        // Never empty (see `segments`).
        self.segments.back().expect("the served binlog always has an active segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments.back_mut().expect("the served binlog always has an active segment")
    }

    fn first_index(&self) -> u64 {
        self.segments.front().map_or(self.next_index, |s| s.header.first_index)
    }

    /// The GTIDs before the first held transaction.
    fn base(&self) -> &[Gtid] {
        self.segments.front().map_or(&[], |s| &s.header.prev)
    }

    /// Records written at `at` (`len` bytes, past the active segment's end) enter the index and the cache. Returns
    /// the next index and whether the active segment is now due to be sealed.
    fn publish(
        &mut self,
        instance: u64,
        trxs: Vec<(Bytes, Transaction)>,
        last: GtidSet,
        at: u64,
        len: u64,
        cfg: &ServedBinlogConfig,
    ) -> (u64, bool) {
        self.unsynced = true;
        let mut offset = at;
        for (payload, t) in trxs {
            let entry = Entry { offset, len: payload.len() as u32, instance, gtid: t.gtid };
            offset = entry.end();
            self.active_mut().note(entry);
            self.next_index += 1;
            self.cache_bytes += t.byte_len();
            self.cache.push_back(Arc::new(t));
        }
        self.last = last;
        self.last_instance = instance;
        self.disk_bytes += len;
        self.trim_cache(cfg.cache_bytes);
        (self.next_index, self.active().data_end >= cfg.segment_bytes)
    }

    /// Forgets the open transaction's pieces and cuts them off the segment file: no crash leaves them to be taken
    /// for records.
    fn drop_parts(&mut self) -> Result<()> {
        if self.open.take().is_none() {
            return Ok(());
        }
        let active = self.active();
        active.file.set_len(active.data_end).map_err(|source| Error::Io { path: active.path.clone(), source })
    }

    /// The open transaction's last piece is written: its pieces enter the index (one entry each, all with its
    /// GTID) and replicas may read it. The cache restarts after it: its pieces are read from disk. Returns whether
    /// the active segment is now due to be sealed.
    fn close_parts(&mut self, cfg: &ServedBinlogConfig) -> bool {
        let Some(open) = self.open.take() else { return false };
        for (offset, len, instance) in open.pieces {
            let entry = Entry { offset, len, instance, gtid: open.gtid };
            self.disk_bytes += entry.end() - offset;
            self.active_mut().note(entry);
            self.next_index += 1;
            self.last_instance = instance;
        }
        self.last.set(open.gtid);
        self.cache.clear();
        self.cache_bytes = 0;
        self.cache_first = self.next_index;
        self.active().data_end >= cfg.segment_bytes
    }

    fn trim_cache(&mut self, limit: usize) {
        while self.cache_bytes > limit && self.cache.len() > 1 {
            if let Some(t) = self.cache.pop_front() {
                self.cache_bytes -= t.byte_len();
                self.cache_first += 1;
            }
        }
    }

    /// Takes the oldest sealed segments beyond the retention limits out of the log; the caller removes their files.
    fn purge(&mut self, cfg: &ServedBinlogConfig) -> Vec<Segment> {
        let now = SystemTime::now();
        let mut purged = Vec::new();
        while self.segments.len() > 1 {
            let Some(oldest) = self.segments.front() else { break };
            let too_old = match (cfg.retain_time, oldest.sealed_at) {
                (Some(limit), Some(at)) => now.duration_since(at).is_ok_and(|age| age > limit),
                _ => false,
            };
            if self.disk_bytes <= cfg.retain_bytes && !too_old {
                break;
            }
            // The next segment's header names the GTIDs before it: the log's new base.
            if let Some(s) = self.segments.pop_front() {
                self.disk_bytes -= s.data_end;
                self.loaded.retain(|f| *f != s.header.first_index);
                purged.push(s);
            }
        }
        purged
    }

    /// Drops the entries of sealed segments used least recently beyond `keep` (the active segment's stay).
    fn unload_beyond(&mut self, keep: usize) {
        let sealed = self.segments.len().saturating_sub(1);
        while self.loaded.len() > keep {
            let Some(first) = self.loaded.pop_front() else { break };
            if let Some(s) = self.segments.iter_mut().take(sealed).find(|s| s.header.first_index == first) {
                s.entries = None;
            }
        }
    }

    /// The entries of segment `i`, loading a sealed segment's index if needed.
    fn entries(&mut self, i: usize) -> Result<Arc<Vec<Entry>>> {
        if let Some(e) = &self.segments[i].entries {
            let e = Arc::clone(e);
            let first = self.segments[i].header.first_index;
            if let Some(pos) = self.loaded.iter().position(|f| *f == first) {
                self.loaded.remove(pos);
                self.loaded.push_back(first);
            }
            return Ok(e);
        }
        let seg = &self.segments[i];
        let loaded = Arc::new(segment::read_entries(&self.dir, &seg.summary(), seg.entries_at)?);
        let first = seg.header.first_index;
        self.segments[i].entries = Some(Arc::clone(&loaded));
        self.loaded.push_back(first);
        self.unload_beyond(LOADED_SEALED);
        Ok(loaded)
    }

    /// Where `want` is: `Some(index after it)` if held (or it is the base of its domain: the first held index),
    /// `None` if not.
    fn find(&mut self, want: &Gtid) -> Result<Option<u64>> {
        if self.base().contains(want) {
            return Ok(Some(self.first_index()));
        }
        let candidates: Vec<usize> = (0..self.segments.len())
            .rev()
            .filter(|&i| {
                self.segments[i].domains.iter().any(|(first, last)| {
                    first.domain_id == want.domain_id && first.seq_no <= want.seq_no && want.seq_no <= last.seq_no
                })
            })
            .collect();
        for i in candidates {
            let single_domain = self.segments[i].domains.len() == 1;
            let seg = &self.segments[i];
            if single_domain && seg.entries.is_none() && seg.entries_at > 0 {
                let at = segment::find_in_index(&self.dir, seg.header.first_index, seg.count, seg.entries_at, want)?;
                if let Some(k) = at {
                    return Ok(Some(seg.header.first_index + k as u64 + 1));
                }
                continue;
            }
            let entries = self.entries(i)?;
            let at = if single_domain {
                // One domain: seq_no grows along the segment.
                entries.binary_search_by_key(&want.seq_no, |e| e.gtid.seq_no).ok().filter(|&k| entries[k].gtid == *want)
            } else {
                entries.iter().position(|e| e.gtid == *want)
            };
            if let Some(k) = at {
                return Ok(Some(self.segments[i].header.first_index + k as u64 + 1));
            }
        }
        Ok(None)
    }

    /// Index of the first transaction `state` does not contain.
    fn first_not_contained(&mut self, state: &GtidSet) -> Result<u64> {
        for i in 0..self.segments.len() {
            if self.segments[i].domains.iter().all(|(_, last)| state.contains(last)) {
                continue;
            }
            let entries = self.entries(i)?;
            let k = if self.segments[i].domains.len() == 1 {
                // One domain: seq_no grows along the segment, so what `state` contains comes first. A replica's
                // lookup lands in the active segment, ~15,000 entries: a linear scan there took ~0.1 ms under the
                // lock every dump and the writer wait for.
                Some(entries.partition_point(|e| state.contains(&e.gtid))).filter(|&k| k < entries.len())
            } else {
                entries.iter().position(|e| !state.contains(&e.gtid))
            };
            if let Some(k) = k {
                return Ok(self.segments[i].header.first_index + k as u64);
            }
        }
        Ok(self.next_index)
    }

    fn locate(&mut self, state: &GtidSet) -> paxsql_repl_server::Result<Cursor> {
        for want in state {
            if self.find(want).map_err(unavailable)?.is_some() {
                continue;
            }
            let base = self.base().iter().find(|b| b.domain_id == want.domain_id).copied();
            let last_seq = self.last.get(want.domain_id).map(|l| l.seq_no);
            return Err(paxsql_repl_server::missing_gtid_error(*want, base, last_seq));
        }
        let index = self.first_not_contained(state).map_err(unavailable)?;
        Ok(Cursor { index, skip: state.clone() })
    }

    /// What to read for `after`: from the cache, or the segment file range to read outside the lock.
    fn plan_read(&mut self, after: &Cursor, max_bytes: usize) -> paxsql_repl_server::Result<ReadPlan> {
        if after.index < self.first_index() {
            return Err(paxsql_repl_server::Error::SourceUnavailable {
                reason: format!(
                    "the served binlog was purged past this replica's position (index {} < first held {})",
                    after.index,
                    self.first_index()
                ),
            });
        }
        if after.index >= self.cache_first {
            let skip = usize::try_from(after.index - self.cache_first).unwrap_or(usize::MAX);
            return Ok(ReadPlan::Ready(Batch::take(after, self.cache.iter().skip(skip), max_bytes)));
        }
        let i = self.segments.partition_point(|s| s.header.first_index <= after.index).saturating_sub(1);
        let entries = self.entries(i).map_err(unavailable)?;
        let seg = &self.segments[i];
        let from = (after.index - seg.header.first_index) as usize;
        let mut to = from;
        let mut bytes = 0usize;
        while let Some(e) = entries.get(to) {
            if to > from && bytes + e.len as usize > max_bytes {
                break;
            }
            bytes += e.len as usize;
            to += 1;
        }
        Ok(ReadPlan::Disk {
            file: Arc::clone(&seg.file),
            path: seg.path.clone(),
            entries: entries[from..to].to_vec(),
            first_index: after.index,
        })
    }

    /// Fills the cache from the active segment's newest records (at open).
    fn warm_cache(&mut self, limit: usize) -> Result<()> {
        let active = self.active();
        let Some(entries) = active.entries.clone() else { return Ok(()) };
        let mut bytes = 0usize;
        let mut k = entries.len();
        while k > 0 && bytes + entries[k - 1].len as usize <= limit {
            k -= 1;
            bytes += entries[k].len as usize;
        }
        if k == entries.len() {
            return Ok(());
        }
        let trxs = read_range(&active.file, &active.path, &entries[k..])?;
        self.cache_first = active.header.first_index + k as u64;
        self.cache_bytes = trxs.iter().map(|t| t.byte_len()).sum();
        self.cache = trxs.into_iter().map(Arc::new).collect();
        Ok(())
    }
}

enum ReadPlan {
    Ready(Batch),
    Disk { file: Arc<File>, path: PathBuf, entries: Vec<Entry>, first_index: u64 },
}

fn unavailable(e: Error) -> paxsql_repl_server::Error {
    paxsql_repl_server::Error::SourceUnavailable { reason: e.to_string() }
}

/// Reads consecutive records with one `pread` and returns their transactions, sharing the one buffer.
fn read_range(file: &File, path: &Path, entries: &[Entry]) -> Result<Vec<Transaction>> {
    let (Some(first), Some(last)) = (entries.first(), entries.last()) else { return Ok(Vec::new()) };
    let mut buf = vec![0u8; (last.end() - first.offset) as usize];
    segment::read_exact_at(file, path, &mut buf, first.offset)?;
    let buf = Bytes::from(buf);
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let at = (e.offset - first.offset) as usize;
        let corrupt = |what| Error::Corrupt { path: path.to_owned(), what, offset: e.offset };
        let record = decode_record(&buf[at..]).ok_or_else(|| corrupt("record checksum mismatch"))?;
        if record.instance != e.instance || record.payload.len() != e.len as usize {
            return Err(corrupt("record differs from its index entry"));
        }
        let payload = buf.slice_ref(record.payload);
        let t = if record.flags & CONTINUES != 0 {
            Transaction::continuation(e.gtid, payload)?
        } else {
            Transaction::from_contiguous(payload)?
        };
        if t.gtid != e.gtid {
            return Err(corrupt("record's GTID differs from its index entry"));
        }
        out.push(t);
    }
    Ok(out)
}

/// Splits one instance's events into transactions (each starts with a GTID event), sharing `events`: each with
/// its events back to back, as a record holds them.
fn split_transactions(events: Bytes) -> Result<Vec<(Bytes, Transaction)>> {
    let mut starts = Vec::new();
    let mut rest = &events[..];
    let mut at = 0usize;
    while !rest.is_empty() {
        let (event, tail) = paxsql_binlog::split_event(rest).map_err(|e| paxsql_repl_server::Error::CorruptEvent {
            gtid: None,
            index: starts.len(),
            source: e,
        })?;
        let header = EventHeader::decode(event).map_err(|e| paxsql_repl_server::Error::CorruptEvent {
            gtid: None,
            index: starts.len(),
            source: e,
        })?;
        if header.type_code == event_type::GTID || starts.is_empty() {
            starts.push(at);
        }
        at += event.len();
        rest = tail;
    }
    starts.push(events.len());
    let mut out = Vec::with_capacity(starts.len().saturating_sub(1));
    for w in starts.windows(2) {
        let payload = events.slice(w[0]..w[1]);
        out.push((payload.clone(), Transaction::from_contiguous(payload)?));
    }
    Ok(out)
}

fn create_segment(dir: &Path, header: SegmentHeader) -> Result<Segment> {
    let path = segment::segment_path(dir, header.first_index);
    // Written whole under a temporary name first: a crash never leaves a segment without its header.
    let tmp = path.with_extension("seg.tmp");
    let encoded = header.encode();
    {
        let io = |source| Error::Io { path: tmp.clone(), source };
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&tmp).map_err(io)?;
        file.write_all_at(&encoded, 0).map_err(io)?;
        file.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, &path).map_err(|source| Error::Io { path: path.clone(), source })?;
    sync_dir(dir)?;
    let file = open_file(&path)?;
    Ok(Segment {
        last_instance: header.prev_instance,
        header,
        path,
        file: Arc::new(file),
        count: 0,
        data_end: encoded.len() as u64,
        domains: Vec::new(),
        entries: Some(Arc::new(Vec::new())),
        entries_at: 0,
        sealed_at: None,
    })
}

fn open_file(path: &Path) -> Result<File> {
    OpenOptions::new().read(true).write(true).open(path).map_err(|source| Error::Io { path: path.to_owned(), source })
}

/// A sealed segment: its header and index summary; a missing or damaged index is rebuilt by a scan.
fn open_sealed(dir: &Path, first: u64) -> Result<Segment> {
    let path = segment::segment_path(dir, first);
    let file = open_file(&path)?;
    let (header, _) = SegmentHeader::read(&file, &path)?;
    let sealed_at = file.metadata().and_then(|m| m.modified()).ok();
    match segment::read_summary(dir, first) {
        Ok((summary, entries_at)) if summary.first_index == header.first_index => Ok(Segment {
            header,
            path,
            file: Arc::new(file),
            count: summary.count,
            data_end: summary.data_end,
            last_instance: summary.last_instance,
            domains: summary.domains,
            entries: None,
            entries_at,
            sealed_at,
        }),
        other => {
            if let Err(e) = other {
                tracing::warn!(segment = %path.display(), error = %e, "re-indexing a sealed served-binlog segment");
            }
            let mut seg = scan(path, file, header)?;
            let entries = seg.entries.clone().unwrap_or_default();
            segment::write_index(dir, &seg.summary(), &entries)?;
            let (_, entries_at) = segment::read_summary(dir, first)?;
            seg.entries_at = entries_at;
            seg.entries = None;
            seg.sealed_at = sealed_at;
            Ok(seg)
        }
    }
}

/// The active segment: scanned whole, cut back to its last complete instance.
fn open_active(dir: &Path, first: u64) -> Result<Segment> {
    let path = segment::segment_path(dir, first);
    let file = open_file(&path)?;
    let (header, _) = SegmentHeader::read(&file, &path)?;
    let seg = scan(path, file, header)?;
    let len = seg.file.metadata().map_err(|source| Error::Io { path: seg.path.clone(), source })?.len();
    if len > seg.data_end {
        tracing::warn!(
            segment = %seg.path.display(),
            cut = len - seg.data_end,
            "served binlog: cutting a torn tail (it is replayed from the global log)"
        );
        let io = |source| Error::Io { path: seg.path.clone(), source };
        seg.file.set_len(seg.data_end).map_err(io)?;
        seg.file.sync_all().map_err(io)?;
    }
    // An index left by a seal that crashed before the next segment was created is stale now.
    let _ = std::fs::remove_file(segment::index_path(dir, first));
    Ok(seg)
}

/// Reads a segment's records up to the last complete instance.
fn scan(path: PathBuf, file: File, header: SegmentHeader) -> Result<Segment> {
    let header_len = header.encode().len() as u64;
    let len = file.metadata().map_err(|source| Error::Io { path: path.clone(), source })?.len();
    let mut seg = Segment {
        last_instance: header.prev_instance,
        header,
        path,
        file: Arc::new(file),
        count: 0,
        data_end: header_len,
        domains: Vec::new(),
        entries: Some(Arc::new(Vec::new())),
        entries_at: 0,
        sealed_at: None,
    };
    // Record by record, so that memory holds one record at a time whatever the segment holds (a transaction that
    // came in parts makes a segment far larger than `segment_bytes`).
    let mut pos = header_len;
    let mut pending: Vec<Entry> = Vec::new();
    let mut head = [0u8; RECORD_HEADER];
    while pos + RECORD_HEADER as u64 <= len {
        if seg.file.read_exact_at(&mut head, pos).is_err() {
            break;
        }
        let payload_len = u64::from(u32::from_le_bytes([head[0], head[1], head[2], head[3]]));
        if pos + RECORD_HEADER as u64 + payload_len > len {
            break; // cut short by a crash
        }
        let mut buf = vec![0u8; RECORD_HEADER + payload_len as usize];
        segment::read_exact_at(&seg.file, &seg.path, &mut buf, pos)?;
        let Some(record) = decode_record(&buf) else { break };
        let continues = record.flags & CONTINUES != 0;
        let payload = Bytes::copy_from_slice(record.payload);
        let gtid = match pending.last() {
            Some(prev) if continues => Transaction::continuation(prev.gtid, payload).map(|t| t.gtid),
            None if continues => break, // a continuation of nothing: not ours
            _ => Transaction::from_contiguous(payload).map(|t| t.gtid),
        };
        let Ok(gtid) = gtid else { break };
        if record.instance < seg.last_instance && pending.is_empty() {
            break; // instances never shrink (a batched instance appends several times): anything else is not ours
        }
        pending.push(Entry { offset: pos, len: record.payload.len() as u32, instance: record.instance, gtid });
        pos += buf.len() as u64;
        if record.flags & END_OF_APPEND != 0 {
            for e in pending.drain(..) {
                seg.note(e);
            }
        }
    }
    Ok(seg)
}

fn remove_segment_files(dir: &Path, s: &Segment) {
    for path in [s.path.clone(), segment::index_path(dir, s.header.first_index)] {
        if let Err(e) = std::fs::remove_file(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(file = %path.display(), error = %e, "cannot remove a served-binlog file");
            }
        }
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|source| Error::Io { path: dir.to_owned(), source })
}

impl EventSource for ServedBinlog {
    fn locate(&self, state: &GtidSet) -> paxsql_repl_server::Result<Cursor> {
        let mut clock = LookupClock::start();
        let found = {
            let mut inner = self.lock();
            clock.locked();
            inner.locate(state)
        };
        self.note_lookup(clock);
        found
    }

    fn read(&self, after: &Cursor, max_bytes: usize) -> paxsql_repl_server::Result<Batch> {
        let plan = self.lock().plan_read(after, max_bytes)?;
        match plan {
            ReadPlan::Ready(batch) => Ok(batch),
            ReadPlan::Disk { file, path, entries, first_index } => {
                // Outside the lock: appends go on while a catching-up replica reads old segments.
                let trxs = read_range(&file, &path, &entries).map_err(unavailable)?;
                let index = first_index + trxs.len() as u64;
                let transactions = trxs.into_iter().filter(|t| !after.skip.contains(&t.gtid)).map(Arc::new).collect();
                Ok(Batch { transactions, next: Cursor { index, skip: after.skip.clone() } })
            }
        }
    }

    fn wait(&self, after: &Cursor) -> impl std::future::Future<Output = ()> + Send {
        let mut rx = self.next_tx.subscribe();
        let index = after.index;
        async move {
            let _ = rx.wait_for(|&next| next > index).await;
        }
    }
}

/// Length of the whole events at the start of `bytes` (the rest is an event cut short, or nothing); an error names
/// what is malformed.
fn whole_events_len(bytes: &[u8]) -> std::result::Result<usize, &'static str> {
    let mut rest = bytes;
    loop {
        match paxsql_binlog::split_event(rest) {
            Ok((_, tail)) => rest = tail,
            Err(paxsql_binlog::Error::Incomplete { .. }) => return Ok(bytes.len() - rest.len()),
            Err(_) => return Err("an event shorter than its header"),
        }
    }
}
