//! The MySQL-protocol proxy of a paxsql node (docs/ARCHITECTURE.md §1, §7).
//!
//! Applications point an unchanged MySQL/MariaDB driver at a node's read-write port; the proxy forwards each
//! connection to the mariadbd of the node that holds the master lease now: the server's bytes untouched (greeting,
//! authentication, results), the client's read packet by packet so that no command can end a commit that waits
//! for its majority ([`statement`]: `KILL` is sent on as `KILL SOFT`, forms it cannot make soft are refused). A
//! client's TLS ends here ([`tls`]); compression is refused, as it would hide the commands.
//! A master on another node is reached through that node's [`relay`] on its peer port — mutual TLS with member
//! certificates, never plaintext SQL on the network — and that node accepts only while its mariadbd serves the
//! term the route names; a master on this node is checked the same way before the client is handed over
//! ([`MasterCheck`]). The read-only port forwards to the node's local mariadbd, a read-only replica unless this
//! node is the master, with the same command filter.
//!
//! The node tells the proxy where writes go by publishing a [`Route`] on a `tokio::sync::watch` channel:
//! - a new RW connection under [`Route::NoMaster`] waits up to `hold_during_election` for a master, then gets a
//!   MySQL ERR packet (1053, SQLSTATE 08S01, "paxsql: no master: <reason>") in place of the greeting — never a
//!   hang, never a bare reset; the same if the master's mariadbd does not accept within `connect_timeout`;
//! - when the route moves away from a master (another node, another `master_version`, or no master), every RW
//!   connection forwarded to it is cut at once: the server side is reset (queued bytes are dropped, not sent to
//!   the stale master) and the client side closed. The client sees a lost connection and reconnects.
//!
//! With `proxy_protocol` on, each backend connection starts with a PROXY v1 header carrying the client's
//! address, so MariaDB grants, `USER()` and `SHOW PROCESSLIST` see the real client. MariaDB must list the proxy's
//! address in `proxy_protocol_networks`. Verified on MariaDB 10.11 (tests/t20_backend.rs): a connection from a
//! listed network WITHOUT a header is still accepted as a plain connection (MariaDB looks for the header in the
//! first bytes the client sends), so the node's own admin connections over TCP or the unix socket keep working.
//!
//! ```no_run
//! use paxsql_proxy::{Proxy, ProxyConfig, Route};
//! # async fn demo() -> Result<(), paxsql_proxy::ProxyError> {
//! let (route_tx, routes) = tokio::sync::watch::channel(Route::no_master("starting"));
//! let cfg = ProxyConfig { rw_listen: Some("0.0.0.0:3306".parse().unwrap()), ..ProxyConfig::default() };
//! let proxy = Proxy::bind(cfg, routes).await?;
//! let stats = proxy.stats();
//! let (stop, stopped) = tokio::sync::watch::channel(false);
//! let task = tokio::spawn(proxy.run(stopped));
//! let backend = paxsql_proxy::Backend::Tcp("127.0.0.1:3307".parse().unwrap());
//! route_tx.send_replace(Route::Master { node_id: 2, master_version: 7, backend });
//! // ... on lease loss: route_tx.send_replace(Route::no_master("election in progress"));
//! stop.send_replace(true);
//! task.await.expect("proxy task")?;
//! println!("{:?}", stats.snapshot());
//! # Ok(()) }
//! ```

mod config;
mod error;
mod forward;
pub mod relay;
mod route;
mod server;
pub mod statement;
mod stats;
pub mod tls;
pub mod wire;

pub use config::{Backend, ForwardMode, ProxyConfig};
pub use error::ProxyError;
pub use route::{LocalServer, Route};
pub use server::{MasterCheck, PrivilegedAccounts, Proxy};
pub use stats::{ProxyStats, ProxyStatsSnapshot};
pub use tls::{ServerTls, TlsError};
