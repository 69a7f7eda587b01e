//! The thin tokio shell: accept loop, per-connection IO around [`Session`] and [`DumpStream`], KILL between
//! connections, heartbeats, back-pressure and shutdown. All protocol decisions live in the pure parts.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::RngCore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tracing::{debug, info, warn};

use crate::dump::{DumpConfig, DumpStream};
use crate::error::{Error, Result};
use crate::session::{DumpRequest, Session, SessionConfig, Step};
use crate::source::EventSource;
use paxsql_listener::AcceptLoop;
use paxsql_mysql_wire::packet::decode as decode_packet;

/// Largest client packet we accept. Replicas send short commands; a bigger packet is an attack or a bug.
const CLIENT_PACKET_MAX: usize = 1 << 20;

/// Configuration of a [`ReplicationServer`].
#[derive(Debug, Clone)]
pub struct ReplicationServerConfig {
    /// Replication account the local mariadbd logs in with (`CHANGE MASTER TO MASTER_USER=...`).
    pub replica_user: String,
    /// Its password (`MASTER_PASSWORD`), checked with mysql_native_password.
    pub replica_password: String,
    /// Our server_id: shown to replicas and put on synthetic events. Must differ from every replica's.
    pub server_id: u32,
    /// Version in the greeting and FORMAT_DESCRIPTION: must start with a digit and be 10 or later.
    pub server_version: String,
    /// `@@gtid_domain_id` we report.
    pub gtid_domain_id: u32,
    /// Heartbeat period when the replica does not set `@master_heartbeat_period`, in ms (0 = none).
    pub heartbeat_default_ms: u64,
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Bytes of transactions read from the source per write to a replica: bounds what we buffer for a slow
    /// replica (one transaction larger than this is still sent whole).
    pub batch_bytes_max: usize,
    /// Size at which a dump rotates to the next virtual binlog file.
    pub virtual_file_bytes_max: u64,
    /// Base name of the virtual binlog files.
    pub binlog_file_base: String,
}

impl Default for ReplicationServerConfig {
    fn default() -> Self {
        ReplicationServerConfig {
            replica_user: "repl".into(),
            replica_password: String::new(),
            server_id: 0,
            server_version: "10.11.19-MariaDB-paxsql".into(),
            gtid_domain_id: 0,
            heartbeat_default_ms: 30_000,
            max_connections: 64,
            batch_bytes_max: 1 << 20,
            virtual_file_bytes_max: 1 << 30,
            binlog_file_base: "paxsql-bin".into(),
        }
    }
}

impl ReplicationServerConfig {
    /// Checks every field; the server refuses to start with a bad one.
    pub fn validate(&self) -> Result<()> {
        let bad = |field, reason: &str| Err(Error::InvalidConfig { field, reason: reason.to_string() });
        if self.replica_user.is_empty() {
            return bad("replica_user", "must not be empty");
        }
        if self.server_id == 0 {
            return bad("server_id", "must not be 0 (MariaDB replicas refuse a master with server_id 0)");
        }
        let major: Option<u32> = self.server_version.split('.').next().and_then(|m| m.parse().ok());
        if !major.is_some_and(|m| m >= 10) {
            return bad("server_version", "must start with the major version, 10 or later (e.g. 10.11.19-MariaDB)");
        }
        if self.server_version.len() >= paxsql_binlog::SERVER_VERSION_LEN || self.server_version.contains('\0') {
            return bad("server_version", "must be shorter than 50 bytes, without NUL");
        }
        if self.max_connections == 0 {
            return bad("max_connections", "must be at least 1");
        }
        if self.batch_bytes_max == 0 {
            return bad("batch_bytes_max", "must be at least 1");
        }
        if !(4096..=u64::from(u32::MAX)).contains(&self.virtual_file_bytes_max) {
            return bad("virtual_file_bytes_max", "must be between 4096 and 4294967295 (log_pos is 32-bit)");
        }
        let base_ok = !self.binlog_file_base.is_empty()
            && self.binlog_file_base.len() < 200
            && self.binlog_file_base.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !base_ok {
            return bad("binlog_file_base", "must be 1..200 characters of [A-Za-z0-9_-]");
        }
        Ok(())
    }
}

