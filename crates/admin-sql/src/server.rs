//! The admin SQL port: accept loop, login, and the opensrv-mysql command loop that answers queries.
//!
//! Each connection runs two tasks joined by an in-memory pipe: opensrv-mysql's command loop (greeting, then one
//! answer per command, from [`AdminShim`]) and the connection task, which owns the socket. The connection task
//! forwards opensrv's greeting, logs the client in itself ([`crate::login`] says why), hands opensrv the verified
//! login, and from then on only copies bytes both ways until either side closes or the server shuts down.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use opensrv_mysql::{
    AsyncMysqlIntermediary, AsyncMysqlShim, Column, ColumnFlags, ColumnType, ErrorKind, InitWriter, OkResponse,
    ParamParser, QueryResultWriter, StatementMetaWriter,
};
use paxsql_repl_server::packet::{caps, decode_packet, eof_payload, err_payload, write_packet};
use paxsql_repl_server::{stage2, verify, SCRAMBLE_LEN};
use rand::Rng;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::error::AdminError;
use crate::login::{auth_switch_request, FirstPacket, LoginRequest, NATIVE_PASSWORD};
use crate::query::{self, Cell, ColumnKind, Reply, SessionInfo};
use crate::view::ClusterView;
use paxsql_proxy::tls::{self as client_tls, ServerTls};

/// The account that may log in to the admin port.
#[derive(Clone)]
pub struct AdminAuth {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for AdminAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminAuth").field("user", &self.user).field("password", &"<redacted>").finish()
    }
}

/// A client that has not logged in within this time is dropped.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest login packet we read (a real one is well under 1 KiB even with connection attributes).
const LOGIN_PACKET_MAX: usize = 64 << 10;
/// Concurrent connections; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 64;
/// Capacity of the pipe between the socket and the command loop.
const PIPE_BYTES: usize = 64 << 10;

/// The greeting's server version. It claims the MariaDB 10.11 protocol (clients tune themselves to the
/// version, and that is the server family they meet elsewhere in the cluster) and says what it really is.
fn server_version() -> String {
    format!("10.11.0-paxsql-admin-{}", env!("CARGO_PKG_VERSION"))
}

struct Shared {
    tls: Option<ServerTls>,
    tls_required: bool,
    user: String,
    password_stage2: Option<[u8; 20]>,
    view: watch::Receiver<ClusterView>,
    next_id: AtomicU32,
}

/// The admin SQL port: answers `SELECT * FROM paxsql.members`, `SELECT * FROM paxsql.master`, `SHOW STATUS [LIKE
/// 'pattern']` and the probes clients send at connect, from the latest [`ClusterView`].
pub struct AdminSqlServer {
    listener: TcpListener,
    local_addr: SocketAddr,
    shared: Arc<Shared>,
}

