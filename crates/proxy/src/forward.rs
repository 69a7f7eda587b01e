//! Moving bytes between a client and its backend once the connection is set up.

use std::collections::BTreeSet;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpStream, UnixStream};

use tracing::{info, warn};

use paxsql_peer_transport::{PortStream, RelayDialer, RelayError, RelayRequest};

use crate::statement::{self, Verdict};
use crate::tls::{self, ServerTls};
use crate::wire::{ErrPacket, ProxyHeader};
use crate::{Backend, ForwardMode, ProxyError, ProxyStats};
use paxsql_mysql_wire::caps;
use paxsql_mysql_wire::command::{COM_CHANGE_USER, COM_DROP_DB, COM_PROCESS_KILL, COM_QUERY, COM_STMT_PREPARE};
use paxsql_mysql_wire::handshake::{
    change_user_name, clear_ssl_capability, is_ssl_request, login_capabilities, login_user,
};
use paxsql_mysql_wire::packet::{chunk_len, MAX_CHUNK as PAYLOAD_MAX};

/// Buffer per direction in [`ForwardMode::Copy`]: a large result set moves in few syscalls.
const COPY_BUF_BYTES: usize = 64 * 1024;

/// Bytes moved by one forwarded connection, and why it ended if not by an orderly close.
#[derive(Debug)]
pub(crate) struct Forwarded {
    pub client_to_server: u64,
    pub server_to_client: u64,
    pub error: Option<io::Error>,
}

impl Forwarded {
    /// Nothing moved: the connection ended with `error` before forwarding began.
    fn failed(error: io::Error) -> Forwarded {
        Forwarded { client_to_server: 0, server_to_client: 0, error: Some(error) }
    }
}

/// A client connection once its login went through: plaintext, or TLS terminated by the proxy.
pub(crate) enum ClientConn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

/// Forwards both ways until both sides have closed (or one fails). Half-closes pass through, like
/// `copy_bidirectional`: MariaDB clients send `COM_QUIT` and close, then the server closes too.
///
/// The server's bytes go to the client untouched (`mode`; a TLS client's through the proxy's TLS session, with the
/// sequence ids of the login's remaining packets moved up by one, see [`server_to_tls_client`]). The client's go
/// through [`filter_client`], packet by packet, so that no command can interrupt a commit waiting for its majority.
/// `rules`: which changes of user and statements are answered with an error instead.
pub(crate) async fn forward<S: ServerStream>(
    client: ClientConn,
    server: &mut S,
    mode: ForwardMode,
    stats: &ProxyStats,
    rules: &ClientRules<'_>,
) -> Forwarded {
    match client {
        ClientConn::Plain(mut client) => {
            let (mut server_rd, mut client_wr) = match (server.duplicate(), client.duplicate()) {
                (Ok(s), Ok(c)) => (s, c),
                (Err(e), _) | (_, Err(e)) => return Forwarded::failed(e),
            };
            let s2c = async {
                let moved = match mode {
                    ForwardMode::Splice => {
                        tokio_splice2::copy(&mut server_rd, &mut client_wr).await.map(|t| t.tx as u64)
                    }
                    ForwardMode::Copy => {
                        let mut reader = tokio::io::BufReader::with_capacity(COPY_BUF_BYTES, &mut server_rd);
                        tokio::io::copy_buf(&mut reader, &mut client_wr).await
                    }
                }?;
                client_wr.shutdown().await?;
                Ok::<_, io::Error>(moved)
            };
            let c2s = client_to_server(&mut client, server, stats, rules, None);
            both_ways(s2c, c2s).await
        }
        tls_client => {
            let server_rd = match server.duplicate() {
                Ok(s) => s,
                Err(e) => return Forwarded::failed(e),
            };
            forward_streams(tls_client, server_rd, server, stats, rules).await
        }
    }
}

