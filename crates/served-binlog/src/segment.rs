//! The on-disk format: segment files of transaction records and, once a segment is sealed, its index file.
//!
//! A segment (`<first index, 20 digits>.seg`) starts with a header naming the first transaction index it holds, the
//! last Paxos instance and the GTID position before it (so a log whose older segments were purged still knows where
//! it starts), then records back to back:
//!
//! ```text
//! u32 payload length | u32 crc32(instance, flags, payload) | u64 instance | u8 flags | payload (the events)
//! ```
//!
//! The records of one append (one `AppendBinlog` command of a chosen instance; a batched instance has several) are
//! written with one `write`, the last one flagged [`END_OF_APPEND`]; at open, whatever follows the last complete
//! append (a torn write) is cut off and comes back from the Paxos log's replay. A transaction that came in parts is
//! several records written over several instances, all but the first flagged [`CONTINUES`], the last one ending
//! the append.
//! A sealed segment gets an index file (`.idx`): a summary (what `open` reads, a few hundred bytes) and one entry per
//! transaction (read only when a replica resumes or reads inside that segment).
//! All integers are little-endian.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use paxsql_binlog::Gtid;

use crate::error::{Error, Result};

const SEGMENT_MAGIC: &[u8; 8] = b"PXSBLOG1";
const INDEX_MAGIC: &[u8; 8] = b"PXSBIDX1";
pub(crate) const RECORD_HEADER: usize = 4 + 4 + 8 + 1;
/// Flag of the last record of one append.
pub(crate) const END_OF_APPEND: u8 = 1;
/// Flag of a record that continues the transaction of the record before it: a transaction that came through the
/// log in parts is kept as several records (pieces cut at event boundaries), written as its parts arrive; only the
/// last carries [`END_OF_APPEND`], so a transaction cut short by a crash (or dropped) is cut off at open.
pub(crate) const CONTINUES: u8 = 2;
/// Bytes of one index entry: offset, payload length, instance, domain, server id, seq_no.
const ENTRY_BYTES: usize = 8 + 4 + 8 + 4 + 4 + 8;
/// No header lists more domains than this (MariaDB's own limit on domains is far above what a cluster uses, but a
/// corrupt count must not make us allocate gigabytes).
const MAX_DOMAINS: usize = 65_536;

pub(crate) fn segment_path(dir: &Path, first_index: u64) -> PathBuf {
    dir.join(format!("{first_index:020}.seg"))
}

pub(crate) fn index_path(dir: &Path, first_index: u64) -> PathBuf {
    dir.join(format!("{first_index:020}.idx"))
}

/// The first transaction index named by a segment file name, if it is one.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".seg")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok())?
}

/// What precedes a segment's first record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    /// Log-wide index of the segment's first transaction.
    pub first_index: u64,
    /// The last Paxos instance before the segment (its first record's instance is higher).
    pub prev_instance: u64,
    /// The last GTID of each domain before the segment.
    pub prev: Vec<Gtid>,
}

impl SegmentHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + 16 * self.prev.len());
        out.extend_from_slice(SEGMENT_MAGIC);
        out.extend_from_slice(&self.first_index.to_le_bytes());
        out.extend_from_slice(&self.prev_instance.to_le_bytes());
        put_gtids(&mut out, &self.prev);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads the header at the start of `file`; returns it and its length.
    pub fn read(file: &File, path: &Path) -> Result<(SegmentHeader, u64)> {
        let corrupt = |what| Error::Corrupt { path: path.to_owned(), what, offset: 0 };
        let mut fixed = [0u8; 8 + 8 + 8 + 4];
        read_exact_at(file, path, &mut fixed, 0).map_err(|_| corrupt("segment header is cut short"))?;
        if &fixed[..8] != SEGMENT_MAGIC {
            return Err(corrupt("not a paxsql served-binlog segment (bad magic)"));
        }
        let n = u32_at(&fixed, 24) as usize;
        if n > MAX_DOMAINS {
            return Err(corrupt("segment header lists an impossible number of domains"));
        }
        let mut all = vec![0u8; fixed.len() + 16 * n + 4];
        read_exact_at(file, path, &mut all, 0).map_err(|_| corrupt("segment header is cut short"))?;
        let body = all.len() - 4;
        if crc32fast::hash(&all[..body]) != u32_at(&all, body) {
            return Err(corrupt("segment header checksum mismatch"));
        }
        let header = SegmentHeader {
            first_index: u64_at(&all, 8),
            prev_instance: u64_at(&all, 16),
            prev: get_gtids(&all[24..body]),
        };
        Ok((header, all.len() as u64))
    }
}

