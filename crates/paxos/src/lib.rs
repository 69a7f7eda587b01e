//! The Paxos core of paxsql: every node's binlog server runs one [`PaxosNode`], a pure Multi-Paxos state machine
//! (acceptor, proposer and learner in one) that decides the global log.
//!
//! Run loop (the daemon and the simulator drive the same code): feed it [`PaxosNode::step`] for each message,
//! [`PaxosNode::tick`] with the current monotonic time, [`PaxosNode::propose`] for new commands; then drain
//! [`PaxosNode::take_ready`], persist its [`WriteBatch`], send its messages (those in `after_persist` only once the
//! batch is durable) and apply its chosen values in order. No IO, no clock, no global randomness here.

mod codec;
pub mod storage;
mod types;

pub use codec::DecodeError;
pub use storage::{MemStorage, RecoveredState, Snapshot, Storage, StorageError, WriteBatch};
pub use types::{Ballot, Instance, Membership, NodeId, Value};
mod message;
mod node;

pub use message::{Message, MessageBody};
pub use node::{Bug, CatchUpRead, Config, PaxosNode, ProposeError, Ready, Role};
