//! Safety invariants, checked after every simulated step. Each check names the invariant it guards.

use std::collections::BTreeMap;
use std::fmt;

use paxsql_global_log::{Applied, LastGtid, ReplicatedState};
use paxsql_paxos::{Instance, NodeId, Value};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub at_ms: u64,
    pub invariant: &'static str,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at {} ms: {} violated: {}", self.at_ms, self.invariant, self.detail)
    }
}

/// What the whole cluster has learned so far, against which every node's output is checked.
#[derive(Debug, Default)]
pub struct Checker {
    /// The one value chosen per instance, as first learned by anyone.
    chosen: BTreeMap<Instance, Value>,
    /// Per node, the last instance it applied: it must apply the next one only.
    applied: BTreeMap<NodeId, Instance>,
    /// The one master of each master version.
    master_by_version: BTreeMap<u64, NodeId>,
    /// The one binlog transaction per GTID sequence number.
    gtid_log: BTreeMap<u64, Vec<u8>>,
    /// Per node, the last GTID sequence number it applied.
    last_seq: BTreeMap<NodeId, u64>,
    /// Per node, the transaction whose parts it is applying: its sequence number and the bytes so far.
    open_parts: BTreeMap<NodeId, (u64, Vec<u8>)>,
    /// Transactions a master acknowledged to its client, by sequence number.
    acked: BTreeMap<u64, Vec<u8>>,
    /// The replicated state as first seen at each applied instance.
    states: BTreeMap<Instance, ReplicatedState>,
}

impl Checker {
    /// State-machine determinism: every node that has applied the log up to the same instance holds the same state
    /// (master, lease sequence, membership, last GTID, recorded addresses), however it got there — applying values,
    /// restarting from its own snapshot or installing a member's.
    pub fn state(&mut self, at_ms: u64, node: NodeId, state: &ReplicatedState) -> Result<(), Violation> {
        match self.states.get(&state.applied) {
            None => {
                self.states.insert(state.applied, state.clone());
                Ok(())
            }
            Some(first) if first == state => Ok(()),
            Some(first) => Err(Violation {
                at_ms,
                invariant: "same state at the same instance",
                detail: format!("node {node} at instance {} holds {state:?}; first seen {first:?}", state.applied),
            }),
        }
    }

    /// The transaction the log holds at GTID sequence number `seq`, as first applied anywhere.
    pub fn transaction(&self, seq: u64) -> Option<&Vec<u8>> {
        self.gtid_log.get(&seq)
    }

    pub fn acked(&self) -> &BTreeMap<u64, Vec<u8>> {
        &self.acked
    }
    pub fn chosen_count(&self) -> usize {
        self.chosen.len()
    }
    /// The highest instance anyone has learned as chosen.
    pub fn max_chosen(&self) -> Instance {
        self.chosen.last_key_value().map_or(0, |(i, _)| *i)
    }
    pub fn masters(&self) -> usize {
        self.master_by_version.len()
    }

    /// A node (re)starts or is rebuilt at `applied` with `last_gtid`: its next outputs continue from there.
    pub fn node_reset(&mut self, node: NodeId, applied: Instance, last_gtid: Option<LastGtid>) {
        self.applied.insert(node, applied);
        // Snapshots never fall inside a transaction's parts: a restarted node applies them again from the first.
        self.open_parts.remove(&node);
        match last_gtid {
            Some(g) => self.last_seq.insert(node, g.seq_no),
            None => self.last_seq.remove(&node),
        };
    }

    /// After a restart: the parts of a transaction still open that the node's replay applied (a restart may fall
    /// between two parts; the replay starts before the first, as no snapshot falls inside a transaction).
    pub fn replayed_parts(&mut self, node: NodeId, replayed: &[Applied]) {
        for effect in replayed {
            match effect {
                Applied::BinlogPartAppended { gtid, last: false, bytes, .. } => {
                    let held = self.open_parts.entry(node).or_insert_with(|| (gtid.seq_no, Vec::new()));
                    held.1.extend_from_slice(bytes);
                }
                Applied::BinlogPartAppended { .. } | Applied::PartsDropped { .. } | Applied::Restored { .. } => {
                    self.open_parts.remove(&node);
                }
                _ => {}
            }
        }
    }

    /// One value per instance, never changed; each node applies a prefix of that one log.
    pub fn chosen(&mut self, at_ms: u64, node: NodeId, instance: Instance, value: &Value) -> Result<(), Violation> {
        let v = |invariant, detail| Err(Violation { at_ms, invariant, detail });
        let prev = self.applied.get(&node).copied().unwrap_or(0);
        if instance != prev + 1 {
            return v("applied logs are prefixes of one log", format!("node {node} applied {instance} after {prev}"));
        }
        self.applied.insert(node, instance);
        match self.chosen.get(&instance) {
            Some(have) if have != value => v(
                "at most one value chosen per instance",
                format!("instance {instance}: node {node} learned {value:?}, earlier {have:?}"),
            ),
            Some(_) => Ok(()),
            None => {
                self.chosen.insert(instance, value.clone());
                Ok(())
            }
        }
    }

