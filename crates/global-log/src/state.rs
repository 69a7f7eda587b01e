//! [`ReplicatedState`]: what the global log means once applied. Deterministic: every member that applies the
//! same chosen values reaches the same state and the same [`Applied`] effects.

use std::collections::BTreeMap;

use bytes::Bytes;

use paxsql_paxos::{Instance, Membership, NodeId, Value};

use crate::command::Command;

/// The last binlog transaction in the global log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LastGtid {
    pub domain_id: u32,
    pub server_id: u32,
    pub seq_no: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicatedState {
    /// Last instance applied.
    pub applied: Instance,
    /// Current master, 0 before the first election.
    pub master_id: NodeId,
    /// Bumped by every successful `ChangeMaster`: names a master's term.
    pub master_version: u64,
    /// Bumped by every successful `ChangeMaster` and `RenewLease`; candidates compare-and-set on it.
    pub lease_seq: u64,
    pub membership: Membership,
    pub last_gtid: Option<LastGtid>,
    /// Binlog transactions appended since the log began.
    pub transactions: u64,
    /// Addresses recorded through the log ([`Command::RecordMember`]), by node: members added after the log began
    /// (and any whose address changed). The initial members' addresses come from each node's config.
    pub addresses: BTreeMap<NodeId, MemberAddress>,
    /// A transaction whose parts ([`Command::AppendBinlogPart`]) are arriving: it is not in the log until its last
    /// part is. Never in a snapshot: the node takes none while one is open (its parts' bytes live only in the log).
    pub open: Option<OpenTransaction>,
}

/// The transaction whose parts are arriving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenTransaction {
    pub master_version: u64,
    pub gtid: LastGtid,
    /// Bytes received so far: the next part's offset.
    pub next_offset: u64,
    /// Instance of its first part.
    pub first_instance: Instance,
}

/// Where a member is reached, as recorded in the log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberAddress {
    /// Its peer (Paxos and admin) endpoint.
    pub peer: String,
    /// Its mariadbd, for the other members' proxies while it is master.
    pub mariadb: String,
}

/// Why a command was rejected (the same on every member).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RejectReason {
    Malformed(String),
    StaleMasterVersion {
        have: u64,
        got: u64,
    },
    StaleLeaseSeq {
        have: u64,
        got: u64,
    },
    NotAMember {
        node: NodeId,
    },
    GtidGap {
        expected: u64,
        got: u64,
    },
    WrongDomain {
        have: u32,
        got: u32,
    },
    EmptyRange,
    NotSingleStepMembership,
    /// A part that does not continue the open transaction (or a first part not at offset 0).
    PartOutOfOrder {
        expected_seq: u64,
        expected_offset: u64,
        got_seq: u64,
        got_offset: u64,
    },
    /// A whole transaction while another one's parts are arriving.
    TransactionOpen {
        seq: u64,
    },
}

/// One effect of applying the log, in log order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// At a restart from a snapshot, before the retained log is replayed: every instance up to `instance` is covered
    /// by the snapshot, its transactions' bytes compacted away; `last_gtid` is the last of them.
    Restored {
        instance: Instance,
        last_gtid: Option<LastGtid>,
    },
    MasterChanged {
        instance: Instance,
        master_version: u64,
        master: NodeId,
        proposed_at_ms: u64,
        /// Named by the previous master ([`Command::HandOver`]) rather than won by a campaign.
        handed_over: bool,
    },
    LeaseRenewed {
        instance: Instance,
        master_version: u64,
        proposed_at_ms: u64,
    },
    BinlogAppended {
        instance: Instance,
        master_version: u64,
        gtid_first: LastGtid,
        last_seq: u64,
        /// A slice of the chosen value's buffer.
        events: Bytes,
    },
    /// A part of a transaction too large for one entry; the one flagged `last` puts the whole transaction in the
    /// log (the master acknowledges it then), and the parts before it are the same transaction's, in order.
    BinlogPartAppended {
        instance: Instance,
        master_version: u64,
        gtid: LastGtid,
        offset: u64,
        last: bool,
        /// A slice of the chosen value's buffer.
        bytes: Bytes,
    },
    /// The parts received of transaction `gtid` are void: its master's term ended before the last one. Whoever kept
    /// them drops them; the transaction is not in the log.
    PartsDropped {
        instance: Instance,
        gtid: LastGtid,
    },
    MembershipChanged {
        instance: Instance,
        membership: Membership,
    },
    MemberRecorded {
        instance: Instance,
        node: NodeId,
        address: MemberAddress,
    },
    Rejected {
        instance: Instance,
        kind: &'static str,
        master_version: u64,
        reason: RejectReason,
    },
}