/// [`forward`] by copying, for a server whose socket cannot be spliced or duplicated (a TLS relay), and for TLS
/// clients: `server_rd` and `server_wr` are the two directions of one server connection.
async fn forward_streams<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    client: ClientConn,
    mut server_rd: R,
    server_wr: &mut W,
    stats: &ProxyStats,
    rules: &ClientRules<'_>,
) -> Forwarded {
    match client {
        ClientConn::Plain(mut client) => {
            let (mut client_rd, mut client_wr) = client.split();
            let s2c = async {
                let mut reader = tokio::io::BufReader::with_capacity(COPY_BUF_BYTES, &mut server_rd);
                let moved = tokio::io::copy_buf(&mut reader, &mut client_wr).await?;
                client_wr.shutdown().await?;
                Ok::<_, io::Error>(moved)
            };
            let c2s = client_to_server(&mut client_rd, server_wr, stats, rules, None);
            both_ways(s2c, c2s).await
        }
        ClientConn::Tls(client) => {
            let (mut client_rd, mut client_wr) = tokio::io::split(*client);
            let login_done = AtomicBool::new(false);
            let s2c = async {
                let moved = server_to_tls_client(&mut server_rd, &mut client_wr, &login_done).await?;
                client_wr.shutdown().await?;
                Ok::<_, io::Error>(moved)
            };
            let c2s = client_to_server(&mut client_rd, server_wr, stats, rules, Some(&login_done));
            both_ways(s2c, c2s).await
        }
    }
}

/// The client's direction: [`filter_client`] until the client closes, then the server's write side shut.
async fn client_to_server<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    client: &mut R,
    server: &mut W,
    stats: &ProxyStats,
    rules: &ClientRules<'_>,
    tls_login: Option<&AtomicBool>,
) -> io::Result<u64> {
    let mut moved = 0u64;
    filter_client(client, server, stats, rules, tls_login, &mut moved).await?;
    server.shutdown().await?;
    Ok(moved)
}

/// Runs both directions until both are done or one fails.
async fn both_ways(
    s2c: impl std::future::Future<Output = io::Result<u64>>,
    c2s: impl std::future::Future<Output = io::Result<u64>>,
) -> Forwarded {
    tokio::pin!(s2c, c2s);
    let (mut s2c_done, mut c2s_done) = (None, None);
    let error = loop {
        tokio::select! {
            r = &mut s2c, if s2c_done.is_none() => match r {
                Ok(n) => s2c_done = Some(n),
                Err(e) => break Some(e),
            },
            r = &mut c2s, if c2s_done.is_none() => match r {
                Ok(n) => c2s_done = Some(n),
                Err(e) => break Some(e),
            },
        }
        if c2s_done.is_some() && s2c_done.is_some() {
            break None;
        }
    };
    Forwarded { client_to_server: c2s_done.unwrap_or(0), server_to_client: s2c_done.unwrap_or(0), error }
}

/// Largest server packet before the login ends (auth switch, auth data, OK or ERR): a few hundred bytes in practice.
const LOGIN_PACKET_MAX: usize = 64 * 1024;

/// Server → TLS client. The client counted one packet more than the server (its `SSLRequest`, which the proxy kept
/// to itself), so until the login ends every server packet's sequence id goes up by one, and the client's down by
/// one ([`filter_client`]). The login ends with the server's OK (0x00) or ERR (0xFF); from then on each command
/// starts again at 0 on both sides, and bytes are copied as they come. `login_done` is set before that OK reaches
/// the client, so the client's first command — sent only after it — is never shifted.
async fn server_to_tls_client<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    server: &mut R,
    client: &mut W,
    login_done: &AtomicBool,
) -> io::Result<u64> {
    let mut moved = 0u64;
    let mut out = Vec::new();
    loop {
        let Some((seq, payload)) = tls::read_one_packet(server, LOGIN_PACKET_MAX).await? else { return Ok(moved) };
        let last = matches!(payload.first(), Some(0x00 | 0xFF));
        if last {
            login_done.store(true, Ordering::Release);
        }
        moved += write_packet(client, &mut out, seq.wrapping_add(1), &payload).await?;
        client.flush().await?;
        if last {
            break;
        }
    }
    let mut reader = tokio::io::BufReader::with_capacity(COPY_BUF_BYTES, server);
    Ok(moved + tokio::io::copy_buf(&mut reader, client).await?)
}

/// A connection to a mariadbd (or a client's): what forwarding needs of a TCP or a unix stream.
pub(crate) trait ServerStream:
    AsyncRead + AsyncWrite + tokio_splice2::AsyncReadFd + tokio_splice2::AsyncWriteFd + tokio_splice2::IsNotFile + Unpin
where
    Self: Sized,
{
    /// A second handle on the same socket, so that one direction can be spliced while the other is filtered.
    fn duplicate(&self) -> io::Result<Self>;

    /// Closes the stream so that bytes still queued for the peer are dropped where the transport allows it.
    fn abort(self);
}

impl ServerStream for TcpStream {
    fn duplicate(&self) -> io::Result<Self> {
        use std::os::fd::AsFd as _;
        let fd = self.as_fd().try_clone_to_owned()?;
        TcpStream::from_std(std::net::TcpStream::from(fd))
    }

