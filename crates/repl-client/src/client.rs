//! The tokio shell around the wire crate ([`paxsql_mysql_wire`]): connect, log in, the replica's setup statements,
//! the dump, the event stream and the ACK writer.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use paxsql_binlog::{event_type, verify_checksum, Checksum, EventData, EventDecoder, EventHeader, Gtid, GtidSet};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{oneshot, watch};
use tracing::{debug, trace, warn};

use paxsql_mysql_wire::auth::{self, NATIVE_PASSWORD};
use paxsql_mysql_wire::command::com_query;
use paxsql_mysql_wire::handshake::{AuthReply, Greeting, LoginRequest};
use paxsql_mysql_wire::packet::{self, Check, Frame};
use paxsql_mysql_wire::replication::{
    semi_sync_ack, BinlogDump, RegisterSlave, SemiSyncFraming, StreamPacket, BINLOG_SEND_ANNOTATE_ROWS_EVENT,
};
use paxsql_mysql_wire::resultset::{parse_column_count, parse_text_row};
use paxsql_mysql_wire::{is_eof, is_ok, ErrPacket};

use crate::error::{Error, Result};
use crate::protocol::{server_error, CLIENT_CAPS, CLIENT_MAX_PACKET};

/// Where the master listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    Tcp {
        host: String,
        port: u16,
    },
    /// The unix socket (the binlog server runs next to its mariadbd, docs/ARCHITECTURE.md §1).
    Unix(PathBuf),
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Tcp { host, port } => write!(f, "{host}:{port}"),
            Address::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// How to connect and where to start. Build with [`ConnectOptions::new`], then set fields.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub address: Address,
    /// A replication account (`REPLICATION SLAVE`) using `mysql_native_password`.
    pub user: String,
    pub password: String,
    /// The server_id this client registers with: must differ from the master's and from every other replica
    /// of it (MariaDB ends an older dump connection that registers the same id).
    pub server_id: u32,
    /// `@slave_connect_state`: the stream starts after these GTIDs (empty: from the start of the binlog).
    pub start: GtidSet,
    /// Bound on TCP/unix connect, login, setup statements and the start of the dump, together.
    pub connect_timeout: Duration,
    /// `@master_heartbeat_period`: the master sends a HEARTBEAT event when idle this long.
    pub heartbeat_period: Duration,
    /// [`ReplicationClient::next_event`] fails with [`Error::IdleTimeout`] when nothing arrives this long;
    /// keep it a few heartbeat periods. `None`: wait forever.
    pub idle_timeout: Option<Duration>,
    /// Send `SET @rpl_semi_sync_slave=1` so the master waits for our ACKs. Off only for tests / tools.
    pub semi_sync: bool,
    /// Return HEARTBEAT events from [`ReplicationClient::next_event`] instead of skipping them.
    pub surface_heartbeats: bool,
    /// Largest reassembled packet accepted (an event is at most the master's `max_allowed_packet`, ≤ 1 GiB).
    pub max_packet_bytes: usize,
}

impl ConnectOptions {
    /// Defaults: start from the beginning, 10 s connect timeout, 1 s heartbeats, 5 s idle timeout, semi-sync
    /// on, heartbeats skipped, 1 GiB + 64 KiB packet limit.
    pub fn new(address: Address, user: &str, password: &str, server_id: u32) -> Self {
        ConnectOptions {
            address,
            user: user.to_string(),
            password: password.to_string(),
            server_id,
            start: GtidSet::new(),
            connect_timeout: Duration::from_secs(10),
            heartbeat_period: Duration::from_secs(1),
            idle_timeout: Some(Duration::from_secs(5)),
            semi_sync: true,
            surface_heartbeats: false,
            max_packet_bytes: (1 << 30) + (64 << 10),
        }
    }

    /// [`ConnectOptions::new`] for `host:port`.
    pub fn tcp(host: &str, port: u16, user: &str, password: &str, server_id: u32) -> Self {
        Self::new(Address::Tcp { host: host.to_string(), port }, user, password, server_id)
    }

    fn validate(&self) -> Result<()> {
        let bad = |what: &str| Err(Error::InvalidOptions { what: what.to_string() });
        if self.server_id == 0 {
            // MariaDB refuses a replica with server_id 0 ("Misconfigured slave").
            return bad("server_id must not be 0");
        }
        if self.heartbeat_period.is_zero() {
            // 0 turns heartbeats off, and with them the only way to notice a silent master.
            return bad("heartbeat_period must be positive");
        }
        if self.idle_timeout.is_some_and(|t| t <= self.heartbeat_period) {
            return bad("idle_timeout must be longer than heartbeat_period");
        }
        if self.user.contains('\0') {
            return bad("user must not contain NUL");
        }
        Ok(())
    }
}

