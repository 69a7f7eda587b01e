//! Typed binlog events: decode from and encode to the exact bytes MariaDB writes.
//!
//! Contract: for any `bytes` and `checksum`, if `BinlogEvent::decode(bytes, checksum)` succeeds then
//! `event.encode(checksum) == bytes`. Fields the codec does not interpret (QUERY status variables, bytes after a
//! GTID's commit_id, row images) are kept verbatim, so the binlog server can re-serve an event to replicas
//! without losing anything (MariaDB's parallel applier needs the GTID's flags2 and commit_id).

use crate::cursor::Cursor;
use crate::error::{Error, Result};
use crate::gtid::Gtid;
use crate::header::{crc32, event_type, verify_checksum, Checksum, EventHeader, CHECKSUM_LEN, EVENT_HEADER_LEN};

/// `ST_SERVER_VER_LEN` in `log_event.h`: the FORMAT_DESCRIPTION's NUL-padded server version field.
pub const SERVER_VERSION_LEN: usize = 50;

/// GTID event `flags2` bits (`Gtid_log_event::FL_*` in MariaDB's `log_event.h`).
pub mod gtid_flags {
    /// The group is a single statement without BEGIN/COMMIT (DDL or non-transactional).
    pub const STANDALONE: u8 = 0x01;
    /// A `commit_id` u64 follows flags2: transactions with the same commit_id group-committed together on the
    /// master and may be applied in parallel (`slave_parallel_mode=conservative`).
    pub const GROUP_COMMIT_ID: u8 = 0x02;
    /// The group only touched transactional (InnoDB) tables and can be rolled back.
    pub const TRANSACTIONAL: u8 = 0x04;
    /// The master allows optimistic parallel apply of this group.
    pub const ALLOW_PARALLEL: u8 = 0x08;
    /// The transaction waited on a row lock on the master (a conflict hint for optimistic parallel apply).
    pub const WAITED: u8 = 0x10;
    pub const DDL: u8 = 0x20;
    /// XA PREPARE: XA data (formatID u32, gtrid_len u8, bqual_len u8, data) follows.
    pub const PREPARED_XA: u8 = 0x40;
    /// XA COMMIT/ROLLBACK of a prepared XA transaction: XA data follows.
    pub const COMPLETED_XA: u8 = 0x80;
}

/// The fixed part of a GTID event body (`GTID_HEADER_LEN` = 19, the post-header length MariaDB announces for
/// type 0xA2); bodies without a commit_id are zero-padded to it.
pub const GTID_HEADER_LEN: usize = 19;

/// A decoded binlog event: common header plus typed body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinlogEvent {
    /// On decode, the header as read. On encode, `type_code` comes from `data` and `event_size` is recomputed;
    /// the other fields are written as they are.
    pub header: EventHeader,
    pub data: EventData,
}

/// Body of a binlog event, by type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventData {
    /// 15: describes the binlog (format version, server version, header lengths, checksum algorithm).
    FormatDescription(FormatDescription),
    /// 4: the next events come from `file_name` at `position`.
    Rotate { position: u64, file_name: Vec<u8> },
    /// 0xA2: opens an event group; its GTID is `domain_id-header.server_id-seq_no`.
    Gtid(GtidEvent),
    /// 0xA3: the binlog's GTID state at this point.
    GtidList(GtidList),
    /// 0xA1: oldest binlog file still needed for XA crash recovery.
    BinlogCheckpoint { file_name: Vec<u8> },
    /// 2: a statement (DDL, BEGIN, or statement-based DML).
    Query(Query),
    /// 16: COMMIT of a transactional group, carrying the internal XA id.
    Xid { xid: u64 },
    /// 0xA0: SQL text of the statement behind the following row events.
    AnnotateRows { sql: Vec<u8> },
    /// 19: maps a table id to a table definition for the row events that follow (body kept opaque).
    TableMap(OpaqueBody),
    /// 23, 24, 25: row images (body kept opaque).
    Rows { kind: RowsKind, body: OpaqueBody },
    /// 27: keep-alive from an idle dump thread; `header.log_pos` is the current end of `file_name`.
    Heartbeat { file_name: Vec<u8> },
    /// 3: the server stopped; the last event of a binlog file.
    Stop,
    /// Any other type code, kept verbatim.
    Unknown { type_code: u8, body: Vec<u8> },
}

/// Which `*_ROWS_EVENT_V1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowsKind {
    Write,
    Update,
    Delete,
}

impl RowsKind {
    pub fn type_code(self) -> u8 {
        match self {
            RowsKind::Write => event_type::WRITE_ROWS_V1,
            RowsKind::Update => event_type::UPDATE_ROWS_V1,
            RowsKind::Delete => event_type::DELETE_ROWS_V1,
        }
    }
}

/// A body this crate does not interpret (TABLE_MAP, row events).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OpaqueBody(pub Vec<u8>);

impl OpaqueBody {
    /// The table id that TABLE_MAP and row events start with: 6 bytes little-endian, as MariaDB writes when
    /// its FORMAT_DESCRIPTION announces post-header length 8 for these types (every version since 5.1).
    /// `None` if the body is shorter than that.
    pub fn table_id(&self) -> Option<u64> {
        let b = self.0.get(..6)?;
        Some(u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], 0, 0]))
    }
}

