//! Commands of the replicated state machine and their binary encoding inside a Paxos batch.
//!
//! Layout: one tag byte, then fixed little-endian fields; `AppendBinlog` ends with the raw binlog events.
//! Decoding never panics; a command that does not decode is rejected deterministically on every member. A decoded
//! command's events are a slice of the buffer it was decoded from, not a copy.

use bytes::Bytes;
use paxsql_paxos::NodeId;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Compare-and-set: make `new_master` master if the master version and the lease sequence are still the ones
    /// the candidate saw. The lease sequence moves with every renewal, so a candidate that missed a renewal loses.
    ChangeMaster { expected_version: u64, expected_lease_seq: u64, new_master: NodeId, proposed_at_ms: u64 },
    /// The master extends its lease; `proposed_at_ms` is on the master's own monotonic clock.
    RenewLease { master_version: u64, proposed_at_ms: u64 },
    /// Binlog transactions `first_seq..=last_seq` of GTID domain `domain_id`, written by the master of
    /// `master_version` (whose mariadbd runs with `server_id`), as the raw events MariaDB sent.
    AppendBinlog { master_version: u64, domain_id: u32, server_id: u32, first_seq: u64, last_seq: u64, events: Bytes },
    /// One part of binlog transaction `seq` (GTID domain `domain_id`, server `server_id`) too large for one log
    /// entry: `bytes` are its raw events from byte `offset` on, cut anywhere (an event may span two parts). Parts
    /// come in order from offset 0; the transaction is in the log once the part flagged `last` is chosen, and a
    /// master change before that drops what came before ([`crate::Applied::PartsDropped`]): no member ever serves
    /// part of a transaction.
    AppendBinlogPart {
        master_version: u64,
        domain_id: u32,
        server_id: u32,
        seq: u64,
        offset: u64,
        last: bool,
        bytes: Bytes,
    },
    /// The master of `master_version`, which has stopped serving, names its successor: the term ends and the next one
    /// belongs to `new_master` at once, whose lease starts only from a renewal of its own.
    HandOver { master_version: u64, new_master: NodeId },
    /// Where member (or member-to-be) `node` is reached: its peer endpoint and its mariadbd for clients. Recorded
    /// in the log rather than in each node's config so that every member, and every member restarted or added
    /// later, learns a new member's addresses from the same place, and so that a config edit can never change a
    /// quorum: only [`paxsql_paxos::Value::Reconfigure`] changes who votes.
    RecordMember { node: NodeId, peer: String, mariadb: String },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandDecodeError {
    #[error("command truncated at byte {0}")]
    Truncated(usize),
    #[error("unknown command tag {0}")]
    UnknownTag(u8),
    #[error("{0} trailing bytes after command")]
    TrailingBytes(usize),
    #[error("an address in the command is not UTF-8")]
    NotText,
    #[error("flag byte at {0} is neither 0 nor 1")]
    BadFlag(usize),
}

/// Longest address a [`Command::RecordMember`] carries (a host name and a port fit many times over).
pub const MAX_ADDRESS_BYTES: usize = 255;

const TAG_CHANGE_MASTER: u8 = 1;
const TAG_RENEW_LEASE: u8 = 2;
const TAG_APPEND_BINLOG: u8 = 3;
const TAG_HAND_OVER: u8 = 4;
const TAG_RECORD_MEMBER: u8 = 5;
const TAG_APPEND_BINLOG_PART: u8 = 6;

