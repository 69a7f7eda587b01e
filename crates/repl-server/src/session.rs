//! The sans-IO state machine of one client connection: greeting → login → setup queries → COM_REGISTER_SLAVE →
//! COM_BINLOG_DUMP. It never touches a socket or a clock: the shell passes each client packet in with the
//! current time and sends what the machine appends to `out`; the [`Step`] it returns says what else to do.
//!
//! Contract: after [`Step::Kill`] call [`Session::kill_done`] before the next packet; after [`Step::Dump`]
//! either call [`Session::dump_refused`] (and close) or start a [`DumpStream`](crate::DumpStream) with
//! [`Session::next_seq`]. Once dumping, the session takes no more packets.

use std::collections::BTreeMap;
use std::sync::Arc;

use paxsql_binlog::GtidSet;
use tracing::{debug, info, warn};

use paxsql_mysql_wire::auth::{self, NATIVE_PASSWORD, SCRAMBLE_LEN};
use paxsql_mysql_wire::handshake::{auth_switch_request, FirstPacket, Greeting, LoginRequest};
use paxsql_mysql_wire::packet::write as write_packet;
use paxsql_mysql_wire::replication::{BinlogDump, RegisterSlave};
pub use paxsql_mysql_wire::replication::{BINLOG_DUMP_NON_BLOCK, BINLOG_SEND_ANNOTATE_ROWS_EVENT};
use paxsql_mysql_wire::resultset::{Column, ResultSet};
use paxsql_mysql_wire::statement::like;
use paxsql_mysql_wire::{caps, command, ok_payload, ErrPacket};

use crate::error::{Error, Result};

/// `@mariadb_slave_capability` a replica must announce for GTID events (`MARIA_SLAVE_CAPABILITY_GTID`).
const SLAVE_CAPABILITY_GTID: u64 = 4;

/// What a session needs to know about the server; shared by all connections.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The replication account's name.
    pub user: String,
    /// `SHA1(SHA1(password))` of that account, `None` for an empty password.
    pub password_stage2: Option<[u8; 20]>,
    /// Our server_id, answered to `SHOW VARIABLES LIKE 'SERVER_ID'`: must differ from the replica's own.
    pub server_id: u32,
    /// Greeting's server_version; must start with a digit (MariaDB slave.cc) and be 10 or later.
    pub server_version: String,
    /// `@@GLOBAL.gtid_domain_id`.
    pub gtid_domain_id: u32,
}

impl SessionConfig {
    pub fn new(user: &str, password: &str, server_id: u32, server_version: &str) -> SessionConfig {
        SessionConfig {
            user: user.to_string(),
            password_stage2: auth::stage2(password),
            server_id,
            server_version: server_version.to_string(),
            gtid_domain_id: 0,
        }
    }
}

/// What the shell must do after [`Session::on_packet`] (besides sending `out`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send `out`, then read the next packet.
    Continue,
    /// Send `out`, then close the connection.
    Close,
    /// `KILL <id>`: end that connection (if it exists), then call [`Session::kill_done`].
    Kill { connection_id: u32 },
    /// COM_BINLOG_DUMP was accepted: send `out`, locate `request.state` in the log and stream.
    Dump(DumpRequest),
}

/// A validated COM_BINLOG_DUMP with the session variables that shape the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpRequest {
    /// The replica's `@slave_connect_state`: last GTID per domain it has.
    pub state: GtidSet,
    /// The replica's server_id (COM_BINLOG_DUMP, else COM_REGISTER_SLAVE).
    pub replica_server_id: u32,
    /// COM_BINLOG_DUMP flags.
    pub flags: u16,
    /// `@master_heartbeat_period` in nanoseconds; `None` if the replica did not set it, `Some(0)` = off.
    pub heartbeat_period_ns: Option<u64>,
    /// The replica set `@rpl_semi_sync_slave=1`: every event packet then carries the `0xEF <flag>` header
    /// (we never request an ACK: durability comes from Paxos, docs/ARCHITECTURE.md §4).
    pub semi_sync: bool,
}