/// One transaction's place in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Offset of its record header in the segment file.
    pub offset: u64,
    pub len: u32,
    pub instance: u64,
    pub gtid: Gtid,
}

impl Entry {
    /// Offset just past its record.
    pub fn end(&self) -> u64 {
        self.offset + RECORD_HEADER as u64 + u64::from(self.len)
    }
}

/// Appends one record to `out`.
pub(crate) fn encode_record(out: &mut Vec<u8>, instance: u64, flags: u8, payload: &[u8]) {
    out.extend_from_slice(&record_header(instance, flags, &[payload]));
    out.extend_from_slice(payload);
}

/// The header of a record whose payload is `pieces` back to back (written without joining them first).
pub(crate) fn record_header(instance: u64, flags: u8, pieces: &[&[u8]]) -> [u8; RECORD_HEADER] {
    let len = pieces.iter().map(|p| p.len()).sum::<usize>();
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    let mut h = crc32fast::Hasher::new();
    h.update(&instance.to_le_bytes());
    h.update(&[flags]);
    for p in pieces {
        h.update(p);
    }
    let mut out = [0u8; RECORD_HEADER];
    out[0..4].copy_from_slice(&len.to_le_bytes());
    out[4..8].copy_from_slice(&h.finalize().to_le_bytes());
    out[8..16].copy_from_slice(&instance.to_le_bytes());
    out[16] = flags;
    out
}

/// A record decoded from a buffer.
pub(crate) struct Record<'a> {
    pub instance: u64,
    pub flags: u8,
    pub payload: &'a [u8],
}

/// Decodes the record at the start of `buf`: `None` if it is cut short or its checksum fails (a torn write).
pub(crate) fn decode_record(buf: &[u8]) -> Option<Record<'_>> {
    let header = buf.get(..RECORD_HEADER)?;
    let len = u32_at(header, 0) as usize;
    let payload = buf.get(RECORD_HEADER..RECORD_HEADER + len)?;
    let instance = u64_at(header, 8);
    let flags = header[16];
    let mut h = crc32fast::Hasher::new();
    h.update(&header[8..RECORD_HEADER]);
    h.update(payload);
    (h.finalize() == u32_at(header, 4)).then_some(Record { instance, flags, payload })
}

/// What the index file says about its segment without its entries: all that `open` reads of a sealed segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Summary {
    pub first_index: u64,
    pub count: u64,
    /// Length of the segment file's valid part.
    pub data_end: u64,
    pub last_instance: u64,
    /// Per domain: its first and last GTID in the segment.
    pub domains: Vec<(Gtid, Gtid)>,
}

/// Writes a sealed segment's index file (through a temporary name, synced, then renamed: a crash leaves either no
/// index, rebuilt by a scan, or a whole one).
pub(crate) fn write_index(dir: &Path, summary: &Summary, entries: &[Entry]) -> Result<()> {
    let path = index_path(dir, summary.first_index);
    let tmp = path.with_extension("idx.tmp");
    let mut out = Vec::with_capacity(64 + 32 * summary.domains.len() + ENTRY_BYTES * entries.len());
    out.extend_from_slice(INDEX_MAGIC);
    for v in [summary.first_index, summary.count, summary.data_end, summary.last_instance] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&(summary.domains.len() as u32).to_le_bytes());
    for (first, last) in &summary.domains {
        put_gtid(&mut out, first);
        put_gtid(&mut out, last);
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    let start = out.len();
    for e in entries {
        out.extend_from_slice(&e.offset.to_le_bytes());
        out.extend_from_slice(&e.len.to_le_bytes());
        out.extend_from_slice(&e.instance.to_le_bytes());
        put_gtid(&mut out, &e.gtid);
    }
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
    let io = |source| Error::Io { path: tmp.clone(), source };
    let mut f = File::create(&tmp).map_err(io)?;
    f.write_all(&out).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, &path).map_err(|source| Error::Io { path: path.clone(), source })?;
    Ok(())
}

const SUMMARY_FIXED: usize = 8 + 4 * 8 + 4;