impl Command {
    pub fn kind(&self) -> &'static str {
        match self {
            Command::ChangeMaster { .. } => "change_master",
            Command::RenewLease { .. } => "renew_lease",
            Command::AppendBinlog { .. } => "append_binlog",
            Command::AppendBinlogPart { .. } => "append_binlog_part",
            Command::HandOver { .. } => "hand_over",
            Command::RecordMember { .. } => "record_member",
        }
    }

    /// Whether a chosen value holds an [`Command::AppendBinlogPart`] (by its tag byte, without decoding).
    pub fn any_part(value: &paxsql_paxos::Value) -> bool {
        matches!(value, paxsql_paxos::Value::Batch(cmds) if cmds.iter().any(|c| c.first() == Some(&TAG_APPEND_BINLOG_PART)))
    }

    /// The command's bytes in the log: the one copy of a transaction's events on its way into a Paxos value.
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::new();
        match self {
            Command::ChangeMaster { expected_version, expected_lease_seq, new_master, proposed_at_ms } => {
                out.push(TAG_CHANGE_MASTER);
                for n in [*expected_version, *expected_lease_seq, *new_master, *proposed_at_ms] {
                    out.extend_from_slice(&n.to_le_bytes());
                }
            }
            Command::RenewLease { master_version, proposed_at_ms } => {
                out.push(TAG_RENEW_LEASE);
                out.extend_from_slice(&master_version.to_le_bytes());
                out.extend_from_slice(&proposed_at_ms.to_le_bytes());
            }
            Command::AppendBinlog { master_version, domain_id, server_id, first_seq, last_seq, events } => {
                out.reserve(37 + events.len());
                out.push(TAG_APPEND_BINLOG);
                out.extend_from_slice(&master_version.to_le_bytes());
                out.extend_from_slice(&domain_id.to_le_bytes());
                out.extend_from_slice(&server_id.to_le_bytes());
                out.extend_from_slice(&first_seq.to_le_bytes());
                out.extend_from_slice(&last_seq.to_le_bytes());
                out.extend_from_slice(events);
            }
            Command::AppendBinlogPart { master_version, domain_id, server_id, seq, offset, last, bytes } => {
                out.reserve(38 + bytes.len());
                out.push(TAG_APPEND_BINLOG_PART);
                out.extend_from_slice(&master_version.to_le_bytes());
                out.extend_from_slice(&domain_id.to_le_bytes());
                out.extend_from_slice(&server_id.to_le_bytes());
                out.extend_from_slice(&seq.to_le_bytes());
                out.extend_from_slice(&offset.to_le_bytes());
                out.push(u8::from(*last));
                out.extend_from_slice(bytes);
            }
            Command::HandOver { master_version, new_master } => {
                out.push(TAG_HAND_OVER);
                out.extend_from_slice(&master_version.to_le_bytes());
                out.extend_from_slice(&new_master.to_le_bytes());
            }
            Command::RecordMember { node, peer, mariadb } => {
                out.push(TAG_RECORD_MEMBER);
                out.extend_from_slice(&node.to_le_bytes());
                for text in [peer, mariadb] {
                    // Longer addresses are refused where they are proposed; cut here, never wrapped around.
                    let bytes = &text.as_bytes()[..text.len().min(MAX_ADDRESS_BYTES)];
                    out.push(bytes.len() as u8);
                    out.extend_from_slice(bytes);
                }
            }
        }
        out.into()
    }

    pub fn decode(raw: &Bytes) -> Result<Command, CommandDecodeError> {
        let bytes: &[u8] = raw;
        let mut pos = 0usize;
        let mut take = |n: usize| -> Result<&[u8], CommandDecodeError> {
            let s = bytes.get(pos..pos + n).ok_or(CommandDecodeError::Truncated(pos))?;
            pos += n;
            Ok(s)
        };
        let u64_of = |s: &[u8]| s.iter().rev().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        let tag = take(1)?[0];
        let cmd = match tag {
            TAG_CHANGE_MASTER => Command::ChangeMaster {
                expected_version: u64_of(take(8)?),
                expected_lease_seq: u64_of(take(8)?),
                new_master: u64_of(take(8)?),
                proposed_at_ms: u64_of(take(8)?),
            },
            TAG_RENEW_LEASE => {
                Command::RenewLease { master_version: u64_of(take(8)?), proposed_at_ms: u64_of(take(8)?) }
            }
            TAG_APPEND_BINLOG => {
                let master_version = u64_of(take(8)?);
                let domain_id = u64_of(take(4)?) as u32;
                let server_id = u64_of(take(4)?) as u32;
                let first_seq = u64_of(take(8)?);
                let last_seq = u64_of(take(8)?);
                let events = raw.slice(pos.min(raw.len())..);
                return Ok(Command::AppendBinlog { master_version, domain_id, server_id, first_seq, last_seq, events });
            }
            TAG_APPEND_BINLOG_PART => {
                let master_version = u64_of(take(8)?);
                let domain_id = u64_of(take(4)?) as u32;
                let server_id = u64_of(take(4)?) as u32;
                let seq = u64_of(take(8)?);
                let offset = u64_of(take(8)?);
                let last = match take(1)?[0] {
                    0 => false,
                    1 => true,
                    _ => return Err(CommandDecodeError::BadFlag(pos - 1)),
                };
                let bytes = raw.slice(pos.min(raw.len())..);
                return Ok(Command::AppendBinlogPart {
                    master_version,
                    domain_id,
                    server_id,
                    seq,
                    offset,
                    last,
                    bytes,
                });
            }
            TAG_HAND_OVER => Command::HandOver { master_version: u64_of(take(8)?), new_master: u64_of(take(8)?) },
            TAG_RECORD_MEMBER => {
                let node = u64_of(take(8)?);
                let mut text = || -> Result<String, CommandDecodeError> {
                    let len = usize::from(take(1)?[0]);
                    String::from_utf8(take(len)?.to_vec()).map_err(|_| CommandDecodeError::NotText)
                };
                let peer = text()?;
                let mariadb = text()?;
                Command::RecordMember { node, peer, mariadb }
            }
            other => return Err(CommandDecodeError::UnknownTag(other)),
        };
        if pos != bytes.len() {
            return Err(CommandDecodeError::TrailingBytes(bytes.len() - pos));
        }
        Ok(cmd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let cmds = [
            Command::ChangeMaster { expected_version: 3, expected_lease_seq: 99, new_master: 2, proposed_at_ms: 12345 },
            Command::RenewLease { master_version: u64::MAX, proposed_at_ms: 0 },
            Command::HandOver { master_version: 9, new_master: 3 },
            Command::RecordMember { node: 4, peer: "10.0.0.4:7101".into(), mariadb: "db4.example:3306".into() },
            Command::RecordMember { node: 5, peer: String::new(), mariadb: String::new() },
            Command::AppendBinlog {
                master_version: 7,
                domain_id: 0,
                server_id: 1001,
                first_seq: 5,
                last_seq: 9,
                events: Bytes::from_static(&[1, 2, 3]),
            },
            Command::AppendBinlogPart {
                master_version: 7,
                domain_id: 0,
                server_id: 1001,
                seq: 10,
                offset: 16 << 20,
                last: true,
                bytes: vec![9; 5].into(),
            },
            Command::AppendBinlog {
                master_version: 7,
                domain_id: 1,
                server_id: 1,
                first_seq: 1,
                last_seq: 1,
                events: Bytes::new(),
            },
        ];
        for c in cmds {
            let enc = c.encode();
            assert_eq!(Command::decode(&enc), Ok(c.clone()));
            // Everything but the trailing bytes of a binlog command must be there.
            let fixed = match c {
                Command::AppendBinlog { .. } => 33,
                Command::AppendBinlogPart { .. } => 34,
                _ => enc.len(),
            };
            for cut in 0..fixed {
                assert!(Command::decode(&enc.slice(..cut)).is_err(), "{} cut at {cut}", c.kind());
            }
        }
        assert_eq!(Command::decode(&Bytes::from_static(&[0])), Err(CommandDecodeError::UnknownTag(0)));
        let mut long = Vec::from(Command::RenewLease { master_version: 1, proposed_at_ms: 1 }.encode());
        long.push(0);
        assert_eq!(Command::decode(&long.into()), Err(CommandDecodeError::TrailingBytes(1)));
        let mut bad = Vec::from(Command::RecordMember { node: 4, peer: "ab".into(), mariadb: String::new() }.encode());
        bad[10] = 0xff;
        assert_eq!(Command::decode(&bad.into()), Err(CommandDecodeError::NotText));
    }
}