    /// A RST instead of a FIN: bytes still queued in the kernel are discarded, not sent. Used on the stale
    /// master's side of a cut connection, so a statement the client sent a moment ago does not reach a master
    /// that lost its lease.
    fn abort(self) {
        // tokio deprecates SO_LINGER because a non-zero linger blocks in close(); a zero linger never blocks.
        #[allow(deprecated)]
        let _ = self.set_linger(Some(Duration::ZERO));
        drop(self);
    }
}

impl ServerStream for UnixStream {
    fn duplicate(&self) -> io::Result<Self> {
        use std::os::fd::AsFd as _;
        let fd = self.as_fd().try_clone_to_owned()?;
        let std = std::os::unix::net::UnixStream::from(fd);
        std.set_nonblocking(true)?;
        UnixStream::from_std(std)
    }

    /// A unix socket has no reset: what the peer has not read yet stays readable. Only the local mariadbd is
    /// reached this way, by the read-only port, which never carries a write to a master of another node.
    fn abort(self) {
        drop(self);
    }
}

/// Commands that fit one packet are read whole and judged before they are sent (so a suspect word inside a string
/// literal is read as data); a command of several packets (16 MiB and more) streams and is cut (backend reset
/// before its last byte) if it holds a suspect word anywhere.
const JUDGED_WHOLE_MAX: usize = PAYLOAD_MAX - 1;
/// Commands a client may send through the proxy besides those judged above; every other one is answered with an
/// error and never reaches mariadbd. Left out on purpose: `COM_SHUTDOWN` (0x08: a clean stop commits every waiting
/// transaction without its ACK, then the master's node fails over — MariaDB's test suite sends it), the replication
/// commands `COM_BINLOG_DUMP` (0x12), `COM_TABLE_DUMP` (0x13), `COM_REGISTER_SLAVE` (0x15) and
/// `COM_BINLOG_DUMP_GTID` (0x1e: a dump from the master's own binlog holds transactions no majority has yet; a
/// replica belongs on a node's replication port, which serves the global log), `COM_MULTI` (0xfe, MariaDB
/// 10.2–10.5: carries other commands inside), and the commands a server only uses internally or answers as
/// unknown.
const PASSED_COMMANDS: [u8; 19] = [
    0x01, // COM_QUIT
    0x02, // COM_INIT_DB
    0x04, // COM_FIELD_LIST
    0x05, // COM_CREATE_DB
    0x06, // COM_DROP_DB
    0x07, // COM_REFRESH
    0x09, // COM_STATISTICS
    0x0a, // COM_PROCESS_INFO
    0x0d, // COM_DEBUG
    0x0e, // COM_PING
    0x17, // COM_STMT_EXECUTE
    0x18, // COM_STMT_SEND_LONG_DATA
    0x19, // COM_STMT_CLOSE
    0x1a, // COM_STMT_RESET
    0x1b, // COM_SET_OPTION
    0x1c, // COM_STMT_FETCH
    0x1f, // COM_RESET_CONNECTION
    0xfa, // COM_STMT_BULK_EXECUTE
    0xfb, // COM_STMT_BULK_EXECUTE (10.2's number)
];

/// Where the client's packet stream is, after its login packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClientPhase {
    /// Commands (sequence id 0) and the packets of multi-round exchanges (auth switch, change user).
    Commands,
    /// `LOAD DATA LOCAL INFILE` content after a `COM_QUERY`: raw packets until an empty one.
    FileContent,
}

