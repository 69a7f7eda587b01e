//! MariaDB semi-sync replication client: how paxsql captures writes on the master node.
//!
//! Place in the system (docs/ARCHITECTURE.md §3, write path): the master's mariadbd runs semi-sync master with
//! `AFTER_SYNC` and an infinite timeout, so every commit waits for a replica's ACK before InnoDB commits. The
//! binlog server is that replica: it connects with this crate as a semi-sync replica of its local mariadbd,
//! streams the binlog from the last GTID of the global log, groups events into transactions
//! ([`TransactionAssembler`]), proposes them to Paxos, and only once an instance is chosen on a majority sends
//! the ACK for the batch's last position ([`AckHandle::ack`]). Until then no other session can see the
//! transaction. Errors end the connection; the caller reconnects with [`ReplicationClient::resume`] from the
//! GTIDs it already holds.
//!
//! Why not `mysql_async`'s binlog stream: `mysql_common` panics on the `0xEF` semi-sync header and cannot send
//! ACKs (docs/ARCHITECTURE.md §8). The framing here is written for this one job, with non-panicking decoders
//! (`fuzz/`, `tests/t40_decoders.rs`).
//!
//! Run loop:
//!
//! ```no_run
//! use paxsql_repl_client::{ConnectOptions, ReplicationClient, TransactionAssembler};
//! # async fn run() -> paxsql_repl_client::Result<()> {
//! let opts = ConnectOptions::tcp("127.0.0.1", 3306, "repl", "replpw", 1001);
//! let mut client = ReplicationClient::connect(opts).await?;
//! let acks = client.ack_handle(); // move to the task that learns "chosen"
//! let mut assembler = TransactionAssembler::new();
//! loop {
//!     let event = client.next_event().await?;
//!     if let Some(trx) = assembler.push(&event)? {
//!         // propose trx.events to Paxos; once chosen (possibly later, from another task):
//!         acks.ack(&trx.end_file, trx.end_pos)?;
//!     }
//! }
//! # }
//! ```

mod client;
mod error;
mod protocol;
mod transaction;

pub use client::{AckHandle, Address, ConnectOptions, ReplicationClient, ReplicationEvent, ServerInfo};
pub use error::{Error, Result};
pub use transaction::{Transaction, TransactionAssembler};

/// Entry points for `tests/t40_decoders.rs` and the fuzz target: every decoder this crate runs on bytes from
/// the network, fed arbitrary input. Not part of the API.
#[doc(hidden)]
pub mod fuzzing {
    use bytes::BytesMut;
    use paxsql_mysql_wire::handshake::{AuthReply, Greeting};
    use paxsql_mysql_wire::packet::{self, Check};
    use paxsql_mysql_wire::replication::{SemiSyncFraming, StreamPacket};
    use paxsql_mysql_wire::resultset::{parse_column_count, parse_text_row};
    use paxsql_mysql_wire::{is_eof, is_ok, ErrPacket};

    /// Runs the packet framer over `data` and every payload parser over each framed packet and over `data`
    /// itself. Must return (with errors, silently) for any input; a panic is a bug.
    pub fn server_bytes(data: &[u8]) {
        parse_payload(data);
        let mut buf = BytesMut::from(data);
        // A small limit keeps hostile lengths cheap; 16 MiB + 1 still lets multi-chunk framing run.
        while let Ok(Check::Complete(frame)) = packet::check(&buf, (16 << 20) + 1) {
            let payload = packet::take(&mut buf, &frame);
            assert_eq!(payload.len(), frame.payload_len);
            parse_payload(&payload);
        }
    }

    fn parse_payload(p: &[u8]) {
        let _ = Greeting::decode(p);
        let _ = AuthReply::decode(p);
        let _ = ErrPacket::decode(p);
        let _ = is_ok(p);
        let _ = is_eof(p);
        let _ = parse_column_count(p);
        for columns in [1, 2, 7] {
            let _ = parse_text_row(p, columns);
        }
        for mut framing in [SemiSyncFraming::Detect, SemiSyncFraming::On, SemiSyncFraming::Off] {
            if let Ok(StreamPacket::Event { offset, .. }) = StreamPacket::decode(p, &mut framing) {
                let event = &p[offset..];
                let _ = paxsql_binlog::EventHeader::decode(event);
                for checksum in [paxsql_binlog::Checksum::Crc32, paxsql_binlog::Checksum::Off] {
                    let _ = paxsql_binlog::EventDecoder::new(checksum).decode(event);
                }
            }
        }
    }
}