impl AdminSqlServer {
    /// Binds `addr`. The password must not be empty: the port shows the cluster's layout.
    pub async fn bind(
        addr: SocketAddr,
        auth: AdminAuth,
        view: watch::Receiver<ClusterView>,
    ) -> Result<AdminSqlServer, AdminError> {
        if auth.user.is_empty() {
            return Err(AdminError::InvalidConfig { field: "user", reason: "must not be empty".into() });
        }
        if auth.password.is_empty() {
            return Err(AdminError::InvalidConfig { field: "password", reason: "must not be empty".into() });
        }
        let listener = TcpListener::bind(addr).await.map_err(|source| AdminError::Bind { addr, source })?;
        let local_addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            tls: None,
            tls_required: false,
            user: auth.user,
            password_stage2: stage2(&auth.password),
            view,
            next_id: AtomicU32::new(1),
        });
        info!(%local_addr, "admin SQL port listening");
        Ok(AdminSqlServer { listener, local_addr, shared })
    }

    /// Offers TLS with `tls` (clients asking for it are refused without); `required`: clients that do not ask for it
    /// are refused. Call before [`AdminSqlServer::run`].
    pub fn with_tls(mut self, tls: Option<ServerTls>, required: bool) -> AdminSqlServer {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.tls = tls;
            shared.tls_required = required && shared.tls.is_some();
        }
        self
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` turns true (or its sender is dropped), then ends every connection and returns
    /// once all connection tasks are gone.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) -> Result<(), AdminError> {
        let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let mut tasks = JoinSet::new();
        loop {
            // Take a slot first: at the limit we stop accepting and clients wait in the backlog.
            let permit = tokio::select! {
                permit = Arc::clone(&limit).acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => break,
                },
                _ = shutdown.wait_for(|stop| *stop) => break,
            };
            let Some((stream, peer)) = accept(&self.listener, &mut shutdown, "admin").await else { break };
            let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
            let shared = Arc::clone(&self.shared);
            let shutdown = shutdown.clone();
            tasks.spawn(async move {
                let _permit = permit;
                match serve_connection(&shared, stream, peer, id, shutdown).await {
                    Ok(()) => debug!(conn = id, %peer, "admin connection closed"),
                    Err(e) => info!(conn = id, %peer, error = %e, "admin connection ended"),
                }
            });
            while tasks.try_join_next().is_some() {}
        }
        info!("admin SQL port shutting down");
        drop(self.listener);
        while tasks.join_next().await.is_some() {}
        Ok(())
    }
}

/// Accepts the next connection, or `None` once `shutdown` turns true (or its sender is gone). An accept error
/// (EMFILE and friends) is waited out with a growing backoff rather than spun on or returned.
pub(crate) async fn accept(
    listener: &TcpListener,
    shutdown: &mut watch::Receiver<bool>,
    what: &str,
) -> Option<(TcpStream, SocketAddr)> {
    let mut backoff = Duration::from_millis(10);
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok(accepted) => return Some(accepted),
                Err(e) => warn!(error = %e, backoff_ms = backoff.as_millis() as u64, "{what} accept failed"),
            },
            _ = shutdown.wait_for(|stop| *stop) => return None,
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.wait_for(|stop| *stop) => return None,
        }
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// Aborts the command-loop task when the connection task ends, however it ends.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn random_salt() -> [u8; SCRAMBLE_LEN] {
    // Printable, never NUL (the greeting NUL-terminates the salt's second part), as MariaDB's own scrambles.
    let mut rng = rand::thread_rng();
    std::array::from_fn(|_| rng.gen_range(33u8..=126))
}

async fn serve_connection(
    shared: &Shared,
    mut stream: TcpStream,
    peer: SocketAddr,
    id: u32,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), AdminError> {
    let _ = stream.set_nodelay(true);
    let salt = random_salt();
    let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
    let shim = AdminShim {
        view: shared.view.clone(),
        salt,
        user: shared.user.clone(),
        password_stage2: shared.password_stage2,
        session: SessionInfo {
            user: shared.user.clone(),
            peer_host: peer.ip().to_string(),
            connection_id: id,
            database: None,
            server_version: server_version(),
        },
    };
    let (session_rd, session_wr) = tokio::io::split(theirs);
    let command_loop = tokio::spawn(async move {
        if let Err(e) = AsyncMysqlIntermediary::run_on(shim, session_rd, session_wr).await {
            debug!(conn = id, error = %e, "admin command loop ended");
        }
    });
    let _abort = AbortOnDrop(command_loop.abort_handle());
    let (mut session_rd, session_wr) = tokio::io::split(ours);

    // The greeting and the client's first packet on the bare socket: it may ask for TLS before anything else.
    let opening = async {
        let mut session_buf = Vec::new();
        let (seq, greeting) =
            read_packet(&mut session_rd, &mut session_buf, LOGIN_PACKET_MAX).await?.ok_or(AdminError::SessionGone)?;
        let mut out = Vec::new();
        let mut s = seq;
        write_packet(&mut out, &mut s, &[&greeting]);
        if shared.tls.is_some() {
            client_tls::announce_tls(&mut out);
        }
        stream.write_all(&out).await?;
        // Exactly one packet: a client asking for TLS sends its TLS hello right behind it, for the TLS layer.
        let first = client_tls::read_one_packet(&mut stream, LOGIN_PACKET_MAX).await?;
        Ok::<_, AdminError>(first)
    };
    let first = tokio::select! {
        r = tokio::time::timeout(LOGIN_TIMEOUT, opening) => match r {
            Ok(r) => r?,
            Err(_) => return Err(AdminError::LoginTimeout { seconds: LOGIN_TIMEOUT.as_secs() }),
        },
        _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
    };
    let Some((seq, payload)) = first else { return Ok(()) };
    let asks_tls = client_tls::response_capabilities(&payload) & client_tls::CLIENT_SSL != 0;
    match (&shared.tls, asks_tls) {
        (Some(tls), true) if client_tls::is_ssl_request(&payload) => {
            let upgraded = tokio::select! {
                r = tokio::time::timeout(LOGIN_TIMEOUT, tls.accept(stream)) => match r {
                    Ok(r) => r?,
                    Err(_) => return Err(AdminError::LoginTimeout { seconds: LOGIN_TIMEOUT.as_secs() }),
                },
                _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
            };
            let (mut client_rd, client_wr) = tokio::io::split(upgraded);
            let login = async {
                let mut buf = Vec::new();
                match read_packet(&mut client_rd, &mut buf, LOGIN_PACKET_MAX).await? {
                    Some(first) => Ok((first, buf)),
                    None => Err(AdminError::SessionGone),
                }
            };
            let (first, buf) = match tokio::time::timeout(LOGIN_TIMEOUT, login).await {
                Ok(r) => r?,
                Err(_) => return Err(AdminError::LoginTimeout { seconds: LOGIN_TIMEOUT.as_secs() }),
            };
            serve_logged_in(
                shared,
                salt,
                peer,
                id,
                first,
                (client_rd, client_wr, buf),
                session_rd,
                session_wr,
                shutdown,
            )
            .await
        }
        (None, true) => {
            refuse(&mut stream, seq.wrapping_add(1), 1043, "08S01", "paxsql admin: TLS is not configured on this node")
                .await?;
            Err(AdminError::TlsRequested)
        }
        (Some(_), true) => {
            refuse(&mut stream, seq.wrapping_add(1), 1043, "08S01", "Bad handshake").await?;
            Ok(())
        }
        (_, false) if shared.tls_required => {
            let message = "paxsql admin: connections without TLS are refused on this port";
            refuse(&mut stream, seq.wrapping_add(1), 3159, "08004", message).await?;
            info!(conn = id, %peer, "plaintext admin login refused");
            Ok(())
        }
        (_, false) => {
            let (client_rd, client_wr) = tokio::io::split(stream);
            serve_logged_in(
                shared,
                salt,
                peer,
                id,
                (seq, payload),
                (client_rd, client_wr, Vec::new()),
                session_rd,
                session_wr,
                shutdown,
            )
            .await
        }
    }
}

/// The login (its first packet read already) and then the command loop, on a plain or a TLS client stream.
#[allow(clippy::too_many_arguments)]
async fn serve_logged_in<CR, CW, SR, SW>(
    shared: &Shared,
    salt: [u8; SCRAMBLE_LEN],
    peer: SocketAddr,
    id: u32,
    first: (u8, Vec<u8>),
    client: (CR, CW, Vec<u8>),
    mut session_rd: SR,
    mut session_wr: SW,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), AdminError>
where
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
    SR: AsyncRead + Unpin,
    SW: AsyncWrite + Unpin,
{
    let (mut client_rd, mut client_wr, mut client_buf) = client;
    let login = log_in(
        shared,
        salt,
        peer,
        id,
        first,
        &mut client_rd,
        &mut client_wr,
        &mut client_buf,
        &mut session_rd,
        &mut session_wr,
    );
    let capabilities = tokio::select! {
        r = tokio::time::timeout(LOGIN_TIMEOUT, login) => match r {
            Ok(r) => r?,
            Err(_) => return Err(AdminError::LoginTimeout { seconds: LOGIN_TIMEOUT.as_secs() }),
        },
        _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
    };
    let Some(capabilities) = capabilities else { return Ok(()) };
    let client_wr = tokio::sync::Mutex::new(client_wr);
    let to_client = async {
        let mut chunk = vec![0u8; 16 << 10];
        loop {
            let n = session_rd.read(&mut chunk).await?;
            if n == 0 {
                return Ok::<(), AdminError>(());
            }
            let mut wr = client_wr.lock().await;
            wr.write_all(&chunk[..n]).await?;
            // A TLS writer holds records until flushed.
            wr.flush().await?;
        }
    };
    let to_session = commands_to_session(&mut client_rd, &client_wr, client_buf, &mut session_wr, capabilities);
    tokio::select! {
        r = to_client => r,
        r = to_session => r,
        _ = shutdown.wait_for(|stop| *stop) => Ok(()),
    }
}

/// Commands opensrv-mysql answers correctly. It answers every other command byte with OK (docs/ARCHITECTURE.md §7), which
/// would tell a client that, say, COM_CHANGE_USER succeeded; those are answered here instead.
const FORWARDED_COMMANDS: &[u8] = &[
    0x01, // COM_QUIT
    0x02, // COM_INIT_DB
    0x03, // COM_QUERY
    0x0E, // COM_PING
    0x16, // COM_STMT_PREPARE (answered with an error)
    0x17, // COM_STMT_EXECUTE (answered with an error)
    0x18, // COM_STMT_SEND_LONG_DATA (no answer)
    0x19, // COM_STMT_CLOSE (no answer)
    0x1B, // COM_SET_OPTION (OK; multi-statements then still get the unsupported-query error)
    0x1F, // COM_RESET_CONNECTION (OK; connectors' pools send it)
];
const COM_FIELD_LIST: u8 = 0x04;
const COM_STATISTICS: u8 = 0x09;
/// Largest command we accept after login; no admin statement comes near it.
pub(crate) const COMMAND_PACKET_MAX: usize = 1 << 20;

/// Reads the client's commands packet by packet: forwards the ones opensrv handles and answers the rest here
/// (through the same lock-guarded writer the command loop's answers go through, so packets never interleave).
async fn commands_to_session<CR, CW, SW>(
    client_rd: &mut CR,
    client_wr: &tokio::sync::Mutex<CW>,
    mut client_buf: Vec<u8>,
    session_wr: &mut SW,
    capabilities: u32,
) -> Result<(), AdminError>
where
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
    SW: AsyncWrite + Unpin,
{
    let mut out = Vec::new();
    loop {
        let Some((seq, payload)) = read_packet(client_rd, &mut client_buf, COMMAND_PACKET_MAX).await? else {
            return Ok(());
        };
        out.clear();
        let mut s = seq;
        let Some(&command) = payload.first() else {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "empty command packet").into());
        };
        if FORWARDED_COMMANDS.contains(&command) {
            write_packet(&mut out, &mut s, &[&payload]);
            session_wr.write_all(&out).await?;
            continue;
        }
        s = seq.wrapping_add(1);
        let answer = match command {
            // The `mariadb` CLI lists every table's columns for name completion when started with a database
            // (opensrv's answer to this makes it hang). An empty list: completion of table names still works.
            COM_FIELD_LIST if capabilities & caps::DEPRECATE_EOF != 0 => vec![0xFE, 0, 0, 0x02, 0, 0, 0],
            COM_FIELD_LIST => eof_payload(),
            // `mariadb-admin status` and the CLI's `status` command show this string.
            COM_STATISTICS => b"paxsql admin port: try SHOW STATUS".to_vec(),
            _ => err_payload(1047, "08S01", "Unknown command"),
        };
        write_packet(&mut out, &mut s, &[&answer]);
        let mut wr = client_wr.lock().await;
        wr.write_all(&out).await?;
        wr.flush().await?;
    }
}

/// Runs the login from its first packet: checks the client's password (with an auth switch if the client started
/// with another plugin), and on success hands opensrv the verified login and forwards its answer. Returns the
/// client's capability flags once it is logged in; `Ok(None)`: the
/// client was refused (and told why) or left.
#[allow(clippy::too_many_arguments)]
async fn log_in<CR, CW, SR, SW>(
    shared: &Shared,
    salt: [u8; SCRAMBLE_LEN],
    peer: SocketAddr,
    id: u32,
    first: (u8, Vec<u8>),
    client_rd: &mut CR,
    client_wr: &mut CW,
    client_buf: &mut Vec<u8>,
    session_rd: &mut SR,
    session_wr: &mut SW,
) -> Result<Option<u32>, AdminError>
where
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
    SR: AsyncRead + Unpin,
    SW: AsyncWrite + Unpin,
{
    let mut session_buf = Vec::new();
    let mut out = Vec::new();
    let (seq, payload) = first;
    let mut next_seq = seq.wrapping_add(1);
    let login = match LoginRequest::decode(&payload)? {
        FirstPacket::Login(login) => login,
        // Told apart before the login: a TLS request here is a full response claiming TLS without a handshake.
        FirstPacket::TlsRequest => {
            refuse(client_wr, next_seq, 1043, "08S01", "Bad handshake").await?;
            return Ok(None);
        }
        FirstPacket::Protocol320 => {
            refuse(client_wr, next_seq, 1043, "08S01", "Bad handshake: protocol 4.1 required").await?;
            return Ok(None);
        }
    };
    let token = if login.needs_auth_switch() {
        out.clear();
        let mut s = next_seq;
        write_packet(&mut out, &mut s, &[&auth_switch_request(&salt)]);
        client_wr.write_all(&out).await?;
        client_wr.flush().await?;
        let Some((seq, token)) = read_packet(client_rd, client_buf, LOGIN_PACKET_MAX).await? else { return Ok(None) };
        next_seq = seq.wrapping_add(1);
        token
    } else {
        login.auth_response.clone()
    };

    let user = String::from_utf8_lossy(&login.user).into_owned();
    let password_ok = verify(shared.password_stage2.as_ref(), &salt, &token);
    if user != shared.user || !password_ok {
        warn!(conn = id, %user, %peer, "admin login refused");
        let using = if token.is_empty() { "NO" } else { "YES" };
        let message = format!("Access denied for user '{user}'@'{}' (using password: {using})", peer.ip());
        refuse(client_wr, next_seq, 1045, "28000", &message).await?;
        return Ok(None);
    }

    out.clear();
    let mut s = 1;
    write_packet(&mut out, &mut s, &[&login.for_command_loop(&token).encode()]);
    session_wr.write_all(&out).await?;
    let (_, answer) =
        read_packet(session_rd, &mut session_buf, LOGIN_PACKET_MAX).await?.ok_or(AdminError::SessionGone)?;
    out.clear();
    write_packet(&mut out, &mut next_seq, &[&answer]);
    client_wr.write_all(&out).await?;
    client_wr.flush().await?;
    if answer.first() == Some(&0xFF) {
        // The database the client asked for does not exist; MariaDB ends such a login too.
        return Ok(None);
    }
    info!(conn = id, %user, %peer, "admin login");
    Ok(Some(login.capabilities))
}

async fn refuse<W: AsyncWrite + Unpin>(
    wr: &mut W,
    seq: u8,
    code: u16,
    state: &str,
    message: &str,
) -> Result<(), AdminError> {
    let mut out = Vec::new();
    let mut s = seq;
    write_packet(&mut out, &mut s, &[&err_payload(code, state, message)]);
    wr.write_all(&out).await?;
    wr.flush().await?;
    Ok(())
}

/// Reads one packet; `Ok(None)` on a clean EOF between packets.
async fn read_packet<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut Vec<u8>,
    max_payload: usize,
) -> Result<Option<(u8, Vec<u8>)>, AdminError> {
    loop {
        if let Some((seq, payload, used)) = decode_packet(buf, max_payload)? {
            buf.drain(..used);
            return Ok(Some((seq, payload)));
        }
        if rd.read_buf(buf).await? == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(io::Error::new(io::ErrorKind::UnexpectedEof, "EOF inside a packet").into())
            };
        }
    }
}

/// opensrv-mysql's view of one logged-in session: answers each command from the latest [`ClusterView`].
struct AdminShim {
    view: watch::Receiver<ClusterView>,
    salt: [u8; SCRAMBLE_LEN],
    user: String,
    password_stage2: Option<[u8; 20]>,
    session: SessionInfo,
}

#[async_trait]
impl<W: AsyncWrite + Send + Unpin> AsyncMysqlShim<W> for AdminShim {
    type Error = io::Error;

    fn version(&self) -> String {
        self.session.server_version.clone()
    }

    // opensrv's defaults are a constant id and a constant salt; a constant salt would make a captured login
    // replayable.
    fn connect_id(&self) -> u32 {
        self.session.connection_id
    }

    fn salt(&self) -> [u8; SCRAMBLE_LEN] {
        self.salt
    }

    async fn authenticate(&self, plugin: &str, user: &[u8], salt: &[u8], token: &[u8]) -> bool {
        // The connection task verified the client already; this only sees the login it forwarded. Checking again
        // costs two SHA-1s and keeps the command loop safe on its own.
        plugin.as_bytes() == NATIVE_PASSWORD
            && user == self.user.as_bytes()
            && salt == self.salt
            && verify(self.password_stage2.as_ref(), &self.salt, token)
    }

    async fn on_prepare<'a>(&'a mut self, _query: &'a str, info: StatementMetaWriter<'a, W>) -> io::Result<()> {
        info.error(ErrorKind::ER_UNSUPPORTED_PS, b"paxsql admin: prepared statements are not supported").await
    }

    async fn on_execute<'a>(
        &'a mut self,
        id: u32,
        _params: ParamParser<'a>,
        results: QueryResultWriter<'a, W>,
    ) -> io::Result<()> {
        let message = format!("Unknown prepared statement handler ({id}) given to EXECUTE");
        results.error(ErrorKind::ER_UNKNOWN_STMT_HANDLER, message.as_bytes()).await
    }

    async fn on_close<'a>(&'a mut self, _stmt: u32)
    where
        W: 'async_trait,
    {
    }

    async fn on_query<'a>(&'a mut self, sql: &'a str, results: QueryResultWriter<'a, W>) -> io::Result<()> {
        // Clone, not borrow: a watch borrow must not live across an await (it would block the publisher).
        let view = self.view.borrow().clone();
        let reply = query::answer(sql, &view, &self.session);
        debug!(conn = self.session.connection_id, sql, ok = !matches!(reply, Reply::Error { .. }), "admin query");
        match reply {
            Reply::Rows(table) => {
                let columns: Vec<Column> = table.columns.iter().map(|(name, kind)| column(name, *kind)).collect();
                let mut rows = results.start(&columns).await?;
                for row in table.rows {
                    for cell in row {
                        match cell {
                            Cell::Null => rows.write_col(None::<u64>)?,
                            Cell::Int(n) => rows.write_col(n)?,
                            Cell::Text(s) => rows.write_col(s)?,
                        }
                    }
                    rows.end_row().await?;
                }
                rows.finish().await
            }
            Reply::Ok => results.completed(OkResponse::default()).await,
            Reply::Use(db) => {
                self.session.database = Some(db);
                results.completed(OkResponse::default()).await
            }
            Reply::Error { kind, message } => results.error(kind, message.as_bytes()).await,
        }
    }

    async fn on_init<'a>(&'a mut self, db: &'a str, writer: InitWriter<'a, W>) -> io::Result<()> {
        match query::use_database(db) {
            Ok(db) => {
                self.session.database = Some(db.to_string());
                writer.ok().await
            }
            Err(message) => writer.error(ErrorKind::ER_BAD_DB_ERROR, message.as_bytes()).await,
        }
    }
}

fn column(name: &str, kind: ColumnKind) -> Column {
    let (coltype, colflags) = match kind {
        ColumnKind::Int => (ColumnType::MYSQL_TYPE_LONGLONG, ColumnFlags::UNSIGNED_FLAG),
        ColumnKind::Text => (ColumnType::MYSQL_TYPE_VAR_STRING, ColumnFlags::empty()),
    };
    Column { table: String::new(), column: name.to_string(), coltype, colflags }
}