/// Client → server, packet by packet, once [`log_in`] has sent the login packet. Commands that could interrupt a
/// waiting commit are made harmless: `KILL …` becomes `KILL SOFT …`, `COM_PROCESS_KILL` becomes `KILL SOFT
/// CONNECTION n`, and what [`crate::statement::judge`] refuses is replaced by a `SIGNAL` so that MariaDB itself
/// answers the client with the reason, in order with everything else it sends.
/// `tls_login`: for a TLS client, set once the server ended the login; until then the client's packets (auth
/// switch answers) are one sequence id ahead of the server's count (see [`server_to_tls_client`]).
async fn filter_client<R: AsyncRead + Unpin, S: AsyncWrite + Unpin>(
    client: &mut R,
    server: &mut S,
    stats: &ProxyStats,
    rules: &ClientRules<'_>,
    tls_login: Option<&AtomicBool>,
    moved: &mut u64,
) -> io::Result<()> {
    let mut reader = tokio::io::BufReader::with_capacity(COPY_BUF_BYTES, &mut *client);
    let mut phase = ClientPhase::Commands;
    let mut last_command = 0u8;
    let mut out = Vec::with_capacity(256);
    // One buffer for every command of the connection, not an allocation per query.
    let mut payload = Vec::new();
    // The session's temporary tables, for the one statement about them MariaDB logs but cannot replicate.
    let mut tables = statement::SessionTables::default();
    loop {
        // Before waiting on the client, push out what was written: a TLS relay's stream holds the end of a large
        // command in its record buffer until flushed (a plain socket's flush costs nothing), and the client is
        // waiting for the answer to a command the server has not seen whole.
        if reader.buffer().is_empty() {
            server.flush().await?;
        }
        let mut header = [0u8; 4];
        match reader.read_exact(&mut header[..1]).await {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        reader.read_exact(&mut header[1..]).await?;
        let len = chunk_len(&header);
        if tls_login.is_some_and(|done| !done.load(Ordering::Acquire)) {
            header[3] = header[3].wrapping_sub(1);
            *moved += pass_through(&mut reader, server, &header, len).await?;
            continue;
        }
        let seq = header[3];
        let starts_command = phase == ClientPhase::Commands && seq == 0;
        if phase == ClientPhase::Commands && seq >= 2 && last_command == COM_QUERY {
            phase = ClientPhase::FileContent;
        }
        if phase == ClientPhase::FileContent && len == 0 {
            phase = ClientPhase::Commands;
        }
        if !starts_command {
            *moved += pass_through(&mut reader, server, &header, len).await?;
            continue;
        }
        if len > JUDGED_WHOLE_MAX {
            // Stream it, judged as it goes; MariaDB executes nothing before it has the whole command.
            let command = streamed_command(&mut reader, server, &header, len, moved).await?;
            if command.suspect {
                warn!(command = command.byte, "a command of 16 MiB or more holds a suspect word: connection cut");
                stats.command_refused();
                return Err(io::Error::new(io::ErrorKind::PermissionDenied, "suspect command of 16 MiB or more"));
            }
            last_command = command.byte;
            continue;
        }
        payload.clear();
        payload.resize(len, 0);
        reader.read_exact(&mut payload).await?;
        let command = payload.first().copied().unwrap_or(0);
        last_command = command;
        let replacement = match command {
            COM_QUERY | COM_STMT_PREPARE => match statement::judge(&payload[1..], rules.node_accounts) {
                Verdict::Forward if command == COM_QUERY => tables.observe(&payload[1..]).map(|why| {
                    stats.command_refused();
                    info!(why, "statement refused");
                    signal(why)
                }),
                Verdict::Forward => None,
                Verdict::Rewrite(text) => {
                    stats.kill_softened();
                    info!(statement = %String::from_utf8_lossy(&text), "KILL sent on as KILL SOFT");
                    Some([&[command][..], &text].concat())
                }
                Verdict::Refuse(why) => {
                    stats.command_refused();
                    info!(why, "statement refused");
                    Some(signal(why))
                }
            },
            COM_PROCESS_KILL => {
                stats.kill_softened();
                match payload.get(1..5) {
                    Some(id) => {
                        let id = u32::from_le_bytes([id[0], id[1], id[2], id[3]]);
                        info!(id, "COM_PROCESS_KILL sent on as KILL SOFT CONNECTION");
                        Some(format!("\x03KILL SOFT CONNECTION {id}").into_bytes())
                    }
                    None => Some(signal("paxsql: malformed COM_PROCESS_KILL")),
                }
            }
            // A privileged account's login refused at the handshake must not come in through a change of user.
            COM_CHANGE_USER
                if change_user_name(&payload).is_some_and(|u| rules.refused_users.is_some_and(|r| r.contains(u))) =>
            {
                stats.command_refused();
                Some(signal("paxsql: a change to an account holding READ ONLY ADMIN is refused on the read-only port"))
            }
            // Dropping `mysql` takes the node's accounts with it.
            COM_DROP_DB if !rules.node_accounts.is_empty() && payload[1..].eq_ignore_ascii_case(b"mysql") => {
                stats.command_refused();
                Some(signal(statement::REFUSE_NODE_ACCOUNTS))
            }
            c if PASSED_COMMANDS.contains(&c) || c == COM_CHANGE_USER => None,
            c => {
                stats.command_refused();
                info!(command = c, "command refused");
                Some(signal(&format!(
                    "paxsql: command 0x{c:02x} is not accepted through the proxy (SHUTDOWN, the replication \
                     commands and COM_MULTI are refused: stop nodes with paxsql, attach replicas to a node's \
                     replication port)"
                )))
            }
        };
        let sent = replacement.as_deref().unwrap_or(&payload);
        *moved += write_packet(server, &mut out, seq, sent).await?;
    }
}

/// What decides whether a client's login is sent on.
pub(crate) struct ClientRules<'a> {
    /// The certificate to offer; `None`: a client asking for TLS is refused.
    pub tls: Option<&'a ServerTls>,
    /// Refuse clients that do not ask for TLS.
    pub tls_required: bool,
    /// User names refused at login (the RO port's privileged accounts).
    pub refused_users: Option<&'a BTreeSet<String>>,
    /// The accounts the node runs its mariadbd with: no statement through the proxy may change them
    /// ([`crate::statement::judge`]).
    pub node_accounts: &'a BTreeSet<String>,
}