/// FORMAT_DESCRIPTION_EVENT, binlog format v4 (`Format_description_log_event` in `log_event.h`).
///
/// Unlike other events it always ends with `checksum_alg` and a 4-byte CRC32, whatever the binlog's checksum
/// setting: MariaDB reserves and fills the footer of this event even with `binlog_checksum=NONE`, so a reader
/// can find the algorithm before it knows it (`get_checksum_alg()` in `log_event.cc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatDescription {
    /// 4 for every MariaDB and MySQL since 5.0.
    pub binlog_version: u16,
    /// The server version, NUL padded to 50 bytes, kept raw so re-encoding is exact. See [`Self::server_version`].
    pub server_version_raw: [u8; SERVER_VERSION_LEN],
    pub create_timestamp: u32,
    /// Common header length of the following events; 19 for every v4 binlog.
    pub header_len: u8,
    /// Post-header length per event type, starting with type 1.
    pub post_header_lens: Vec<u8>,
    /// `enum_binlog_checksum_alg` of the following events: 0 = OFF, 1 = CRC32.
    pub checksum_alg: u8,
}

impl FormatDescription {
    /// The server version up to its first NUL, e.g. `10.11.19-MariaDB-0+deb12u1-log`.
    pub fn server_version(&self) -> String {
        let end = self.server_version_raw.iter().position(|&b| b == 0).unwrap_or(SERVER_VERSION_LEN);
        String::from_utf8_lossy(&self.server_version_raw[..end]).into_owned()
    }

    /// The checksum algorithm of the events after this one, if it is one MariaDB knows.
    pub fn checksum(&self) -> Option<Checksum> {
        Checksum::from_alg_byte(self.checksum_alg)
    }

    /// Post-header length announced for `type_code` (the array starts at type 1).
    pub fn post_header_len(&self, type_code: u8) -> Option<u8> {
        self.post_header_lens.get(usize::from(type_code).checked_sub(1)?).copied()
    }
}

/// MariaDB GTID_EVENT (0xA2, `Gtid_log_event`). The server_id part of the GTID is the event header's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GtidEvent {
    pub seq_no: u64,
    pub domain_id: u32,
    /// `FL_*` bits, see [`gtid_flags`].
    pub flags2: u8,
    /// Present exactly when `flags2` has [`gtid_flags::GROUP_COMMIT_ID`].
    pub commit_id: Option<u64>,
    /// Everything after flags2 / commit_id, verbatim: the zero padding up to [`GTID_HEADER_LEN`], XA data,
    /// and the extra flags of newer versions.
    pub rest: Vec<u8>,
}

impl GtidEvent {
    /// A GTID event body as MariaDB 10.11 writes it without XA: 19 bytes, or 21 with a commit_id
    /// (which also sets [`gtid_flags::GROUP_COMMIT_ID`]).
    pub fn new(domain_id: u32, seq_no: u64, flags2: u8, commit_id: Option<u64>) -> GtidEvent {
        let (flags2, rest) = match commit_id {
            Some(_) => (flags2 | gtid_flags::GROUP_COMMIT_ID, Vec::new()),
            None => (flags2 & !gtid_flags::GROUP_COMMIT_ID, vec![0; GTID_HEADER_LEN - 13]),
        };
        GtidEvent { seq_no, domain_id, flags2, commit_id, rest }
    }

    /// The GTID, given the event header's server_id.
    pub fn gtid(&self, server_id: u32) -> Gtid {
        Gtid { domain_id: self.domain_id, server_id, seq_no: self.seq_no }
    }
}

/// MariaDB GTID_LIST_EVENT (0xA3, `Gtid_list_log_event`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GtidList {
    /// The top 4 bits of the count word (`FLAG_UNTIL_REACHED` = 1, `FLAG_IGN_GTIDS` = 2, shifted right by 28).
    pub flags: u8,
    /// The binlog state: one GTID per (domain, server_id) pair, not a position (see
    /// [`crate::GtidSet::from_state`]).
    pub gtids: Vec<Gtid>,
    /// Bytes after the last GTID, verbatim. MariaDB pads an empty list with 2 zero bytes (seen in
    /// `repl-handshake-and-stream.pcap`: an empty GTID_LIST is 29 bytes, not 27); older replicas expected a
    /// non-empty body.
    pub padding: Vec<u8>,
}

impl GtidList {
    /// A list as MariaDB 10.11 writes it: `gtids`, no flags, the 2-byte padding when empty.
    pub fn new(gtids: Vec<Gtid>) -> GtidList {
        let padding = if gtids.is_empty() { vec![0; 2] } else { Vec::new() };
        GtidList { flags: 0, gtids, padding }
    }
}

/// QUERY_EVENT (`Query_log_event`). Status variables (sql_mode, charset, ...) are kept opaque.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Query {
    pub thread_id: u32,
    pub exec_time: u32,
    pub error_code: u16,
    /// Raw status-variable block (`Q_*` codes); at most 65535 bytes.
    pub status_vars: Vec<u8>,
    /// Default database; at most 255 bytes.
    pub db: Vec<u8>,
    /// Statement text, in the character set named by the status variables.
    pub query: Vec<u8>,
}

