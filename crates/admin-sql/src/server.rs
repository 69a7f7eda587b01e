//! The admin SQL port: accept loop, login and command loop, one task per connection.
//!
//! The MySQL side is the shared wire crate's ([`paxsql_mysql_wire`]): greeting, login with `mysql_native_password`
//! (an auth switch for clients that start with another plugin), then one answer per command from
//! [`crate::query`]. A refused login gets MariaDB's own ERR 1045 text, and nothing an unauthenticated client sends
//! is read beyond one bounded login packet.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use paxsql_listener::AcceptLoop;
use paxsql_mysql_wire::auth::{stage2, verify, NATIVE_PASSWORD, SCRAMBLE_LEN};
use paxsql_mysql_wire::handshake::{auth_switch_request, FirstPacket, Greeting, LoginRequest};
use paxsql_mysql_wire::packet::{decode as decode_packet, write as write_packet};
use paxsql_mysql_wire::resultset::{Column, ResultSet};
use paxsql_mysql_wire::{caps, command, eof_payload, ok_payload, result_end_ok_payload, ErrPacket};
use rand::Rng;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::error::AdminError;
use crate::query::{self, Cell, ColumnKind, Reply, SessionInfo, SqlErrorKind, COMMAND_PACKET_MAX};
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
    pub async fn run(self, shutdown: watch::Receiver<bool>) -> Result<(), AdminError> {
        let acceptor = AcceptLoop::new("admin", MAX_CONNECTIONS);
        let shared = &self.shared;
        let serve = |stream, peer, permit| {
            let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
            let shared = Arc::clone(shared);
            let shutdown = shutdown.clone();
            async move {
                let _permit = permit;
                match serve_connection(&shared, stream, peer, id, shutdown).await {
                    Ok(()) => debug!(conn = id, %peer, "admin connection closed"),
                    Err(e) => info!(conn = id, %peer, error = %e, "admin connection ended"),
                }
            }
        };
        acceptor.run(self.listener, shutdown.clone(), serve, |_, _| {}).await;
        info!("admin SQL port stopped");
        Ok(())
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
    let greeting = Greeting {
        server_version: server_version(),
        connection_id: id,
        capabilities: if shared.tls.is_some() { caps::PAXSQL_SERVER | caps::SSL } else { caps::PAXSQL_SERVER },
        charset: paxsql_mysql_wire::CHARSET_UTF8MB4_GENERAL_CI,
        status: paxsql_mysql_wire::STATUS_AUTOCOMMIT,
        scramble: salt.to_vec(),
        auth_plugin: NATIVE_PASSWORD.into(),
    };
    // The greeting and the client's first packet on the bare socket: it may ask for TLS before anything else.
    let opening = async {
        let mut out = Vec::new();
        write_packet(&mut out, &mut 0, &[&greeting.encode()]);
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
    let asks_tls = paxsql_mysql_wire::handshake::login_capabilities(&payload) & caps::SSL != 0;
    let session = Session::new(shared, salt, peer, id);
    match (&shared.tls, asks_tls) {
        (Some(tls), true) if paxsql_mysql_wire::handshake::is_ssl_request(&payload) => {
            let upgraded = tokio::select! {
                r = tokio::time::timeout(LOGIN_TIMEOUT, tls.accept(stream)) => match r {
                    Ok(r) => r?,
                    Err(_) => return Err(AdminError::LoginTimeout { seconds: LOGIN_TIMEOUT.as_secs() }),
                },
                _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
            };
            let mut client = Client { stream: upgraded, buf: Vec::new() };
            let first = tokio::select! {
                r = tokio::time::timeout(LOGIN_TIMEOUT, client.read(LOGIN_PACKET_MAX)) => match r {
                    Ok(r) => r?.ok_or(AdminError::SessionGone)?,
                    Err(_) => return Err(AdminError::LoginTimeout { seconds: LOGIN_TIMEOUT.as_secs() }),
                },
                _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
            };
            session.run(first, client, shutdown).await
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
        (_, false) => session.run((seq, payload), Client { stream, buf: Vec::new() }, shutdown).await,
    }
}

/// A client's stream (plain or TLS) and the bytes read from it but not yet taken as packets.
struct Client<S> {
    stream: S,
    buf: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    /// Reads one packet; `Ok(None)` on a clean EOF between packets.
    async fn read(&mut self, max_payload: usize) -> Result<Option<(u8, Vec<u8>)>, AdminError> {
        loop {
            if let Some((seq, payload, used)) = decode_packet(&self.buf, max_payload)? {
                self.buf.drain(..used);
                return Ok(Some((seq, payload)));
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(io::Error::new(io::ErrorKind::UnexpectedEof, "EOF inside a packet").into())
                };
            }
        }
    }

    /// Sends `out` (whole packets) and flushes: a TLS writer holds records until then.
    async fn send(&mut self, out: &[u8]) -> Result<(), AdminError> {
        self.stream.write_all(out).await?;
        self.stream.flush().await?;
        Ok(())
    }
}

/// One connection after its first packet: the login, then one answer per command.
struct Session<'a> {
    shared: &'a Shared,
    salt: [u8; SCRAMBLE_LEN],
    peer: SocketAddr,
    info: SessionInfo,
    capabilities: u32,
}