/// A client that has not sent its login (and finished TLS) within this time is dropped, as mariadbd would.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(10);
/// MySQL's `ER_SECURE_TRANSPORT_REQUIRED`, what clients know as "insecure transport prohibited".
const ER_SECURE_TRANSPORT_REQUIRED: u16 = 3159;

/// Reads the client's login after the greeting was sent: a plain handshake response, or an `SSLRequest`, the TLS
/// handshake and then the handshake response inside it. Refuses (with an ERR the client can read, over TLS if it
/// began) compression, TLS where none is configured, plaintext where TLS is required, and `refused_users`; sends
/// the login on to the server otherwise (a TLS client's with sequence id 1 and without `CLIENT_SSL`: the server
/// never saw the `SSLRequest`).
pub(crate) async fn log_in<S: AsyncWrite + Unpin>(
    client: TcpStream,
    server: &mut S,
    rules: &ClientRules<'_>,
    stats: &ProxyStats,
) -> io::Result<ClientConn> {
    match tokio::time::timeout(LOGIN_TIMEOUT, log_in_within(client, server, rules, stats)).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "no login within 10 s")),
    }
}

async fn log_in_within<S: AsyncWrite + Unpin>(
    mut client: TcpStream,
    server: &mut S,
    rules: &ClientRules<'_>,
    stats: &ProxyStats,
) -> io::Result<ClientConn> {
    let (seq, payload) = read_login_packet(&mut client).await?;
    if login_capabilities(&payload) & caps::SSL == 0 {
        if rules.tls_required {
            stats.refused_plaintext();
            let message = "paxsql: connections without TLS are refused on this port; connect with TLS (e.g. \
                           --ssl-verify-server-cert --ssl-ca=<cluster CA>)";
            let err = ErrPacket::new(ER_SECURE_TRANSPORT_REQUIRED, "08004", message);
            return Err(refuse_login(&mut client, seq, err, "plaintext client where TLS is required").await);
        }
        let mut client = ClientConn::Plain(client);
        send_login(&mut client, server, rules, stats, seq, payload).await?;
        return Ok(client);
    }
    let Some(server_tls) = rules.tls.filter(|_| is_ssl_request(&payload)) else {
        let message = "paxsql: TLS is not configured on this node's client ports".to_string();
        let err = ErrPacket::new(ER_NOT_SUPPORTED_YET, "08004", message);
        stats.command_refused();
        return Err(refuse_login(&mut client, seq, err, "client asked for TLS").await);
    };
    let mut tls_stream = server_tls.accept(client).await?;
    stats.tls_session();
    let (seq, mut payload) = read_login_packet(&mut tls_stream).await?;
    let mut client = ClientConn::Tls(Box::new(tls_stream));
    clear_ssl_capability(&mut payload);
    send_login(&mut client, server, rules, stats, seq.wrapping_sub(1), payload).await?;
    Ok(client)
}

