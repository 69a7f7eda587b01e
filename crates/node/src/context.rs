//! What the role controller, the capture and a switchover share about their node: its mariadbd, the driver's
//! inbox and applied effects, the served binlog, the donors of a rebuild — and what the local database is doing.

use std::sync::mpsc::SyncSender;
use std::sync::Arc;

use paxsql_global_log::Applied;
use paxsql_served_binlog::ServedBinlog;
use tokio::sync::{broadcast, watch};

use crate::config::MariaDbConfig;
use crate::driver::Input;
use crate::mariadb::LocalMariaDb;
use crate::rebuild::{Donors, RebuildProgress};

/// What the role controller needs to know about its node.
pub struct RoleContext {
    pub node_id: u64,
    pub mariadb: tokio::sync::Mutex<LocalMariaDb>,
    pub mariadb_config: MariaDbConfig,
    pub socket: std::path::PathBuf,
    pub replication_host: String,
    pub replication_port: u16,
    pub replication_user: String,
    pub replication_password: String,
    pub inbox: SyncSender<Input>,
    pub applied: broadcast::Sender<Applied>,
    /// The global binlog as served to replicas: the alignment check looks the local position up in it.
    pub global_binlog: Arc<ServedBinlog>,
    /// Where a rebuild gets its copy from.
    pub donors: Donors,
    /// What the local database is doing, for status, donors and candidacy.
    pub local: watch::Sender<LocalRole>,
    /// Prometheus series the capture feeds (ACKs and their latency).
    pub metrics: paxsql_admin_sql::Metrics,
}

/// What the local database is doing now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalRole {
    /// Not running (yet, or it failed to start: the reason).
    Down(String),
    /// Running, but its GTID state is not (yet) a prefix of the global log: it serves nothing.
    NotAligned(String),
    /// Its data is being replaced by a copy of a healthy member's.
    Rebuilding(RebuildProgress),
    /// A read-only replica of the global log.
    Replica,
    /// The master of this term.
    Master(u64),
}

impl LocalRole {
    /// One word, for status columns and the `database` status detail.
    pub fn name(&self) -> &'static str {
        match self {
            LocalRole::Down(_) => "down",
            LocalRole::NotAligned(_) => "not-aligned",
            LocalRole::Rebuilding(_) => "rebuilding",
            LocalRole::Replica => "replica",
            LocalRole::Master(_) => "master",
        }
    }

    /// The reason or progress behind the name, if any.
    pub fn detail(&self) -> String {
        match self {
            LocalRole::Down(r) | LocalRole::NotAligned(r) => r.clone(),
            LocalRole::Rebuilding(p) => p.to_string(),
            LocalRole::Replica | LocalRole::Master(_) => String::new(),
        }
    }
}