/// Max count of a GTID_LIST (the low 28 bits of the count word).
const GTID_LIST_COUNT_MASK: u32 = 0x0fff_ffff;
/// FORMAT_DESCRIPTION fixed part: binlog_version u16, server version, create_timestamp u32, header_len u8.
const FDE_FIXED_LEN: usize = 2 + SERVER_VERSION_LEN + 4 + 1;
/// QUERY post-header: thread_id u32, exec_time u32, db_len u8, error_code u16, status_vars_len u16.
const QUERY_POST_HEADER_LEN: usize = 13;

impl EventData {
    /// The type code this body is written with.
    pub fn type_code(&self) -> u8 {
        match self {
            EventData::FormatDescription(_) => event_type::FORMAT_DESCRIPTION,
            EventData::Rotate { .. } => event_type::ROTATE,
            EventData::Gtid(_) => event_type::GTID,
            EventData::GtidList(_) => event_type::GTID_LIST,
            EventData::BinlogCheckpoint { .. } => event_type::BINLOG_CHECKPOINT,
            EventData::Query(_) => event_type::QUERY,
            EventData::Xid { .. } => event_type::XID,
            EventData::AnnotateRows { .. } => event_type::ANNOTATE_ROWS,
            EventData::TableMap(_) => event_type::TABLE_MAP,
            EventData::Rows { kind, .. } => kind.type_code(),
            EventData::Heartbeat { .. } => event_type::HEARTBEAT,
            EventData::Stop => event_type::STOP,
            EventData::Unknown { type_code, .. } => *type_code,
        }
    }

    /// Decodes a body (the bytes between header and checksum footer). For FORMAT_DESCRIPTION the body ends with
    /// the checksum_alg byte.
    pub fn decode(type_code: u8, body: &[u8]) -> Result<EventData> {
        let mut c = Cursor::new(body);
        let data = match type_code {
            event_type::FORMAT_DESCRIPTION => {
                let binlog_version = c.u16("binlog_version")?;
                let server_version_raw = c.array("server_version")?;
                let create_timestamp = c.u32("create_timestamp")?;
                let header_len = c.u8("header_len")?;
                let Some((&checksum_alg, post_header_lens)) = c.rest().split_last() else {
                    return Err(Error::Truncated { what: "checksum_alg", offset: c.offset() });
                };
                EventData::FormatDescription(FormatDescription {
                    binlog_version,
                    server_version_raw,
                    create_timestamp,
                    header_len,
                    post_header_lens: post_header_lens.to_vec(),
                    checksum_alg,
                })
            }
            event_type::ROTATE => {
                let position = c.u64("rotate position")?;
                EventData::Rotate { position, file_name: c.rest().to_vec() }
            }
            event_type::GTID => {
                let seq_no = c.u64("gtid seq_no")?;
                let domain_id = c.u32("gtid domain_id")?;
                let flags2 = c.u8("gtid flags2")?;
                let commit_id = match flags2 & gtid_flags::GROUP_COMMIT_ID {
                    0 => None,
                    _ => Some(c.u64("gtid commit_id")?),
                };
                EventData::Gtid(GtidEvent { seq_no, domain_id, flags2, commit_id, rest: c.rest().to_vec() })
            }
            event_type::GTID_LIST => {
                let word = c.u32("gtid_list count")?;
                let count = (word & GTID_LIST_COUNT_MASK) as usize;
                // Check the claimed count against the bytes present before allocating for it.
                if count.checked_mul(16).is_none_or(|need| need > c.remaining()) {
                    return Err(Error::Truncated { what: "gtid_list entries", offset: c.offset() });
                }
                let mut gtids = Vec::with_capacity(count);
                for _ in 0..count {
                    let domain_id = c.u32("gtid_list domain_id")?;
                    let server_id = c.u32("gtid_list server_id")?;
                    let seq_no = c.u64("gtid_list seq_no")?;
                    gtids.push(Gtid { domain_id, server_id, seq_no });
                }
                let padding = c.rest().to_vec();
                EventData::GtidList(GtidList { flags: (word >> 28) as u8, gtids, padding })
            }
            event_type::BINLOG_CHECKPOINT => {
                let len = c.u32("binlog_checkpoint name length")? as usize;
                if len != c.remaining() {
                    return Err(Error::Malformed {
                        what: "binlog_checkpoint name length does not match body length",
                        offset: EVENT_HEADER_LEN,
                    });
                }
                EventData::BinlogCheckpoint { file_name: c.rest().to_vec() }
            }
            event_type::QUERY => {
                let thread_id = c.u32("query thread_id")?;
                let exec_time = c.u32("query exec_time")?;
                let db_len = c.u8("query db_len")? as usize;
                let error_code = c.u16("query error_code")?;
                let status_len = c.u16("query status_vars_len")? as usize;
                let status_vars = c.bytes(status_len, "query status_vars")?.to_vec();
                let db = c.bytes(db_len, "query db")?.to_vec();
                let nul_at = c.offset();
                if c.u8("query db terminator")? != 0 {
                    return Err(Error::Malformed { what: "query db not NUL terminated", offset: nul_at });
                }
                let query = c.rest().to_vec();
                EventData::Query(Query { thread_id, exec_time, error_code, status_vars, db, query })
            }
            event_type::XID => {
                let xid = c.u64("xid")?;
                c.finish("bytes after xid")?;
                EventData::Xid { xid }
            }
            event_type::ANNOTATE_ROWS => EventData::AnnotateRows { sql: c.rest().to_vec() },
            event_type::TABLE_MAP => EventData::TableMap(OpaqueBody(c.rest().to_vec())),
            event_type::WRITE_ROWS_V1 => EventData::Rows { kind: RowsKind::Write, body: OpaqueBody(c.rest().to_vec()) },
            event_type::UPDATE_ROWS_V1 => {
                EventData::Rows { kind: RowsKind::Update, body: OpaqueBody(c.rest().to_vec()) }
            }
            event_type::DELETE_ROWS_V1 => {
                EventData::Rows { kind: RowsKind::Delete, body: OpaqueBody(c.rest().to_vec()) }
            }
            event_type::HEARTBEAT => EventData::Heartbeat { file_name: c.rest().to_vec() },
            event_type::STOP => {
                c.finish("bytes in a STOP event body")?;
                EventData::Stop
            }
            _ => EventData::Unknown { type_code, body: c.rest().to_vec() },
        };
        Ok(data)
    }

