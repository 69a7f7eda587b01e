//! What the admin port and the metrics show: one snapshot of the node and the cluster as this node sees it.
//!
//! The node fills a [`ClusterView`] (from its driver status, the local mariadbd and its configuration) and
//! publishes it on a `tokio::sync::watch` channel; every admin query and every scrape reads the latest one. It
//! holds no secret: everything in it may be shown to anyone who can log in to the admin port.

use serde::Serialize;

/// This node's view of itself and of the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClusterView {
    /// This node's id.
    pub node_id: u64,
    /// e.g. "master", "replica", "candidate", "recovering" (free-form, as in the admin gRPC `StatusReply`).
    pub role: String,
    /// The master the global log names, `None` while no master is known.
    pub master_id: Option<u64>,
    /// `master_version` of the global log's state machine (bumped by every ChangeMaster).
    pub master_version: u64,
    /// Whether this node holds the master lease now.
    pub holds_lease: bool,
    /// How long the lease this node holds still runs, on the node's monotonic clock; `None` when it holds none.
    pub lease_remaining_ms: Option<u64>,
    /// Last global log instance applied to the state machine.
    pub applied_instance: u64,
    /// The local mariadbd's `@@gtid_current_pos`; `None` when it could not be read (mariadbd down).
    pub applied_gtid: Option<String>,
    /// The global log's last GTID, `domain-server-seq`; empty before the first transaction.
    pub global_last_gtid: String,
    /// Transactions in the global log the local mariadbd has not applied yet; `None` when unknown.
    pub lag_transactions: Option<u64>,
    /// This node's Paxos figures.
    pub paxos: PaxosView,
    /// Every configured member, this node included.
    pub members: Vec<MemberView>,
    /// Where clients reach the current master; `None` while no master is known.
    pub master: Option<MasterView>,
}

/// This node's Paxos figures.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PaxosView {
    /// Every instance up to this one is chosen (as far as this node knows).
    pub chosen_up_to: u64,
    /// Instances this node proposed that are not chosen yet (0 unless it leads).
    pub proposals_in_flight: u64,
    /// The highest ballot this node promised, as the driver prints it; empty when none.
    pub promised_ballot: String,
}

/// One configured member. Addresses are `host:port`; `None` when the member does not expose that endpoint or it
/// is not known.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemberView {
    pub node_id: u64,
    /// Paxos (gRPC) endpoint.
    pub peer: String,
    /// Its mariadbd's client port.
    pub mariadb: Option<String>,
    /// Its proxy's read-write port (routes to the master): known for this node only.
    pub proxy_rw: Option<String>,
    /// Its proxy's read-only port (its local mariadbd): known for this node only.
    pub proxy_ro: Option<String>,
    /// Its admin SQL port: known for this node only (the log records members' peer and mariadbd addresses).
    pub admin: Option<String>,
    /// Its role as last reported; `None` when not known.
    pub role: Option<String>,
    /// Whether this node currently reaches it (its own row: always true).
    pub reachable: bool,
}

/// The current master and where clients reach it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MasterView {
    pub node_id: u64,
    pub master_version: u64,
    /// The master's mariadbd client port.
    pub mariadb: Option<String>,
    /// The master's proxy read-write port.
    pub proxy_rw: Option<String>,
}
