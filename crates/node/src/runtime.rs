//! `paxsql node`: starts every part of a node and keeps them running until asked to stop.
//!
//! Order matters: the global log first (so the served binlog is complete before any replica connects), then the
//! replication endpoint, then mariadbd (killed first if a previous process left one running: only a recovery
//! restart may bring it back, docs/ARCHITECTURE.md §5), then the role controller.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use paxsql_global_log::PeerMessage;
use paxsql_paxos_store::RaftEngineStorage;
use paxsql_peer_transport::pb::admin_server::{Admin, AdminServer};
use paxsql_peer_transport::pb::{
    BackupChunk, BackupRequest, ChangeMembershipRequest, MembershipReply, RecordMemberRequest, ServingReply,
    ServingRequest, StatusReply, StatusRequest, SwitchoverReply, SwitchoverRequest,
};
use paxsql_peer_transport::{
    ClusterAuth, ClusterSecret as WireSecret, PeerClient, PeerPortServices, PeerServer, RelayDialer, TransportConfig,
};
use paxsql_repl_server::{ReplicationServer, ReplicationServerConfig};
use paxsql_served_binlog::ServedBinlog;
use serde::Serialize;
use tokio::sync::watch;

use crate::config::NodeConfig;
use crate::context::{LocalRole, RoleContext};
use crate::directory::Directory;
use crate::driver::{self, offer, Input, NodeStatus, Outbox};
use crate::mariadb::LocalMariaDb;
use crate::membership::MembershipDesk;
use crate::rebuild::{BackupDonor, Donors};
use crate::roles;
use paxsql_admin_sql::{
    AdminAuth, AdminSqlServer, ClusterView, MasterView, MemberView, Metrics, MetricsServer, PaxosView,
    PeerServerCounts, ServedBinlogFigures,
};
use paxsql_proxy::{Backend, LocalServer, Proxy, ProxyConfig, Route};

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("global log store: {0}")]
    Storage(#[from] paxsql_paxos::StorageError),
    #[error("peer transport: {0}")]
    Transport(#[from] paxsql_peer_transport::TransportError),
    #[error("replication endpoint: {0}")]
    Replication(#[from] paxsql_repl_server::Error),
    #[error("global log driver: {0}")]
    Driver(#[from] driver::DriverError),
    #[error("local mariadbd: {0}")]
    MariaDb(#[from] crate::mariadb::MariaDbError),
    #[error("proxy: {0}")]
    Proxy(#[from] paxsql_proxy::ProxyError),
    #[error(transparent)]
    DirLock(#[from] crate::dir_lock::DirLockError),
    #[error("[client_tls]: {0}")]
    ClientTls(#[from] paxsql_proxy::TlsError),
    #[error("cannot create the data directory {path}: {source}")]
    DataDir {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the served binlog: {0}")]
    ServedBinlog(#[from] paxsql_served_binlog::Error),
    #[error("{0} is required")]
    MissingSetting(&'static str),
    #[error("{what} {addr}: {source}")]
    Admin {
        what: &'static str,
        addr: std::net::SocketAddr,
        #[source]
        source: paxsql_admin_sql::AdminError,
    },
}

/// The peer links, driven from the driver's thread; new links are spawned on the node's runtime.
struct TransportOutbox {
    client: PeerClient,
    runtime: tokio::runtime::Handle,
    links: Links,
}

impl Outbox for TransportOutbox {
    fn send(&mut self, msg: PeerMessage) {
        self.client.send(msg);
    }

    fn set_address(&mut self, node: u64, peer: &str) {
        let _runtime = self.runtime.enter();
        match self.client.set_peer(node, peer) {
            Ok(()) => {
                tracing::info!(node, peer, "peer address from the log");
                if let (Some(sender), Ok(mut links)) = (self.client.sender(node), self.links.write()) {
                    links.insert(node, sender.connected_flag());
                }
            }
            Err(e) => tracing::error!(node, peer, error = %e, "the address recorded for this member cannot be used"),
        }
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

/// Runs the node until `shutdown` becomes true.
pub async fn run(cfg: NodeConfig, mut shutdown: watch::Receiver<bool>) -> Result<(), NodeError> {
    let span = tracing::info_span!("node", node = cfg.node_id);
    let _g = span.enter();
    let secret = cfg.read_cluster_secret()?;
    let repl_password = NodeConfig::read_password(&cfg.mariadb.replication_password_file)?;
    let admin_password = NodeConfig::read_password(&cfg.mariadb.admin_password_file)?;
    // Before anything starts: a certificate that cannot be used stops the node with the file's name.
    let client_tls = match &cfg.client_tls {
        Some(t) => Some(paxsql_proxy::ServerTls::load(&t.cert, &t.key)?),
        None => None,
    };
    let client_tls_required = cfg.client_tls.as_ref().is_some_and(|t| t.require);
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|source| NodeError::DataDir { path: cfg.data_dir.clone(), source })?;
    // Before any port or file is touched: a second node on this directory must change nothing.
    let _dir_lock = crate::dir_lock::DataDirLock::acquire(&cfg.data_dir)?;

    // Peers.
    let mut tcfg = TransportConfig::new(cfg.node_id, cfg.cluster_id.clone(), WireSecret::new(secret.expose()));
    tcfg.max_message_bytes = cfg.peer_message_bytes();
    // Talk to peers from the address we listen on: the peers (and any firewall) then see who is speaking.
    tcfg.local_address = Some(cfg.listen.peer.ip()).filter(|ip| !ip.is_unspecified());
    tcfg.tls = cfg.tls.clone();
    // The admin status service shares the peer port and its cluster authentication.
    let (admin_status_tx, admin_status) = watch::channel(StatusReply::default());
    let auth = ClusterAuth::new(&cfg.cluster_id, &tcfg.cluster_secret)?;
    let (admin_donor, donor_slot) = watch::channel(None);
    // Which term (if any) the local mariadbd serves as master: set by the role controller after a promotion and
    // cleared before a demotion kills mariadbd.
    let (serving_tx, serving) = watch::channel(None);
    // Operators' switchovers, carried out by the role controller (it owns the local database).
    let (switchover_tx, switchover_rx) = tokio::sync::mpsc::channel(4);
    // Membership changes reach the driver, which starts below.
    let (membership_tx, membership) = watch::channel(None);
    let admin_service = AdminService {
        status: admin_status,
        donor: donor_slot,
        serving: serving.clone(),
        switchover: switchover_tx,
        membership,
    };
    let routes = tonic::service::Routes::new(AdminServer::with_interceptor(admin_service, auth.interceptor()));
    // Relays too: the other members' RW ports reach this node's mariadbd through this port while it is master.
    let also = PeerPortServices { routes: Some(routes), relays: true };
    // Peer messages go straight from the stream that received them into the driver's inbox (no task between);
    // until the driver runs they are dropped, as on a full inbox (Paxos retransmits).
    let driver_inbox: Arc<std::sync::OnceLock<std::sync::mpsc::SyncSender<Input>>> = Arc::default();
    let deliver: paxsql_peer_transport::Inbox = {
        let slot = driver_inbox.clone();
        Arc::new(move |m| {
            use paxsql_peer_transport::Delivery;
            match slot.get().map(|inbox| inbox.try_send(Input::Peer(m))) {
                Some(Ok(())) => Delivery::Delivered,
                None | Some(Err(std::sync::mpsc::TrySendError::Full(_))) => Delivery::Full,
                Some(Err(std::sync::mpsc::TrySendError::Disconnected(_))) => Delivery::Closed,
            }
        })
    };
    let mut peer_server = PeerServer::bind_into(cfg.listen.peer, &tcfg, also, deliver).await?;
    let relays = peer_server.take_relays();
    let mut client = PeerClient::new(&tcfg)?;
    for m in cfg.known_members().filter(|m| m.id != cfg.node_id) {
        client.set_peer(m.id, &m.peer.to_string())?;
    }
    let links: Links = Arc::new(std::sync::RwLock::new(client.peers().map(|p| (p.to(), p.connected_flag())).collect()));

    // Global log, feeding the served binlog.
    let served = cfg.served_binlog.resolve(&cfg.data_dir);
    let source = Arc::new(ServedBinlog::open(served)?);
    let store = RaftEngineStorage::open(&cfg.data_dir.join("global-log"))?;
    let sink = Box::new(crate::feed::ServedBinlogFeed(source.clone()));
    let handle = driver::start(
        cfg.global_log_config(),
        store,
        Box::new(TransportOutbox { client, runtime: tokio::runtime::Handle::current(), links: links.clone() }),
        sink,
    )?;
    let inbox = handle.inbox.clone();
    membership_tx.send_replace(Some(MembershipDesk { inbox: inbox.clone(), status: handle.status.clone() }));
    let _ = driver_inbox.set(inbox.clone());

    // Replication endpoint for the local mariadbd.
    let repl_addr = cfg
        .listen
        .replication
        .ok_or(NodeError::MissingSetting("listen.replication (the local mariadbd replicates from it)"))?;
    let rcfg = ReplicationServerConfig {
        replica_user: cfg.mariadb.replication_user.clone(),
        replica_password: repl_password.clone(),
        server_id: (3_000_000_000u64 + cfg.node_id) as u32,
        ..ReplicationServerConfig::default()
    };
    let repl_server = ReplicationServer::bind(repl_addr, rcfg, source.clone()).await?;
    let repl_port = repl_server.local_addr().port();
    let repl_task = tokio::spawn(repl_server.run(shutdown.clone()));

    // mariadbd: the role controller starts it, always in recovery mode (killed first if a previous process left one
    // running: only a recovery restart may bring it back, docs/ARCHITECTURE.md §5).
    let defaults_file = cfg.mariadb.defaults_file.clone().unwrap_or_else(|| cfg.data_dir.join("my.cnf"));
    let log_entry_bytes = cfg.global_log_config().max_value_bytes;
    let db = LocalMariaDb::new(cfg.mariadb.clone(), defaults_file.clone(), admin_password.clone(), log_entry_bytes);
    let (local_tx, local_role) = watch::channel(LocalRole::Down("starting".into()));
    let donor = Arc::new(BackupDonor::new(cfg.mariadb.clone(), defaults_file, admin_password, cfg.data_dir.clone()));
    admin_donor.send_replace(Some((donor, local_role.clone())));

    let metrics = Metrics::new(cfg.node_id);
    let directory = Directory::from_config(&cfg);
    let ctx = Arc::new(RoleContext {
        node_id: cfg.node_id,
        mariadb: tokio::sync::Mutex::new(db),
        mariadb_config: cfg.mariadb.clone(),
        socket: cfg.mariadb.socket.clone(),
        replication_host: repl_addr.ip().to_string(),
        replication_port: repl_port,
        replication_user: cfg.mariadb.replication_user.clone(),
        replication_password: repl_password,
        inbox: inbox.clone(),
        applied: handle.applied.clone(),
        global_binlog: source.clone(),
        donors: Donors {
            node_id: cfg.node_id,
            directory: directory.clone(),
            recorded: handle.status.clone(),
            auth: auth.clone(),
            tls: tcfg.tls.clone(),
        },
        local: local_tx,
        metrics: metrics.clone(),
    });
    // The proxy: writes go to the master while this node sees its lease; reads to the local server, over its unix
    // socket (a replica's mariadbd refuses logins over TCP: `require_secure_transport`, lifted only at promotion).
    let local_mariadb = paxsql_proxy::Backend::Unix(cfg.mariadb.socket.clone());
    // Where the other nodes' proxies reach this mariadbd over TCP while it is the master.
    let local_mariadb_tcp = cfg
        .known_members()
        .find(|m| m.id == cfg.node_id)
        .and_then(|m| m.mariadb)
        .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], cfg.mariadb.port)));
    let (route_tx, route_rx) = watch::channel(Route::no_master("the node is starting"));
    let mut proxy_task = None;
    let mut proxy_stats = None;
    if cfg.listen.proxy_rw.is_some() || cfg.listen.proxy_ro.is_some() {
        let pcfg = ProxyConfig {
            rw_listen: cfg.listen.proxy_rw,
            ro_listen: cfg.listen.proxy_ro,
            local_backend: local_mariadb,
            hold_during_election: Duration::from_millis(cfg.proxy.hold_during_election_ms),
            proxy_protocol: cfg.proxy.proxy_protocol,
            max_connections: cfg.proxy.max_connections,
            tls: client_tls.clone(),
            tls_required: client_tls_required,
            relay: Some(Arc::new(RelayDialer::new(&tcfg)?)),
            node_accounts: [cfg.mariadb.admin_user.clone(), cfg.mariadb.replication_user.clone()].into(),
            ..ProxyConfig::default()
        };
        let check = master_check(cfg.node_id, serving.clone());
        let proxy = Proxy::bind(pcfg, route_rx)
            .await?
            .with_master_check(check)
            .with_local_server(local_server(local_role.clone()))
            .with_privileged_accounts(privileged_accounts(ctx.clone(), shutdown.clone()));
        tracing::info!(rw = ?proxy.rw_addr(), ro = ?proxy.ro_addr(), "proxy listening");
        proxy_stats = Some(proxy.stats());
        proxy_task = Some(tokio::spawn(proxy.run(shutdown.clone())));
    }
    let route_task = tokio::spawn(publish_routes(
        cfg.node_id,
        local_mariadb_tcp,
        directory.clone(),
        handle.status.clone(),
        serving.clone(),
        route_tx,
    ));
    // The other members' RW connections to this node's mariadbd while it is master.
    // Counted with the proxy's own figures (a node without client ports still relays as master).
    let proxy_stats: Arc<paxsql_proxy::ProxyStats> = proxy_stats.unwrap_or_default();
    let relay_target = paxsql_proxy::relay::RelayTarget {
        mariadb: local_mariadb_tcp,
        proxy_protocol: cfg.proxy.proxy_protocol,
        connect_timeout: ProxyConfig::default().connect_timeout,
    };
    let relay_task = relays.map(|relays| {
        tokio::spawn(paxsql_proxy::relay::serve_relays(
            relays,
            serving.clone(),
            relay_target,
            proxy_stats.clone(),
            shutdown.clone(),
        ))
    });

    // Admin SQL port and Prometheus metrics, both fed from the status published below.
    let (view_tx, view_rx) = watch::channel(ClusterView::default());
    let mut admin_tasks = Vec::new();
    if let Some(addr) = cfg.listen.admin {
        let password_file =
            cfg.admin.password_file.as_ref().ok_or(NodeError::MissingSetting("[admin] password_file"))?;
        let auth = AdminAuth {
            user: cfg.admin.user.clone().unwrap_or_else(|| "paxsql".into()),
            password: NodeConfig::read_password(password_file)?,
        };
        let stop_admin = shutdown.clone();
        let server = AdminSqlServer::bind(addr, auth, view_rx.clone())
            .await
            .map(|server| server.with_tls(client_tls.clone(), client_tls_required))
            .map_err(|source| NodeError::Admin { what: "admin SQL port", addr, source })?;
        admin_tasks.push(tokio::spawn(async move {
            let _ = server.run(stop_admin).await;
        }));
    }
    if let Some(addr) = cfg.listen.metrics {
        let server = MetricsServer::bind(addr, metrics.clone(), view_rx.clone())
            .await
            .map_err(|source| NodeError::Admin { what: "metrics endpoint", addr, source })?;
        let stop = shutdown.clone();
        admin_tasks.push(tokio::spawn(async move {
            let _ = server.run(stop).await;
        }));
        let metrics = metrics.clone();
        let peer_stats = peer_server.stats().clone();
        let served = source.clone();
        admin_tasks.push(tokio::spawn(async move {
            let read = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
            loop {
                metrics.update_proxy(proxy_stats.snapshot());
                metrics.update_peer_server(PeerServerCounts {
                    calls_rejected: read(&peer_stats.calls_rejected),
                    forged: read(&peer_stats.forged),
                    malformed: read(&peer_stats.malformed),
                    misaddressed: read(&peer_stats.misaddressed),
                    inbox_full: read(&peer_stats.dropped_inbox_full),
                });
                let s = served.stats();
                metrics.update_served_binlog(ServedBinlogFigures {
                    disk_bytes: s.disk_bytes,
                    segments: s.segments as u64,
                    transactions: s.next_index - s.first_index,
                    cache_bytes: s.cache_bytes as u64,
                    lookups: served.take_lookup_times(),
                });
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }));
    }

    let roles_task = tokio::spawn(roles::run(ctx.clone(), handle.status.clone(), serving_tx, switchover_rx));
    let status_path = cfg.data_dir.join("status.json");
    let endpoints = Endpoints {
        host: repl_addr.ip().to_string(),
        mariadb_port: cfg.mariadb.port,
        peer: cfg.listen.peer.to_string(),
        replication_port: repl_port,
        proxy_rw: cfg.listen.proxy_rw.map(|a| a.to_string()),
        proxy_ro: cfg.listen.proxy_ro.map(|a| a.to_string()),
        admin: cfg.listen.admin.map(|a| a.to_string()),
        directory: directory.clone(),
        links,
    };
    let status_task = tokio::spawn(publish_status(
        ctx.clone(),
        handle.status.clone(),
        serving,
        status_path,
        admin_status_tx,
        view_tx,
        endpoints,
    ));
    tracing::info!(peer = %peer_server.local_addr(), replication = repl_port, "node running");

    // The global-log core runs on its own thread; if it ends (a failed write or fsync of the store, a full disk, a
    // panic) nothing can be acknowledged any more and this node's view of the lease goes stale: a master here must
    // not stay writable. Kill mariadbd and exit non-zero with the reason; the others elect a new master.
    let driver_thread = handle.thread;
    let driver_done = tokio::task::spawn_blocking(move || driver_thread.join());
    tokio::select! {
        _ = shutdown.wait_for(|stop| *stop) => {}
        joined = driver_done => {
            let why = match joined {
                Ok(Ok(Ok(()))) => "the global-log core stopped".to_string(),
                Ok(Ok(Err(e))) => format!("the global-log core failed: {e}"),
                Ok(Err(_)) => "the global-log core panicked".to_string(),
                Err(e) => format!("the global-log core could not be watched: {e}"),
            };
            tracing::error!(%why, "fatal: killing mariadbd and exiting");
            match ctx.mariadb.try_lock() {
                Ok(mut db) => db.kill9(),
                // The role controller holds it (a start or a rebuild): mariadbd dies with this process anyway
                // (PR_SET_PDEATHSIG), the exit follows at once.
                Err(_) => tracing::warn!("mariadbd is busy; it dies with the node process"),
            }
            eprintln!("paxsql node {}: fatal: {why}", cfg.node_id);
            std::process::exit(70);
        }
    }
    tracing::info!("node stopping");
    roles_task.abort();
    status_task.abort();
    route_task.abort();
    for t in admin_tasks {
        t.abort();
    }
    if let Some(p) = proxy_task {
        let _ = p.await;
    }
    if let Some(r) = relay_task {
        // It stops on `shutdown` too; the relayed connections end with it.
        let _ = r.await;
    }
    let _ = repl_task.await;
    offer(&inbox, Input::Shutdown);
    peer_server.shutdown().await;
    // Dropping the context SIGKILLs mariadbd (never a clean shutdown of a possible master).
    drop(ctx);
    Ok(())
}

struct Endpoints {
    host: String,
    mariadb_port: u16,
    peer: String,
    replication_port: u16,
    proxy_rw: Option<String>,
    proxy_ro: Option<String>,
    admin: Option<String>,
    directory: Directory,
    /// Whether this node's outgoing stream to each other node is open (the peer transport's own flag); links to
    /// members added later join when the log records their address.
    links: Links,
}

type Links = Arc<std::sync::RwLock<std::collections::HashMap<u64, Arc<std::sync::atomic::AtomicBool>>>>;

impl Endpoints {
    /// A member this node reaches: itself, or one its peer link is connected to.
    fn reachable(&self, me: u64, id: u64) -> bool {
        id == me
            || self
                .links
                .read()
                .is_ok_and(|links| links.get(&id).is_some_and(|up| up.load(std::sync::atomic::Ordering::Relaxed)))
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

/// Where the proxy sends writes, from what this node knows. A stale master must never serve (docs/ARCHITECTURE.md §5): the
/// local server only while it serves the current term under a held lease, another member's only while this node
/// has seen that master's lease renewed less than a lease ago — and then through that member's relay, whose node
/// accepts only while it serves the term itself.
fn route_for(
    node_id: u64,
    local: std::net::SocketAddr,
    directory: &Directory,
    st: &NodeStatus,
    serving: Option<u64>,
) -> Route {
    if st.master_id == 0 {
        return Route::no_master("no master elected yet (election in progress)");
    }
    if st.master_id == node_id {
        return match serving {
            Some(v) if st.holds_lease && v == st.master_version => {
                Route::Master { node_id, master_version: v, backend: Backend::Tcp(local) }
            }
            _ => Route::no_master("this node is taking over as master (election in progress)"),
        };
    }
    if !st.master_lease_seen {
        return Route::no_master(
            "the master's lease is not current here (election in progress, or this node is cut off)",
        );
    }
    let addr = match directory.address(st, st.master_id).map(|a| a.peer.parse()) {
        Some(Ok(addr)) => Some(addr),
        Some(Err(_)) => {
            return Route::no_master(format!("node {} is master but its recorded address is not usable", st.master_id))
        }
        None => None,
    };
    match addr {
        Some(addr) => Route::Master {
            node_id: st.master_id,
            master_version: st.master_version,
            backend: Backend::Relay { node_id: st.master_id, addr },
        },
        None => Route::no_master(format!("node {} is master but is not a configured member", st.master_id)),
    }
}

async fn publish_routes(
    node_id: u64,
    local: std::net::SocketAddr,
    directory: Directory,
    mut status: watch::Receiver<NodeStatus>,
    mut serving: watch::Receiver<Option<u64>>,
    routes: watch::Sender<Route>,
) {
    loop {
        let route = route_for(node_id, local, &directory, &status.borrow_and_update(), *serving.borrow_and_update());
        routes.send_if_modified(|r| {
            if *r == route {
                return false;
            }
            tracing::info!(?route, "proxy route");
            *r = route;
            true
        });
        tokio::select! {
            _ = status.changed() => {}
            _ = serving.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// The RO port's view of the local database: aligned only as a replica of the global log or as its master.
fn local_server(mut role: watch::Receiver<LocalRole>) -> watch::Receiver<LocalServer> {
    let view = |r: &LocalRole| match r {
        LocalRole::Replica | LocalRole::Master(_) => LocalServer::Aligned,
        other => LocalServer::NotAligned(match other.detail() {
            d if d.is_empty() => other.name().to_string(),
            d => format!("{}: {d}", other.name()),
        }),
    };
    let (tx, rx) = watch::channel(view(&role.borrow_and_update()));
    tokio::spawn(async move {
        while role.changed().await.is_ok() {
            let next = view(&role.borrow_and_update());
            tx.send_if_modified(|s| std::mem::replace(s, next.clone()) != next);
        }
    });
    rx
}

/// The accounts the RO port refuses, read from the local server every second while it runs (a GRANT reaches a
/// replica through the log like any other statement). Until the first read the list is empty.
fn privileged_accounts(ctx: Arc<RoleContext>, mut shutdown: watch::Receiver<bool>) -> paxsql_proxy::PrivilegedAccounts {
    let (tx, rx) = watch::channel(Arc::new(std::collections::BTreeSet::new()));
    tokio::spawn(async move {
        loop {
            let serving = matches!(*ctx.local.borrow(), LocalRole::Replica | LocalRole::Master(_));
            if serving {
                match ctx.mariadb.lock().await.privileged_users().await {
                    Ok(names) => {
                        tx.send_if_modified(|cur| {
                            let changed = **cur != names;
                            if changed {
                                tracing::info!(accounts = ?names, "accounts the read-only port refuses (READ ONLY ADMIN)");
                                *cur = Arc::new(names);
                            }
                            changed
                        });
                    }
                    Err(e) => tracing::debug!(error = %e, "cannot read the privileged accounts"),
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = shutdown.changed() => return,
            }
        }
    });
    rx
}

/// The RW port's confirmation that this node's mariadbd serves the term its route names, asked after the greeting
/// (a master on another node is asked by its own node, through the relay).
fn master_check(node_id: u64, serving: watch::Receiver<Option<u64>>) -> paxsql_proxy::MasterCheck {
    Arc::new(move |master: u64, master_version: u64| {
        let yes = master == node_id && *serving.borrow() == Some(master_version);
        Box::pin(std::future::ready(yes))
    })
}

/// The admin service on the peer port: `Status` (the latest status, as published below) and `Backup` (a copy of
/// the local database for a member being rebuilt, only while the local database is an aligned replica).
struct AdminService {
    status: watch::Receiver<StatusReply>,
    donor: watch::Receiver<Option<(Arc<BackupDonor>, watch::Receiver<LocalRole>)>>,
    serving: watch::Receiver<Option<u64>>,
    switchover: tokio::sync::mpsc::Sender<crate::switchover::SwitchoverRequest>,
    membership: watch::Receiver<Option<MembershipDesk>>,
}

impl AdminService {
    /// Operators' changes come with the operator's certificate (or, without TLS, the cluster secret), never over
    /// another member's link, and only the serving master carries them out.
    fn operator_at_master<T>(&self, request: &tonic::Request<T>, what: &str) -> Result<(), tonic::Status> {
        if let Some(paxsql_peer_transport::identity::PeerIdentity::Member(id)) =
            paxsql_peer_transport::identity::caller(request)
        {
            tracing::warn!(caller = id, what, "refused an operator's request made with a member's certificate");
            return Err(tonic::Status::permission_denied(format!("{what} is asked with the operator's certificate")));
        }
        if self.serving.borrow().is_none() {
            let st = self.status.borrow();
            return Err(tonic::Status::failed_precondition(format!(
                "node {} does not serve as master; it sees node {} as master (term {})",
                st.node_id, st.master_id, st.master_version
            )));
        }
        Ok(())
    }

    fn membership_desk(&self) -> Result<MembershipDesk, tonic::Status> {
        self.membership.borrow().clone().ok_or_else(|| tonic::Status::unavailable("the node is starting"))
    }
}

#[tonic::async_trait]
impl Admin for AdminService {
    async fn switchover(
        &self,
        request: tonic::Request<SwitchoverRequest>,
    ) -> Result<tonic::Response<SwitchoverReply>, tonic::Status> {
        use crate::switchover::{SwitchoverError, SwitchoverRequest as Asked};
        self.operator_at_master(&request, "a switchover")?;
        let req = request.into_inner();
        let drain_timeout =
            Duration::from_millis(if req.drain_timeout_ms == 0 { 5_000 } else { req.drain_timeout_ms.min(600_000) });
        let (reply, answer) = tokio::sync::oneshot::channel();
        let asked = Asked {
            to: Some(req.to).filter(|t| *t != 0),
            drain_timeout,
            deadline: std::time::Instant::now() + Duration::from_secs(2),
            reply,
        };
        if self.switchover.try_send(asked).is_err() {
            return Err(tonic::Status::unavailable("another switchover is under way"));
        }
        let done = match tokio::time::timeout(drain_timeout + Duration::from_secs(10), answer).await {
            Ok(Ok(Ok(done))) => done,
            Ok(Ok(Err(e @ SwitchoverError::NotMaster { .. }))) => {
                return Err(tonic::Status::failed_precondition(e.to_string()))
            }
            Ok(Ok(Err(e))) => return Err(tonic::Status::aborted(e.to_string())),
            Ok(Err(_)) => return Err(tonic::Status::unavailable("the node is stopping")),
            Err(_) => return Err(tonic::Status::deadline_exceeded("no answer from the role controller")),
        };
        Ok(tonic::Response::new(SwitchoverReply {
            successor: done.successor,
            master_version: done.master_version,
            drained_gtid: done.drained_gtid,
            drain_ms: done.drain.as_millis() as u64,
        }))
    }

    async fn record_member(
        &self,
        request: tonic::Request<RecordMemberRequest>,
    ) -> Result<tonic::Response<MembershipReply>, tonic::Status> {
        self.operator_at_master(&request, "a membership change")?;
        let req = request.into_inner();
        let reply = self.membership_desk()?.record(req.node_id, &req.peer, &req.mariadb).await?;
        Ok(tonic::Response::new(reply))
    }

    async fn change_membership(
        &self,
        request: tonic::Request<ChangeMembershipRequest>,
    ) -> Result<tonic::Response<MembershipReply>, tonic::Status> {
        self.operator_at_master(&request, "a membership change")?;
        let req = request.into_inner();
        let reply = self.membership_desk()?.change(req.add, req.remove).await?;
        Ok(tonic::Response::new(reply))
    }

    async fn status(&self, _: tonic::Request<StatusRequest>) -> Result<tonic::Response<StatusReply>, tonic::Status> {
        Ok(tonic::Response::new(self.status.borrow().clone()))
    }

    async fn serving(
        &self,
        request: tonic::Request<ServingRequest>,
    ) -> Result<tonic::Response<ServingReply>, tonic::Status> {
        let asked = request.into_inner().master_version;
        Ok(tonic::Response::new(ServingReply { serving: *self.serving.borrow() == Some(asked) }))
    }

    type BackupStream = tokio_stream::wrappers::ReceiverStream<Result<BackupChunk, tonic::Status>>;

    async fn backup(
        &self,
        request: tonic::Request<BackupRequest>,
    ) -> Result<tonic::Response<Self::BackupStream>, tonic::Status> {
        let Some((donor, local)) = self.donor.borrow().clone() else {
            return Err(tonic::Status::unavailable("this node is still starting"));
        };
        let role = local.borrow().clone();
        let from_master = request.get_ref().from_master && matches!(role, LocalRole::Master(_));
        if role != LocalRole::Replica && !from_master {
            return Err(tonic::Status::failed_precondition(format!(
                "only an aligned replica (or, when none can, the master) gives copies; this node's database is {}",
                role.name()
            )));
        }
        if from_master {
            tracing::warn!(requester = request.get_ref().requester, "no replica can give a copy: the master sends one");
        }
        // With TLS a copy of the database goes only to the member that asks for it, as its certificate proves:
        // an operator's certificate (status, watch) or another member's cannot fetch one.
        let requester = request.get_ref().requester;
        if let Some(who) = paxsql_peer_transport::identity::caller(&request) {
            if who != paxsql_peer_transport::identity::PeerIdentity::Member(requester) {
                tracing::warn!(requester, ?who, "refused a database copy: the certificate does not name the requester");
                return Err(tonic::Status::permission_denied(
                    "a database copy goes only to the member that asks for it, as its certificate names it",
                ));
            }
        }
        let rx = donor.start(requester)?;
        Ok(tonic::Response::new(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }
}

/// Writes `status.json`, feeds the admin status service and tells the global log how far the local database has
/// applied (candidate preference).
async fn publish_status(
    ctx: Arc<RoleContext>,
    status: watch::Receiver<NodeStatus>,
    serving: watch::Receiver<Option<u64>>,
    path: PathBuf,
    admin: watch::Sender<StatusReply>,
    view: watch::Sender<ClusterView>,
    endpoints: Endpoints,
) {
    let mut last_pid = None;
    // The last reading of the local position, and when: the role controller holds the database for a moment at
    // every check round, and a reading one round old is better than a lag shown as unknown.
    let mut last_reading: Option<(String, u64, std::time::Instant)> = None;
    loop {
        let st = status.borrow().clone();
        let local_role = ctx.local.borrow().clone();
        let mut pid = last_pid;
        // A rebuild or a start holds the database for a long time: report without it meanwhile.
        if let Ok(db) = ctx.mariadb.try_lock() {
            pid = db.pid();
            last_pid = pid;
            if let Ok(pos) = db.query_string("SELECT @@GLOBAL.gtid_current_pos").await {
                let seq = pos.split(',').filter_map(|g| g.rsplit('-').next()?.parse::<u64>().ok()).max().unwrap_or(0);
                offer(&ctx.inbox, Input::SetProgress(seq));
                last_reading = Some((pos, seq, std::time::Instant::now()));
            }
        }
        let fresh = last_reading.as_ref().filter(|(_, _, at)| at.elapsed() < Duration::from_secs(2));
        let local_gtid = fresh.map(|(pos, _, _)| pos.clone());
        let local_seq = fresh.map(|(_, seq, _)| *seq);
        let serving_master = serving.borrow().is_some();
        let mut details = std::collections::HashMap::new();
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
        details.insert("mariadbd_pid".to_string(), pid.map(|p| p.to_string()).unwrap_or_default());
        details.insert("serving_as_master".to_string(), serving_master.to_string());
        details.insert("database".to_string(), local_role.name().to_string());
        let why = local_role.detail();
        if !why.is_empty() {
            details.insert("database_detail".to_string(), why);
        }
        // A log without a transaction yet: a database that answered is 0 behind it.
        let lag = local_seq.map(|local| st.last_seq.map_or(0, |global| global.saturating_sub(local)));
        if let Some(lag) = lag {
            details.insert("lag_transactions".to_string(), lag.to_string());
        }
        let members = endpoints.members(&st);
        admin.send_replace(StatusReply {
            node_id: st.node_id,
            role: if serving_master { "master".into() } else { st.role.clone() },
            master_id: st.master_id,
            master_version: st.master_version,
            holds_lease: st.holds_lease,
            applied_instance: st.applied,
            last_gtid: st.last_gtid.clone(),
            members: st.members.clone(),
            peers: members
                .iter()
                .map(|(id, addr, _)| paxsql_peer_transport::pb::PeerEndpoint {
                    node_id: *id,
                    address: addr.clone(),
                    connected: *id != st.node_id && endpoints.reachable(st.node_id, *id),
                })
                .collect(),
            chosen_up_to: st.applied,
            details,
        });
        let me = st.node_id;
        let mine = |id: u64, what: &Option<String>| if id == me { what.clone() } else { None };
        view.send_replace(ClusterView {
            node_id: me,
            role: if serving_master { "master".into() } else { local_role.name().to_string() },
            master_id: Some(st.master_id).filter(|m| *m != 0),
            master_version: st.master_version,
            holds_lease: st.holds_lease,
            lease_remaining_ms: st.holds_lease.then(|| st.lease_until_unix_ms.saturating_sub(unix_now_ms())),
            applied_instance: st.applied,
            applied_gtid: local_gtid.clone(),
            global_last_gtid: st.last_gtid.clone(),
            lag_transactions: lag,
            paxos: PaxosView {
                chosen_up_to: st.applied,
                proposals_in_flight: st.proposals_in_flight,
                promised_ballot: st.promised.clone(),
            },
            members: members
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
                mariadb: members.iter().find(|(id, _, _)| *id == m).and_then(|(_, _, mariadb)| mariadb.clone()),
                proxy_rw: mine(m, &endpoints.proxy_rw),
            }),
        });
        let file = StatusFile {
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
            database: local_role.name(),
            database_detail: local_role.detail(),
            database_gtid: local_gtid.clone(),
            lag_transactions: lag,
            mariadbd_pid: pid,
            node_pid: std::process::id(),
        };
        if let Ok(json) = serde_json::to_vec_pretty(&file) {
            let tmp = path.with_extension("json.tmp");
            if std::fs::write(&tmp, json).is_ok() {
                let _ = std::fs::rename(&tmp, &path);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Wall-clock ms since the Unix epoch (0 if the clock is before it).
fn unix_now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
