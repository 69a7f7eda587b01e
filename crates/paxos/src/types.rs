//! Identifiers and values shared by the core, the storage and the wire codec.

use std::collections::BTreeSet;
use std::fmt;

use bytes::Bytes;

/// A member of the Paxos group. Zero is reserved for "nobody".
pub type NodeId = u64;

/// Position in the global log. The first instance is 1; 0 means "before the log".
pub type Instance = u64;

/// A Paxos ballot, ordered by round first and proposer second so that two proposers never share one
/// (Paxos Made Simple §2.2: proposal numbers are totally ordered and disjoint per proposer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ballot {
    pub round: u64,
    pub node: NodeId,
}

impl Ballot {
    /// The ballot no proposal carries; an acceptor starts promised to it.
    pub const ZERO: Ballot = Ballot { round: 0, node: 0 };
    /// Marks a value reported as already chosen: it outranks every real ballot, which is what phase 1
    /// needs (a chosen value is the only safe value for its instance).
    pub const CHOSEN: Ballot = Ballot { round: u64::MAX, node: u64::MAX };

    pub fn new(round: u64, node: NodeId) -> Self {
        Ballot { round, node }
    }
}

impl fmt::Display for Ballot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.round, self.node)
    }
}

/// The voting members of the group for a range of instances.
///
/// Changes go through the log one member at a time, so that a majority of the old set and a majority of the new
/// set always intersect (this is what lets a leader keep its pipeline across a change).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Membership {
    pub members: BTreeSet<NodeId>,
}

impl Membership {
    pub fn new(members: impl IntoIterator<Item = NodeId>) -> Self {
        Membership { members: members.into_iter().collect() }
    }

    pub fn contains(&self, node: NodeId) -> bool {
        self.members.contains(&node)
    }

    /// Smallest number of members that forms a majority.
    pub fn quorum(&self) -> usize {
        self.members.len() / 2 + 1
    }

    pub fn is_quorum<'a>(&self, voters: impl IntoIterator<Item = &'a NodeId>) -> bool {
        voters.into_iter().filter(|n| self.members.contains(n)).count() >= self.quorum()
    }

    /// Whether `next` differs from `self` by adding or removing exactly one member, and is not empty.
    pub fn is_single_step_to(&self, next: &Membership) -> bool {
        if next.members.is_empty() || next.members.contains(&0) {
            return false;
        }
        let added = next.members.difference(&self.members).count();
        let removed = self.members.difference(&next.members).count();
        added + removed == 1
    }
}

/// What one Paxos instance decides.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    /// Fills a hole a new leader found in the log; changes nothing.
    Noop,
    /// A batch of opaque commands for the replicated state machine, applied in order. Cloning a value shares the
    /// commands' bytes (reference counts), never copies them.
    Batch(Vec<Bytes>),
    /// The membership for every instance after this one. Ignored (a no-op on every member alike) unless it is a
    /// single-step change from the membership in force.
    Reconfigure(Membership),
}

impl Value {
    /// Size used for batching and catch-up limits.
    pub fn size_bytes(&self) -> usize {
        match self {
            Value::Noop => 1,
            Value::Batch(cmds) => 8 + cmds.iter().map(|c| c.len() + 4).sum::<usize>(),
            Value::Reconfigure(m) => 8 + m.members.len() * 8,
        }
    }
}
