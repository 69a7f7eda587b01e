//! The steps by which `runtime::run` starts a node, one type or function a step, each handing the later ones what
//! it started: the secrets and the data directory's lock, the peer port with its admin service, the global log
//! feeding the served binlog, the replication endpoint, the local database's role context, the client ports, and
//! the admin SQL port with the metrics. Why they start in this order is said at the top of runtime.rs.

use std::net::SocketAddr;
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use paxsql_admin_sql::{
    AdminAuth, AdminSqlServer, ClusterView, Metrics, MetricsServer, PeerServerCounts, ServedBinlogFigures,
};
use paxsql_global_log::PeerMessage;
use paxsql_paxos_store::RaftEngineStorage;
use paxsql_peer_transport::pb::admin_server::AdminServer;
use paxsql_peer_transport::{
    ClusterAuth, ClusterSecret as WireSecret, IncomingRelay, PeerClient, PeerPortServices, PeerServer, RelayDialer,
    ServerStats, TransportConfig,
};
use paxsql_proxy::{Proxy, ProxyConfig, ProxyStats, Route, ServerTls};
use paxsql_repl_server::{ReplicationServer, ReplicationServerConfig};
use paxsql_served_binlog::ServedBinlog;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::admin_service::{AdminFeeds, AdminService};
use crate::config::{ClusterSecret, NodeConfig};
use crate::context::{LocalRole, RoleContext};
use crate::dir_lock::DataDirLock;
use crate::directory::Directory;
use crate::driver::{self, DriverHandle, Input, Outbox};
use crate::mariadb::LocalMariaDb;
use crate::membership::MembershipDesk;
use crate::proxy_feeds::{local_server, master_check, privileged_accounts, publish_routes};
use crate::rebuild::{BackupDonor, Donors};
use crate::status::Links;
use crate::switchover::SwitchoverRequest;

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

/// The node's secrets and the client ports' certificate, read before anything starts: a file that cannot be used
/// stops the node with the file's name.
pub(crate) struct Secrets {
    pub cluster: ClusterSecret,
    pub replication_password: String,
    pub admin_password: String,
    pub client_tls: Option<ServerTls>,
    pub client_tls_required: bool,
}

impl Secrets {
    pub(crate) fn read(cfg: &NodeConfig) -> Result<Secrets, NodeError> {
        let cluster = cfg.read_cluster_secret()?;
        let replication_password = NodeConfig::read_password(&cfg.mariadb.replication_password_file)?;
        let admin_password = NodeConfig::read_password(&cfg.mariadb.admin_password_file)?;
        let client_tls = match &cfg.client_tls {
            Some(t) => Some(ServerTls::load(&t.cert, &t.key)?),
            None => None,
        };
        let client_tls_required = cfg.client_tls.as_ref().is_some_and(|t| t.require);
        Ok(Secrets { cluster, replication_password, admin_password, client_tls, client_tls_required })
    }
}

/// Creates the data directory and locks it, before any port or file is touched: a second node on this directory
/// must change nothing. The node holds the lock until it has stopped.
pub(crate) fn lock_data_dir(cfg: &NodeConfig) -> Result<DataDirLock, NodeError> {
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|source| NodeError::DataDir { path: cfg.data_dir.clone(), source })?;
    Ok(DataDirLock::acquire(&cfg.data_dir)?)
}

/// Which term (if any) the local mariadbd serves as master, and the operators' switchovers: the role controller's
/// to set and to carry out (it owns the local database), made here because the admin service reads and asks them.
pub(crate) struct RoleChannels {
    /// Set by the role controller after a promotion and cleared before a demotion kills mariadbd.
    pub serving_tx: watch::Sender<Option<u64>>,
    pub serving: watch::Receiver<Option<u64>>,
    pub switchovers: mpsc::Receiver<SwitchoverRequest>,
}

/// The peer port and what shares it: the Paxos traffic, the admin service with its cluster authentication, and the
/// relays by which the other members' RW ports reach this node's mariadbd while it is master.
pub(crate) struct PeerPort {
    pub transport: TransportConfig,
    pub auth: ClusterAuth,
    pub server: PeerServer,
    /// Until the client ports take them.
    pub relays: Option<mpsc::Receiver<IncomingRelay>>,
    pub links: Links,
    /// The driver's inbox, once it runs: the peer port delivers into it from the start.
    driver_inbox: Arc<OnceLock<SyncSender<Input>>>,
    pub admin: AdminFeeds,
    pub roles: RoleChannels,
}