impl DumpRequest {
    pub fn non_block(&self) -> bool {
        self.flags & BINLOG_DUMP_NON_BLOCK != 0
    }
    pub fn send_annotate_rows(&self) -> bool {
        self.flags & BINLOG_SEND_ANNOTATE_ROWS_EVENT != 0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Greeting not sent yet.
    Start,
    /// Waiting for the handshake response.
    Login,
    /// Sent an auth switch to mysql_native_password; waiting for the token.
    AuthSwitch,
    /// Logged in: commands.
    Command,
    /// COM_BINLOG_DUMP accepted; the shell streams.
    Dumping,
    /// Closed (login failed, COM_QUIT, fatal error).
    Closed,
}

/// One connection's protocol state.
#[derive(Debug)]
pub struct Session {
    config: Arc<SessionConfig>,
    connection_id: u32,
    salt: [u8; SCRAMBLE_LEN],
    peer_host: String,
    phase: Phase,
    /// Capabilities both sides have.
    caps: u32,
    /// Sequence id of our next packet.
    seq: u8,
    user: String,
    /// User variables (`SET @name=...`), names lower-cased, values as text.
    vars: BTreeMap<String, String>,
    /// server_id from COM_REGISTER_SLAVE.
    registered_server_id: Option<u32>,
}

impl Session {
    /// A new connection. `salt` must be fresh random bytes for every connection (never a constant: a captured
    /// login could be replayed); bytes are mapped to 1..=127 as MariaDB does, since the salt's second part is
    /// NUL terminated in the greeting.
    pub fn new(config: Arc<SessionConfig>, connection_id: u32, salt: [u8; SCRAMBLE_LEN], peer_host: &str) -> Session {
        let salt = salt.map(|b| (b % 127) + 1);
        Session {
            config,
            connection_id,
            salt,
            peer_host: peer_host.to_string(),
            phase: Phase::Start,
            caps: 0,
            seq: 0,
            user: String::new(),
            vars: BTreeMap::new(),
            registered_server_id: None,
        }
    }

    pub fn connection_id(&self) -> u32 {
        self.connection_id
    }

    /// The salt as sent in the greeting.
    pub fn salt(&self) -> &[u8; SCRAMBLE_LEN] {
        &self.salt
    }

    /// Sequence id of the next packet we send (the dump stream continues from it).
    pub fn next_seq(&self) -> u8 {
        self.seq
    }

    /// True once the connection is over (the shell closes it).
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// Capabilities both sides have (valid after login).
    pub fn capabilities(&self) -> u32 {
        self.caps
    }

    /// Appends the handshake v10 greeting.
    pub fn greeting(&mut self, out: &mut Vec<u8>) {
        let greeting = Greeting {
            server_version: self.config.server_version.clone(),
            connection_id: self.connection_id,
            capabilities: caps::PAXSQL_SERVER,
            charset: paxsql_mysql_wire::CHARSET_UTF8MB4_GENERAL_CI,
            status: paxsql_mysql_wire::STATUS_AUTOCOMMIT,
            scramble: self.salt.to_vec(),
            auth_plugin: NATIVE_PASSWORD.into(),
        };
        self.seq = 0;
        write_packet(out, &mut self.seq, &[&greeting.encode()]);
        self.phase = Phase::Login;
    }

    /// Feeds one client packet (`seq` = its sequence id). Appends the answer to `out`.
    pub fn on_packet(&mut self, seq: u8, payload: &[u8], now_unix: u64, out: &mut Vec<u8>) -> Step {
        self.seq = seq.wrapping_add(1);
        let result = match self.phase {
            Phase::Start | Phase::Dumping | Phase::Closed => {
                self.phase = Phase::Closed;
                return Step::Close;
            }
            Phase::Login => self.on_login(payload, out),
            Phase::AuthSwitch => Ok(self.check_token(payload, out)),
            Phase::Command => self.on_command(payload, now_unix, out),
        };
        match result {
            Ok(step) => step,
            Err(e) => {
                warn!(conn = self.connection_id, error = %e, "malformed client packet; closing");
                self.send_err(out, 1043, "08S01", "Bad handshake or malformed packet");
                self.phase = Phase::Closed;
                Step::Close
            }
        }
    }

