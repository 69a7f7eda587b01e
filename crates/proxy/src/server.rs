//! The listeners and the per-connection handlers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, info_span, warn, Instrument as _};

use paxsql_peer_transport::RelayRequest;

use paxsql_listener::{AcceptLoop, WhenFull};

use crate::forward::{open_backend, open_relay, serve_client, unreachable, ClientRules};
use crate::wire::{connection_failure, too_many_connections, ErrPacket, ProxyHeader};
use crate::{Backend, LocalServer, ProxyConfig, ProxyError, ProxyStats, Route};

/// After shutdown, how long `run` waits for connection tasks to close their sockets.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(5);
/// Bound on writing an ERR packet to a client that does not read.
const ERR_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Asks the node of a master whether its mariadbd serves as master in a term right now: `(node_id,
/// master_version) -> yes`. The RW port calls it after the backend greeted and before the client is handed over;
/// `false` (or no answer) holds the client as during an election. A route can be stale (another node's view of a
/// lease that is still running while that master already resigned and restarted its mariadbd); the master's own
/// node cannot be.
pub type MasterCheck =
    Arc<dyn Fn(u64, u64) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>> + Send + Sync>;

/// A bound proxy: listeners open, not serving yet. Call [`Proxy::run`].
pub struct Proxy {
    cfg: ProxyConfig,
    rw: Option<TcpListener>,
    ro: Option<TcpListener>,
    routes: watch::Receiver<Route>,
    stats: Arc<ProxyStats>,
    master_check: Option<MasterCheck>,
    local: Option<watch::Receiver<LocalServer>>,
    privileged: Option<PrivilegedAccounts>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy").field("cfg", &self.cfg).field("master_check", &self.master_check.is_some()).finish()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Port {
    ReadWrite,
    ReadOnly,
}

impl Port {
    fn name(self) -> &'static str {
        match self {
            Port::ReadWrite => "rw",
            Port::ReadOnly => "ro",
        }
    }
}

/// User names of the accounts `read_only` does not bind (READ ONLY ADMIN, directly or through a role), as the
/// local server lists them. The RO port refuses their logins: on a replica they could write what the global log
/// does not hold.
pub type PrivilegedAccounts = watch::Receiver<Arc<std::collections::BTreeSet<String>>>;

/// What every connection task shares.
struct Shared {
    cfg: ProxyConfig,
    stats: Arc<ProxyStats>,
    routes: watch::Receiver<Route>,
    master_check: Option<MasterCheck>,
    local: Option<watch::Receiver<LocalServer>>,
    privileged: Option<PrivilegedAccounts>,
    shutdown: watch::Receiver<bool>,
    next_conn_id: AtomicU64,
}

impl Proxy {
    /// Validates `cfg` and opens the configured listeners (port 0 picks a free port: see [`Proxy::rw_addr`]).
    pub async fn bind(cfg: ProxyConfig, routes: watch::Receiver<Route>) -> Result<Proxy, ProxyError> {
        cfg.validate()?;
        let rw = match cfg.rw_listen {
            Some(addr) => Some(listen(addr).await?),
            None => None,
        };
        let ro = match cfg.ro_listen {
            Some(addr) => Some(listen(addr).await?),
            None => None,
        };
        Ok(Proxy { cfg, rw, ro, routes, stats: Arc::default(), master_check: None, local: None, privileged: None })
    }

    /// Makes the RO port serve only while `local` says the local mariadbd is aligned with the global log; its
    /// connections are cut when that stops. Without it the RO port always forwards.
    pub fn with_local_server(mut self, local: watch::Receiver<LocalServer>) -> Proxy {
        self.local = Some(local);
        self
    }

    /// Makes the RO port refuse logins of the accounts in `privileged` (see [`PrivilegedAccounts`]).
    pub fn with_privileged_accounts(mut self, privileged: PrivilegedAccounts) -> Proxy {
        self.privileged = Some(privileged);
        self
    }

    /// Makes the RW port confirm each backend with `check` before handing a client to it (see [`MasterCheck`]).
    pub fn with_master_check(mut self, check: MasterCheck) -> Proxy {
        self.master_check = Some(check);
        self
    }

