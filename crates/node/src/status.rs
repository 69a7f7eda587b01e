//! What a running node says about itself — to the admin service on the peer port, to the admin SQL port and the
//! metrics (the cluster view), and in `status.json` in its data directory — gathered every half second from the
//! global log, the role controller and the local database.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use paxsql_admin_sql::{ClusterView, MasterView, MemberView, PaxosView};
use paxsql_peer_transport::pb::{PeerEndpoint, StatusReply};
use serde::Serialize;
use tokio::sync::watch;

use crate::config::NodeConfig;
use crate::context::{LocalRole, RoleContext};
use crate::directory::Directory;
use crate::driver::{offer, Input, NodeStatus};

/// Whether this node's outgoing stream to each other node is open (the peer transport's own flag); links to
/// members added later join when the log records their address.
pub(crate) type Links = Arc<RwLock<HashMap<u64, Arc<AtomicBool>>>>;

/// Where this node and the other members are reached, as the status names them.
pub(crate) struct Endpoints {
    host: String,
    mariadb_port: u16,
    peer: String,
    replication_port: u16,
    proxy_rw: Option<String>,
    proxy_ro: Option<String>,
    admin: Option<String>,
    directory: Directory,
    links: Links,
}

impl Endpoints {
    /// This node's endpoints from its config, but for the replication endpoint: its port is the one it bound.
    pub(crate) fn new(cfg: &NodeConfig, replication: SocketAddr, directory: Directory, links: Links) -> Endpoints {
        Endpoints {
            host: replication.ip().to_string(),
            mariadb_port: cfg.mariadb.port,
            peer: cfg.listen.peer.to_string(),
            replication_port: replication.port(),
            proxy_rw: cfg.listen.proxy_rw.map(|a| a.to_string()),
            proxy_ro: cfg.listen.proxy_ro.map(|a| a.to_string()),
            admin: cfg.listen.admin.map(|a| a.to_string()),
            directory,
            links,
        }
    }

    /// A member this node reaches: itself, or one its peer link is connected to.
    fn reachable(&self, me: u64, id: u64) -> bool {
        id == me || self.links.read().is_ok_and(|links| links.get(&id).is_some_and(|up| up.load(Ordering::Relaxed)))
    }

    /// The current members with their peer and mariadbd addresses.
    fn members(&self, st: &NodeStatus) -> Vec<(u64, String, Option<String>)> {
        st.members
            .iter()
            .map(|id| match self.directory.address(st, *id) {
                Some(a) => (*id, a.peer.clone(), Some(a.mariadb.clone()).filter(|m| !m.is_empty())),
                None => (*id, String::new(), None),
            })
            .collect()
    }
}

/// What `status.json` in the data directory says (for `paxsql cluster status` and people).
#[derive(Serialize)]
struct StatusFile<'a> {
    node_id: u64,
    role: &'a str,
    master_id: u64,
    master_version: u64,
    holds_lease: bool,
    /// Until when (wall-clock ms since the Unix epoch) this node holds the lease; absent when it does not. A
    /// paused process's file keeps `holds_lease: true`, while this deadline shows that the lease ran out.
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_until_unix_ms: Option<u64>,
    serving_as_master: bool,
    applied_instance: u64,
    /// The first instance the Paxos log holds (the compaction floor).
    log_first_held: u64,
    global_last_gtid: &'a str,
    members: &'a [u64],
    /// What the local database is doing: down, not-aligned, rebuilding, replica, master.
    database: &'a str,
    /// Why, or how far (a rebuild's progress).
    database_detail: String,
    /// The local server's `gtid_current_pos`, when the node could read it this round.
    #[serde(skip_serializing_if = "Option::is_none")]
    database_gtid: Option<String>,
    /// How many transactions of the global log the local server has yet to apply (0 on a master that serves).
    /// A replica minutes behind looks healthy otherwise, and a failover to it takes as long as it needs to catch up.
    #[serde(skip_serializing_if = "Option::is_none")]
    lag_transactions: Option<u64>,
    mariadbd_pid: Option<u32>,
    node_pid: u32,
}