    /// Answers the `KILL` that produced [`Step::Kill`]: OK if that connection existed, else ERR 1094 (which a
    /// replica's STOP SLAVE tolerates).
    pub fn kill_done(&mut self, connection_id: u32, found: bool, out: &mut Vec<u8>) {
        if found {
            self.send_ok(out);
        } else {
            self.send_err(out, 1094, "HY000", &format!("Unknown thread id: {connection_id}"));
        }
    }

    /// Answers an accepted COM_BINLOG_DUMP whose start the log cannot serve: ERR 1236 with MariaDB's text.
    /// The connection is over afterwards.
    pub fn dump_refused(&mut self, error: &Error, out: &mut Vec<u8>) {
        self.send_err(out, 1236, "HY000", &error.replica_message());
        self.phase = Phase::Closed;
    }

    fn send_ok(&mut self, out: &mut Vec<u8>) {
        write_packet(out, &mut self.seq, &[&ok_payload()]);
    }

    fn send_err(&mut self, out: &mut Vec<u8>, code: u16, state: &str, message: &str) {
        write_packet(out, &mut self.seq, &[&ErrPacket::new(code, state, message).payload()]);
    }

    fn on_login(&mut self, payload: &[u8], out: &mut Vec<u8>) -> Result<Step> {
        let login = match LoginRequest::decode(payload)? {
            FirstPacket::Login(login) => login,
            FirstPacket::Protocol320 => {
                self.send_err(out, 1043, "08S01", "Bad handshake: protocol 4.1 required");
                self.phase = Phase::Closed;
                return Ok(Step::Close);
            }
            FirstPacket::TlsRequest => {
                self.send_err(out, 1043, "08S01", "Bad handshake: TLS is not supported by the paxsql binlog server");
                self.phase = Phase::Closed;
                return Ok(Step::Close);
            }
        };
        self.caps = login.capabilities & caps::PAXSQL_SERVER;
        self.user = String::from_utf8_lossy(&login.user).into_owned();
        if login.needs_auth_switch() {
            // Ask the client to redo the login with mysql_native_password (AuthSwitchRequest).
            let plugin = String::from_utf8_lossy(login.plugin.as_deref().unwrap_or_default()).into_owned();
            debug!(conn = self.connection_id, plugin = %plugin, "auth switch");
            write_packet(out, &mut self.seq, &[&auth_switch_request(&self.salt)]);
            self.phase = Phase::AuthSwitch;
            return Ok(Step::Continue);
        }
        Ok(self.check_token(&login.auth_response, out))
    }

    fn check_token(&mut self, token: &[u8], out: &mut Vec<u8>) -> Step {
        let user_ok = self.user == self.config.user;
        let password_ok = auth::verify(self.config.password_stage2.as_ref(), &self.salt, token);
        if user_ok && password_ok {
            info!(conn = self.connection_id, user = %self.user, peer = %self.peer_host, "replica logged in");
            self.phase = Phase::Command;
            self.send_ok(out);
            Step::Continue
        } else {
            warn!(conn = self.connection_id, user = %self.user, peer = %self.peer_host, "access denied");
            let using = if token.is_empty() { "NO" } else { "YES" };
            let message =
                format!("Access denied for user '{}'@'{}' (using password: {using})", self.user, self.peer_host);
            self.send_err(out, 1045, "28000", &message);
            self.phase = Phase::Closed;
            Step::Close
        }
    }