    /// Length of the encoded body (without header and footer).
    pub fn body_len(&self) -> usize {
        match self {
            EventData::FormatDescription(f) => FDE_FIXED_LEN + f.post_header_lens.len() + 1,
            EventData::Rotate { file_name, .. } => 8 + file_name.len(),
            EventData::Gtid(g) => 13 + if g.commit_id.is_some() { 8 } else { 0 } + g.rest.len(),
            EventData::GtidList(l) => 4 + 16 * l.gtids.len() + l.padding.len(),
            EventData::BinlogCheckpoint { file_name } => 4 + file_name.len(),
            EventData::Query(q) => QUERY_POST_HEADER_LEN + q.status_vars.len() + q.db.len() + 1 + q.query.len(),
            EventData::Xid { .. } => 8,
            EventData::AnnotateRows { sql } => sql.len(),
            EventData::TableMap(b) | EventData::Rows { body: b, .. } => b.0.len(),
            EventData::Heartbeat { file_name } => file_name.len(),
            EventData::Stop => 0,
            EventData::Unknown { body, .. } => body.len(),
        }
    }

    /// Appends the body. Panics if a length field would overflow its wire width (a QUERY db over 255 bytes,
    /// status vars over 65535, more than 2^28 GTIDs in a list, or inconsistent GTID flags): such values
    /// cannot come from [`EventData::decode`] and are bugs in the caller.
    pub fn encode_body(&self, out: &mut Vec<u8>) {
        match self {
            EventData::FormatDescription(f) => {
                out.extend_from_slice(&f.binlog_version.to_le_bytes());
                out.extend_from_slice(&f.server_version_raw);
                out.extend_from_slice(&f.create_timestamp.to_le_bytes());
                out.push(f.header_len);
                out.extend_from_slice(&f.post_header_lens);
                out.push(f.checksum_alg);
            }
            EventData::Rotate { position, file_name } => {
                out.extend_from_slice(&position.to_le_bytes());
                out.extend_from_slice(file_name);
            }
            EventData::Gtid(g) => {
                assert_eq!(
                    g.commit_id.is_some(),
                    g.flags2 & gtid_flags::GROUP_COMMIT_ID != 0,
                    "GTID event commit_id must be present exactly when flags2 has FL_GROUP_COMMIT_ID: {g:?}"
                );
                out.extend_from_slice(&g.seq_no.to_le_bytes());
                out.extend_from_slice(&g.domain_id.to_le_bytes());
                out.push(g.flags2);
                if let Some(commit_id) = g.commit_id {
                    out.extend_from_slice(&commit_id.to_le_bytes());
                }
                out.extend_from_slice(&g.rest);
            }
            EventData::GtidList(l) => {
                let count = u32::try_from(l.gtids.len()).ok().filter(|&n| n <= GTID_LIST_COUNT_MASK);
                let count = count.unwrap_or_else(|| panic!("GTID_LIST of {} GTIDs exceeds 2^28-1", l.gtids.len()));
                assert!(l.flags < 16, "GTID_LIST flags {:#x} do not fit in 4 bits", l.flags);
                out.extend_from_slice(&(count | u32::from(l.flags) << 28).to_le_bytes());
                for g in &l.gtids {
                    out.extend_from_slice(&g.domain_id.to_le_bytes());
                    out.extend_from_slice(&g.server_id.to_le_bytes());
                    out.extend_from_slice(&g.seq_no.to_le_bytes());
                }
                out.extend_from_slice(&l.padding);
            }
            EventData::BinlogCheckpoint { file_name } => {
                let len = u32::try_from(file_name.len()).expect("binlog checkpoint file name over 4 GiB");
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(file_name);
            }
            EventData::Query(q) => {
                let db_len =
                    u8::try_from(q.db.len()).unwrap_or_else(|_| panic!("QUERY db of {} bytes exceeds 255", q.db.len()));
                let status_len = u16::try_from(q.status_vars.len())
                    .unwrap_or_else(|_| panic!("QUERY status vars of {} bytes exceed 65535", q.status_vars.len()));
                out.extend_from_slice(&q.thread_id.to_le_bytes());
                out.extend_from_slice(&q.exec_time.to_le_bytes());
                out.push(db_len);
                out.extend_from_slice(&q.error_code.to_le_bytes());
                out.extend_from_slice(&status_len.to_le_bytes());
                out.extend_from_slice(&q.status_vars);
                out.extend_from_slice(&q.db);
                out.push(0);
                out.extend_from_slice(&q.query);
            }
            EventData::Xid { xid } => out.extend_from_slice(&xid.to_le_bytes()),
            EventData::AnnotateRows { sql } => out.extend_from_slice(sql),
            EventData::TableMap(b) | EventData::Rows { body: b, .. } => out.extend_from_slice(&b.0),
            EventData::Heartbeat { file_name } => out.extend_from_slice(file_name),
            EventData::Stop => {}
            EventData::Unknown { body, .. } => out.extend_from_slice(body),
        }
    }
}

