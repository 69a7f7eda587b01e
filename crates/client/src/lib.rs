//! paxsql-client: the Rust client library for a paxsql cluster, on `mysql_async`.
//!
//! Applications give it every node's read-write endpoint (the node proxies' RW ports, docs/ARCHITECTURE.md §1, §7). It finds
//! the master through any reachable node — a connection whose server answers `SELECT @@read_only` = 0 is on the
//! master — keeps a connection pool on that endpoint, and after a failover looks again, starting with the last
//! endpoint that worked, pausing with bounded exponential backoff, until a failover deadline (10 s by default).
//!
//! # What is retried, and what is not
//!
//! A failover can break a connection at any moment. Whether repeating the request is safe depends on what the
//! server may already have done:
//!
//! | failure                                                        | effect on the server   | the library      |
//! |----------------------------------------------------------------|------------------------|------------------|
//! | no connection, login refused by a proxy without master        | nothing                | retries          |
//! | statement refused: server read-only (`1290`), proxy no master | nothing                | retries          |
//! | connection lost inside a transaction, before `COMMIT` was sent | rolled back            | `run_transaction` retries the whole transaction |
//! | deadlock (`1213`)                                              | rolled back            | `run_transaction` and `execute` retry |
//! | connection lost after an autocommit write or `COMMIT` was sent | **committed or not**   | [`Error::OutcomeUnknown`], never retried |
//! | connection lost during a read ([`Client::query`])              | nothing (a read)       | retries          |
//! | any other server error (duplicate key, syntax, access denied)  | definitive answer      | returned         |
//!
//! A session killed with `KILL` or ended by a shutdown may have committed a transaction that was waiting for its
//! replication ACK (docs/ARCHITECTURE.md §3), so `1927` and `1053` count as a lost connection, not as a refusal.
//! [`Error::OutcomeUnknown`] is the application's call: look for the write with a read, or make writes
//! idempotent (a unique request id) so that repeating them is harmless.
//!
//! # Examples
//!
//! A transfer as one transaction, retried as a whole when a failover interrupts it before `COMMIT`:
//!
//! ```no_run
//! use paxsql_client::{Client, Error};
//! # async fn demo() -> Result<(), Error> {
//! let client = Client::builder()
//!     .endpoints(["10.0.0.1:3310", "10.0.0.2:3310", "10.0.0.3:3310"])
//!     .user("app")
//!     .password("secret")
//!     .database("bank")
//!     .build()?;
//! let moved = client
//!     .run_transaction(async |tx| {
//!         let balance: Option<i64> = tx.exec_first("SELECT balance FROM account WHERE id = ? FOR UPDATE", (1,)).await?;
//!         if balance.unwrap_or(0) < 10 {
//!             return Err(Error::abort("insufficient funds"));
//!         }
//!         tx.exec_drop("UPDATE account SET balance = balance - 10 WHERE id = ?", (1,)).await?;
//!         tx.exec_drop("UPDATE account SET balance = balance + 10 WHERE id = ?", (2,)).await?;
//!         Ok(10)
//!     })
//!     .await;
//! match moved {
//!     Ok(amount) => println!("moved {amount}"),
//!     Err(Error::OutcomeUnknown { .. }) => println!("the connection broke at COMMIT: check before repeating"),
//!     Err(e) => return Err(e),
//! }
//! # Ok(()) }
//! ```
//!
//! Inside a spawned task, write the closure as `async move |tx| ...` so that it captures what it uses by
//! value: a closure that borrows locals makes the task's future fail rustc's higher-ranked `Send` check.
//!
//! Single writes and reads:
//!
//! ```no_run
//! # use paxsql_client::{Client, Error};
//! # async fn demo(client: Client) -> Result<(), Error> {
//! // Autocommit write: retried only if it provably did not run.
//! let w = client.execute("INSERT INTO audit (msg) VALUES (?)", ("hello",)).await?;
//! println!("row {:?}", w.last_insert_id);
//! // Reads are retried freely.
//! let n: Option<i64> = client.query_first("SELECT COUNT(*) FROM audit", ()).await?;
//! println!("{n:?} rows, {} failovers ridden out", client.failovers());
//! # Ok(()) }
//! ```
//!
//! Through a paxsql proxy the RW port always leads to the master; when servers are addressed directly, the
//! `@@read_only` check happens when an endpoint is picked, and a write that reaches a server demoted since then
//! is refused (`1290`) and sent again to the new master.

mod client;
mod error;
mod transaction;

pub use client::{
    Client, ClientBuilder, WriteResult, DEFAULT_BACKOFF_MAX, DEFAULT_BACKOFF_MIN, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_FAILOVER_DEADLINE, DEFAULT_POOL_MAX,
};
pub use error::{classify, Error, ErrorClass, Stage, PROXY_NO_MASTER_PREFIX, PROXY_NO_MASTER_STATE};
pub use mysql_async;
pub use transaction::Transaction;