    /// The bound read-write address.
    pub fn rw_addr(&self) -> Option<SocketAddr> {
        self.rw.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The bound read-only address.
    pub fn ro_addr(&self) -> Option<SocketAddr> {
        self.ro.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The counters; stays valid after `run` returns.
    pub fn stats(&self) -> Arc<ProxyStats> {
        Arc::clone(&self.stats)
    }

    /// Serves until `shutdown` becomes `true` (or its sender is dropped). Then stops accepting, closes every
    /// connection, and returns once their tasks are gone (bounded by 5 s).
    pub async fn run(self, shutdown: watch::Receiver<bool>) -> Result<(), ProxyError> {
        let max = self.cfg.max_connections;
        let shared = Arc::new(Shared {
            cfg: self.cfg,
            stats: self.stats,
            routes: self.routes,
            master_check: self.master_check,
            local: self.local,
            privileged: self.privileged,
            shutdown: shutdown.clone(),
            next_conn_id: AtomicU64::new(1),
        });
        info!(rw = ?self.rw.as_ref().and_then(|l| l.local_addr().ok()),
              ro = ?self.ro.as_ref().and_then(|l| l.local_addr().ok()), "proxy serving");
        // One limit for both ports; a client beyond it is told "too many connections", as by mariadbd.
        let acceptor =
            AcceptLoop { when_full: WhenFull::Refuse, drain: SHUTDOWN_DRAIN, ..AcceptLoop::new("proxy", max) };
        tokio::join!(
            accept_loop(&acceptor, self.rw, Port::ReadWrite, &shared),
            accept_loop(&acceptor, self.ro, Port::ReadOnly, &shared),
        );
        info!("proxy stopped");
        Ok(())
    }
}

async fn listen(addr: SocketAddr) -> Result<TcpListener, ProxyError> {
    TcpListener::bind(addr).await.map_err(|source| ProxyError::Bind { addr, source })
}

/// Resolves when shutdown is asked for (or nobody can ask any more).
async fn shutdown_requested(mut shutdown: watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

async fn accept_loop(acceptor: &AcceptLoop, listener: Option<TcpListener>, port: Port, shared: &Arc<Shared>) {
    let Some(listener) = listener else { return };
    let serve = |client: TcpStream, peer, slot| {
        let id = shared.next_conn_id.fetch_add(1, Ordering::Relaxed);
        let span = info_span!("proxy_conn", id, port = port.name(), %peer);
        let shared = Arc::clone(shared);
        async move {
            let _slot = slot;
            let _active = shared.stats.accepted();
            // Queries and results are small packets; Nagle would hold them back.
            let _ = client.set_nodelay(true);
            match port {
                Port::ReadWrite => serve_read_write(&shared, client, peer).await,
                Port::ReadOnly => serve_read_only(&shared, client, peer).await,
            }
        }
        .instrument(span)
    };
    let refuse = |client: TcpStream, _| {
        shared.stats.refused_max_connections();
        // A fresh socket's send buffer takes the few bytes at once; never wait on a client here.
        let _ = client.try_write(&too_many_connections().packet(0));
    };
    acceptor.run(listener, shared.shutdown.clone(), serve, refuse).await;
}

fn proxy_header(shared: &Shared, client: &TcpStream, peer: SocketAddr) -> Option<ProxyHeader> {
    let destination = client.local_addr().ok()?;
    shared.cfg.proxy_protocol.then_some(ProxyHeader { source: peer, destination })
}

/// Sends `err` in place of the server greeting and closes. The client may be gone already: nothing to do then.
async fn refuse(mut client: TcpStream, err: ErrPacket) {
    debug!(code = err.code, message = %err.message, "refusing client");
    let _ = tokio::time::timeout(ERR_WRITE_TIMEOUT, async {
        client.write_all(&err.packet(0)).await?;
        client.shutdown().await
    })
    .await;
}

/// How often a held client retries a master whose mariadbd refused it, while the route does not change.
const UNREACHABLE_RETRY: Duration = Duration::from_millis(200);

/// RW port: find a master and connect to it (waiting up to the hold time, through elections and through a dead
/// master's remaining lease), forward until the route moves away.
async fn serve_read_write(shared: &Shared, client: TcpStream, peer: SocketAddr) {
    let mut routes = shared.routes.clone();
    let deadline = Instant::now() + shared.cfg.hold_during_election;
    let shutdown = shutdown_requested(shared.shutdown.clone());
    tokio::pin!(shutdown);
    let (target, node_id, master_version, mut server, greeting) = loop {
        let route = routes.borrow_and_update().clone();
        match route {
            Route::Master { ref backend, node_id, master_version } => {
                let header = proxy_header(shared, &client, peer);
                let timeout = shared.cfg.connect_timeout;
                let open = async {
                    if let Backend::Relay { .. } = backend {
                        // The master's node answers only while it serves this term: no separate check.
                        let request = RelayRequest {
                            master_version,
                            client: peer,
                            proxy: client.local_addr().map_err(|e| unreachable(backend, timeout, e.to_string()))?,
                        };
                        let opened = open_relay(shared.cfg.relay.as_deref(), backend, &request, timeout).await?;
                        shared.stats.relayed_out();
                        return Ok(opened);
                    }
                    let (server, greeting) = open_backend(backend, timeout, header).await?;
                    // Asked after the greeting: a yes now means the process that greeted is the serving master
                    // (or already dead), never a demoted or recovering one.
                    if let Some(check) = &shared.master_check {
                        if !check(node_id, master_version).await {
                            server.abort();
                            return Err(unreachable(
                                backend,
                                timeout,
                                format!("node {node_id} does not serve as master in term {master_version}"),
                            ));
                        }
                    }
                    Ok::<_, ProxyError>((server, greeting))
                };
                let connected = tokio::select! {
                    _ = &mut shutdown => return,
                    connected = open => connected,
                };
                let (server, greeting) = match connected {
                    Ok(opened) => opened,
                    Err(e) if Instant::now() < deadline => {
                        // A master whose mariadbd died still holds its lease until it runs out and another member
                        // takes over: hold the client through that election, as for NoMaster, instead of failing
                        // it. Try again on the next route, or after a short pause if the route stays.
                        debug!(node_id, master_version, error = %e, "master unreachable; holding the client");
                        let retry_at = deadline.min(Instant::now() + UNREACHABLE_RETRY);
                        let changed = tokio::select! {
                            _ = &mut shutdown => return,
                            changed = tokio::time::timeout_at(retry_at, routes.changed()) => changed,
                        };
                        if matches!(changed, Ok(Err(_))) {
                            refuse(client, connection_failure("paxsql: the node stopped publishing routes")).await;
                            return;
                        }
                        continue;
                    }
                    Err(e) => {
                        warn!(node_id, master_version, error = %e, "master unreachable");
                        shared.stats.refused_backend_unreachable();
                        refuse(client, connection_failure(format!("paxsql: master unreachable: {e}"))).await;
                        return;
                    }
                };
                // The master may have changed while we connected: never hand the client a stale one.
                if *routes.borrow() == route {
                    break (route, node_id, master_version, server, greeting);
                }
                server.abort();
                if Instant::now() >= deadline {
                    shared.stats.refused_no_master();
                    refuse(client, connection_failure("paxsql: no master: master changed while connecting")).await;
                    return;
                }
            }
            Route::NoMaster { reason } => {
                let changed = tokio::select! {
                    _ = &mut shutdown => return,
                    changed = tokio::time::timeout_at(deadline, routes.changed()) => changed,
                };
                let reason = match changed {
                    Ok(Ok(())) => continue,
                    Ok(Err(_)) => "the node stopped publishing routes".to_string(),
                    Err(_) => reason,
                };
                shared.stats.refused_no_master();
                info!(%reason, "no master within the hold time");
                refuse(client, connection_failure(format!("paxsql: no master: {reason}"))).await;
                return;
            }
        }
    };
    debug!(node_id, master_version, "forwarding to master");

    let moved_away = async {
        loop {
            if routes.changed().await.is_err() {
                return "the node stopped publishing routes";
            }
            if *routes.borrow_and_update() != target {
                return "the master changed";
            }
        }
    };
    let mut client = client;
    if greet(shared, &mut client, greeting).await.is_err() {
        // The client left while it was held.
        server.abort();
        return;
    }
    let rules = login_rules(shared, None);
    let outcome = tokio::select! {
        done = serve_client(client, &mut server, &rules, shared.cfg.forward_mode, &shared.stats) => Some(done),
        why = moved_away => {
            shared.stats.cut_on_master_change();
            info!(node_id, master_version, why, "cutting connection to a former master");
            None
        }
        _ = &mut shutdown => None,
    };
    match outcome {
        Some(done) => finished(shared, done),
        None => server.abort(),
    }
}

/// RO port: forward to the local mariadbd (whose own `read_only` answers writes).
async fn serve_read_only(shared: &Shared, mut client: TcpStream, peer: SocketAddr) {
    let mut local = shared.local.clone();
    if let Some(LocalServer::NotAligned(why)) = local.as_mut().map(|l| l.borrow_and_update().clone()) {
        shared.stats.refused_not_aligned();
        refuse(client, connection_failure(format!("paxsql: this node's server is not aligned: {why}"))).await;
        return;
    }
    let backend = &shared.cfg.local_backend;
    let header = proxy_header(shared, &client, peer);
    let shutdown = shutdown_requested(shared.shutdown.clone());
    tokio::pin!(shutdown);
    let timeout = shared.cfg.connect_timeout;
    let connected = tokio::select! {
        _ = &mut shutdown => return,
        connected = open_backend(backend, timeout, header) => connected,
    };
    let (mut server, greeting) = match connected {
        Ok(opened) => opened,
        Err(e) => {
            warn!(error = %e, "local mariadbd unreachable");
            shared.stats.refused_backend_unreachable();
            refuse(client, connection_failure(format!("paxsql: local server unreachable: {e}"))).await;
            return;
        }
    };
    // The read-only port reaches the master's own mariadbd on the master's node: it filters commands too.
    let refused = shared.privileged.as_ref().map(|p| p.borrow().clone());
    if greet(shared, &mut client, greeting).await.is_err() {
        return;
    }
    let rules = login_rules(shared, refused.as_deref());
    let no_longer_aligned = async {
        match local.as_mut() {
            Some(l) => {
                let _ = l.wait_for(|s| *s != LocalServer::Aligned).await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    let outcome = tokio::select! {
        done = serve_client(client, &mut server, &rules, shared.cfg.forward_mode, &shared.stats) => Some(done),
        _ = no_longer_aligned => {
            info!("cutting a read-only connection: the local server is no longer aligned");
            None
        }
        _ = &mut shutdown => None,
    };
    match outcome {
        Some(done) => finished(shared, done),
        None => server.abort(),
    }
}

/// Sends the backend's greeting on, announcing the proxy's TLS where it has a certificate.
async fn greet(shared: &Shared, client: &mut TcpStream, mut greeting: Vec<u8>) -> std::io::Result<()> {
    if shared.cfg.tls.is_some() {
        crate::tls::announce_tls(&mut greeting);
    }
    client.write_all(&greeting).await
}

fn login_rules<'a>(
    shared: &'a Shared,
    refused_users: Option<&'a std::collections::BTreeSet<String>>,
) -> ClientRules<'a> {
    ClientRules {
        tls: shared.cfg.tls.as_ref(),
        tls_required: shared.cfg.tls_required,
        refused_users,
        node_accounts: &shared.cfg.node_accounts,
    }
}

fn finished(shared: &Shared, done: crate::forward::Forwarded) {
    shared.stats.forwarded(done.client_to_server, done.server_to_client);
    match done.error {
        None => debug!(c2s = done.client_to_server, s2c = done.server_to_client, "connection closed"),
        Some(e) => debug!(c2s = done.client_to_server, s2c = done.server_to_client, error = %e, "connection ended"),
    }
}