impl ReplicatedState {
    pub fn new(membership: Membership) -> Self {
        ReplicatedState {
            applied: 0,
            master_id: 0,
            master_version: 0,
            lease_seq: 0,
            membership,
            last_gtid: None,
            transactions: 0,
            addresses: BTreeMap::new(),
            open: None,
        }
    }

    /// Applies the chosen value of the next instance.
    pub fn apply(&mut self, instance: Instance, value: &Value, out: &mut Vec<Applied>) {
        assert_eq!(instance, self.applied + 1, "global log applied out of order");
        self.applied = instance;
        match value {
            Value::Noop => {}
            Value::Reconfigure(m) => {
                if self.membership.is_single_step_to(m) {
                    self.membership = m.clone();
                    out.push(Applied::MembershipChanged { instance, membership: m.clone() });
                } else {
                    out.push(Applied::Rejected {
                        instance,
                        kind: "change_membership",
                        master_version: self.master_version,
                        reason: RejectReason::NotSingleStepMembership,
                    });
                }
            }
            Value::Batch(cmds) => {
                for raw in cmds {
                    match Command::decode(raw) {
                        Ok(cmd) => self.apply_command(instance, cmd, out),
                        Err(e) => out.push(Applied::Rejected {
                            instance,
                            kind: "malformed",
                            master_version: self.master_version,
                            reason: RejectReason::Malformed(e.to_string()),
                        }),
                    }
                }
            }
        }
    }

    fn apply_command(&mut self, instance: Instance, cmd: Command, out: &mut Vec<Applied>) {
        let kind = cmd.kind();
        match self.check(&cmd) {
            Err(reason) => {
                let master_version = match &cmd {
                    Command::ChangeMaster { expected_version, .. } => *expected_version,
                    Command::RenewLease { master_version, .. }
                    | Command::AppendBinlog { master_version, .. }
                    | Command::AppendBinlogPart { master_version, .. }
                    | Command::HandOver { master_version, .. } => *master_version,
                    Command::RecordMember { .. } => self.master_version,
                };
                out.push(Applied::Rejected { instance, kind, master_version, reason });
            }
            Ok(()) => match cmd {
                Command::ChangeMaster { new_master, proposed_at_ms, .. } => {
                    self.change_master(instance, new_master, proposed_at_ms, false, out);
                }
                Command::HandOver { new_master, .. } => self.change_master(instance, new_master, 0, true, out),
                Command::RenewLease { master_version, proposed_at_ms } => {
                    self.lease_seq += 1;
                    out.push(Applied::LeaseRenewed { instance, master_version, proposed_at_ms });
                }
                Command::AppendBinlog { master_version, domain_id, server_id, first_seq, last_seq, events } => {
                    self.assert_continues(first_seq);
                    self.last_gtid = Some(LastGtid { domain_id, server_id, seq_no: last_seq });
                    self.transactions += last_seq - first_seq + 1;
                    let gtid_first = LastGtid { domain_id, server_id, seq_no: first_seq };
                    out.push(Applied::BinlogAppended { instance, master_version, gtid_first, last_seq, events });
                }
                Command::AppendBinlogPart { master_version, domain_id, server_id, seq, offset, last, bytes } => {
                    let gtid = LastGtid { domain_id, server_id, seq_no: seq };
                    let first_instance = self.open.map_or(instance, |o| o.first_instance);
                    let next_offset = offset + bytes.len() as u64;
                    if last {
                        self.assert_continues(seq);
                        self.open = None;
                        self.last_gtid = Some(gtid);
                        self.transactions += 1;
                    } else {
                        self.open = Some(OpenTransaction { master_version, gtid, next_offset, first_instance });
                    }
                    out.push(Applied::BinlogPartAppended { instance, master_version, gtid, offset, last, bytes });
                }
                Command::RecordMember { node, peer, mariadb } => {
                    let address = MemberAddress { peer, mariadb };
                    self.addresses.insert(node, address.clone());
                    out.push(Applied::MemberRecorded { instance, node, address });
                }
            },
        }
    }

