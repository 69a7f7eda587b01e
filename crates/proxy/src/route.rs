use crate::Backend;

/// Where writes go now. The node publishes it through a `tokio::sync::watch` channel; the proxy reads only this.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// A master holds a valid lease: RW connections go to its mariadbd, at `backend` (over TCP on the master's
    /// own node, through the master's relay from any other). A connection forwarded under one `Master` value is
    /// cut as soon as the published value differs in any field.
    Master { node_id: u64, master_version: u64, backend: Backend },
    /// No master is known now; `reason` is for humans ("election in progress", "this node is in a minority")
    /// and reaches clients in the ERR packet.
    NoMaster { reason: String },
}

impl Route {
    /// What a node publishes before it knows anything.
    pub fn no_master(reason: impl Into<String>) -> Self {
        Route::NoMaster { reason: reason.into() }
    }
}

/// Whether the local mariadbd may answer the read-only port: only while its data is a prefix of the global log
/// (an aligned replica, or the master). Anything else — starting, recovering, diverged, being rebuilt — could
/// show what no majority holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalServer {
    Aligned,
    /// Why not; reaches clients in the ERR packet.
    NotAligned(String),
}