/// What the master told us about itself while connecting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// As in the greeting, e.g. `5.5.5-10.11.19-MariaDB-0+deb12u1-log`.
    pub server_version: String,
    /// Our session's thread id on the master (the dump thread; `KILL` target).
    pub connection_id: u32,
    /// The master's `@@server_id`.
    pub server_id: u32,
    /// `@@global.binlog_checksum` as negotiated with `@master_binlog_checksum`.
    pub checksum: Checksum,
}

/// One binlog event as the master sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationEvent {
    /// The event exactly as MariaDB sent it (header, body, CRC32 footer), for re-serving to replicas.
    pub raw: Bytes,
    pub header: EventHeader,
    /// Decoded body for the events that steer the stream: FORMAT_DESCRIPTION, ROTATE, GTID, GTID_LIST,
    /// BINLOG_CHECKPOINT, QUERY, XID, HEARTBEAT, STOP. `None` for row data and others, which paxsql carries
    /// opaquely (their CRC32 is still checked).
    pub data: Option<EventData>,
    /// The binlog file the event is in (from the last ROTATE; for a HEARTBEAT, the file it names).
    pub file: Arc<str>,
    /// Position just after the event in `file` (the header's log_pos; 0 on the dump's fake ROTATE). The value
    /// to ACK for a transaction ending here.
    pub end_pos: u64,
    /// The semi-sync header asked for an ACK: the master blocks the commit until a reply covers `end_pos`.
    pub ack_requested: bool,
}

impl ReplicationEvent {
    pub fn type_code(&self) -> u8 {
        self.header.type_code
    }

    /// The GTID of a GTID event (`domain-server_id-seq_no`, server_id from the header).
    pub fn gtid(&self) -> Option<Gtid> {
        match &self.data {
            Some(EventData::Gtid(g)) => Some(g.gtid(self.header.server_id)),
            _ => None,
        }
    }

    pub fn is_heartbeat(&self) -> bool {
        self.header.type_code == event_type::HEARTBEAT
    }
}

/// Where an ACK points: semi-sync replies are cumulative, so only the highest one matters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct AckPosition {
    // Field order gives MariaDB's order: file name first (`strcmp`, `Active_tranx::compare`), then position.
    file: Arc<str>,
    pos: u64,
}

/// Sends semi-sync ACKs for a [`ReplicationClient`] from any task while the client keeps reading.
///
/// `ack` never blocks: it records the position and a writer task sends it (sequence id 0, docs/ARCHITECTURE.md §4). If ACKs
/// come faster than the socket takes them, the writer sends only the newest, which covers the older ones
/// (the master releases every commit at or before the acknowledged position,
/// `Active_tranx::clear_active_tranx_nodes`). An ACK at or before one already given is ignored.
#[derive(Debug, Clone)]
pub struct AckHandle {
    latest: Arc<watch::Sender<Option<AckPosition>>>,
}

impl AckHandle {
    /// Acknowledges everything up to `file`:`pos` (the `end_pos` of the last event of the last transaction
    /// that is safe, i.e. chosen in Paxos). Fails with [`Error::Disconnected`] once the connection is gone or
    /// its [`ReplicationClient`] was dropped.
    pub fn ack(&self, file: &str, pos: u64) -> Result<()> {
        if self.latest.is_closed() {
            return Err(Error::Disconnected { during: format!("sending the semi-sync ACK for {file}:{pos}") });
        }
        let new = AckPosition { file: Arc::from(file), pos };
        self.latest.send_if_modified(|cur| {
            if cur.as_ref().is_some_and(|c| *c >= new) {
                return false;
            }
            *cur = Some(new);
            true
        });
        Ok(())
    }
}