    /// A new term for `new_master`, won by a campaign or handed over by the previous master.
    fn change_master(
        &mut self,
        instance: Instance,
        new_master: NodeId,
        proposed_at_ms: u64,
        handed_over: bool,
        out: &mut Vec<Applied>,
    ) {
        if let Some(open) = self.open.take() {
            // Before the master change itself: whoever kept the parts drops them before the new term's first
            // transaction (which takes the same sequence number) arrives.
            out.push(Applied::PartsDropped { instance, gtid: open.gtid });
        }
        self.master_id = new_master;
        self.master_version += 1;
        self.lease_seq += 1;
        out.push(Applied::MasterChanged {
            instance,
            master_version: self.master_version,
            master: new_master,
            proposed_at_ms,
            handed_over,
        });
    }

    fn check(&self, cmd: &Command) -> Result<(), RejectReason> {
        let current = |got: u64| {
            if got == self.master_version {
                Ok(())
            } else {
                Err(RejectReason::StaleMasterVersion { have: self.master_version, got })
            }
        };
        match cmd {
            Command::ChangeMaster { expected_version, expected_lease_seq, new_master, .. } => {
                current(*expected_version)?;
                if *expected_lease_seq != self.lease_seq {
                    return Err(RejectReason::StaleLeaseSeq { have: self.lease_seq, got: *expected_lease_seq });
                }
                if !self.membership.contains(*new_master) {
                    return Err(RejectReason::NotAMember { node: *new_master });
                }
                Ok(())
            }
            Command::RenewLease { master_version, .. } => current(*master_version),
            Command::HandOver { master_version, new_master } => {
                current(*master_version)?;
                if !self.membership.contains(*new_master) {
                    return Err(RejectReason::NotAMember { node: *new_master });
                }
                Ok(())
            }
            Command::AppendBinlog { master_version, domain_id, first_seq, last_seq, .. } => {
                current(*master_version)?;
                if last_seq < first_seq {
                    return Err(RejectReason::EmptyRange);
                }
                if let Some(open) = self.open {
                    return Err(RejectReason::TransactionOpen { seq: open.gtid.seq_no });
                }
                self.continues_log(*domain_id, *first_seq)
            }
            Command::AppendBinlogPart { master_version, domain_id, server_id, seq, offset, .. } => {
                current(*master_version)?;
                self.continues_log(*domain_id, *seq)?;
                let (expected_seq, expected_offset) = match self.open {
                    Some(o) if o.gtid.server_id == *server_id => (o.gtid.seq_no, o.next_offset),
                    Some(o) => (o.gtid.seq_no, u64::MAX),
                    None => (*seq, 0),
                };
                if (*seq, *offset) != (expected_seq, expected_offset) {
                    return Err(RejectReason::PartOutOfOrder {
                        expected_seq,
                        expected_offset,
                        got_seq: *seq,
                        got_offset: *offset,
                    });
                }
                Ok(())
            }
            Command::RecordMember { node, .. } if *node == 0 => Err(RejectReason::NotAMember { node: 0 }),
            Command::RecordMember { .. } => Ok(()),
        }
    }

    /// GTID continuity on apply: what `check` let through must follow the log's last transaction. Cheap, and a
    /// gap here would serve replicas a binlog MariaDB cannot apply, so it stops the node (the simulator turns it
    /// into a violation of its seed).
    fn assert_continues(&self, first_seq: u64) {
        assert!(
            self.last_gtid.is_none_or(|l| l.seq_no + 1 == first_seq),
            "global log applied transaction {first_seq} after {:?}",
            self.last_gtid
        );
    }

