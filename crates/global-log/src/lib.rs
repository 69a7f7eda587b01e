//! The global log of paxsql: the replicated state machine that every binlog server keeps on top of the Paxos core
//! (docs/ARCHITECTURE.md §2), and each node's view of the master lease (docs/ARCHITECTURE.md §5).
//!
//! [`GlobalLogNode`] is the whole per-node logic, still pure: the daemon feeds it network messages and ticks from
//! a monotonic clock and does the disk and network work its [`NodeReady`] asks for; the simulator drives the very
//! same type. The master proposes [`Command::AppendBinlog`] for each group of captured transactions and ACKs them
//! to MariaDB once they come back as [`Applied::BinlogAppended`] for its term.

mod command;
mod node;
mod ready;
mod state;

pub use command::{Command, CommandDecodeError};
pub use node::{GlobalLogConfig, GlobalLogError, GlobalLogNode, NodeReady, PeerMessage, VALUE_MESSAGE_MARGIN};
pub use ready::ReadyIo;
pub use state::{Applied, LastGtid, MemberAddress, RejectReason, ReplicatedState};