/// Reads an index file's summary; returns it and where the entries start.
pub(crate) fn read_summary(dir: &Path, first_index: u64) -> Result<(Summary, u64)> {
    let path = index_path(dir, first_index);
    let f = File::open(&path).map_err(|source| Error::Io { path: path.clone(), source })?;
    let corrupt = |what| Error::Corrupt { path: path.clone(), what, offset: 0 };
    let mut fixed = [0u8; SUMMARY_FIXED];
    read_exact_at(&f, &path, &mut fixed, 0).map_err(|_| corrupt("index summary is cut short"))?;
    if &fixed[..8] != INDEX_MAGIC {
        return Err(corrupt("not a paxsql served-binlog index (bad magic)"));
    }
    let n = u32_at(&fixed, 40) as usize;
    if n > MAX_DOMAINS {
        return Err(corrupt("index summary lists an impossible number of domains"));
    }
    let mut all = vec![0u8; SUMMARY_FIXED + 32 * n + 4];
    read_exact_at(&f, &path, &mut all, 0).map_err(|_| corrupt("index summary is cut short"))?;
    let body = all.len() - 4;
    if crc32fast::hash(&all[..body]) != u32_at(&all, body) {
        return Err(corrupt("index summary checksum mismatch"));
    }
    let gtids = get_gtids(&all[SUMMARY_FIXED - 4..body]);
    let summary = Summary {
        first_index: u64_at(&all, 8),
        count: u64_at(&all, 16),
        data_end: u64_at(&all, 24),
        last_instance: u64_at(&all, 32),
        domains: gtids.chunks_exact(2).map(|p| (p[0], p[1])).collect(),
    };
    if summary.first_index != first_index {
        return Err(corrupt("index names another segment"));
    }
    Ok((summary, all.len() as u64))
}

/// Reads a sealed segment's entries.
pub(crate) fn read_entries(dir: &Path, summary: &Summary, entries_at: u64) -> Result<Vec<Entry>> {
    let path = index_path(dir, summary.first_index);
    let f = File::open(&path).map_err(|source| Error::Io { path: path.clone(), source })?;
    let corrupt = |what| Error::Corrupt { path: path.clone(), what, offset: entries_at };
    let n = usize::try_from(summary.count).map_err(|_| corrupt("impossible entry count"))?;
    let len = n.checked_mul(ENTRY_BYTES).ok_or_else(|| corrupt("impossible entry count"))?;
    let file_len = f.metadata().map_err(|source| Error::Io { path: path.clone(), source })?.len();
    if file_len != entries_at + len as u64 + 4 {
        return Err(corrupt("index file length does not match its entry count"));
    }
    let mut buf = vec![0u8; len + 4];
    read_exact_at(&f, &path, &mut buf, entries_at)?;
    if crc32fast::hash(&buf[..len]) != u32_at(&buf, len) {
        return Err(corrupt("index entries checksum mismatch"));
    }
    Ok(buf[..len].chunks_exact(ENTRY_BYTES).map(decode_entry).collect())
}

/// Where `want` sits in a sealed single-domain segment (whose seq_no grows along it), read from its index file
/// without loading the index: a binary search, one entry read per step. Lets a lookup that lands in a segment no
/// longer in memory (a replica's alignment check, every second, a few segments behind) cost ~15 small reads from the
/// page cache instead of reading, checksumming and parsing the whole index (~1 MiB for a 16 MiB segment) under the
/// served binlog's lock. The checksum is not verified here; a dump that then reads the segment loads the index whole
/// and verifies it.
pub(crate) fn find_in_index(
    dir: &Path,
    first_index: u64,
    count: u64,
    entries_at: u64,
    want: &Gtid,
) -> Result<Option<usize>> {
    let path = index_path(dir, first_index);
    let f = File::open(&path).map_err(|source| Error::Io { path: path.clone(), source })?;
    let n = usize::try_from(count).map_err(|_| Error::Corrupt {
        path: path.clone(),
        what: "impossible entry count",
        offset: entries_at,
    })?;
    let mut buf = [0u8; ENTRY_BYTES];
    let (mut lo, mut hi) = (0usize, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        read_exact_at(&f, &path, &mut buf, entries_at + (mid * ENTRY_BYTES) as u64)?;
        let gtid = decode_entry(&buf).gtid;
        match gtid.seq_no.cmp(&want.seq_no) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Ok((gtid == *want).then_some(mid)),
        }
    }
    Ok(None)
}