async fn ack_writer(
    mut writer: Box<dyn AsyncWrite + Send + Unpin>,
    mut latest: watch::Receiver<Option<AckPosition>>,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut stop => break,
            changed = latest.changed() => if changed.is_err() { break },
        }
        let Some(ack) = latest.borrow_and_update().clone() else { continue };
        let mut bytes = Vec::with_capacity(32);
        packet::encode(0, &semi_sync_ack(&ack.file, ack.pos), &mut bytes);
        if let Err(e) = writer.write_all(&bytes).await {
            warn!(file = %ack.file, pos = ack.pos, error = %e, "semi-sync ACK not sent; the ACK writer stops");
            break;
        }
        trace!(file = %ack.file, pos = ack.pos, "semi-sync ACK sent");
    }
    // Dropping `latest` closes the channel: later `AckHandle::ack` calls report Disconnected.
}

/// Buffered packet reader. Cancel-safe: bytes are only consumed once a whole packet is in the buffer, so a
/// `next_event` dropped in a `select!` loses nothing.
struct PacketReader {
    reader: Box<dyn AsyncRead + Send + Unpin>,
    buf: BytesMut,
    max_packet: usize,
}

impl PacketReader {
    async fn read(&mut self, during: &str, idle: Option<Duration>) -> Result<(Frame, Bytes)> {
        loop {
            match packet::check(&self.buf, self.max_packet)? {
                Check::Complete(frame) => {
                    let payload = packet::take(&mut self.buf, &frame);
                    return Ok((frame, payload));
                }
                Check::Incomplete { need } => {
                    // Grow towards big events in bounded steps: a length field alone must not allocate 1 GiB.
                    self.buf.reserve(need.clamp(64 << 10, 4 << 20));
                    let read = self.reader.read_buf(&mut self.buf);
                    let n = match idle {
                        Some(t) => tokio::time::timeout(t, read)
                            .await
                            .map_err(|_| Error::IdleTimeout { idle_ms: t.as_millis() })?,
                        None => read.await,
                    }
                    .map_err(|e| Error::io(during, e))?;
                    if n == 0 {
                        return Err(Error::Disconnected { during: during.to_string() });
                    }
                }
            }
        }
    }
}

/// The connection before the dump starts: request/response with strict sequence ids.
struct Session {
    reader: PacketReader,
    writer: Box<dyn AsyncWrite + Send + Unpin>,
}

impl Session {
    async fn write(&mut self, seq: u8, payload: &[u8], during: &str) -> Result<()> {
        let mut bytes = Vec::with_capacity(payload.len() + 4);
        packet::encode(seq, payload, &mut bytes);
        self.writer.write_all(&bytes).await.map_err(|e| Error::io(during, e))
    }

    async fn read(&mut self, expected_seq: u8, during: &'static str) -> Result<Bytes> {
        let (frame, payload) = self.reader.read(during, None).await?;
        if frame.first_seq != expected_seq {
            return Err(Error::PacketOutOfOrder { during, expected: expected_seq, got: frame.first_seq });
        }
        Ok(payload)
    }

    async fn login(&mut self, opts: &ConnectOptions) -> Result<Greeting> {
        let payload = self.read(0, "reading the greeting").await?;
        if payload.first() == Some(&0xFF) {
            // Too many connections, host blocked: an ERR in place of the greeting.
            return Err(server_error(ErrPacket::decode(&payload)?, "the connection greeting"));
        }
        let greeting = Greeting::decode(&payload)?;
        debug!(version = %greeting.server_version, id = greeting.connection_id, plugin = %greeting.auth_plugin, "greeting");
        let token = auth::token(opts.password.as_bytes(), &greeting.scramble);
        let login = LoginRequest::native(CLIENT_CAPS, greeting.capabilities, CLIENT_MAX_PACKET, &opts.user, token);
        self.write(1, &login.encode(), "sending the login").await?;
        let mut seq = 2u8;
        // A server may switch plugins once; a second switch would be a loop we do not follow.
        for _ in 0..2 {
            match AuthReply::decode(&self.read(seq, "logging in").await?)? {
                AuthReply::Ok => return Ok(greeting),
                AuthReply::Err(e) => return Err(server_error(e, "login")),
                AuthReply::Switch { plugin, data } if plugin == NATIVE_PASSWORD => {
                    let token = auth::token(opts.password.as_bytes(), &data);
                    self.write(seq.wrapping_add(1), &token, "answering the auth switch").await?;
                    seq = seq.wrapping_add(2);
                }
                AuthReply::Switch { plugin, .. } => return Err(Error::UnsupportedAuthPlugin { plugin }),
                AuthReply::MoreData => return Err(Error::UnsupportedAuthPlugin { plugin: greeting.auth_plugin }),
            }
        }
        Err(Error::Protocol { during: "login", what: "repeated auth switch", offset: 0 })
    }