impl PeerPort {
    /// Binds the peer port and opens the links to the configured members: the links go to the global log, which
    /// starts next.
    pub(crate) async fn start(cfg: &NodeConfig, secrets: &Secrets) -> Result<(PeerPort, PeerClient), NodeError> {
        let mut transport =
            TransportConfig::new(cfg.node_id, cfg.cluster_id.clone(), WireSecret::new(secrets.cluster.expose()));
        transport.max_message_bytes = cfg.peer_message_bytes();
        // Talk to peers from the address we listen on: the peers (and any firewall) then see who is speaking.
        transport.local_address = Some(cfg.listen.peer.ip()).filter(|ip| !ip.is_unspecified());
        transport.tls = cfg.tls.clone();
        // The admin status service shares the peer port and its cluster authentication.
        let auth = ClusterAuth::new(&cfg.cluster_id, &transport.cluster_secret)?;
        let (serving_tx, serving) = watch::channel(None);
        let (switchover_tx, switchovers) = mpsc::channel(4);
        let (service, admin) = AdminService::new(serving.clone(), switchover_tx);
        let routes = tonic::service::Routes::new(AdminServer::with_interceptor(service, auth.interceptor()));
        // Relays too: the other members' RW ports reach this node's mariadbd through this port while it is master.
        let also = PeerPortServices { routes: Some(routes), relays: true };
        let driver_inbox: Arc<OnceLock<SyncSender<Input>>> = Arc::default();
        let deliver = deliver_to(driver_inbox.clone());
        let mut server = PeerServer::bind_into(cfg.listen.peer, &transport, also, deliver).await?;
        let relays = server.take_relays();
        let mut client = PeerClient::new(&transport)?;
        for m in cfg.known_members().filter(|m| m.id != cfg.node_id) {
            client.set_peer(m.id, &m.peer.to_string())?;
        }
        let links: Links =
            Arc::new(std::sync::RwLock::new(client.peers().map(|p| (p.to(), p.connected_flag())).collect()));
        let roles = RoleChannels { serving_tx, serving, switchovers };
        Ok((PeerPort { transport, auth, server, relays, links, driver_inbox, admin, roles }, client))
    }
}