/// One index entry (`ENTRY_BYTES`): offset, length, Paxos instance, GTID.
fn decode_entry(c: &[u8]) -> Entry {
    Entry { offset: u64_at(c, 0), len: u32_at(c, 8), instance: u64_at(c, 12), gtid: gtid_at(c, 20) }
}

pub(crate) fn read_exact_at(file: &File, path: &Path, buf: &mut [u8], offset: u64) -> Result<()> {
    file.read_exact_at(buf, offset).map_err(|source| Error::Io { path: path.to_owned(), source })
}

fn put_gtid(out: &mut Vec<u8>, g: &Gtid) {
    out.extend_from_slice(&g.domain_id.to_le_bytes());
    out.extend_from_slice(&g.server_id.to_le_bytes());
    out.extend_from_slice(&g.seq_no.to_le_bytes());
}

fn put_gtids(out: &mut Vec<u8>, gtids: &[Gtid]) {
    out.extend_from_slice(&(gtids.len() as u32).to_le_bytes());
    for g in gtids {
        put_gtid(out, g);
    }
}

/// Reads back-to-back 16-byte GTIDs (the count before them already checked by the caller).
fn get_gtids(buf: &[u8]) -> Vec<Gtid> {
    buf.get(4..).unwrap_or_default().chunks_exact(16).map(|c| gtid_at(c, 0)).collect()
}

fn gtid_at(b: &[u8], at: usize) -> Gtid {
    Gtid::new(u32_at(b, at), u32_at(b, at + 4), u64_at(b, at + 8))
}

// The callers slice their buffers to a length they checked, so these cannot go out of bounds.
fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_a_torn_or_flipped_record_is_refused() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 42, END_OF_APPEND, b"payload");
        let r = decode_record(&buf).expect("whole record");
        assert_eq!((r.instance, r.flags, r.payload), (42, END_OF_APPEND, &b"payload"[..]));
        for cut in 0..buf.len() {
            assert!(decode_record(&buf[..cut]).is_none(), "cut at {cut}");
        }
        for i in 4..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x10;
            assert!(decode_record(&bad).is_none(), "flipped byte {i}");
        }
    }

    #[test]
    fn headers_and_index_files_round_trip_and_refuse_damage() {
        let dir = tempfile::tempdir().unwrap();
        let header =
            SegmentHeader { first_index: 7, prev_instance: 99, prev: vec![Gtid::new(0, 1, 6), Gtid::new(3, 2, 1)] };
        let path = dir.path().join("h.seg");
        std::fs::write(&path, header.encode()).unwrap();
        let (back, len) = SegmentHeader::read(&File::open(&path).unwrap(), &path).unwrap();
        assert_eq!((back, len), (header.clone(), header.encode().len() as u64));
        let mut bad = header.encode();
        bad[12] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        assert!(SegmentHeader::read(&File::open(&path).unwrap(), &path).is_err());

        let entries: Vec<Entry> = (0..5)
            .map(|i| Entry { offset: 40 + i * 100, len: 83, instance: 100 + i, gtid: Gtid::new(0, 1, 7 + i) })
            .collect();
        let summary = Summary {
            first_index: 7,
            count: 5,
            data_end: 540,
            last_instance: 104,
            domains: vec![(Gtid::new(0, 1, 7), Gtid::new(0, 1, 11))],
        };
        write_index(dir.path(), &summary, &entries).unwrap();
        let (s, at) = read_summary(dir.path(), 7).unwrap();
        assert_eq!(s, summary);
        assert_eq!(read_entries(dir.path(), &s, at).unwrap(), entries);
        let idx = index_path(dir.path(), 7);
        let mut raw = std::fs::read(&idx).unwrap();
        let n = raw.len();
        raw[n - 10] ^= 1;
        std::fs::write(&idx, &raw).unwrap();
        assert!(read_entries(dir.path(), &s, at).is_err());
        assert!(read_summary(dir.path(), 8).is_err());
    }

    #[test]
    fn segment_names() {
        assert_eq!(parse_segment_name("00000000000000000042.seg"), Some(42));
        assert_eq!(parse_segment_name("42.seg"), None);
        assert_eq!(parse_segment_name("00000000000000000042.idx"), None);
    }
}