    fn on_command(&mut self, payload: &[u8], now_unix: u64, out: &mut Vec<u8>) -> Result<Step> {
        let Some((&cmd, body)) = payload.split_first() else {
            return Err(Error::Malformed { what: "empty command packet", offset: 0 });
        };
        match cmd {
            command::COM_QUIT => {
                self.phase = Phase::Closed;
                Ok(Step::Close)
            }
            command::COM_PING | command::COM_INIT_DB => {
                self.send_ok(out);
                Ok(Step::Continue)
            }
            command::COM_QUERY => {
                let sql = String::from_utf8_lossy(body);
                Ok(self.on_query(&sql, now_unix, out))
            }
            command::COM_REGISTER_SLAVE => {
                let server_id = RegisterSlave::decode(body)?.server_id;
                self.registered_server_id = Some(server_id);
                debug!(conn = self.connection_id, server_id, "COM_REGISTER_SLAVE");
                self.send_ok(out);
                Ok(Step::Continue)
            }
            command::COM_BINLOG_DUMP => self.on_binlog_dump(body, out),
            other => {
                warn!(conn = self.connection_id, command = other, "unsupported command");
                self.send_err(out, 1047, "08S01", "Unknown command");
                Ok(Step::Continue)
            }
        }
    }

    fn on_binlog_dump(&mut self, body: &[u8], out: &mut Vec<u8>) -> Result<Step> {
        let BinlogDump { position, flags, server_id, file_name } = BinlogDump::decode(body)?;
        let file_name = String::from_utf8_lossy(&file_name).into_owned();
        let capability = self.var("mariadb_slave_capability").and_then(|v| v.trim().parse::<u64>().ok());
        if capability.unwrap_or(0) < SLAVE_CAPABILITY_GTID {
            return Ok(self.refuse_dump(
                out,
                "the paxsql binlog server needs a replica that understands GTID events \
                                               (@mariadb_slave_capability >= 4, MariaDB 10.0 or later)",
            ));
        }
        if !self.var("master_binlog_checksum").is_some_and(|v| v.eq_ignore_ascii_case("CRC32")) {
            // MariaDB's message for a replica that cannot take checksummed events.
            return Ok(self.refuse_dump(
                out,
                "Slave can not handle replication events with the checksum that master is configured to log",
            ));
        }
        let state = match self.var("slave_connect_state") {
            Some(text) => match text.parse::<GtidSet>() {
                Ok(state) => state,
                Err(e) => {
                    let error = Error::InvalidConnectState { text: text.to_string(), reason: e.to_string() };
                    self.dump_refused(&error, out);
                    return Ok(Step::Close);
                }
            },
            // A file/position dump (no GTID): only "from the very start" maps onto our log.
            None if position <= 4 => GtidSet::new(),
            None => {
                return Ok(self.refuse_dump(
                    out,
                    &format!(
                        "the paxsql binlog server serves GTID dumps only (set @slave_connect_state); got file \
                         {file_name:?} position {position}"
                    ),
                ))
            }
        };
        let request = DumpRequest {
            state,
            replica_server_id: if server_id != 0 { server_id } else { self.registered_server_id.unwrap_or(0) },
            flags,
            heartbeat_period_ns: self.var("master_heartbeat_period").and_then(|v| v.trim().parse().ok()),
            semi_sync: self.var("rpl_semi_sync_slave").is_some_and(|v| v.trim() == "1"),
        };
        info!(conn = self.connection_id, replica_server_id = request.replica_server_id, state = %request.state,
              flags, "COM_BINLOG_DUMP");
        self.phase = Phase::Dumping;
        Ok(Step::Dump(request))
    }

    fn refuse_dump(&mut self, out: &mut Vec<u8>, message: &str) -> Step {
        warn!(conn = self.connection_id, message, "refusing COM_BINLOG_DUMP");
        self.send_err(out, 1236, "HY000", message);
        self.phase = Phase::Closed;
        Step::Close
    }

    fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    fn on_query(&mut self, sql: &str, now_unix: u64, out: &mut Vec<u8>) -> Step {
        let q = sql.trim().trim_end_matches(';').trim();
        let word = q.split(|c: char| c.is_ascii_whitespace()).next().unwrap_or("").to_ascii_uppercase();
        debug!(conn = self.connection_id, query = q, "query");
        match word.as_str() {
            "SET" => {
                for assignment in split_top_level(&q[3..], ',') {
                    self.on_assignment(assignment.trim());
                }
                self.send_ok(out);
            }
            "SELECT" => {
                let rs = self.select(&q[6..], now_unix);
                rs.write(out, &mut self.seq, self.caps);
            }
            "SHOW" => {
                let rs = self.show(&q[4..]);
                rs.write(out, &mut self.seq, self.caps);
            }
            "KILL" => match parse_kill(&q[4..]) {
                Some(connection_id) => return Step::Kill { connection_id },
                None => self.send_err(out, 1064, "42000", "KILL needs a connection id"),
            },
            "BEGIN" | "COMMIT" | "ROLLBACK" | "USE" | "DO" | "FLUSH" => self.send_ok(out),
            _ => {
                warn!(conn = self.connection_id, query = q, "unsupported statement");
                self.send_err(out, 1235, "42000", "This statement is not supported by the paxsql binlog server");
            }
        }
        Step::Continue
    }

    /// `@name = value`: user variables are remembered; system variables (`NAMES`, `@@session.x`, `x=...`) are
    /// accepted and ignored, as a replica only sets session options we do not need.
    fn on_assignment(&mut self, assignment: &str) {
        let Some((lhs, rhs)) = assignment.split_once('=') else {
            debug!(conn = self.connection_id, assignment, "SET without '=' ignored");
            return;
        };
        let lhs = lhs.trim().trim_start_matches(':');
        let Some(name) = lhs.strip_prefix('@').filter(|n| !n.starts_with('@')) else {
            debug!(conn = self.connection_id, assignment, "system variable SET ignored");
            return;
        };
        let name = name.trim().trim_matches('`').to_ascii_lowercase();
        let rhs = rhs.trim_start_matches('=').trim();
        let value = match self.system_var(rhs) {
            Some(v) => v,
            None => unquote(rhs),
        };
        if name == "slave_connect_state" {
            info!(conn = self.connection_id, state = %value, "replica GTID position");
        }
        self.vars.insert(name, value);
    }

    fn select(&self, rest: &str, now_unix: u64) -> ResultSet {
        let mut rest = rest.trim();
        // The mysql CLI sends "SELECT @@version_comment LIMIT 1".
        if let Some(i) = rest.to_ascii_uppercase().rfind(" LIMIT ") {
            rest = rest[..i].trim();
        }
        let mut rs = ResultSet::default();
        let mut row = Vec::new();
        for expr in split_top_level(rest, ',') {
            let expr = expr.trim();
            let (expr_only, alias) = split_alias(expr);
            let name = alias.unwrap_or(expr_only).to_string();
            let lower = expr_only.to_ascii_lowercase();
            if lower == "unix_timestamp()" {
                rs.columns.push(Column::int(name));
                row.push(Some(now_unix.to_string()));
            } else if let Some(v) = self.system_var(expr_only) {
                rs.columns.push(Column::text(name));
                row.push(Some(v));
            } else if let Some(var) = expr_only.strip_prefix('@').filter(|v| !v.starts_with('@')) {
                rs.columns.push(Column::text(name));
                row.push(self.var(&var.trim_matches('`').to_ascii_lowercase()).map(str::to_string));
            } else if expr_only.starts_with("@@") {
                warn!(conn = self.connection_id, expr, "unknown system variable: NULL");
                rs.columns.push(Column::text(name));
                row.push(None);
            } else if !expr_only.is_empty() && expr_only.bytes().all(|b| b.is_ascii_digit()) {
                rs.columns.push(Column::int(name));
                row.push(Some(expr_only.to_string()));
            } else {
                warn!(conn = self.connection_id, query = rest, "unsupported SELECT: empty result");
                return ResultSet { columns: vec![Column::text(rest.to_string())], rows: vec![] };
            }
        }
        rs.rows.push(row);
        rs
    }