/// Peer messages go straight from the stream that received them into the driver's inbox (no task between); until
/// the driver runs they are dropped, as on a full inbox (Paxos retransmits).
fn deliver_to(slot: Arc<OnceLock<SyncSender<Input>>>) -> paxsql_peer_transport::Inbox {
    Arc::new(move |m| {
        use paxsql_peer_transport::Delivery;
        match slot.get().map(|inbox| inbox.try_send(Input::Peer(m))) {
            Some(Ok(())) => Delivery::Delivered,
            None | Some(Err(std::sync::mpsc::TrySendError::Full(_))) => Delivery::Full,
            Some(Err(std::sync::mpsc::TrySendError::Disconnected(_))) => Delivery::Closed,
        }
    })
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

/// The global log, run by its driver over the peer links, feeding the served binlog.
pub(crate) struct GlobalLog {
    pub binlog: Arc<ServedBinlog>,
    pub driver: DriverHandle,
    /// The node's Prometheus series (the driver, the capture, the ports and the served binlog feed them).
    pub metrics: Metrics,
}

impl GlobalLog {
    /// From here the peer port delivers into the driver, and the admin service takes membership changes.
    pub(crate) fn start(cfg: &NodeConfig, peers: &PeerPort, client: PeerClient) -> Result<GlobalLog, NodeError> {
        let served = cfg.served_binlog.resolve(&cfg.data_dir);
        let binlog = Arc::new(ServedBinlog::open(served)?);
        let store = RaftEngineStorage::open(&cfg.data_dir.join("global-log"))?;
        let sink = Box::new(crate::feed::ServedBinlogFeed(binlog.clone()));
        let outbox = TransportOutbox { client, runtime: tokio::runtime::Handle::current(), links: peers.links.clone() };
        // Created here, the first user: the driver times its Paxos rounds into it.
        let metrics = Metrics::new(cfg.node_id);
        let driver = driver::start(cfg.global_log_config(), store, Box::new(outbox), sink, metrics.clone())?;
        let desk = MembershipDesk { inbox: driver.inbox.clone(), status: driver.status.clone() };
        peers.admin.membership.send_replace(Some(desk));
        let _ = peers.driver_inbox.set(driver.inbox.clone());
        Ok(GlobalLog { binlog, driver, metrics })
    }
}

/// The replication endpoint the local mariadbd replicates from: the served binlog.
pub(crate) struct ReplicationEndpoint {
    /// The configured address, with the port bound.
    pub addr: SocketAddr,
    pub task: JoinHandle<paxsql_repl_server::Result<()>>,
}

impl ReplicationEndpoint {
    pub(crate) async fn start(
        cfg: &NodeConfig,
        secrets: &Secrets,
        log: &GlobalLog,
        shutdown: &watch::Receiver<bool>,
    ) -> Result<ReplicationEndpoint, NodeError> {
        let addr = cfg
            .listen
            .replication
            .ok_or(NodeError::MissingSetting("listen.replication (the local mariadbd replicates from it)"))?;
        let rcfg = ReplicationServerConfig {
            replica_user: cfg.mariadb.replication_user.clone(),
            replica_password: secrets.replication_password.clone(),
            server_id: (3_000_000_000u64 + cfg.node_id) as u32,
            ..ReplicationServerConfig::default()
        };
        let server = ReplicationServer::bind(addr, rcfg, log.binlog.clone()).await?;
        let port = server.local_addr().port();
        let task = tokio::spawn(server.run(shutdown.clone()));
        Ok(ReplicationEndpoint { addr: SocketAddr::new(addr.ip(), port), task })
    }
}

/// The local mariadbd and what the role controller, the status and the ports share about it.
pub(crate) struct LocalDatabase {
    pub ctx: Arc<RoleContext>,
    /// What the local database is doing (the role controller says).
    pub role: watch::Receiver<LocalRole>,
    pub metrics: Metrics,
    pub directory: Directory,
}

impl LocalDatabase {
    /// mariadbd itself is started later by the role controller, always in recovery mode (killed first if a previous
    /// process left one running: only a recovery restart may bring it back, docs/ARCHITECTURE.md §5). From here the
    /// admin service can give copies of it.
    pub(crate) fn new(
        cfg: &NodeConfig,
        secrets: &Secrets,
        peers: &PeerPort,
        log: &GlobalLog,
        replication: &ReplicationEndpoint,
    ) -> LocalDatabase {
        let admin_password = secrets.admin_password.clone();
        let defaults_file = cfg.mariadb.defaults_file.clone().unwrap_or_else(|| cfg.data_dir.join("my.cnf"));
        let db = LocalMariaDb::new(cfg.mariadb.clone(), defaults_file.clone(), admin_password.clone());
        let (local_tx, role) = watch::channel(LocalRole::Down("starting".into()));
        let donor =
            Arc::new(BackupDonor::new(cfg.mariadb.clone(), defaults_file, admin_password, cfg.data_dir.clone()));
        peers.admin.donor.send_replace(Some((donor, role.clone())));

        let metrics = log.metrics.clone();
        let directory = Directory::from_config(cfg);
        let ctx = Arc::new(RoleContext {
            node_id: cfg.node_id,
            mariadb: tokio::sync::Mutex::new(db),
            mariadb_config: cfg.mariadb.clone(),
            socket: cfg.mariadb.socket.clone(),
            replication_host: replication.addr.ip().to_string(),
            replication_port: replication.addr.port(),
            replication_user: cfg.mariadb.replication_user.clone(),
            replication_password: secrets.replication_password.clone(),
            inbox: log.driver.inbox.clone(),
            applied: log.driver.applied.clone(),
            global_binlog: log.binlog.clone(),
            donors: Donors {
                node_id: cfg.node_id,
                directory: directory.clone(),
                recorded: log.driver.status.clone(),
                auth: peers.auth.clone(),
                tls: peers.transport.tls.clone(),
            },
            local: local_tx,
            metrics: metrics.clone(),
        });
        LocalDatabase { ctx, role, metrics, directory }
    }
}

/// The client side: the RW and RO ports (when configured) with the route they follow, and the relays of the other
/// members' RW connections to this node's mariadbd while it is master.
pub(crate) struct ClientPorts {
    pub proxy: Option<JoinHandle<Result<(), paxsql_proxy::ProxyError>>>,
    pub routes: JoinHandle<()>,
    pub relays: Option<JoinHandle<()>>,
    /// The proxy's figures, the relayed connections counted with them (a node without client ports still relays
    /// as master).
    pub stats: Arc<ProxyStats>,
}

impl ClientPorts {
    pub(crate) async fn start(
        cfg: &NodeConfig,
        secrets: &Secrets,
        peers: &mut PeerPort,
        local: &LocalDatabase,
        log: &GlobalLog,
        shutdown: &watch::Receiver<bool>,
    ) -> Result<ClientPorts, NodeError> {
        let serving = &peers.roles.serving;
        // Writes go to the master while this node sees its lease; reads to the local server, over its unix socket (a
        // replica's mariadbd refuses logins over TCP: `require_secure_transport`, lifted only at promotion).
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
                tls: secrets.client_tls.clone(),
                tls_required: secrets.client_tls_required,
                relay: Some(Arc::new(RelayDialer::new(&peers.transport)?)),
                node_accounts: [cfg.mariadb.admin_user.clone(), cfg.mariadb.replication_user.clone()].into(),
                ..ProxyConfig::default()
            };
            let check = master_check(cfg.node_id, serving.clone());
            let proxy = Proxy::bind(pcfg, route_rx)
                .await?
                .with_master_check(check)
                .with_local_server(local_server(local.role.clone()))
                .with_privileged_accounts(privileged_accounts(local.ctx.clone(), shutdown.clone()));
            tracing::info!(rw = ?proxy.rw_addr(), ro = ?proxy.ro_addr(), "proxy listening");
            proxy_stats = Some(proxy.stats());
            proxy_task = Some(tokio::spawn(proxy.run(shutdown.clone())));
        }
        let route_task = tokio::spawn(publish_routes(
            cfg.node_id,
            local_mariadb_tcp,
            local.directory.clone(),
            log.driver.status.clone(),
            serving.clone(),
            route_tx,
        ));
        let stats: Arc<ProxyStats> = proxy_stats.unwrap_or_default();
        let relay_target = paxsql_proxy::relay::RelayTarget {
            mariadb: local_mariadb_tcp,
            proxy_protocol: cfg.proxy.proxy_protocol,
            connect_timeout: ProxyConfig::default().connect_timeout,
        };
        let relay_task = peers.relays.take().map(|relays| {
            tokio::spawn(paxsql_proxy::relay::serve_relays(
                relays,
                serving.clone(),
                relay_target,
                stats.clone(),
                shutdown.clone(),
            ))
        });
        Ok(ClientPorts { proxy: proxy_task, routes: route_task, relays: relay_task, stats })
    }
}