    /// Whether a transaction of `domain_id` numbered `first_seq` follows the log's last one without a gap.
    fn continues_log(&self, domain_id: u32, first_seq: u64) -> Result<(), RejectReason> {
        if let Some(last) = self.last_gtid {
            if last.domain_id != domain_id {
                return Err(RejectReason::WrongDomain { have: last.domain_id, got: domain_id });
            }
            if first_seq != last.seq_no + 1 {
                return Err(RejectReason::GtidGap { expected: last.seq_no + 1, got: first_seq });
            }
        }
        Ok(())
    }

    /// Encoding for [`paxsql_paxos::Snapshot::data`] (membership travels in the snapshot itself).
    pub fn encode_snapshot(&self) -> Vec<u8> {
        assert!(self.open.is_none(), "a snapshot inside transaction {:?}'s parts", self.open);
        let mut out = Vec::with_capacity(64);
        for n in [self.applied, self.master_id, self.master_version, self.lease_seq, self.transactions] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        // Bit 0: a last GTID follows; bit 1: recorded addresses follow it (snapshots written before addresses were
        // recorded have neither bit 1 nor the section, and still decode).
        let with_addresses = !self.addresses.is_empty();
        out.push(u8::from(self.last_gtid.is_some()) | (u8::from(with_addresses) << 1));
        if let Some(g) = self.last_gtid {
            out.extend_from_slice(&g.domain_id.to_le_bytes());
            out.extend_from_slice(&g.server_id.to_le_bytes());
            out.extend_from_slice(&g.seq_no.to_le_bytes());
        }
        if with_addresses {
            out.extend_from_slice(&(self.addresses.len() as u32).to_le_bytes());
            for (node, a) in &self.addresses {
                out.extend_from_slice(&node.to_le_bytes());
                for text in [&a.peer, &a.mariadb] {
                    let bytes = &text.as_bytes()[..text.len().min(crate::command::MAX_ADDRESS_BYTES)];
                    out.push(bytes.len() as u8);
                    out.extend_from_slice(bytes);
                }
            }
        }
        out
    }