    /// Sends a command and expects OK (or ERR, returned as [`Error::Server`] naming `what`).
    async fn command_ok(&mut self, payload: &[u8], what: &str) -> Result<()> {
        self.write(0, payload, what).await?;
        let reply = self.read(1, "reading a command reply").await?;
        if reply.first() == Some(&0xFF) {
            return Err(server_error(ErrPacket::decode(&reply)?, what));
        }
        if !is_ok(&reply)? {
            return Err(Error::Protocol { during: "command reply", what: "expected OK", offset: 0 });
        }
        Ok(())
    }

    async fn exec(&mut self, sql: &str) -> Result<()> {
        debug!(sql, "setup statement");
        self.command_ok(&com_query(sql), sql).await
    }

    /// Runs a query and returns its rows (text protocol, NULL as `None`).
    async fn query(&mut self, sql: &str) -> Result<Vec<Vec<Option<Vec<u8>>>>> {
        const DURING: &str = "reading a result set";
        debug!(sql, "setup query");
        self.write(0, &com_query(sql), sql).await?;
        let first = self.read(1, DURING).await?;
        if first.first() == Some(&0xFF) {
            return Err(server_error(ErrPacket::decode(&first)?, sql));
        }
        if is_ok(&first)? {
            return Ok(Vec::new());
        }
        let columns = parse_column_count(&first)?;
        let columns = usize::try_from(columns).ok().filter(|&c| c <= 4096).ok_or(Error::Protocol {
            during: DURING,
            what: "absurd column count",
            offset: 0,
        })?;
        let mut seq = 2u8;
        for _ in 0..columns {
            self.read(seq, DURING).await?; // column definition: names and types are not needed
            seq = seq.wrapping_add(1);
        }
        let eof = self.read(seq, DURING).await?;
        if !is_eof(&eof) {
            return Err(Error::Protocol { during: DURING, what: "no EOF after the column definitions", offset: 0 });
        }
        let mut rows = Vec::new();
        loop {
            seq = seq.wrapping_add(1);
            let p = self.read(seq, DURING).await?;
            if is_eof(&p) {
                return Ok(rows);
            }
            if p.first() == Some(&0xFF) {
                return Err(server_error(ErrPacket::decode(&p)?, sql));
            }
            rows.push(parse_text_row(&p, columns)?);
        }
    }

    async fn query_value(&mut self, sql: &str) -> Result<String> {
        let rows = self.query(sql).await?;
        match rows.into_iter().next().and_then(|r| r.into_iter().next()) {
            Some(Some(v)) => Ok(String::from_utf8_lossy(&v).into_owned()),
            _ => Err(Error::Protocol { during: "setup query", what: "no value in the result", offset: 0 }),
        }
    }
}

/// A semi-sync replication connection to the local mariadbd, streaming its binlog by GTID.
///
/// Read with [`ReplicationClient::next_event`] (cancel-safe); ACK with [`ReplicationClient::ack`] or an
/// [`AckHandle`] from another task. Dropping the client closes the connection (ACK handles then fail).
pub struct ReplicationClient {
    reader: PacketReader,
    expected_seq: u8,
    framing: SemiSyncFraming,
    decoder: EventDecoder,
    file: Arc<str>,
    ack: AckHandle,
    _stop_ack_writer: oneshot::Sender<()>,
    pending: Option<ReplicationEvent>,
    surface_heartbeats: bool,
    idle_timeout: Option<Duration>,
    server: ServerInfo,
}

impl fmt::Debug for ReplicationClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicationClient").field("server", &self.server).field("file", &self.file).finish()
    }
}

impl ReplicationClient {
    /// Connects, logs in, sends the statements a MariaDB 10.11 semi-sync replica sends (docs/ARCHITECTURE.md §4) and
    /// starts the dump from `opts.start`. Returns once the master accepted the dump: an unknown start GTID
    /// fails here with [`Error::Server`] code 1236.
    pub async fn connect(opts: ConnectOptions) -> Result<ReplicationClient> {
        opts.validate()?;
        let timeout = opts.connect_timeout;
        let address = opts.address.to_string();
        match tokio::time::timeout(timeout, Self::connect_within(opts)).await {
            Ok(result) => result,
            Err(_) => Err(Error::ConnectTimeout { address, timeout_ms: timeout.as_millis() }),
        }
    }