impl BinlogEvent {
    /// An event with the given header fields. `type_code` and `event_size` are derived (the latter for the
    /// given `checksum` setting), so the result equals what decoding its encoding gives back.
    pub fn new(
        timestamp: u32,
        server_id: u32,
        log_pos: u32,
        flags: u16,
        data: EventData,
        checksum: Checksum,
    ) -> BinlogEvent {
        let header = EventHeader { timestamp, type_code: data.type_code(), server_id, event_size: 0, log_pos, flags };
        let mut event = BinlogEvent { header, data };
        let len = event.encoded_len(checksum);
        event.header.event_size = u32::try_from(len).unwrap_or_else(|_| panic!("binlog event of {len} bytes"));
        event
    }

    /// Decodes exactly one complete event. `checksum` says whether events carry the CRC32 footer; it is
    /// checked before the body is parsed. A FORMAT_DESCRIPTION always carries (and is checked against) its
    /// CRC32 whatever `checksum` says, see [`FormatDescription`].
    ///
    /// `event` must be exactly `event_size` bytes: fewer is [`Error::Incomplete`], more is
    /// [`Error::Malformed`] (use [`crate::split_event`] to frame a stream of events).
    pub fn decode(event: &[u8], checksum: Checksum) -> Result<BinlogEvent> {
        let header = EventHeader::decode(event)?;
        let size = header.event_size as usize;
        if size < EVENT_HEADER_LEN {
            return Err(Error::Malformed { what: "event_size smaller than the header", offset: 9 });
        }
        if event.len() < size {
            return Err(Error::Incomplete { have: event.len(), need: size });
        }
        if event.len() > size {
            return Err(Error::Malformed { what: "bytes after event_size", offset: size });
        }
        let footer = Self::footer_for(header.type_code, checksum);
        let covered = match footer {
            Checksum::Off => event,
            Checksum::Crc32 => {
                if event.len() < EVENT_HEADER_LEN + CHECKSUM_LEN {
                    return Err(Error::Truncated { what: "checksum footer", offset: EVENT_HEADER_LEN });
                }
                verify_checksum(event)?
            }
        };
        let data = EventData::decode(header.type_code, &covered[EVENT_HEADER_LEN..])?;
        Ok(BinlogEvent { header, data })
    }

    /// Encodes the event, with a CRC32 footer if `checksum` is [`Checksum::Crc32`] (a FORMAT_DESCRIPTION gets
    /// one always).
    pub fn encode(&self, checksum: Checksum) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len(checksum));
        self.encode_into(checksum, &mut out);
        out
    }

    /// Like [`BinlogEvent::encode`], appending to `out`.
    pub fn encode_into(&self, checksum: Checksum, out: &mut Vec<u8>) {
        let start = out.len();
        let len = self.encoded_len(checksum);
        let event_size = u32::try_from(len).unwrap_or_else(|_| panic!("binlog event of {len} bytes exceeds 4 GiB"));
        let header = EventHeader { type_code: self.data.type_code(), event_size, ..self.header };
        header.encode(out);
        self.data.encode_body(out);
        if Self::footer_for(header.type_code, checksum) == Checksum::Crc32 {
            let crc = crc32(&out[start..]);
            out.extend_from_slice(&crc.to_le_bytes());
        }
        assert_eq!(out.len() - start, len, "encoded length of {:?} disagrees with body_len", header);
    }

    /// Size of the encoded event, header and footer included.
    pub fn encoded_len(&self, checksum: Checksum) -> usize {
        EVENT_HEADER_LEN + self.data.body_len() + Self::footer_for(self.data.type_code(), checksum).footer_len()
    }

    /// The GTID this event opens, for a GTID event.
    pub fn gtid(&self) -> Option<Gtid> {
        match &self.data {
            EventData::Gtid(g) => Some(g.gtid(self.header.server_id)),
            _ => None,
        }
    }

    fn footer_for(type_code: u8, checksum: Checksum) -> Checksum {
        if type_code == event_type::FORMAT_DESCRIPTION {
            Checksum::Crc32
        } else {
            checksum
        }
    }
}