/// What the command loop does after answering.
enum Next {
    Continue,
    Close,
}

impl<'a> Session<'a> {
    fn new(shared: &'a Shared, salt: [u8; SCRAMBLE_LEN], peer: SocketAddr, id: u32) -> Session<'a> {
        let info = SessionInfo {
            user: shared.user.clone(),
            peer_host: peer.ip().to_string(),
            connection_id: id,
            database: None,
            server_version: server_version(),
        };
        Session { shared, salt, peer, info, capabilities: 0 }
    }

    async fn run<S: AsyncRead + AsyncWrite + Unpin>(
        mut self,
        first: (u8, Vec<u8>),
        mut client: Client<S>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), AdminError> {
        let logged_in = tokio::select! {
            r = tokio::time::timeout(LOGIN_TIMEOUT, self.log_in(first, &mut client)) => match r {
                Ok(r) => r?,
                Err(_) => return Err(AdminError::LoginTimeout { seconds: LOGIN_TIMEOUT.as_secs() }),
            },
            _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
        };
        if !logged_in {
            return Ok(());
        }
        let mut out = Vec::new();
        loop {
            let packet = tokio::select! {
                r = client.read(COMMAND_PACKET_MAX) => r?,
                _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
            };
            let Some((seq, payload)) = packet else { return Ok(()) };
            out.clear();
            let next = self.on_command(&payload, seq.wrapping_add(1), &mut out)?;
            if !out.is_empty() {
                client.send(&out).await?;
            }
            if let Next::Close = next {
                return Ok(());
            }
        }
    }

    /// Runs the login from its first packet: checks the client's password (with an auth switch if the client
    /// started with another plugin) and the database it asked for. `Ok(false)`: the client was refused (and told
    /// why) or left.
    async fn log_in<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        first: (u8, Vec<u8>),
        client: &mut Client<S>,
    ) -> Result<bool, AdminError> {
        let (seq, payload) = first;
        let mut next_seq = seq.wrapping_add(1);
        let mut out = Vec::new();
        let login = match LoginRequest::decode(&payload)? {
            FirstPacket::Login(login) => login,
            // Told apart before the login: a TLS request here is a full response claiming TLS without a handshake.
            FirstPacket::TlsRequest => {
                refuse(&mut client.stream, next_seq, 1043, "08S01", "Bad handshake").await?;
                return Ok(false);
            }
            FirstPacket::Protocol320 => {
                refuse(&mut client.stream, next_seq, 1043, "08S01", "Bad handshake: protocol 4.1 required").await?;
                return Ok(false);
            }
        };
        let token = if login.needs_auth_switch() {
            write_packet(&mut out, &mut next_seq, &[&auth_switch_request(&self.salt)]);
            client.send(&out).await?;
            let Some((seq, token)) = client.read(LOGIN_PACKET_MAX).await? else { return Ok(false) };
            next_seq = seq.wrapping_add(1);
            token
        } else {
            login.auth_response.clone()
        };
        let (id, peer) = (self.info.connection_id, self.peer);
        let user = String::from_utf8_lossy(&login.user).into_owned();
        let password_ok = verify(self.shared.password_stage2.as_ref(), &self.salt, &token);
        if user != self.shared.user || !password_ok {
            warn!(conn = id, %user, %peer, "admin login refused");
            let using = if token.is_empty() { "NO" } else { "YES" };
            let message = format!("Access denied for user '{user}'@'{}' (using password: {using})", peer.ip());
            refuse(&mut client.stream, next_seq, 1045, "28000", &message).await?;
            return Ok(false);
        }
        if let Some(db) = &login.database {
            // The database the client asked for does not exist: MariaDB ends such a login too.
            match query::use_database(&String::from_utf8_lossy(db)) {
                Ok(db) => self.info.database = Some(db.to_string()),
                Err(message) => {
                    let kind = SqlErrorKind::BadDb;
                    refuse(&mut client.stream, next_seq, kind as u16, kind.sql_state(), &message).await?;
                    return Ok(false);
                }
            }
        }
        self.capabilities = login.capabilities & (caps::PAXSQL_SERVER | caps::SSL);
        out.clear();
        write_packet(&mut out, &mut next_seq, &[&ok_payload()]);
        client.send(&out).await?;
        info!(conn = id, %user, %peer, "admin login");
        Ok(true)
    }