/// Writes `status.json`, feeds the admin status service and the cluster view, and tells the global log how far the
/// local database has applied (candidate preference).
pub(crate) async fn publish_status(
    ctx: Arc<RoleContext>,
    status: watch::Receiver<NodeStatus>,
    serving: watch::Receiver<Option<u64>>,
    path: PathBuf,
    admin: watch::Sender<StatusReply>,
    view: watch::Sender<ClusterView>,
    endpoints: Endpoints,
) {
    let mut last = LastReading::default();
    loop {
        let figures = gather(&ctx, &status, &serving, &endpoints, &mut last).await;
        admin.send_replace(status_reply(&figures, &endpoints));
        view.send_replace(cluster_view(&figures, &endpoints));
        write_status_file(&path, &status_file(&figures, &serving));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What earlier rounds read of the local database: the role controller holds the database for a moment at every
/// check round, and a reading one round old is better than a lag shown as unknown.
#[derive(Default)]
struct LastReading {
    mariadbd_pid: Option<u32>,
    /// `gtid_current_pos`, its highest sequence number, and when it was read.
    position: Option<(String, u64, Instant)>,
}

/// One round's figures, read once so that every output of the round says the same.
struct Figures {
    st: NodeStatus,
    local_role: LocalRole,
    mariadbd_pid: Option<u32>,
    /// The local position, when read less than two seconds ago.
    local_gtid: Option<String>,
    serving_master: bool,
    lag: Option<u64>,
    members: Vec<(u64, String, Option<String>)>,
}

async fn gather(
    ctx: &RoleContext,
    status: &watch::Receiver<NodeStatus>,
    serving: &watch::Receiver<Option<u64>>,
    endpoints: &Endpoints,
    last: &mut LastReading,
) -> Figures {
    let st = status.borrow().clone();
    let local_role = ctx.local.borrow().clone();
    let mut mariadbd_pid = last.mariadbd_pid;
    // A rebuild or a start holds the database for a long time: report without it meanwhile.
    if let Ok(db) = ctx.mariadb.try_lock() {
        mariadbd_pid = db.pid();
        last.mariadbd_pid = mariadbd_pid;
        if let Ok(pos) = db.query_string("SELECT @@GLOBAL.gtid_current_pos").await {
            let seq = pos.split(',').filter_map(|g| g.rsplit('-').next()?.parse::<u64>().ok()).max().unwrap_or(0);
            offer(&ctx.inbox, Input::SetProgress(seq));
            last.position = Some((pos, seq, Instant::now()));
        }
    }
    let fresh = last.position.as_ref().filter(|(_, _, at)| at.elapsed() < Duration::from_secs(2));
    let local_gtid = fresh.map(|(pos, _, _)| pos.clone());
    let local_seq = fresh.map(|(_, seq, _)| *seq);
    let serving_master = serving.borrow().is_some();
    // A log without a transaction yet: a database that answered is 0 behind it.
    let lag = local_seq.map(|local| st.last_seq.map_or(0, |global| global.saturating_sub(local)));
    let members = endpoints.members(&st);
    Figures { st, local_role, mariadbd_pid, local_gtid, serving_master, lag, members }
}

/// The admin service's answer to `Status` (what `paxsql status` shows).
fn status_reply(f: &Figures, endpoints: &Endpoints) -> StatusReply {
    let st = &f.st;
    let mut details = HashMap::new();
    details.insert("mariadb".to_string(), format!("{}:{}", endpoints.host, endpoints.mariadb_port));
    details.insert("replication".to_string(), format!("{}:{}", endpoints.host, endpoints.replication_port));
    details.insert("peer".to_string(), endpoints.peer.clone());
    if let Some(a) = &endpoints.proxy_rw {
        details.insert("proxy_rw".to_string(), a.clone());
    }
    if let Some(a) = &endpoints.proxy_ro {
        details.insert("proxy_ro".to_string(), a.clone());
    }
    details.insert("node_pid".to_string(), std::process::id().to_string());
    details.insert("mariadbd_pid".to_string(), f.mariadbd_pid.map(|p| p.to_string()).unwrap_or_default());
    details.insert("serving_as_master".to_string(), f.serving_master.to_string());
    details.insert("database".to_string(), f.local_role.name().to_string());
    let why = f.local_role.detail();
    if !why.is_empty() {
        details.insert("database_detail".to_string(), why);
    }
    if let Some(lag) = f.lag {
        details.insert("lag_transactions".to_string(), lag.to_string());
    }
    StatusReply {
        node_id: st.node_id,
        role: if f.serving_master { "master".into() } else { st.role.clone() },
        master_id: st.master_id,
        master_version: st.master_version,
        holds_lease: st.holds_lease,
        applied_instance: st.applied,
        last_gtid: st.last_gtid.clone(),
        members: st.members.clone(),
        peers: f
            .members
            .iter()
            .map(|(id, addr, _)| PeerEndpoint {
                node_id: *id,
                address: addr.clone(),
                connected: *id != st.node_id && endpoints.reachable(st.node_id, *id),
            })
            .collect(),
        chosen_up_to: st.applied,
        details,
    }
}

/// What the admin SQL port and the metrics show.
fn cluster_view(f: &Figures, endpoints: &Endpoints) -> ClusterView {
    let st = &f.st;
    let me = st.node_id;
    let mine = |id: u64, what: &Option<String>| if id == me { what.clone() } else { None };
    ClusterView {
        node_id: me,
        role: if f.serving_master { "master".into() } else { f.local_role.name().to_string() },
        master_id: Some(st.master_id).filter(|m| *m != 0),
        master_version: st.master_version,
        holds_lease: st.holds_lease,
        lease_remaining_ms: st.holds_lease.then(|| st.lease_until_unix_ms.saturating_sub(unix_now_ms())),
        applied_instance: st.applied,
        applied_gtid: f.local_gtid.clone(),
        global_last_gtid: st.last_gtid.clone(),
        lag_transactions: f.lag,
        paxos: PaxosView {
            chosen_up_to: st.applied,
            proposals_in_flight: st.proposals_in_flight,
            promised_ballot: st.promised.clone(),
        },
        members: f
            .members
            .iter()
            .map(|(id, peer, mariadb)| MemberView {
                node_id: *id,
                peer: peer.clone(),
                mariadb: mariadb.clone(),
                proxy_rw: mine(*id, &endpoints.proxy_rw),
                proxy_ro: mine(*id, &endpoints.proxy_ro),
                admin: mine(*id, &endpoints.admin),
                role: Some(if *id == st.master_id { "master" } else { "member" }.to_string()),
                reachable: endpoints.reachable(me, *id),
            })
            .collect(),
        master: Some(st.master_id).filter(|m| *m != 0).map(|m| MasterView {
            node_id: m,
            master_version: st.master_version,
            mariadb: f.members.iter().find(|(id, _, _)| *id == m).and_then(|(_, _, mariadb)| mariadb.clone()),
            proxy_rw: mine(m, &endpoints.proxy_rw),
        }),
    }
}

/// `serving_as_master` is read afresh as the file is written: `cluster up` and `cluster status` find the master by it.
fn status_file<'a>(f: &'a Figures, serving: &watch::Receiver<Option<u64>>) -> StatusFile<'a> {
    let st = &f.st;
    StatusFile {
        node_id: st.node_id,
        role: &st.role,
        master_id: st.master_id,
        master_version: st.master_version,
        holds_lease: st.holds_lease,
        lease_until_unix_ms: Some(st.lease_until_unix_ms).filter(|_| st.holds_lease),
        serving_as_master: serving.borrow().is_some(),
        applied_instance: st.applied,
        log_first_held: st.log_first_held,
        global_last_gtid: &st.last_gtid,
        members: &st.members,
        database: f.local_role.name(),
        database_detail: f.local_role.detail(),
        database_gtid: f.local_gtid.clone(),
        lag_transactions: f.lag,
        mariadbd_pid: f.mariadbd_pid,
        node_pid: std::process::id(),
    }
}

/// Replaced whole (written beside, then renamed): a reader never sees half a file.
fn write_status_file(path: &Path, file: &StatusFile<'_>) {
    if let Ok(json) = serde_json::to_vec_pretty(file) {
        let tmp = path.with_extension("json.tmp");
        if std::fs::write(&tmp, json).is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }
}

/// Wall-clock ms since the Unix epoch (0 if the clock is before it).
fn unix_now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