/// Open connections, so that `KILL <id>` (STOP SLAVE's second connection) and a replica reconnecting with the
/// same server_id can end a dump.
#[derive(Debug, Default)]
struct Registry {
    conns: Mutex<HashMap<u32, Registered>>,
}

#[derive(Debug)]
struct Registered {
    kill: Arc<Notify>,
    /// server_id of the replica this connection is dumping to.
    dump_for: Option<u32>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Registered>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn kill(&self, id: u32) -> bool {
        match self.lock().get(&id) {
            Some(conn) => {
                conn.kill.notify_one();
                true
            }
            None => false,
        }
    }

    /// Marks `id` as the dump of `replica_server_id` and ends older dumps of the same replica (MariaDB:
    /// `kill_zombie_dump_threads`): after a replica crash its old connection may linger.
    fn start_dump(&self, id: u32, replica_server_id: u32) {
        let mut conns = self.lock();
        for (other, conn) in conns.iter() {
            if *other != id && conn.dump_for == Some(replica_server_id) {
                info!(conn = other, replica_server_id, "ending the older dump of a reconnected replica");
                conn.kill.notify_one();
            }
        }
        if let Some(conn) = conns.get_mut(&id) {
            conn.dump_for = Some(replica_server_id);
        }
    }
}

/// Removes a connection from the registry when its task ends, however it ends.
struct Deregister<'a> {
    registry: &'a Registry,
    id: u32,
}

impl Drop for Deregister<'_> {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.id);
    }
}

struct Shared<S> {
    config: ReplicationServerConfig,
    session_config: Arc<SessionConfig>,
    dump_config: DumpConfig,
    source: Arc<S>,
    registry: Registry,
    next_id: AtomicU32,
}

/// The replication server: listens on one address and serves `source` to MariaDB replicas.
pub struct ReplicationServer<S> {
    listener: TcpListener,
    local_addr: SocketAddr,
    shared: Arc<Shared<S>>,
}