    /// Appends the answer to one command (its packets numbered from `seq`).
    fn on_command(&mut self, payload: &[u8], mut seq: u8, out: &mut Vec<u8>) -> Result<Next, AdminError> {
        let Some((&cmd, body)) = payload.split_first() else {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "empty command packet").into());
        };
        let err = |kind: SqlErrorKind, message: &str| ErrPacket::new(kind as u16, kind.sql_state(), message).payload();
        let answer = match cmd {
            command::COM_QUIT => return Ok(Next::Close),
            command::COM_QUERY => {
                let sql = String::from_utf8_lossy(body);
                // Clone, not borrow: the publisher must never wait on a reader.
                let view = self.shared.view.borrow().clone();
                let reply = query::answer(&sql, &view, &self.info);
                debug!(conn = self.info.connection_id, sql = %sql, ok = !matches!(reply, Reply::Error { .. }), "admin query");
                match reply {
                    Reply::Rows(table) => {
                        let rows = table.rows.into_iter().map(|row| row.into_iter().map(Cell::into_text).collect());
                        let columns = table.columns.iter().map(|(name, kind)| match kind {
                            ColumnKind::Int => Column::unsigned(name.as_str()),
                            ColumnKind::Text => Column::text(name.as_str()),
                        });
                        let set = ResultSet { columns: columns.collect(), rows: rows.collect() };
                        set.write(out, &mut seq, self.capabilities);
                        return Ok(Next::Continue);
                    }
                    Reply::Ok => ok_payload(),
                    Reply::Use(db) => {
                        self.info.database = Some(db);
                        ok_payload()
                    }
                    Reply::Error { kind, message } => err(kind, &message),
                }
            }
            command::COM_INIT_DB => match query::use_database(&String::from_utf8_lossy(body)) {
                Ok(db) => {
                    self.info.database = Some(db.to_string());
                    ok_payload()
                }
                Err(message) => err(SqlErrorKind::BadDb, &message),
            },
            // COM_SET_OPTION (multi-statements then still get the unsupported-query error) and
            // COM_RESET_CONNECTION (connectors' pools send it): nothing to change.
            command::COM_PING | command::COM_SET_OPTION | command::COM_RESET_CONNECTION => ok_payload(),
            command::COM_STMT_PREPARE => {
                err(SqlErrorKind::UnsupportedPs, "paxsql admin: prepared statements are not supported")
            }
            command::COM_STMT_EXECUTE => {
                let id = body.get(..4).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                err(
                    SqlErrorKind::UnknownStmtHandler,
                    &format!("Unknown prepared statement handler ({id}) given to EXECUTE"),
                )
            }
            // No answer, as for MariaDB.
            command::COM_STMT_SEND_LONG_DATA | command::COM_STMT_CLOSE => return Ok(Next::Continue),
            // The `mariadb` CLI lists every table's columns for name completion when started with a database. An
            // empty list: completion of table names still works.
            command::COM_FIELD_LIST if self.capabilities & caps::DEPRECATE_EOF != 0 => result_end_ok_payload(),
            command::COM_FIELD_LIST => eof_payload(),
            // `mariadb-admin status` and the CLI's `status` command show this string.
            command::COM_STATISTICS => b"paxsql admin port: try SHOW STATUS".to_vec(),
            // COM_CHANGE_USER among them: refused, never silently OKed.
            _ => ErrPacket::new(1047, "08S01", "Unknown command").payload(),
        };
        write_packet(out, &mut seq, &[&answer]);
        Ok(Next::Continue)
    }
}

async fn refuse<W: AsyncWrite + Unpin>(
    wr: &mut W,
    seq: u8,
    code: u16,
    state: &str,
    message: &str,
) -> Result<(), AdminError> {
    let mut out = Vec::new();
    write_packet(&mut out, &mut { seq }, &[&ErrPacket::new(code, state, message).payload()]);
    wr.write_all(&out).await?;
    wr.flush().await?;
    Ok(())
}
