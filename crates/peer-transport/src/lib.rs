//! The wire between paxsql nodes.
//!
//! Each node's binlog server is a Paxos member (docs/ARCHITECTURE.md §1, §6). This crate carries
//! [`PeerMessage`](paxsql_global_log::PeerMessage)s — Paxos messages and anti-entropy status — between them on
//! [`link`]s: one connection per sender and receiver, length-prefixed protobuf frames (`proto/paxsql.proto`,
//! package `paxsql.v1`). The Paxos core is sans-IO and tolerates lost, duplicated and reordered messages, so the
//! transport never blocks it: outgoing messages go into a bounded per-peer queue that drops the oldest entry when
//! full, incoming ones into a bounded inbox that drops when the node falls behind; both count what they drop. The
//! same port serves the admin API over gRPC (tonic) and [`relay`]s.
//!
//! Run loop of a node:
//!
//! ```no_run
//! # async fn run() -> Result<(), paxsql_peer_transport::TransportError> {
//! use paxsql_peer_transport::{ClusterSecret, PeerClient, PeerServer, TransportConfig};
//! let cfg = TransportConfig::new(1, "prod-eu", ClusterSecret::new("a long random shared secret"));
//! let (server, mut inbox) = PeerServer::bind("10.0.0.1:7100".parse().unwrap(), &cfg).await?;
//! let mut peers = PeerClient::new(&cfg)?;
//! peers.set_peer(2, "10.0.0.2:7100")?;
//! peers.set_peer(3, "10.0.0.3:7100")?;
//! while let Some(msg) = inbox.recv().await {
//!     // node.step(msg, now); then for every outgoing message in node.take_ready(): peers.send(m)
//! #   let _ = msg;
//! }
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Every link, relay and gRPC call carries the cluster id and the cluster secret ([`auth`]); with a `tls` section
//! the connection is mutual TLS, and each member's certificate binds its node id ([`identity`]). Without TLS the secret crosses the network in clear: run plaintext only on a network
//! you trust.
//!
//! The same port carries [`relay`]s: a member's proxy reaching the master's mariadbd through the master's node,
//! with the same credentials, so that no SQL crosses the network outside this port's TLS.

pub mod auth;
mod client;
mod config;
pub mod convert;
mod error;
mod frame;
pub mod identity;
pub mod link;
pub mod relay;
mod server;
mod stream;
mod tls;

/// Generated protobuf messages and gRPC stubs for `paxsql.v1`.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("paxsql.v1");
}

pub use auth::{ClusterAuth, ClusterSecret};
pub use client::{peer_endpoint, PeerClient, PeerSender, SenderStats};
pub use config::{TlsConfig, TransportConfig};
pub use convert::{decode_envelope, open_envelope, seal_envelope};
pub use error::TransportError;
pub use relay::{IncomingRelay, RelayDialer, RelayError, RelayRequest};
pub use server::{Delivery, Inbox, PeerPortServices, PeerServer, ServerStats};
pub use stream::PortStream;
