//! Carrying out a node's output: the one order in which a [`NodeReady`]'s parts may leave the core, for the
//! daemon's driver thread and the simulator alike — each says only *how* a part goes out ([`ReadyIo`]), never
//! *when*, so the simulator exercises the daemon's own ordering.
//!
//! The order, and why:
//! 1. **messages** — they carry nothing this node must hold on disk first (those are in `after_persist`), so they
//!    leave at once;
//! 2. **chosen values and their effects**, in log order — a majority of acceptors holds each chosen value on disk
//!    already (an acceptor's vote, this node's included, counts only after its sync), so they need not wait for
//!    this batch, which only records locally what is chosen; a crash before the sync loses that record, not the
//!    value. Releasing them first takes one fsync off every semi-sync ACK;
//! 3. **catch-ups answered from storage** — before the batch, which may compact what a laggard asked for;
//! 4. **the batch, then `after_persist`** — promises and accepts may be answered only once durable.

use paxsql_paxos::{CatchUpRead, Instance, Value, WriteBatch};

use crate::node::{NodeReady, PeerMessage};
use crate::state::Applied;

/// Where the parts of a [`NodeReady`] go.
pub trait ReadyIo {
    type Error;

    /// A message that needs nothing durable first, to a peer or to this node itself.
    fn send(&mut self, msg: PeerMessage);

    /// A newly chosen value, before the effects of applying it.
    fn chosen(&mut self, _instance: Instance, _value: &Value) -> Result<(), Self::Error> {
        Ok(())
    }

    /// One effect of applying the chosen values, in log order.
    fn applied(&mut self, effect: Applied) -> Result<(), Self::Error>;

    /// A catch-up a member asked for below what the core holds in memory, to answer from storage.
    fn catch_up(&mut self, read: CatchUpRead) -> Result<(), Self::Error>;

    /// Writes `batch` (if not empty); `after` may leave only once it is durable.
    fn persist(&mut self, batch: WriteBatch, after: Vec<PeerMessage>) -> Result<(), Self::Error>;
}

impl NodeReady {
    /// Hands every part of this output to `io`, in the order above. `rebuild_required` and `term_given_up` are
    /// reports for the caller to read first; they need no ordering.
    pub fn carry_out<I: ReadyIo>(self, io: &mut I) -> Result<(), I::Error> {
        for m in self.messages {
            io.send(m);
        }
        for (instance, value) in &self.chosen {
            io.chosen(*instance, value)?;
        }
        for effect in self.applied {
            io.applied(effect)?;
        }
        for read in self.catch_up_reads {
            io.catch_up(read)?;
        }
        io.persist(self.batch, self.after_persist)
    }
}
