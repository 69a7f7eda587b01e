//! Messages between Paxos members. The transport (gRPC in the daemon, the simulator's network) carries them
//! as they are; it may lose, delay, duplicate or reorder them.

use crate::types::{Ballot, Instance, NodeId, Value};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub from: NodeId,
    pub to: NodeId,
    pub body: MessageBody,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MessageBody {
    /// Phase 1a: promise `ballot` for every instance from `from_instance` on.
    Prepare { ballot: Ballot, from_instance: Instance },
    /// Phase 1b: the sender promised `ballot`; `entries` are its accepted values from `from_instance` on (chosen
    /// ones carry [`Ballot::CHOSEN`]), in ascending order. `more` means the report was cut short and continues
    /// after the last entry.
    Promise { ballot: Ballot, from_instance: Instance, entries: Vec<(Instance, Ballot, Value)>, more: bool },
    /// The sender has promised `promised`, which outranks `rejected`.
    Nack { rejected: Ballot, promised: Ballot },
    /// Phase 2a. `chosen_up_to` piggybacks the leader's commit point (see [`MessageBody::Commit`]).
    Accept { ballot: Ballot, instance: Instance, value: Value, chosen_up_to: Instance },
    /// Phase 2b, sent only once the accepted value is durable.
    Accepted { ballot: Ballot, instance: Instance },
    /// Every instance up to `chosen_up_to` is chosen, and where the sender proposed in `ballot`, with exactly the
    /// value it proposed. A receiver that accepted at `ballot` therefore knows the chosen value; others ask for it.
    /// Doubles as the leader's heartbeat.
    Commit { ballot: Ballot, chosen_up_to: Instance },
    /// Please send chosen values from `from_instance` on.
    CatchUpRequest { from_instance: Instance },
    /// Chosen values, ascending and contiguous; the sender had chosen up to `chosen_up_to`.
    CatchUp { entries: Vec<(Instance, Value)>, chosen_up_to: Instance },
    /// The sender no longer holds instances below `first_held`: the receiver must be rebuilt from a snapshot.
    CatchUpGone { first_held: Instance },
}

impl MessageBody {
    pub fn kind(&self) -> &'static str {
        match self {
            MessageBody::Prepare { .. } => "prepare",
            MessageBody::Promise { .. } => "promise",
            MessageBody::Nack { .. } => "nack",
            MessageBody::Accept { .. } => "accept",
            MessageBody::Accepted { .. } => "accepted",
            MessageBody::Commit { .. } => "commit",
            MessageBody::CatchUpRequest { .. } => "catch_up_request",
            MessageBody::CatchUp { .. } => "catch_up",
            MessageBody::CatchUpGone { .. } => "catch_up_gone",
        }
    }
}
