//! `paxsql node`: starts every part of a node and keeps them running until asked to stop.
//!
//! Order matters: the global log first (so the served binlog is complete before any replica connects), then the
//! replication endpoint, then mariadbd (killed first if a previous process left one running: only a recovery
//! restart may bring it back, docs/ARCHITECTURE.md §5), then the role controller.
//!
//! [`run`] reads as that list: each step is a type or function of [`crate::startup`]; what the node says about
//! itself is [`crate::status`]'s. On the way down the role controller and the feeds stop first, then the client
//! ports, the relays and the replication endpoint, the global log and the peer port; mariadbd goes last, killed
//! (never a clean shutdown of a possible master).

use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use tracing::Instrument;

use paxsql_peer_transport::PeerServer;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::NodeConfig;
use crate::context::RoleContext;
use crate::driver::{offer, DriverError, Input};
use crate::roles;
use crate::startup::{
    lock_data_dir, AdminPorts, ClientPorts, GlobalLog, LocalDatabase, PeerPort, ReplicationEndpoint, Secrets,
};
use crate::status::{publish_status, Endpoints};

pub use crate::startup::NodeError;

/// Runs the node until `shutdown` becomes true.
pub async fn run(cfg: NodeConfig, mut shutdown: watch::Receiver<bool>) -> Result<(), NodeError> {
    let span = tracing::info_span!("node", node = cfg.node_id);
    let _g = span.enter();
    let secrets = Secrets::read(&cfg)?;
    let _dir_lock = lock_data_dir(&cfg)?;
    let (mut peers, peer_client) = PeerPort::start(&cfg, &secrets).await?;
    let log = GlobalLog::start(&cfg, &peers, peer_client)?;
    let replication = ReplicationEndpoint::start(&cfg, &secrets, &log, &shutdown).await?;
    let local = LocalDatabase::new(&cfg, &secrets, &peers, &log, &replication);
    let clients = ClientPorts::start(&cfg, &secrets, &mut peers, &local, &log, &shutdown).await?;
    let admin = AdminPorts::start(&cfg, &secrets, &peers, &log, &local, clients.stats.clone(), &shutdown).await?;

    // Set to work: the role controller (it starts mariadbd) and the status publisher.
    let roles_task = tokio::spawn(roles::run(
        local.ctx.clone(),
        log.driver.status.clone(),
        peers.roles.serving_tx,
        peers.roles.switchovers,
    ));
    let binlog_retention = tokio::spawn(
        crate::binlog_retention::run(local.ctx.clone(), cfg.mariadb.binlog_retain_bytes())
            .instrument(tracing::info_span!("binlog_retention", node = cfg.node_id)),
    );
    let endpoints = Endpoints::new(&cfg, replication.addr, local.directory.clone(), peers.links.clone());
    let status_task = tokio::spawn(publish_status(
        local.ctx.clone(),
        log.driver.status.clone(),
        peers.roles.serving,
        cfg.data_dir.join("status.json"),
        peers.admin.status,
        admin.view,
        endpoints,
    ));
    let running = Running {
        roles: roles_task,
        binlog_retention,
        status: status_task,
        clients,
        admin: admin.tasks,
        replication: replication.task,
    };
    tracing::info!(peer = %peers.server.local_addr(), replication = replication.addr.port(), "node running");

    until_asked_to_stop(&mut shutdown, log.driver.thread, &local.ctx, cfg.node_id).await;
    tracing::info!("node stopping");
    running.stop(&log.driver.inbox, peers.server, local.ctx).await;
    Ok(())
}

/// Returns when `shutdown` becomes true. The global-log core runs on its own thread; if it ends (a failed write or
/// fsync of the store, a full disk, a panic) nothing can be acknowledged any more and this node's view of the lease
/// goes stale: a master here must not stay writable. Then this kills mariadbd and exits non-zero with the reason;
/// the others elect a new master.
async fn until_asked_to_stop(
    shutdown: &mut watch::Receiver<bool>,
    core: std::thread::JoinHandle<Result<(), DriverError>>,
    ctx: &RoleContext,
    node_id: u64,
) {
    let core_done = tokio::task::spawn_blocking(move || core.join());
    tokio::select! {
        _ = shutdown.wait_for(|stop| *stop) => {}
        joined = core_done => {
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
            eprintln!("paxsql node {node_id}: fatal: {why}");
            std::process::exit(70);
        }
    }
}

/// What runs until the node stops, besides the global log and the peer port.
struct Running {
    roles: JoinHandle<()>,
    binlog_retention: JoinHandle<()>,
    status: JoinHandle<()>,
    clients: ClientPorts,
    admin: Vec<JoinHandle<()>>,
    replication: JoinHandle<paxsql_repl_server::Result<()>>,
}

impl Running {
    async fn stop(self, driver: &SyncSender<Input>, peer_server: PeerServer, ctx: Arc<RoleContext>) {
        self.roles.abort();
        self.binlog_retention.abort();
        self.status.abort();
        self.clients.routes.abort();
        for t in self.admin {
            t.abort();
        }
        if let Some(p) = self.clients.proxy {
            let _ = p.await;
        }
        if let Some(r) = self.clients.relays {
            // It stops on `shutdown` too; the relayed connections end with it.
            let _ = r.await;
        }
        let _ = self.replication.await;
        offer(driver, Input::Shutdown);
        peer_server.shutdown().await;
        // Dropping the context SIGKILLs mariadbd (never a clean shutdown of a possible master).
        drop(ctx);
    }
}