impl<S: EventSource> ReplicationServer<S> {
    /// Validates `config` and binds `addr` (only that address: use 127.0.0.1 for the node's own mariadbd).
    pub async fn bind(addr: SocketAddr, config: ReplicationServerConfig, source: Arc<S>) -> Result<Self> {
        config.validate()?;
        let listener = TcpListener::bind(addr).await.map_err(|source| Error::Bind { addr, source })?;
        let local_addr = listener.local_addr()?;
        let mut session_config = SessionConfig::new(
            &config.replica_user,
            &config.replica_password,
            config.server_id,
            &config.server_version,
        );
        session_config.gtid_domain_id = config.gtid_domain_id;
        let dump_config = DumpConfig {
            server_id: config.server_id,
            server_version: config.server_version.clone(),
            file_base: config.binlog_file_base.clone(),
            file_bytes_max: config.virtual_file_bytes_max,
        };
        // Connection ids start at a random point so ids of a restarted server do not repeat the previous run's
        // (a replica's STOP SLAVE must never kill a stranger).
        let first_id = rand::thread_rng().next_u32() % (1 << 30) + 1;
        let shared = Arc::new(Shared {
            config,
            session_config: Arc::new(session_config),
            dump_config,
            source,
            registry: Registry::default(),
            next_id: AtomicU32::new(first_id),
        });
        info!(%local_addr, "replication server listening");
        Ok(ReplicationServer { listener, local_addr, shared })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` turns true (or its sender is dropped), then ends every connection and returns
    /// once all connection tasks are gone.
    pub async fn run(self, shutdown: watch::Receiver<bool>) -> Result<()> {
        let acceptor = AcceptLoop::new("replication", self.shared.config.max_connections);
        let shared = &self.shared;
        let serve = |stream, peer, permit| {
            let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
            let kill = Arc::new(Notify::new());
            shared.registry.lock().insert(id, Registered { kill: Arc::clone(&kill), dump_for: None });
            let shared = Arc::clone(shared);
            let shutdown = shutdown.clone();
            async move {
                let _permit = permit;
                let _deregister = Deregister { registry: &shared.registry, id };
                match serve_connection(&shared, stream, peer, id, kill, shutdown).await {
                    Ok(()) => debug!(conn = id, %peer, "connection closed"),
                    Err(e) => info!(conn = id, %peer, error = %e, "connection ended"),
                }
            }
        };
        acceptor.run(self.listener, shutdown.clone(), serve, |_, _| {}).await;
        info!("replication server stopped");
        Ok(())
    }
}

fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Why a connection loop stopped waiting.
enum Interrupt {
    Killed,
    Shutdown,
}

async fn interrupted(kill: &Notify, shutdown: &mut watch::Receiver<bool>) -> Interrupt {
    tokio::select! {
        _ = kill.notified() => Interrupt::Killed,
        _ = shutdown.wait_for(|stop| *stop) => Interrupt::Shutdown,
    }
}

/// Reads one client packet; `Ok(None)` on a clean EOF between packets.
async fn read_packet(rd: &mut OwnedReadHalf, buf: &mut Vec<u8>) -> Result<Option<(u8, Vec<u8>)>> {
    loop {
        if let Some((seq, payload, used)) = decode_packet(buf, CLIENT_PACKET_MAX)? {
            buf.drain(..used);
            return Ok(Some((seq, payload)));
        }
        if rd.read_buf(buf).await? == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(Error::Io(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "EOF inside a packet")))
            };
        }
    }
}

/// Writes `out` unless killed or shut down first (a slow replica must not hold up STOP SLAVE or shutdown).
async fn write_out(
    wr: &mut OwnedWriteHalf,
    out: &mut Vec<u8>,
    kill: &Notify,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<bool> {
    if out.is_empty() {
        return Ok(true);
    }
    let done = tokio::select! {
        r = wr.write_all(out) => { r?; true }
        _ = interrupted(kill, shutdown) => false,
    };
    out.clear();
    Ok(done)
}

async fn serve_connection<S: EventSource>(
    shared: &Shared<S>,
    stream: TcpStream,
    peer: SocketAddr,
    id: u32,
    kill: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<()> {
    stream.set_nodelay(true)?;
    let (mut rd, mut wr) = stream.into_split();
    let mut salt = [0u8; 20];
    rand::thread_rng().fill_bytes(&mut salt);
    let mut session = Session::new(Arc::clone(&shared.session_config), id, salt, &peer.ip().to_string());
    let mut out = Vec::new();
    let mut inbuf = Vec::new();
    session.greeting(&mut out);
    debug!(conn = id, %peer, "greeting");
    loop {
        if !write_out(&mut wr, &mut out, &kill, &mut shutdown).await? {
            return Ok(());
        }
        let packet = tokio::select! {
            p = read_packet(&mut rd, &mut inbuf) => p?,
            _ = interrupted(&kill, &mut shutdown) => return Ok(()),
        };
        let Some((seq, payload)) = packet else { return Ok(()) };
        match session.on_packet(seq, &payload, now_unix(), &mut out) {
            Step::Continue => {}
            Step::Close => {
                write_out(&mut wr, &mut out, &kill, &mut shutdown).await?;
                return Ok(());
            }
            Step::Kill { connection_id } => {
                let found = shared.registry.kill(connection_id);
                info!(conn = id, target = connection_id, found, "KILL");
                session.kill_done(connection_id, found, &mut out);
            }
            Step::Dump(request) => {
                return dump(shared, &mut session, request, id, rd, wr, inbuf, &kill, &mut shutdown).await;
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn dump<S: EventSource>(
    shared: &Shared<S>,
    session: &mut Session,
    request: DumpRequest,
    id: u32,
    mut rd: OwnedReadHalf,
    mut wr: OwnedWriteHalf,
    mut inbuf: Vec<u8>,
    kill: &Notify,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<()> {
    let mut out = Vec::new();
    let mut cursor = match shared.source.locate(&request.state) {
        Ok(cursor) => cursor,
        Err(e) => {
            warn!(conn = id, replica_server_id = request.replica_server_id, error = %e, "cannot serve the position");
            session.dump_refused(&e, &mut out);
            write_out(&mut wr, &mut out, kill, shutdown).await?;
            return Ok(());
        }
    };
    shared.registry.start_dump(id, request.replica_server_id);
    let now = u32::try_from(now_unix()).unwrap_or(u32::MAX);
    let mut stream = DumpStream::start(&shared.dump_config, &request, now, session.next_seq(), &mut out);
    let heartbeat = match request.heartbeat_period_ns {
        Some(0) => None,
        Some(ns) => Some(Duration::from_nanos(ns)),
        None if shared.config.heartbeat_default_ms == 0 => None,
        None => Some(Duration::from_millis(shared.config.heartbeat_default_ms)),
    }
    .map(|d| d.max(Duration::from_millis(1)));
    info!(conn = id, replica_server_id = request.replica_server_id, file = %stream.file_name(),
          heartbeat_ms = heartbeat.map(|d| d.as_millis() as u64), "dump started");
    let mut last_sent = tokio::time::Instant::now();
    loop {
        if !write_out(&mut wr, &mut out, kill, shutdown).await? {
            break;
        }
        if *shutdown.borrow() {
            break;
        }
        let batch = match shared.source.read(&cursor, shared.config.batch_bytes_max) {
            Ok(batch) => batch,
            Err(e) => {
                warn!(conn = id, error = %e, "event source failed; ending the dump");
                session.dump_refused(&e, &mut out);
                write_out(&mut wr, &mut out, kill, shutdown).await?;
                break;
            }
        };
        if !batch.transactions.is_empty() {
            for trx in &batch.transactions {
                if let Err(e) = stream.push_transaction(trx, &mut out) {
                    // Send what precedes the bad transaction, then stop: never forward corrupt data.
                    warn!(conn = id, error = %e, "cannot serve a transaction; ending the dump");
                    write_out(&mut wr, &mut out, kill, shutdown).await?;
                    return Err(e);
                }
            }
            cursor = batch.next;
            last_sent = tokio::time::Instant::now();
            continue;
        }
        if request.non_block() {
            stream.end_of_log(&mut out);
            write_out(&mut wr, &mut out, kill, shutdown).await?;
            break;
        }
        // Idle: wait for new transactions, a heartbeat deadline, the replica going away, KILL or shutdown.
        let deadline = heartbeat.map(|h| last_sent + h);
        tokio::select! {
            _ = shared.source.wait(&cursor) => {}
            _ = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => {
                stream.heartbeat(&mut out);
                last_sent = tokio::time::Instant::now();
            }
            r = rd.read_buf(&mut inbuf) => {
                if r? == 0 {
                    debug!(conn = id, "replica closed the connection");
                    break;
                }
                // A replica may send COM_QUIT, or semi-sync ACKs (0xEF ...) if it set @rpl_semi_sync_slave;
                // we never request ACKs, so they carry nothing we need.
                while let Some((_, payload, used)) = decode_packet(&inbuf, CLIENT_PACKET_MAX)? {
                    inbuf.drain(..used);
                    if payload.first() == Some(&0x01) {
                        debug!(conn = id, "COM_QUIT during dump");
                        return Ok(());
                    }
                }
            }
            _ = interrupted(kill, shutdown) => break,
        }
    }
    info!(conn = id, events = stream.events_sent, bytes = stream.event_bytes_sent, state = %stream.state(),
          "dump ended");
    Ok(())
}