/// Decodes a stream of events (what a replication client reads after COM_BINLOG_DUMP, or a binlog file), and
/// follows the checksum algorithm announced by each FORMAT_DESCRIPTION, as MariaDB's replica I/O thread does.
#[derive(Debug, Clone)]
pub struct EventDecoder {
    checksum: Checksum,
}

impl EventDecoder {
    /// `checksum` applies until the first FORMAT_DESCRIPTION: for a dump, the value the client negotiated with
    /// `SET @master_binlog_checksum` (the master already checksums the fake ROTATE that precedes the
    /// FORMAT_DESCRIPTION).
    pub fn new(checksum: Checksum) -> EventDecoder {
        EventDecoder { checksum }
    }

    /// The checksum setting in force for the next event.
    pub fn checksum(&self) -> Checksum {
        self.checksum
    }

    /// Decodes one complete event; a FORMAT_DESCRIPTION switches the checksum setting for the events after it.
    /// Rejects a FORMAT_DESCRIPTION with an unknown checksum algorithm or a common header length other than 19,
    /// which this codec (and every MariaDB binlog v4) assumes.
    pub fn decode(&mut self, event: &[u8]) -> Result<BinlogEvent> {
        let decoded = BinlogEvent::decode(event, self.checksum)?;
        if let EventData::FormatDescription(fd) = &decoded.data {
            if usize::from(fd.header_len) != EVENT_HEADER_LEN {
                return Err(Error::Malformed {
                    what: "FORMAT_DESCRIPTION common header length is not 19",
                    offset: EVENT_HEADER_LEN + FDE_FIXED_LEN - 1,
                });
            }
            let alg_offset = event.len().saturating_sub(CHECKSUM_LEN + 1);
            let Some(checksum) = fd.checksum() else {
                return Err(Error::Malformed { what: "unknown binlog checksum algorithm", offset: alg_offset });
            };
            self.checksum = checksum;
        }
        Ok(decoded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::event_flags;

    fn round_trip(event: &BinlogEvent, checksum: Checksum) -> Vec<u8> {
        let bytes = event.encode(checksum);
        assert_eq!(bytes.len(), event.encoded_len(checksum));
        let decoded = BinlogEvent::decode(&bytes, checksum).unwrap_or_else(|e| panic!("{event:?}: {e}"));
        assert_eq!(&decoded, event);
        assert_eq!(decoded.encode(checksum), bytes);
        bytes
    }

    fn every_kind() -> Vec<EventData> {
        vec![
            EventData::FormatDescription(FormatDescription {
                binlog_version: 4,
                server_version_raw: [b'9'; SERVER_VERSION_LEN],
                create_timestamp: 7,
                header_len: 19,
                post_header_lens: vec![1, 2, 3],
                checksum_alg: 1,
            }),
            EventData::Rotate { position: 4, file_name: b"n1-bin.000002".to_vec() },
            EventData::Gtid(GtidEvent::new(0, 42, gtid_flags::TRANSACTIONAL, None)),
            EventData::Gtid(GtidEvent::new(3, 43, gtid_flags::ALLOW_PARALLEL, Some(17))),
            EventData::GtidList(GtidList::new(vec![Gtid::new(0, 1, 5), Gtid::new(0, 2, 9)])),
            EventData::GtidList(GtidList::new(vec![])),
            EventData::BinlogCheckpoint { file_name: b"n1-bin.000001".to_vec() },
            EventData::Query(Query {
                thread_id: 9,
                exec_time: 1,
                error_code: 0,
                status_vars: vec![0, 0, 0, 0, 0],
                db: b"t".to_vec(),
                query: b"BEGIN".to_vec(),
            }),
            EventData::Xid { xid: 29 },
            EventData::AnnotateRows { sql: b"INSERT INTO t.a VALUES (1)".to_vec() },
            EventData::TableMap(OpaqueBody(vec![19, 0, 0, 0, 0, 0, 1, 0, 1, b't'])),
            EventData::Rows { kind: RowsKind::Write, body: OpaqueBody(vec![19, 0, 0, 0, 0, 0, 1, 0]) },
            EventData::Rows { kind: RowsKind::Update, body: OpaqueBody(vec![19, 0, 0, 0, 0, 0]) },
            EventData::Rows { kind: RowsKind::Delete, body: OpaqueBody(vec![]) },
            EventData::Heartbeat { file_name: b"n1-bin.000001".to_vec() },
            EventData::Stop,
            EventData::Unknown { type_code: 0xA4, body: vec![1, 2, 3] },
            EventData::Unknown { type_code: 30, body: vec![] },
        ]
    }

    #[test]
    fn every_event_type_round_trips_with_and_without_checksum() {
        for data in every_kind() {
            for checksum in [Checksum::Off, Checksum::Crc32] {
                let event = BinlogEvent::new(1_796_221_866, 1, 367, 0, data.clone(), checksum);
                round_trip(&event, checksum);
            }
        }
    }

    /// A GTID event with a commit_id as MariaDB writes it after a group commit (no capture has one: the lab
    /// master committed serially), annotated field by field.
    #[test]
    fn gtid_with_commit_id_keeps_it() {
        #[rustfmt::skip]
        let mut bytes = vec![
            0xaa, 0x2b, 0x10, 0x6b,                         // timestamp
            0xa2,                                           // type GTID
            0x01, 0x00, 0x00, 0x00,                         // server_id 1
            44, 0x00, 0x00, 0x00,                           // event_size 19 + 21 + 4
            0x43, 0x03, 0x00, 0x00,                         // log_pos 835
            0x08, 0x00,                                     // flags SUPPRESS_USE
            0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // seq_no 7
            0x02, 0x00, 0x00, 0x00,                         // domain_id 2
            0x0e,                                           // flags2 GROUP_COMMIT_ID|TRANSACTIONAL|ALLOW_PARALLEL
            0x63, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // commit_id 99
        ];
        let crc = crate::header::crc32(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        let event = BinlogEvent::decode(&bytes, Checksum::Crc32).unwrap();
        assert_eq!(event.gtid(), Some(Gtid::new(2, 1, 7)));
        let EventData::Gtid(g) = &event.data else { panic!("{event:?}") };
        assert_eq!((g.commit_id, g.flags2, g.rest.len()), (Some(99), 0x0e, 0));
        assert_eq!(event.encode(Checksum::Crc32), bytes);
        assert_eq!(BinlogEvent::new(0x6b10_2baa, 1, 835, 8, event.data.clone(), Checksum::Crc32), event);
    }

    #[test]
    fn gtid_xa_data_is_kept_verbatim() {
        let mut g = GtidEvent::new(0, 5, gtid_flags::PREPARED_XA, None);
        // formatID 1, gtrid_len 2, bqual_len 1, data "abc"
        g.rest = vec![1, 0, 0, 0, 2, 1, b'a', b'b', b'c'];
        let event = BinlogEvent::new(1, 1, 100, 0, EventData::Gtid(g), Checksum::Crc32);
        round_trip(&event, Checksum::Crc32);
    }

    #[test]
    #[should_panic(expected = "FL_GROUP_COMMIT_ID")]
    fn inconsistent_gtid_flags_are_a_caller_bug() {
        let mut g = GtidEvent::new(0, 5, 0, Some(1));
        g.commit_id = None;
        BinlogEvent::new(1, 1, 100, 0, EventData::Gtid(g), Checksum::Crc32).encode(Checksum::Crc32);
    }

    fn xid_event() -> Vec<u8> {
        BinlogEvent::new(1, 1, 31, 0, EventData::Xid { xid: 29 }, Checksum::Crc32).encode(Checksum::Crc32)
    }

    #[test]
    fn framing_errors_are_distinct() {
        let bytes = xid_event();
        assert_eq!(BinlogEvent::decode(&bytes[..10], Checksum::Crc32), Err(Error::Incomplete { have: 10, need: 19 }));
        assert_eq!(BinlogEvent::decode(&bytes[..30], Checksum::Crc32), Err(Error::Incomplete { have: 30, need: 31 }));
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            BinlogEvent::decode(&longer, Checksum::Crc32),
            Err(Error::Malformed { what: "bytes after event_size", offset: 31 })
        );
        let mut tiny = bytes.clone();
        tiny[9] = 18;
        assert!(matches!(BinlogEvent::decode(&tiny, Checksum::Crc32), Err(Error::Malformed { offset: 9, .. })));
    }

    #[test]
    fn checksum_mismatch_reports_both_values() {
        let mut bytes = xid_event();
        let stored = u32::from_le_bytes(bytes[27..31].try_into().unwrap());
        bytes[19] ^= 0xff;
        let actual = crate::header::crc32(&bytes[..27]);
        assert_eq!(
            BinlogEvent::decode(&bytes, Checksum::Crc32),
            Err(Error::ChecksumMismatch { expected: stored, actual })
        );
    }

    /// Re-frames `body` as a complete event of `type_code` with a valid checksum.
    fn event_with_body(type_code: u8, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let size = (EVENT_HEADER_LEN + body.len() + CHECKSUM_LEN) as u32;
        EventHeader { timestamp: 0, type_code, server_id: 1, event_size: size, log_pos: 0, flags: 0 }.encode(&mut out);
        out.extend_from_slice(body);
        let crc = crate::header::crc32(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    #[test]
    fn short_bodies_are_truncated_with_the_field_and_offset() {
        let cases: [(u8, &[u8], &str, usize); 6] = [
            (event_type::XID, &[1, 2, 3], "xid", 19),
            (event_type::ROTATE, &[4, 0, 0], "rotate position", 19),
            (event_type::GTID, &[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 9], "gtid commit_id", 32),
            (event_type::QUERY, &[0; 12], "query status_vars_len", 30),
            (event_type::QUERY, &[0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, b'a'], "query db", 32),
            (event_type::FORMAT_DESCRIPTION, &[4, 0, b'1'], "server_version", 21),
        ];
        for (type_code, body, what, offset) in cases {
            let bytes = event_with_body(type_code, body);
            assert_eq!(BinlogEvent::decode(&bytes, Checksum::Crc32), Err(Error::Truncated { what, offset }), "{what}");
        }
        // A GTID_LIST claiming more entries than it holds is rejected before allocating for them.
        let bytes = event_with_body(event_type::GTID_LIST, &[0xff, 0xff, 0xff, 0x0f]);
        assert!(matches!(BinlogEvent::decode(&bytes, Checksum::Crc32), Err(Error::Truncated { .. })));
    }

    #[test]
    fn exact_length_bodies_reject_extra_bytes() {
        let xid = event_with_body(event_type::XID, &[0; 9]);
        assert_eq!(
            BinlogEvent::decode(&xid, Checksum::Crc32),
            Err(Error::Malformed { what: "bytes after xid", offset: 27 })
        );
        let stop = event_with_body(event_type::STOP, &[0]);
        assert!(matches!(BinlogEvent::decode(&stop, Checksum::Crc32), Err(Error::Malformed { offset: 19, .. })));
        let checkpoint = event_with_body(event_type::BINLOG_CHECKPOINT, &[3, 0, 0, 0, b'a', b'b']);
        assert!(matches!(BinlogEvent::decode(&checkpoint, Checksum::Crc32), Err(Error::Malformed { .. })));
        let query = event_with_body(event_type::QUERY, &[0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, b't', b'x']);
        assert_eq!(
            BinlogEvent::decode(&query, Checksum::Crc32),
            Err(Error::Malformed { what: "query db not NUL terminated", offset: 33 })
        );
    }

    #[test]
    fn format_description_always_carries_its_checksum() {
        let fd = crate::synth::format_description(1, 0, "10.11.19-MariaDB", Checksum::Off);
        let bytes = fd.encode(Checksum::Off);
        // Decodes the same whatever the caller's setting, and the footer is checked either way.
        for checksum in [Checksum::Off, Checksum::Crc32] {
            assert_eq!(BinlogEvent::decode(&bytes, checksum).unwrap(), fd);
        }
        let mut bad = bytes.clone();
        bad[30] ^= 1;
        assert!(matches!(BinlogEvent::decode(&bad, Checksum::Off), Err(Error::ChecksumMismatch { .. })));
    }

    #[test]
    fn decoder_follows_the_format_description() {
        let mut decoder = EventDecoder::new(Checksum::Crc32);
        let fd_off = crate::synth::format_description(1, 0, "10.11.19-MariaDB", Checksum::Off);
        decoder.decode(&fd_off.encode(Checksum::Crc32)).unwrap();
        assert_eq!(decoder.checksum(), Checksum::Off);
        let xid = BinlogEvent::new(1, 1, 31, 0, EventData::Xid { xid: 3 }, Checksum::Off);
        assert_eq!(decoder.decode(&xid.encode(Checksum::Off)).unwrap(), xid);

        let mut fd = crate::synth::format_description(1, 0, "10.11.19-MariaDB", Checksum::Crc32);
        let EventData::FormatDescription(inner) = &mut fd.data else { unreachable!() };
        inner.checksum_alg = 2;
        assert!(matches!(decoder.decode(&fd.encode(Checksum::Crc32)), Err(Error::Malformed { .. })));
        let EventData::FormatDescription(inner) = &mut fd.data else { unreachable!() };
        inner.checksum_alg = 1;
        inner.header_len = 23;
        assert!(matches!(decoder.decode(&fd.encode(Checksum::Crc32)), Err(Error::Malformed { offset: 75, .. })));
        assert_eq!(decoder.checksum(), Checksum::Off, "a rejected FORMAT_DESCRIPTION changes nothing");
    }

    #[test]
    fn patch_log_pos_rewrites_position_and_checksum() {
        let event = BinlogEvent::new(1, 1, 31, 0, EventData::Xid { xid: 29 }, Checksum::Crc32);
        let mut bytes = event.encode(Checksum::Crc32);
        crate::header::patch_log_pos(&mut bytes, 4000, Checksum::Crc32).unwrap();
        let moved = BinlogEvent::decode(&bytes, Checksum::Crc32).unwrap();
        assert_eq!((moved.header.log_pos, &moved.data), (4000, &event.data));
        let mut short = bytes[..20].to_vec();
        assert!(crate::header::patch_log_pos(&mut short, 1, Checksum::Crc32).is_err());
    }

    #[test]
    fn header_flags_and_accessors() {
        let rotate = crate::synth::fake_rotate(1, b"f", 4, Checksum::Crc32);
        assert!(rotate.header.is_artificial());
        assert_eq!(rotate.header.flags, event_flags::ARTIFICIAL);
        assert_eq!(rotate.gtid(), None);
        assert_eq!(OpaqueBody(vec![1, 2, 3]).table_id(), None);
        assert_eq!(OpaqueBody(vec![0x13, 0, 0, 0, 0, 1, 0xff]).table_id(), Some(0x0100_0000_0013));
    }
}