    /// One master per version; GTIDs gapless and increasing; one transaction per GTID.
    pub fn applied(&mut self, at_ms: u64, node: NodeId, effect: &Applied) -> Result<(), Violation> {
        let v = |invariant, detail| Err(Violation { at_ms, invariant, detail });
        match effect {
            Applied::MasterChanged { master_version, master, .. } => {
                match self.master_by_version.insert(*master_version, *master) {
                    Some(other) if other != *master => {
                        return v(
                            "at most one master per master_version",
                            format!("version {master_version}: {other} and {master}"),
                        )
                    }
                    _ => {}
                }
            }
            Applied::BinlogPartAppended { gtid, offset, last, bytes, .. } => {
                let (seq, mut held) = self.open_parts.remove(&node).unwrap_or((gtid.seq_no, Vec::new()));
                if seq != gtid.seq_no || *offset != held.len() as u64 {
                    return v(
                        "a transaction's parts applied in order",
                        format!("node {node}: part of {} at {offset} after {} bytes of {seq}", gtid.seq_no, held.len()),
                    );
                }
                held.extend_from_slice(bytes);
                if !*last {
                    self.open_parts.insert(node, (seq, held));
                    return Ok(());
                }
                // The whole transaction is in the log now: checked as one appended whole.
                let whole = Applied::BinlogAppended {
                    instance: 0,
                    master_version: 0,
                    gtid_first: *gtid,
                    last_seq: gtid.seq_no,
                    events: held.into(),
                };
                return self.applied(at_ms, node, &whole);
            }
            Applied::PartsDropped { gtid, .. } => {
                let held = self.open_parts.remove(&node);
                if held.as_ref().is_some_and(|(seq, _)| *seq != gtid.seq_no) {
                    return v(
                        "parts dropped are the open ones",
                        format!("node {node}: {gtid:?} dropped, {held:?} open"),
                    );
                }
            }
            Applied::BinlogAppended { gtid_first, last_seq, events, .. } => {
                if self.open_parts.contains_key(&node) {
                    return v("no transaction inside another's parts", format!("node {node}: {gtid_first:?}"));
                }
                if let Some(prev) = self.last_seq.get(&node) {
                    if gtid_first.seq_no != prev + 1 || *last_seq < gtid_first.seq_no {
                        return v(
                            "GTIDs gapless and increasing",
                            format!("node {node}: {}..={} after {prev}", gtid_first.seq_no, last_seq),
                        );
                    }
                }
                self.last_seq.insert(node, *last_seq);
                for seq in gtid_first.seq_no..=*last_seq {
                    match self.gtid_log.get(&seq) {
                        Some(have) if have != events => {
                            return v("one transaction per GTID", format!("seq {seq} on node {node} differs"))
                        }
                        Some(_) => {}
                        None => {
                            self.gtid_log.insert(seq, events.to_vec());
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Records a transaction the master acknowledged; it must be the one the log holds at that GTID.
    pub fn ack(&mut self, at_ms: u64, seq: u64, events: &[u8]) -> Result<(), Violation> {
        if self.gtid_log.get(&seq).map(Vec::as_slice) != Some(events) {
            return Err(Violation {
                at_ms,
                invariant: "no acknowledged write lost",
                detail: format!("acked seq {seq} is not what the log holds"),
            });
        }
        self.acked.insert(seq, events.to_vec());
        Ok(())
    }

    /// Never two nodes that both believe they hold the lease at one instant of real time.
    pub fn lease(&self, at_ms: u64, holders: &[(NodeId, u64)]) -> Result<(), Violation> {
        if holders.len() > 1 {
            return Err(Violation {
                at_ms,
                invariant: "at most one lease holder at any instant",
                detail: format!("holders (node, version): {holders:?}"),
            });
        }
        Ok(())
    }

    /// At the end: a node that has applied the whole log holds every acknowledged transaction, at its GTID.
    pub fn all_acked_present(&self, at_ms: u64, node: NodeId, last_seq: u64) -> Result<(), Violation> {
        if let Some((&max, _)) = self.acked.last_key_value() {
            if last_seq < max {
                return Err(Violation {
                    at_ms,
                    invariant: "no acknowledged write lost",
                    detail: format!("node {node} ends at seq {last_seq}, below acknowledged {max}"),
                });
            }
        }
        Ok(())
    }
}