    pub fn decode_snapshot(data: &[u8], membership: Membership) -> Option<Self> {
        let u64_at =
            |at: usize| data.get(at..at + 8).map(|s| s.iter().rev().fold(0u64, |a, b| (a << 8) | u64::from(*b)));
        let u32_at =
            |at: usize| data.get(at..at + 4).map(|s| s.iter().rev().fold(0u32, |a, b| (a << 8) | u32::from(*b)));
        let mut s = ReplicatedState::new(membership);
        s.applied = u64_at(0)?;
        s.master_id = u64_at(8)?;
        s.master_version = u64_at(16)?;
        s.lease_seq = u64_at(24)?;
        s.transactions = u64_at(32)?;
        let flags = *data.get(40)?;
        if flags > 3 {
            return None;
        }
        let mut at = 41;
        if flags & 1 != 0 {
            s.last_gtid = Some(LastGtid { domain_id: u32_at(41)?, server_id: u32_at(45)?, seq_no: u64_at(49)? });
            at = 57;
        }
        if flags & 2 == 0 {
            return (at == data.len()).then_some(s);
        }
        let count = u32_at(at)?;
        at += 4;
        for _ in 0..count {
            let node = u64_at(at)?;
            at += 8;
            let mut text = || -> Option<String> {
                let len = usize::from(*data.get(at)?);
                let text = String::from_utf8(data.get(at + 1..at + 1 + len)?.to_vec()).ok()?;
                at += 1 + len;
                Some(text)
            };
            let peer = text()?;
            let mariadb = text()?;
            s.addresses.insert(node, MemberAddress { peer, mariadb });
        }
        (at == data.len()).then_some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(cmds: &[Command]) -> Value {
        Value::Batch(cmds.iter().map(Command::encode).collect())
    }

    #[test]
    fn change_master_is_compare_and_set_on_version_and_lease_seq() {
        let mut s = ReplicatedState::new(Membership::new([1, 2, 3]));
        let mut out = Vec::new();
        let cm = |v, seq, node| Command::ChangeMaster {
            expected_version: v,
            expected_lease_seq: seq,
            new_master: node,
            proposed_at_ms: 0,
        };
        s.apply(1, &batch(&[cm(0, 0, 1), cm(0, 0, 2)]), &mut out);
        assert_eq!((s.master_id, s.master_version, s.lease_seq), (1, 1, 1));
        assert!(matches!(out[1], Applied::Rejected { reason: RejectReason::StaleMasterVersion { .. }, .. }));
        out.clear();
        s.apply(2, &batch(&[Command::RenewLease { master_version: 1, proposed_at_ms: 5 }, cm(1, 1, 2)]), &mut out);
        assert!(matches!(out[1], Applied::Rejected { reason: RejectReason::StaleLeaseSeq { have: 2, got: 1 }, .. }));
        out.clear();
        s.apply(3, &batch(&[cm(1, 2, 9)]), &mut out);
        assert!(matches!(out[0], Applied::Rejected { reason: RejectReason::NotAMember { node: 9 }, .. }));
        s.apply(4, &batch(&[cm(1, 2, 3)]), &mut out);
        assert_eq!((s.master_id, s.master_version), (3, 2));
    }

    #[test]
    fn a_transaction_in_parts_is_in_the_log_at_its_last_part_and_dropped_by_a_master_change() {
        let mut s = ReplicatedState::new(Membership::new([1, 2, 3]));
        let mut out = Vec::new();
        let cm = |v, l, node| Command::ChangeMaster {
            expected_version: v,
            expected_lease_seq: l,
            new_master: node,
            proposed_at_ms: 0,
        };
        let part = |v, seq, offset: u64, last, len: usize| Command::AppendBinlogPart {
            master_version: v,
            domain_id: 0,
            server_id: 7,
            seq,
            offset,
            last,
            bytes: vec![seq as u8; len].into(),
        };
        let whole = |v, seq| Command::AppendBinlog {
            master_version: v,
            domain_id: 0,
            server_id: 7,
            first_seq: seq,
            last_seq: seq,
            events: Bytes::from_static(&[1]),
        };
        s.apply(1, &batch(&[cm(0, 0, 1), whole(1, 1)]), &mut out);
        out.clear();
        s.apply(2, &batch(&[part(1, 2, 0, false, 10)]), &mut out);
        out.clear();
        assert_eq!(s.last_gtid.map(|g| g.seq_no), Some(1), "not in the log before its last part");
        assert_eq!(s.open.map(|o| (o.gtid.seq_no, o.next_offset, o.first_instance)), Some((2, 10, 2)));
        // Out of order, a gap in the bytes, another transaction, a whole one: all refused while it is open.
        s.apply(
            3,
            &batch(&[part(1, 2, 11, false, 1), part(1, 3, 0, false, 1), whole(1, 2), part(1, 2, 0, false, 1)]),
            &mut out,
        );
        let reasons: Vec<_> = out
            .drain(..)
            .map(|a| match a {
                Applied::Rejected { reason, .. } => reason,
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(matches!(reasons[0], RejectReason::PartOutOfOrder { expected_offset: 10, got_offset: 11, .. }));
        assert!(matches!(reasons[1], RejectReason::GtidGap { expected: 2, got: 3 }));
        assert!(matches!(reasons[2], RejectReason::TransactionOpen { seq: 2 }));
        assert!(matches!(reasons[3], RejectReason::PartOutOfOrder { expected_offset: 10, got_offset: 0, .. }));
        s.apply(4, &batch(&[part(1, 2, 10, false, 5), part(1, 2, 15, true, 3)]), &mut out);
        assert!(matches!(out[1], Applied::BinlogPartAppended { last: true, offset: 15, .. }));
        assert_eq!((s.last_gtid.map(|g| g.seq_no), s.transactions, s.open), (Some(2), 2, None));
        out.clear();
        // A master change while parts arrive: they are dropped before the new term starts, and the new master's
        // transaction takes the same sequence number.
        s.apply(5, &batch(&[part(1, 3, 0, false, 4)]), &mut out);
        s.apply(6, &batch(&[cm(1, 1, 2), part(1, 3, 4, true, 1), whole(2, 3)]), &mut out);
        assert!(matches!(out[1], Applied::PartsDropped { gtid: LastGtid { seq_no: 3, .. }, .. }), "{:?}", out[1]);
        assert!(matches!(out[2], Applied::MasterChanged { master_version: 2, .. }));
        assert!(matches!(out[3], Applied::Rejected { reason: RejectReason::StaleMasterVersion { .. }, .. }));
        assert!(matches!(out[4], Applied::BinlogAppended { last_seq: 3, .. }));
        assert_eq!((s.open, s.transactions), (None, 3));
    }

    #[test]
    fn append_binlog_needs_current_version_and_gapless_gtids() {
        let mut s = ReplicatedState::new(Membership::new([1, 2, 3]));
        let mut out = Vec::new();
        let ap = |v, first, last| Command::AppendBinlog {
            master_version: v,
            domain_id: 0,
            server_id: 7,
            first_seq: first,
            last_seq: last,
            events: Bytes::new(),
        };
        s.apply(
            1,
            &batch(&[Command::ChangeMaster {
                expected_version: 0,
                expected_lease_seq: 0,
                new_master: 1,
                proposed_at_ms: 0,
            }]),
            &mut out,
        );
        out.clear();
        s.apply(2, &batch(&[ap(1, 10, 12), ap(1, 14, 14), ap(0, 13, 13), ap(1, 13, 13), ap(1, 15, 14)]), &mut out);
        let kinds: Vec<bool> = out.iter().map(|a| matches!(a, Applied::BinlogAppended { .. })).collect();
        assert_eq!(kinds, vec![true, false, false, true, false]);
        assert!(matches!(out[1], Applied::Rejected { reason: RejectReason::GtidGap { expected: 13, got: 14 }, .. }));
        assert_eq!(s.last_gtid.map(|g| g.seq_no), Some(13));
        assert_eq!(s.transactions, 4);
        // Garbage inside a batch is rejected, not a panic, and the rest of the batch still applies.
        out.clear();
        s.apply(3, &Value::Batch(vec![Bytes::from_static(&[0xff, 1]), ap(1, 14, 14).encode()]), &mut out);
        assert!(matches!(out[0], Applied::Rejected { reason: RejectReason::Malformed(_), .. }));
        assert_eq!(s.transactions, 5);
    }

    #[test]
    fn snapshot_round_trip() {
        let m = Membership::new([1, 2, 3]);
        let mut s = ReplicatedState::new(m.clone());
        assert_eq!(ReplicatedState::decode_snapshot(&s.encode_snapshot(), m.clone()), Some(s.clone()));
        s.last_gtid = Some(LastGtid { domain_id: 2, server_id: 3, seq_no: 4 });
        s.master_version = 9;
        let enc = s.encode_snapshot();
        assert_eq!(ReplicatedState::decode_snapshot(&enc, m.clone()), Some(s.clone()));
        for cut in 0..enc.len() {
            assert_eq!(ReplicatedState::decode_snapshot(&enc[..cut], m.clone()), None);
        }
        let mut out = Vec::new();
        let record = |node: u64, peer: &str| Command::RecordMember {
            node,
            peer: peer.into(),
            mariadb: format!("db{node}.example:3306"),
        };
        s.apply(1, &batch(&[record(4, "10.0.0.4:7101"), record(5, "[::1]:7101"), record(0, "x:1")]), &mut out);
        assert!(matches!(&out[0], Applied::MemberRecorded { node: 4, address, .. } if address.peer == "10.0.0.4:7101"));
        assert!(matches!(out[2], Applied::Rejected { reason: RejectReason::NotAMember { node: 0 }, .. }));
        assert_eq!(s.addresses.len(), 2);
        for gtid in [None, s.last_gtid] {
            s.last_gtid = gtid;
            let enc = s.encode_snapshot();
            assert_eq!(ReplicatedState::decode_snapshot(&enc, m.clone()), Some(s.clone()));
            for cut in 0..enc.len() {
                assert_eq!(ReplicatedState::decode_snapshot(&enc[..cut], m.clone()), None, "cut at {cut}");
            }
        }
    }
}