    /// Reconnects after an error, continuing after `gtids` (the GTID state of everything the caller already
    /// holds, e.g. the last GTID proposed to Paxos). Transactions the caller had only partly received are
    /// sent again from their GTID event; reset any [`crate::TransactionAssembler`] first.
    pub async fn resume(mut opts: ConnectOptions, gtids: GtidSet) -> Result<ReplicationClient> {
        opts.start = gtids;
        Self::connect(opts).await
    }

    async fn connect_within(opts: ConnectOptions) -> Result<ReplicationClient> {
        let during = format!("connecting to {}", opts.address);
        let (reader, writer): (Box<dyn AsyncRead + Send + Unpin>, Box<dyn AsyncWrite + Send + Unpin>) = match &opts
            .address
        {
            Address::Tcp { host, port } => {
                let stream =
                    tokio::net::TcpStream::connect((host.as_str(), *port)).await.map_err(|e| Error::io(&during, e))?;
                // ACKs are tiny and latency bound (every commit waits for one): never let Nagle hold them.
                stream.set_nodelay(true).map_err(|e| Error::io(&during, e))?;
                let (r, w) = stream.into_split();
                (Box::new(r), Box::new(w))
            }
            Address::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path).await.map_err(|e| Error::io(&during, e))?;
                let (r, w) = stream.into_split();
                (Box::new(r), Box::new(w))
            }
        };
        let reader = PacketReader { reader, buf: BytesMut::with_capacity(64 << 10), max_packet: opts.max_packet_bytes };
        let mut s = Session { reader, writer };
        let greeting = s.login(&opts).await?;

        let server_id = s.query_value("SELECT @@GLOBAL.server_id").await?;
        let server_id = server_id.parse::<u32>().map_err(|_| Error::Protocol {
            during: "setup query",
            what: "@@server_id is not a number",
            offset: 0,
        })?;
        if server_id == opts.server_id {
            return Err(Error::ServerIdClash { server_id });
        }
        s.exec(&format!("SET @master_heartbeat_period= {}", opts.heartbeat_period.as_nanos())).await?;
        s.exec("SET @master_binlog_checksum= @@global.binlog_checksum").await?;
        let checksum = match s.query_value("SELECT @master_binlog_checksum").await?.as_str() {
            "CRC32" => Checksum::Crc32,
            "NONE" => Checksum::Off,
            other => return Err(Error::UnknownChecksum { value: other.to_string() }),
        };
        // 4 = MARIA_SLAVE_CAPABILITY_GTID: the master sends GTID events and accepts @slave_connect_state.
        s.exec("SET @mariadb_slave_capability=4").await?;
        // GtidSet's Display is digits, '-' and ',' only: nothing to escape.
        s.exec(&format!("SET @slave_connect_state='{}'", opts.start)).await?;
        s.exec("SET @slave_gtid_strict_mode=1").await?;
        s.exec("SET @slave_gtid_ignore_duplicates=0").await?;
        s.command_ok(&RegisterSlave { server_id: opts.server_id, report_port: 0 }.encode(), "COM_REGISTER_SLAVE")
            .await?;
        if opts.semi_sync {
            s.exec("SET @rpl_semi_sync_slave= 1").await?;
        }
        s.write(0, &BinlogDump::gtid(opts.server_id, BINLOG_SEND_ANNOTATE_ROWS_EVENT).encode(), "COM_BINLOG_DUMP")
            .await?;
        debug!(start = %opts.start, server_id = opts.server_id, "binlog dump requested");

        let (latest_tx, latest_rx) = watch::channel(None);
        let (stop_tx, stop_rx) = oneshot::channel();
        tokio::spawn(ack_writer(s.writer, latest_rx, stop_rx));
        let mut client = ReplicationClient {
            reader: s.reader,
            expected_seq: 1,
            framing: if opts.semi_sync { SemiSyncFraming::Detect } else { SemiSyncFraming::Off },
            decoder: EventDecoder::new(checksum),
            file: Arc::from(""),
            ack: AckHandle { latest: Arc::new(latest_tx) },
            _stop_ack_writer: stop_tx,
            pending: None,
            // The first packet is the fake ROTATE; read it here so a refused start position fails `connect`.
            surface_heartbeats: true,
            idle_timeout: opts.idle_timeout,
            server: ServerInfo {
                server_version: greeting.server_version,
                connection_id: greeting.connection_id,
                server_id,
                checksum,
            },
        };
        let first = client.next_event().await?;
        client.pending = Some(first);
        client.surface_heartbeats = opts.surface_heartbeats;
        Ok(client)
    }

    /// The next event of the stream. Fails with [`Error::Server`] on an ERR packet, [`Error::Disconnected`]
    /// when the master goes away, [`Error::IdleTimeout`] when even heartbeats stop. After an error the client
    /// is done: [`ReplicationClient::resume`] a new one.
    pub async fn next_event(&mut self) -> Result<ReplicationEvent> {
        if let Some(event) = self.pending.take() {
            return Ok(event);
        }
        loop {
            let (frame, payload) = self.reader.read("reading the binlog stream", self.idle_timeout).await?;
            if frame.first_seq != self.expected_seq {
                return Err(Error::PacketOutOfOrder {
                    during: "binlog stream",
                    expected: self.expected_seq,
                    got: frame.first_seq,
                });
            }
            self.expected_seq = frame.last_seq.wrapping_add(1);
            match StreamPacket::decode(&payload, &mut self.framing)? {
                StreamPacket::Eof => {
                    return Err(Error::Disconnected { during: "the binlog stream (the master sent EOF)".into() })
                }
                StreamPacket::Error(e) => return Err(server_error(e, "the binlog stream")),
                StreamPacket::Event { ack_requested, offset } => {
                    if ack_requested {
                        // After a packet that wants a reply the master restarts its sequence ids, because
                        // replies interleave with its packets (`Repl_semi_sync_master::flush_net`).
                        self.expected_seq = 1;
                    }
                    let event = self.decode_event(payload.slice(offset..), ack_requested)?;
                    if event.is_heartbeat() && !self.surface_heartbeats {
                        continue;
                    }
                    return Ok(event);
                }
            }
        }
    }

    fn decode_event(&mut self, raw: Bytes, ack_requested: bool) -> Result<ReplicationEvent> {
        let file = self.file.clone();
        let at = |end_pos: u64, source| Error::Event { file: file.to_string(), end_pos, source };
        let header = EventHeader::decode(&raw).map_err(|e| at(0, e))?;
        let end_pos = u64::from(header.log_pos);
        if header.event_size as usize != raw.len() {
            let source = paxsql_binlog::Error::Malformed { what: "event_size differs from the packet", offset: 9 };
            return Err(at(end_pos, source));
        }
        let data = match header.type_code {
            event_type::FORMAT_DESCRIPTION
            | event_type::ROTATE
            | event_type::GTID
            | event_type::GTID_LIST
            | event_type::BINLOG_CHECKPOINT
            | event_type::QUERY
            | event_type::XID
            | event_type::HEARTBEAT
            | event_type::STOP => Some(self.decoder.decode(&raw).map_err(|e| at(end_pos, e))?.data),
            _ => {
                if self.decoder.checksum() == Checksum::Crc32 {
                    verify_checksum(&raw).map_err(|e| at(end_pos, e))?;
                }
                None
            }
        };
        let mut event_file = self.file.clone();
        match &data {
            Some(EventData::Rotate { file_name, .. }) => {
                let next: Arc<str> = Arc::from(String::from_utf8_lossy(file_name).as_ref());
                // The dump's fake ROTATE (artificial, log_pos 0) names the file the following events are in; a
                // real ROTATE is the last event of the old file.
                if header.is_artificial() || header.log_pos == 0 {
                    event_file = next.clone();
                }
                debug!(from = %self.file, to = %next, "binlog file");
                self.file = next;
            }
            Some(EventData::Heartbeat { file_name }) => {
                event_file = Arc::from(String::from_utf8_lossy(file_name).as_ref());
            }
            _ => {}
        }
        Ok(ReplicationEvent { raw, header, data, file: event_file, end_pos, ack_requested })
    }

    /// Acknowledges everything up to `file`:`pos`; see [`AckHandle::ack`].
    pub fn ack(&self, file: &str, pos: u64) -> Result<()> {
        self.ack.ack(file, pos)
    }

    /// A handle to send ACKs from other tasks while this client keeps reading.
    pub fn ack_handle(&self) -> AckHandle {
        self.ack.clone()
    }

    /// The master as seen while connecting.
    pub fn server(&self) -> &ServerInfo {
        &self.server
    }

    /// The binlog file the stream is in now.
    pub fn current_file(&self) -> &str {
        &self.file
    }
}