    /// `SHOW [GLOBAL|SESSION] VARIABLES [LIKE 'pattern']` over the variables a replica asks about; any other
    /// SHOW gets an empty two-column result.
    fn show(&self, rest: &str) -> ResultSet {
        let upper = rest.trim().to_ascii_uppercase();
        let mut rs = ResultSet { columns: vec![Column::text("Variable_name"), Column::text("Value")], rows: vec![] };
        let words: Vec<&str> = upper.split_ascii_whitespace().collect();
        let is_variables = words.iter().take(2).any(|w| *w == "VARIABLES");
        if !is_variables {
            warn!(conn = self.connection_id, statement = rest.trim(), "unsupported SHOW: empty result");
            return rs;
        }
        let pattern = match rest.to_ascii_uppercase().find(" LIKE ") {
            Some(i) => Some(unquote(rest[i + 6..].trim())),
            None => None,
        };
        for name in SYSTEM_VARIABLES {
            if pattern.as_deref().is_none_or(|p| like(p, name)) {
                let value = self.system_var(&format!("@@{name}")).unwrap_or_default();
                rs.rows.push(vec![Some(name.to_string()), Some(value)]);
            }
        }
        rs
    }

    /// Value of a system variable expression such as `@@GLOBAL.gtid_domain_id`, if we know it.
    fn system_var(&self, expr: &str) -> Option<String> {
        let name = expr.trim().strip_prefix("@@")?.to_ascii_lowercase();
        let name = name.strip_prefix("global.").or_else(|| name.strip_prefix("session.")).unwrap_or(&name);
        Some(match name {
            "server_id" => self.config.server_id.to_string(),
            "gtid_domain_id" => self.config.gtid_domain_id.to_string(),
            "binlog_checksum" => "CRC32".into(),
            "version" => self.config.server_version.clone(),
            "version_comment" => "paxsql binlog server".into(),
            // OFF: replicas then stream without the 0xEF semi-sync header; durability comes from Paxos.
            "rpl_semi_sync_master_enabled" => "OFF".into(),
            "gtid_strict_mode" => "ON".into(),
            "log_bin" => "ON".into(),
            "binlog_format" => "ROW".into(),
            _ => return None,
        })
    }
}

/// Variables `SHOW VARIABLES` lists.
const SYSTEM_VARIABLES: [&str; 9] = [
    "binlog_checksum",
    "binlog_format",
    "gtid_domain_id",
    "gtid_strict_mode",
    "log_bin",
    "rpl_semi_sync_master_enabled",
    "server_id",
    "version",
    "version_comment",
];

/// `KILL [CONNECTION|QUERY] <id>`.
fn parse_kill(rest: &str) -> Option<u32> {
    let mut words = rest.split_ascii_whitespace();
    let mut word = words.next()?;
    if word.eq_ignore_ascii_case("CONNECTION") || word.eq_ignore_ascii_case("QUERY") {
        word = words.next()?;
    }
    word.parse().ok()
}

/// Splits at `sep` outside quotes and parentheses.
fn split_top_level(s: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut quote, mut start) = (0i32, None::<char>, 0usize);
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match (quote, c) {
            (Some(_), '\\') => {
                chars.next();
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"' | '`') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => depth -= 1,
            (None, c) if c == sep && depth == 0 => {
                parts.push(&s[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// `expr AS alias` → (expr, alias).
fn split_alias(expr: &str) -> (&str, Option<&str>) {
    match expr.to_ascii_uppercase().rfind(" AS ") {
        Some(i) => (expr[..i].trim(), Some(expr[i + 4..].trim().trim_matches('`'))),
        None => (expr, None),
    }
}

/// A SQL literal as text: quotes removed and escapes resolved; anything else trimmed as is.
fn unquote(s: &str) -> String {
    let s = s.trim();
    let Some(q) = s.chars().next().filter(|c| *c == '\'' || *c == '"') else { return s.to_string() };
    let mut out = String::new();
    let mut chars = s[1..].chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('0') => out.push('\0'),
                Some(other) => out.push(other),
                None => {}
            },
            c if c == q => {
                if chars.peek() == Some(&q) {
                    chars.next();
                    out.push(q);
                } else {
                    break;
                }
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests;