/// Judges the handshake response and sends it on with sequence id `seq`.
async fn send_login<S: AsyncWrite + Unpin>(
    client: &mut ClientConn,
    server: &mut S,
    rules: &ClientRules<'_>,
    stats: &ProxyStats,
    seq: u8,
    payload: Vec<u8>,
) -> io::Result<()> {
    // The client's own numbering: one ahead of the server's over TLS.
    let client_seq = if matches!(client, ClientConn::Tls(_)) { seq.wrapping_add(1) } else { seq };
    if login_capabilities(&payload) & caps::COMPRESS != 0 {
        let message = "paxsql: compression through the proxy is not available: the proxy reads each command to keep \
                       KILL from ending a commit before a majority holds it (see README)";
        let err = ErrPacket::new(ER_NOT_SUPPORTED_YET, "08004", message);
        stats.command_refused();
        return Err(refuse_login(client, client_seq, err, "client asked for compression").await);
    }
    if let Some(user) = login_user(&payload).filter(|u| rules.refused_users.is_some_and(|r| r.contains(*u))) {
        let message = format!(
            "paxsql: account {user:?} holds READ ONLY ADMIN, which read_only does not bind: on this replica it could \
             write what the cluster's log does not hold. Read through the read-write port"
        );
        info!(user, "privileged login refused on the read-only port");
        let err = ErrPacket::new(ER_SPECIFIC_ACCESS_DENIED, "42000", message);
        stats.command_refused();
        return Err(refuse_login(client, client_seq, err, "privileged account on the RO port").await);
    }
    let mut out = Vec::with_capacity(4 + payload.len());
    write_packet(server, &mut out, seq, &payload).await?;
    Ok(())
}

/// Reads the client's next packet of the login (it fits [`LOGIN_PACKET_MAX`]).
async fn read_login_packet<R: AsyncRead + Unpin>(client: &mut R) -> io::Result<(u8, Vec<u8>)> {
    tls::read_one_packet(client, LOGIN_PACKET_MAX)
        .await?
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "the client left during the login"))
}

/// Answers a refused login with `err` (sequence id after the client's `seq`) and returns the error that ends the
/// connection.
async fn refuse_login<W: AsyncWrite + Unpin>(client: &mut W, seq: u8, err: ErrPacket, why: &str) -> io::Error {
    let _ = async {
        client.write_all(&err.packet(seq.wrapping_add(1))).await?;
        client.flush().await
    }
    .await;
    io::Error::new(io::ErrorKind::PermissionDenied, why.to_string())
}

