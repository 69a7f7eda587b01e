//! MariaDB binlog event codec for paxsql: pure functions over byte slices, no IO.
//!
//! Place in the system (docs/ARCHITECTURE.md §3, §4): on the master node the replication client reads events from the
//! local mariadbd's dump stream and uses this crate to find event-group boundaries and GTIDs; the Paxos log
//! stores the events as opaque bytes; on replica nodes the binlog server re-serves them to its local mariadbd,
//! opening each dump with synthetic events built by [`synth`] and rewriting positions with [`patch_log_pos`].
//! Because events are re-served, every decoded event re-encodes to exactly its original bytes: MariaDB's
//! parallel applier depends on the GTID event's flags2 and commit_id arriving intact.
//!
//! Run loop: frame with [`split_event`] (or take one event per replication packet), decode with an
//! [`EventDecoder`] that follows the checksum algorithm each FORMAT_DESCRIPTION announces, encode with
//! [`BinlogEvent::encode`].
//!
//! ```
//! use paxsql_binlog::{synth, Checksum, EventData, EventDecoder, GtidSet};
//!
//! let [rotate, fd, list, checkpoint] =
//!     synth::dump_opening(1, 1_796_221_858, "10.11.19-MariaDB-log", b"n1-bin.000001", vec![], Checksum::Crc32);
//! let mut decoder = EventDecoder::new(Checksum::Crc32);
//! for event in [&rotate, &fd, &list, &checkpoint] {
//!     let bytes = event.encode(decoder.checksum());
//!     let decoded = decoder.decode(&bytes)?;
//!     assert_eq!(&decoded, event);
//!     assert_eq!(decoded.encode(decoder.checksum()), bytes);
//! }
//! assert!(matches!(list.data, EventData::GtidList(ref l) if l.gtids.is_empty()));
//!
//! let pos: GtidSet = "0-1-42,1-2-7".parse()?;
//! assert!(pos.contains(&"0-3-40".parse()?));
//! # Ok::<(), paxsql_binlog::Error>(())
//! ```
//!
//! Formats follow MariaDB's `sql/log_event.h` / `log_event.cc` (10.11) and were checked against the captures
//! in the lab captures (`docs/evidence/replication-protocol.md`) (see `testdata/`).

mod cursor;
mod error;
mod event;
mod gtid;
mod header;
pub mod synth;

pub use error::{Error, Result};
pub use event::{
    gtid_flags, BinlogEvent, EventData, EventDecoder, FormatDescription, GtidEvent, GtidList, OpaqueBody, Query,
    RowsKind, GTID_HEADER_LEN, SERVER_VERSION_LEN,
};
pub use gtid::{Gtid, GtidSet};
pub use header::{
    crc32, event_flags, event_type, patch_log_pos, split_event, verify_checksum, Checksum, EventHeader, CHECKSUM_LEN,
    EVENT_HEADER_LEN,
};