/// The admin SQL port and the Prometheus metrics, both showing the cluster view the status publisher sends here.
pub(crate) struct AdminPorts {
    pub view: watch::Sender<ClusterView>,
    pub tasks: Vec<JoinHandle<()>>,
}

impl AdminPorts {
    pub(crate) async fn start(
        cfg: &NodeConfig,
        secrets: &Secrets,
        peers: &PeerPort,
        log: &GlobalLog,
        local: &LocalDatabase,
        proxy_stats: Arc<ProxyStats>,
        shutdown: &watch::Receiver<bool>,
    ) -> Result<AdminPorts, NodeError> {
        let (view, view_rx) = watch::channel(ClusterView::default());
        let mut tasks = Vec::new();
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
                .map(|server| server.with_tls(secrets.client_tls.clone(), secrets.client_tls_required))
                .map_err(|source| NodeError::Admin { what: "admin SQL port", addr, source })?;
            tasks.push(tokio::spawn(async move {
                let _ = server.run(stop_admin).await;
            }));
        }
        if let Some(addr) = cfg.listen.metrics {
            let server = MetricsServer::bind(addr, local.metrics.clone(), view_rx.clone())
                .await
                .map_err(|source| NodeError::Admin { what: "metrics endpoint", addr, source })?;
            let stop = shutdown.clone();
            tasks.push(tokio::spawn(async move {
                let _ = server.run(stop).await;
            }));
            let peer_stats = peers.server.stats().clone();
            tasks.push(tokio::spawn(feed_metrics(local.metrics.clone(), proxy_stats, peer_stats, log.binlog.clone())));
        }
        Ok(AdminPorts { view, tasks })
    }
}

/// Every second, the figures the metrics take from the proxy, the peer port and the served binlog.
async fn feed_metrics(metrics: Metrics, proxy: Arc<ProxyStats>, peer: Arc<ServerStats>, served: Arc<ServedBinlog>) {
    let read = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    loop {
        metrics.update_proxy(proxy.snapshot());
        metrics.update_peer_server(PeerServerCounts {
            calls_rejected: read(&peer.calls_rejected),
            forged: read(&peer.forged),
            malformed: read(&peer.malformed),
            misaddressed: read(&peer.misaddressed),
            inbox_full: read(&peer.dropped_inbox_full),
        });
        let s = served.stats();
        metrics.update_served_binlog(ServedBinlogFigures {
            disk_bytes: s.disk_bytes,
            segments: s.segments as u64,
            transactions: s.next_index - s.first_index,
            cache_bytes: s.cache_bytes as u64,
            ..lookup_figures(served.take_lookup_times())
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn lookup_figures(times: Vec<paxsql_served_binlog::LookupTime>) -> ServedBinlogFigures {
    ServedBinlogFigures {
        lookups: times.iter().map(|t| t.wall).collect(),
        lookup_lock_waits: times.iter().map(|t| t.lock_wait).collect(),
        lookup_cpu: times.iter().map(|t| t.cpu).collect(),
        ..Default::default()
    }
}