impl AsyncRead for ClientConn {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            ClientConn::Plain(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            ClientConn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientConn {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientConn::Plain(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            ClientConn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            ClientConn::Plain(s) => std::pin::Pin::new(s).poll_flush(cx),
            ClientConn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            ClientConn::Plain(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            ClientConn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// MariaDB's `ER_SPECIFIC_ACCESS_DENIED_ERROR`.
const ER_SPECIFIC_ACCESS_DENIED: u16 = 1227;

/// `SIGNAL` makes MariaDB answer with our message as an ordinary error (SQLSTATE 42000, ER_NOT_SUPPORTED_YET).
fn signal(message: &str) -> Vec<u8> {
    let escaped = message.replace('\\', "\\\\").replace('\'', "''");
    format!("\x03SIGNAL SQLSTATE '42000' SET MYSQL_ERRNO = {ER_NOT_SUPPORTED_YET}, MESSAGE_TEXT = '{escaped}'")
        .into_bytes()
}

/// MariaDB `ER_NOT_SUPPORTED_YET`: "This version of MariaDB doesn't yet support …".
const ER_NOT_SUPPORTED_YET: u16 = 1235;

async fn write_packet<S: AsyncWrite + Unpin>(
    server: &mut S,
    out: &mut Vec<u8>,
    seq: u8,
    payload: &[u8],
) -> io::Result<u64> {
    // A replacement is always far below one packet's maximum; a forwarded payload is one packet already.
    out.clear();
    paxsql_mysql_wire::packet::encode(seq, payload, out);
    server.write_all(out).await?;
    Ok(out.len() as u64)
}

/// Copies one packet (header already read) to the server as it is.
async fn pass_through<R: AsyncRead + Unpin, S: AsyncWrite + Unpin>(
    reader: &mut R,
    server: &mut S,
    header: &[u8; 4],
    len: usize,
) -> io::Result<u64> {
    server.write_all(header).await?;
    let copied = tokio::io::copy(&mut reader.take(len as u64), server).await?;
    if copied < len as u64 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "client closed inside a packet"));
    }
    Ok(4 + copied)
}

struct StreamedCommand {
    byte: u8,
    suspect: bool,
}

/// Streams a large command (and its continuation packets) to the server, scanning it for suspect words across
/// chunk and packet boundaries. Returns before sending the last chunk if one is found, so the server never holds
/// the whole command.
async fn streamed_command<R: AsyncRead + Unpin, S: AsyncWrite + Unpin>(
    reader: &mut R,
    server: &mut S,
    header: &[u8; 4],
    mut len: usize,
    moved: &mut u64,
) -> io::Result<StreamedCommand> {
    let mut chunk = vec![0u8; COPY_BUF_BYTES];
    // The tail of the previous chunk, so a word split across two chunks is still seen.
    let mut carry: Vec<u8> = Vec::new();
    let mut first_byte = None;
    let mut header = *header;
    loop {
        server.write_all(&header).await?;
        *moved += 4;
        let mut left = len;
        while left > 0 {
            let n = left.min(chunk.len());
            reader.read_exact(&mut chunk[..n]).await?;
            first_byte.get_or_insert(chunk[0]);
            carry.extend_from_slice(&chunk[..n]);
            if statement::is_suspect_in_bulk(&carry) {
                return Ok(StreamedCommand { byte: first_byte.unwrap_or(0), suspect: true });
            }
            // Keep enough of the tail for the longest word to be seen whole across the boundary.
            let drop = carry.len().saturating_sub(statement::LONGEST_BULK_WORD - 1);
            carry.drain(..drop);
            server.write_all(&chunk[..n]).await?;
            *moved += n as u64;
            left -= n;
        }
        if len < PAYLOAD_MAX {
            return Ok(StreamedCommand { byte: first_byte.unwrap_or(0), suspect: false });
        }
        reader.read_exact(&mut header).await?;
        len = chunk_len(&header);
    }
}

/// Takes what the proxy cannot give out of a server greeting's capability flags: compression (the client would
/// then wrap its commands) and TLS (mariadbd runs none; the proxy announces its own where configured, see
/// [`crate::tls::announce_tls`]). A packet that is not a v10 greeting (an ERR from a full or blocking server) is left
/// as it is.
fn restrict_greeting(packet: &mut [u8]) {
    paxsql_mysql_wire::handshake::set_greeting_capabilities(packet, |low| {
        low & !(caps::COMPRESS as u16) & !(caps::SSL as u16)
    });
}

/// A connected backend mariadbd, by transport.
pub(crate) enum ServerConn {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// Through another member's relay over TLS (a plaintext relay is a [`ServerConn::Tcp`]: it can be spliced).
    Relay(PortStream),
}

impl ServerConn {
    pub(crate) fn abort(self) {
        match self {
            ServerConn::Tcp(s) => s.abort(),
            ServerConn::Unix(s) => s.abort(),
            ServerConn::Relay(s) => s.abort(),
        }
    }
}

/// Takes the client's login ([`log_in`]) and then [`forward`]s, over whichever transport the backend was reached by.
pub(crate) async fn serve_client(
    client: TcpStream,
    server: &mut ServerConn,
    rules: &ClientRules<'_>,
    mode: ForwardMode,
    stats: &ProxyStats,
) -> Forwarded {
    match server {
        ServerConn::Tcp(s) => match log_in(client, s, rules, stats).await {
            Ok(client) => forward(client, s, mode, stats, rules).await,
            Err(e) => Forwarded::failed(e),
        },
        ServerConn::Unix(s) => match log_in(client, s, rules, stats).await {
            Ok(client) => forward(client, s, mode, stats, rules).await,
            Err(e) => Forwarded::failed(e),
        },
        ServerConn::Relay(s) => match log_in(client, s, rules, stats).await {
            Ok(client) => {
                let (server_rd, mut server_wr) = tokio::io::split(s);
                forward_streams(client, server_rd, &mut server_wr, stats, rules).await
            }
            Err(e) => Forwarded::failed(e),
        },
    }
}

/// Connects to a backend mariadbd (PROXY header first, if given) and reads its greeting, restricted to what the
/// proxy can forward ([`restrict_greeting`]); the client is handed over only after this. MariaDB takes the header on
/// its unix socket too when `proxy_protocol_networks` lists `localhost` (verified on 10.11: the session is then the
/// client's `user@address`, as over TCP).
pub(crate) async fn open_backend(
    backend: &Backend,
    timeout: Duration,
    header: Option<ProxyHeader>,
) -> Result<(ServerConn, Vec<u8>), ProxyError> {
    match backend {
        Backend::Tcp(addr) => {
            let (stream, greeting) = open_tcp(*addr, timeout, header).await?;
            Ok((ServerConn::Tcp(stream), greeting))
        }
        Backend::Unix(path) => {
            let (stream, greeting) = open_on(UnixStream::connect(path), backend, timeout, header).await?;
            Ok((ServerConn::Unix(stream), greeting))
        }
        Backend::Relay { .. } => {
            Err(unreachable(backend, timeout, "a relay is opened with open_relay, for a master's term".into()))
        }
    }
}

/// [`open_backend`] for a mariadbd over TCP, as a TCP stream (the master's end of a relay needs one).
pub(crate) async fn open_tcp(
    addr: std::net::SocketAddr,
    timeout: Duration,
    header: Option<ProxyHeader>,
) -> Result<(TcpStream, Vec<u8>), ProxyError> {
    let connect = async {
        let stream = TcpStream::connect(addr).await?;
        // Queries and results are small packets; Nagle would hold them back.
        stream.set_nodelay(true)?;
        Ok(stream)
    };
    open_on(connect, &Backend::Tcp(addr), timeout, header).await
}

/// Opens a relay to the master `backend` (a [`Backend::Relay`]) for a client of `request`, and reads mariadbd's
/// greeting through it. The master's node answers only while its mariadbd serves `request.master_version`, and
/// sends the PROXY header to it itself.
pub(crate) async fn open_relay(
    dialer: Option<&RelayDialer>,
    backend: &Backend,
    request: &RelayRequest,
    timeout: Duration,
) -> Result<(ServerConn, Vec<u8>), ProxyError> {
    let (Backend::Relay { node_id, addr }, Some(dialer)) = (backend, dialer) else {
        return Err(unreachable(backend, timeout, "no relay credentials configured".into()));
    };
    let stream = dialer.dial(*node_id, *addr, request, timeout).await.map_err(|e| match e {
        RelayError::Refused { detail, .. } => unreachable(backend, timeout, detail),
        other => unreachable(backend, timeout, other.to_string()),
    })?;
    let (stream, greeting) = greeted(stream, backend, timeout, PortStream::abort).await?;
    let server = match stream {
        PortStream::Plain(tcp) => ServerConn::Tcp(tcp),
        tls => ServerConn::Relay(tls),
    };
    Ok((server, greeting))
}

/// [`open_backend`] on one transport: `connect` and the PROXY header within `timeout`, then the greeting.
async fn open_on<S: ServerStream>(
    connect: impl std::future::Future<Output = io::Result<S>>,
    backend: &Backend,
    timeout: Duration,
    header: Option<ProxyHeader>,
) -> Result<(S, Vec<u8>), ProxyError> {
    let attempt = async {
        let mut stream = connect.await?;
        if let Some(header) = header {
            stream.write_all(&header.encode_v1()).await?;
        }
        Ok::<_, io::Error>(stream)
    };
    let stream = match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return Err(unreachable(backend, timeout, e.to_string())),
        Err(_) => return Err(unreachable(backend, timeout, "timed out".into())),
    };
    greeted(stream, backend, timeout, S::abort).await
}

/// The greeting of a just opened backend `stream`, restricted to what the proxy can forward
/// ([`restrict_greeting`]); a stream that does not greet is closed with `abort`.
async fn greeted<S: AsyncRead + Unpin>(
    mut stream: S,
    backend: &Backend,
    timeout: Duration,
    abort: impl FnOnce(S),
) -> Result<(S, Vec<u8>), ProxyError> {
    match read_greeting(&mut stream, backend, timeout).await {
        Ok(mut greeting) => {
            restrict_greeting(&mut greeting);
            Ok((stream, greeting))
        }
        Err(e) => {
            abort(stream);
            Err(e)
        }
    }
}

pub(crate) fn unreachable(backend: &Backend, timeout: Duration, detail: String) -> ProxyError {
    ProxyError::BackendUnreachable { backend: backend.to_string(), timeout_ms: timeout.as_millis(), detail }
}

/// Larger than any server greeting (a few hundred bytes); a backend that announces more is not a MariaDB server.
const GREETING_BYTES_MAX: usize = 64 * 1024;

/// Reads the backend's first packet (its handshake greeting), whole, within `timeout`. The RW port hands a client
/// to a backend only once it has greeted: a backend that dies or is replaced before then has told the client
/// nothing, so the client can still be held and sent to the next master instead of seeing a dropped connection.
async fn read_greeting<S: AsyncRead + Unpin>(
    server: &mut S,
    backend: &Backend,
    timeout: Duration,
) -> Result<Vec<u8>, ProxyError> {
    let read = async {
        let mut header = [0u8; 4];
        server.read_exact(&mut header).await?;
        let len = chunk_len(&header);
        let mut packet = header.to_vec();
        if len > GREETING_BYTES_MAX {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a {len}-byte first packet")));
        }
        packet.resize(4 + len, 0);
        server.read_exact(&mut packet[4..]).await?;
        Ok::<_, io::Error>(packet)
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(packet)) => Ok(packet),
        Ok(Err(e)) => Err(unreachable(backend, timeout, format!("no greeting: {e}"))),
        Err(_) => Err(unreachable(backend, timeout, "no greeting in time".into())),
    }
}
