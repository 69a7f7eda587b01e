//! paxsql-naming-watch: `paxsql watch`, the daemon that keeps a naming service pointed at the master.
//!
//! Applications that cannot use the paxsql client (a connection string in a file, a DNS record, a load balancer)
//! still need to follow failovers. The watcher asks every node's authenticated Admin.Status (on its peer port,
//! docs/ARCHITECTURE.md §1) every `poll_interval_ms`, trusts the node that says it is master, holds the lease and serves, with
//! the highest `master_version`, and once a new master has been seen unchanged for `debounce_ms` hands it to
//! each target: a file rewritten atomically from a template, a command, a webhook (JSON POST over HTTP). Every
//! target has its own worker that retries with doubling pauses and always moves to the newest master. A cluster
//! without a master changes nothing: the last published master stays until a new one serves.
//!
//! ```no_run
//! # async fn demo() -> Result<(), paxsql_naming_watch::WatchError> {
//! let cfg = paxsql_naming_watch::WatchConfig::load(std::path::Path::new("/etc/paxsql/watch.toml"))?;
//! let (_stop_tx, stop_rx) = tokio::sync::watch::channel(false);
//! paxsql_naming_watch::run(cfg, stop_rx).await?; // until _stop_tx sends true
//! # Ok(()) }
//! ```

pub mod config;
mod master;
mod targets;
pub mod template;
mod watcher;
pub mod webhook;

use std::path::PathBuf;

pub use config::WatchConfig;
pub use master::{pick_master, rfc3339_utc, MasterInfo};
pub use targets::{write_atomically, Target};
pub use watcher::{load_auth, run};

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("bad watch configuration: {0}")]
    Config(String),
    #[error("cannot read the cluster secret from {}: {source}", path.display())]
    Secret {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
