//! The admin port's SQL: the few statements it understands and their answers, as a pure function of the query
//! text, the [`ClusterView`] and the session (no IO, so every answer is unit-tested without a socket).
//!
//! Parsed by hand, not with `sqlparser`: the port understands about ten fixed statement shapes (two table
//! reads, `SHOW STATUS [LIKE]`, and the probes clients send at connect such as `SELECT @@version_comment LIMIT
//! 1`), and a general SQL AST would still have to be pattern-matched down to exactly these shapes while adding
//! a large crate to every build. A small tokenizer (quotes, backticks, comments, `@@scope.name`) plus token
//! patterns is less code than that match, and every form it accepts is listed in [`parse`].

use paxsql_mysql_wire::statement::like;

use crate::view::ClusterView;

/// What an unsupported statement gets, so a person at the `mariadb` prompt learns what to type.
pub const UNSUPPORTED_HINT: &str = "paxsql admin: unsupported query, try SELECT * FROM paxsql.members, \
                                    SELECT * FROM paxsql.master, or SHOW STATUS [LIKE 'pattern']";

/// Largest command the port accepts after login (its `@@max_allowed_packet`); no admin statement comes near it.
pub const COMMAND_PACKET_MAX: usize = 1 << 20;

/// The one database the port has.
pub const DATABASE: &str = "paxsql";

/// Who is asking, for `USER()`, `DATABASE()`, `CONNECTION_ID()`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionInfo {
    pub user: String,
    pub peer_host: String,
    pub connection_id: u32,
    pub database: Option<String>,
    pub server_version: String,
}

/// A value in a result row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    Null,
    Int(u64),
    Text(String),
}

impl Cell {
    /// The text-protocol form of the value (`None` for NULL).
    pub fn into_text(self) -> Option<String> {
        match self {
            Cell::Null => None,
            Cell::Int(n) => Some(n.to_string()),
            Cell::Text(s) => Some(s),
        }
    }
}

/// How a column is announced to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    /// BIGINT UNSIGNED.
    Int,
    /// VARCHAR.
    Text,
}

/// A result set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub columns: Vec<(String, ColumnKind)>,
    pub rows: Vec<Vec<Cell>>,
}

/// The errors the port answers with: MariaDB's codes (`kind as u16`) and SQLSTATEs for the same conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum SqlErrorKind {
    /// `ER_BAD_DB_ERROR`: no such database.
    BadDb = 1049,
    /// `ER_PARSE_ERROR`: a statement the port does not understand.
    ParseError = 1064,
    /// `ER_EMPTY_QUERY`.
    EmptyQuery = 1065,
    /// `ER_UNKNOWN_SYSTEM_VARIABLE`.
    UnknownSystemVariable = 1193,
    /// `ER_UNKNOWN_STMT_HANDLER`.
    UnknownStmtHandler = 1243,
    /// `ER_UNSUPPORTED_PS`: prepared statements.
    UnsupportedPs = 1295,
}

impl SqlErrorKind {
    pub fn sql_state(self) -> &'static str {
        match self {
            SqlErrorKind::BadDb | SqlErrorKind::ParseError | SqlErrorKind::EmptyQuery => "42000",
            SqlErrorKind::UnknownSystemVariable | SqlErrorKind::UnknownStmtHandler | SqlErrorKind::UnsupportedPs => {
                "HY000"
            }
        }
    }
}

/// The answer to one statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Rows(Table),
    /// OK packet (statements accepted and ignored, such as the `SET`s connectors send at connect).
    Ok,
    /// OK packet, and the session's current database becomes this one.
    Use(String),
    Error {
        kind: SqlErrorKind,
        message: String,
    },
}

impl Reply {
    fn unsupported() -> Reply {
        Reply::Error { kind: SqlErrorKind::ParseError, message: UNSUPPORTED_HINT.to_string() }
    }
}

/// Answers `sql`.
pub fn answer(sql: &str, view: &ClusterView, session: &SessionInfo) -> Reply {
    let Some(statement) = parse(sql) else { return Reply::unsupported() };
    match statement {
        Statement::Empty => Reply::Error { kind: SqlErrorKind::EmptyQuery, message: "Query was empty".into() },
        Statement::Members => Reply::Rows(members_table(view)),
        Statement::Master => Reply::Rows(master_table(view)),
        Statement::ShowStatus { like: pattern } => Reply::Rows(status_table(view, pattern.as_deref())),
        Statement::ShowDatabases => Reply::Rows(Table {
            columns: vec![("Database".into(), ColumnKind::Text)],
            rows: vec![vec![Cell::Text(DATABASE.into())]],
        }),
        Statement::ShowTables => Reply::Rows(Table {
            columns: vec![(format!("Tables_in_{DATABASE}"), ColumnKind::Text)],
            rows: vec![vec![Cell::Text("master".into())], vec![Cell::Text("members".into())]],
        }),
        Statement::Use(db) => match use_database(&db) {
            Ok(db) => Reply::Use(db.to_string()),
            Err(message) => Reply::Error { kind: SqlErrorKind::BadDb, message },
        },
        Statement::Set => Reply::Ok,
        Statement::Select(items) => select(&items, view, session),
    }
}

/// `USE db` / COM_INIT_DB: only our database exists. `Err` is ER_BAD_DB_ERROR's message.
pub fn use_database(db: &str) -> Result<&'static str, String> {
    if db.eq_ignore_ascii_case(DATABASE) {
        Ok(DATABASE)
    } else {
        Err(format!("Unknown database '{db}'"))
    }
}

fn members_table(view: &ClusterView) -> Table {
    let columns = [
        ("node_id", ColumnKind::Int),
        ("peer", ColumnKind::Text),
        ("mariadb", ColumnKind::Text),
        ("proxy_rw", ColumnKind::Text),
        ("proxy_ro", ColumnKind::Text),
        ("admin", ColumnKind::Text),
        ("role", ColumnKind::Text),
        ("reachable", ColumnKind::Int),
    ];
    let rows = view
        .members
        .iter()
        .map(|m| {
            vec![
                Cell::Int(m.node_id),
                Cell::Text(m.peer.clone()),
                opt_text(&m.mariadb),
                opt_text(&m.proxy_rw),
                opt_text(&m.proxy_ro),
                opt_text(&m.admin),
                opt_text(&m.role),
                Cell::Int(u64::from(m.reachable)),
            ]
        })
        .collect();
    Table { columns: named(&columns), rows }
}

fn master_table(view: &ClusterView) -> Table {
    let columns = [
        ("node_id", ColumnKind::Int),
        ("master_version", ColumnKind::Int),
        ("mariadb", ColumnKind::Text),
        ("proxy_rw", ColumnKind::Text),
    ];
    let rows = view
        .master
        .iter()
        .map(|m| vec![Cell::Int(m.node_id), Cell::Int(m.master_version), opt_text(&m.mariadb), opt_text(&m.proxy_rw)])
        .collect();
    Table { columns: named(&columns), rows }
}

/// `SHOW STATUS` rows, in a fixed order. Values are text, as in MariaDB's own `SHOW STATUS`.
pub fn status_rows(view: &ClusterView) -> Vec<(&'static str, Option<String>)> {
    let on_off = |b: bool| Some(if b { "ON" } else { "OFF" }.to_string());
    let reachable = view.members.iter().filter(|m| m.reachable).count();
    vec![
        ("node_id", Some(view.node_id.to_string())),
        ("role", Some(view.role.clone())),
        ("master_id", view.master_id.map(|id| id.to_string())),
        ("master_version", Some(view.master_version.to_string())),
        ("holds_lease", on_off(view.holds_lease)),
        ("lease_remaining_ms", view.lease_remaining_ms.map(|ms| ms.to_string())),
        ("applied_instance", Some(view.applied_instance.to_string())),
        ("applied_gtid", view.applied_gtid.clone()),
        ("global_last_gtid", Some(view.global_last_gtid.clone())),
        ("lag_transactions", view.lag_transactions.map(|n| n.to_string())),
        ("paxos_chosen_up_to", Some(view.paxos.chosen_up_to.to_string())),
        ("paxos_proposals_in_flight", Some(view.paxos.proposals_in_flight.to_string())),
        ("paxos_promised_ballot", Some(view.paxos.promised_ballot.clone())),
        ("members", Some(view.members.len().to_string())),
        ("members_reachable", Some(reachable.to_string())),
    ]
}

fn status_table(view: &ClusterView, pattern: Option<&str>) -> Table {
    let rows = status_rows(view)
        .into_iter()
        .filter(|(name, _)| pattern.is_none_or(|p| like(p, name)))
        .map(|(name, value)| vec![Cell::Text(name.to_string()), value.map_or(Cell::Null, Cell::Text)])
        .collect();
    Table { columns: named(&[("Variable_name", ColumnKind::Text), ("Value", ColumnKind::Text)]), rows }
}

fn select(items: &[SelectItem], view: &ClusterView, session: &SessionInfo) -> Reply {
    let mut columns = Vec::with_capacity(items.len());
    let mut row = Vec::with_capacity(items.len());
    for item in items {
        let cell = match &item.expr {
            Expr::Null => Cell::Null,
            Expr::Int(n) => Cell::Int(*n),
            Expr::Text(s) => Cell::Text(s.clone()),
            Expr::SysVar(name) => match system_variable(name, view, session) {
                Some(cell) => cell,
                None => {
                    return Reply::Error {
                        kind: SqlErrorKind::UnknownSystemVariable,
                        message: format!("Unknown system variable '{name}'"),
                    }
                }
            },
            Expr::Func(f) => match f {
                Func::Database => session.database.clone().map_or(Cell::Null, Cell::Text),
                Func::User => Cell::Text(format!("{}@{}", session.user, session.peer_host)),
                Func::CurrentUser => Cell::Text(format!("{}@%", session.user)),
                Func::Version => Cell::Text(session.server_version.clone()),
                Func::ConnectionId => Cell::Int(u64::from(session.connection_id)),
            },
        };
        let kind = if matches!(cell, Cell::Int(_)) { ColumnKind::Int } else { ColumnKind::Text };
        columns.push((item.name.clone(), kind));
        row.push(cell);
    }
    Reply::Rows(Table { columns, rows: vec![row] })
}

/// The system variables clients read at connect (the `mariadb` CLI's `@@version_comment`, mysql_async's
/// `@@max_allowed_packet,@@wait_timeout,@@socket`, the CLI's `status` command's character sets).
fn system_variable(name: &str, view: &ClusterView, session: &SessionInfo) -> Option<Cell> {
    let text = |s: &str| Some(Cell::Text(s.to_string()));
    match name {
        "version_comment" => Some(Cell::Text(format!("paxsql admin port of node {}", view.node_id))),
        "version" => text(&session.server_version),
        "max_allowed_packet" => Some(Cell::Int(COMMAND_PACKET_MAX as u64)),
        "wait_timeout" | "interactive_timeout" => Some(Cell::Int(28_800)),
        "net_read_timeout" => Some(Cell::Int(30)),
        "net_write_timeout" => Some(Cell::Int(60)),
        "socket" => Some(Cell::Null),
        "autocommit" => Some(Cell::Int(1)),
        "server_id" => Some(Cell::Int(view.node_id)),
        "lower_case_table_names" => Some(Cell::Int(0)),
        "sql_mode" => text(""),
        "time_zone" => text("SYSTEM"),
        "system_time_zone" => text("UTC"),
        "character_set_client"
        | "character_set_connection"
        | "character_set_results"
        | "character_set_server"
        | "character_set_database" => text("utf8mb4"),
        "collation_connection" | "collation_server" | "collation_database" => text("utf8mb4_general_ci"),
        "transaction_isolation" | "tx_isolation" => text("REPEATABLE-READ"),
        "read_only" | "transaction_read_only" | "tx_read_only" => Some(Cell::Int(1)),
        _ => None,
    }
}

fn opt_text(s: &Option<String>) -> Cell {
    s.clone().map_or(Cell::Null, Cell::Text)
}

fn named(columns: &[(&str, ColumnKind)]) -> Vec<(String, ColumnKind)> {
    columns.iter().map(|(n, k)| (n.to_string(), *k)).collect()
}

// ---------------------------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------------------------

/// A statement the port understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Statement {
    /// Only whitespace, comments and `;`.
    Empty,
    /// `SELECT * FROM [paxsql.]members`
    Members,
    /// `SELECT * FROM [paxsql.]master`
    Master,
    /// `SHOW [GLOBAL|SESSION] STATUS [LIKE 'pattern']`
    ShowStatus { like: Option<String> },
    /// `SHOW DATABASES` / `SHOW SCHEMAS`
    ShowDatabases,
    /// `SHOW [FULL] TABLES [FROM|IN paxsql]`
    ShowTables,
    /// `USE db`
    Use(String),
    /// `SET ...` (accepted and ignored)
    Set,
    /// `SELECT item [, item ...] [LIMIT n]` where an item is a literal, `NULL`, `@@[scope.]variable`,
    /// `DATABASE()`, `SCHEMA()`, `USER()`, `CURRENT_USER[()]`, `SESSION_USER()`, `SYSTEM_USER()`, `VERSION()` or
    /// `CONNECTION_ID()`, optionally followed by `[AS] alias`.
    Select(Vec<SelectItem>),
}

/// One item of a table-less SELECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectItem {
    pub expr: Expr,
    /// The column name: the alias, else the expression as written (as MariaDB names it).
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Null,
    Int(u64),
    Text(String),
    /// Lower-case name without `@@` and scope.
    SysVar(String),
    Func(Func),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    Database,
    User,
    CurrentUser,
    Version,
    ConnectionId,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    /// Keyword or identifier (backquotes removed).
    Word(String),
    Str(String),
    Num(String),
    /// `@@[scope.]name`, lower-cased, scope dropped.
    SysVar(String),
    Punct(char),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    start: usize,
    end: usize,
}

impl Token {
    fn is_word(&self, kw: &str) -> bool {
        matches!(&self.tok, Tok::Word(w) if w.eq_ignore_ascii_case(kw))
    }

    fn is_punct(&self, c: char) -> bool {
        self.tok == Tok::Punct(c)
    }

    fn word(&self) -> Option<&str> {
        match &self.tok {
            Tok::Word(w) => Some(w),
            _ => None,
        }
    }
}

/// Parses one statement; `None` when it is not one of the [`Statement`] forms.
pub fn parse(sql: &str) -> Option<Statement> {
    let mut tokens = tokenize(sql)?;
    while tokens.last().is_some_and(|t| t.is_punct(';')) {
        tokens.pop();
    }
    let t = tokens.as_slice();
    let Some(first) = t.first() else { return Some(Statement::Empty) };
    if first.is_word("SELECT") {
        parse_select(sql, &t[1..])
    } else if first.is_word("SHOW") {
        parse_show(&t[1..])
    } else if first.is_word("USE") {
        match &t[1..] {
            [db] => db.word().map(|w| Statement::Use(w.to_string())),
            _ => None,
        }
    } else if first.is_word("SET") && t.len() > 1 {
        Some(Statement::Set)
    } else {
        None
    }
}

fn parse_show(t: &[Token]) -> Option<Statement> {
    let t = match t.first() {
        Some(s) if s.is_word("GLOBAL") || s.is_word("SESSION") => &t[1..],
        _ => t,
    };
    match t {
        [s] if s.is_word("STATUS") => Some(Statement::ShowStatus { like: None }),
        [s, l, p] if s.is_word("STATUS") && l.is_word("LIKE") => match &p.tok {
            Tok::Str(p) => Some(Statement::ShowStatus { like: Some(p.clone()) }),
            _ => None,
        },
        [d] if d.is_word("DATABASES") || d.is_word("SCHEMAS") => Some(Statement::ShowDatabases),
        _ => {
            let t = if t.first().is_some_and(|f| f.is_word("FULL")) { &t[1..] } else { t };
            match t {
                [tables] if tables.is_word("TABLES") => Some(Statement::ShowTables),
                [tables, from, db] if tables.is_word("TABLES") && (from.is_word("FROM") || from.is_word("IN")) => {
                    db.is_word(DATABASE).then_some(Statement::ShowTables)
                }
                _ => None,
            }
        }
    }
}

fn parse_select(sql: &str, t: &[Token]) -> Option<Statement> {
    // SELECT * FROM [paxsql.]table
    if t.first().is_some_and(|s| s.is_punct('*')) {
        let table = match t {
            [_, from, table] if from.is_word("FROM") => table,
            [_, from, db, dot, table] if from.is_word("FROM") && db.is_word(DATABASE) && dot.is_punct('.') => table,
            _ => return None,
        };
        return if table.is_word("members") {
            Some(Statement::Members)
        } else if table.is_word("master") {
            Some(Statement::Master)
        } else {
            None
        };
    }
    // Drop a trailing LIMIT n (the CLI sends `SELECT @@version_comment LIMIT 1`); one row is all we return.
    let t = match t {
        [rest @ .., limit, n] if limit.is_word("LIMIT") && matches!(n.tok, Tok::Num(_)) => rest,
        _ => t,
    };
    let mut items = Vec::new();
    for part in t.split(|tok| tok.is_punct(',')) {
        items.push(parse_select_item(sql, part)?);
    }
    Some(Statement::Select(items))
}

fn parse_select_item(sql: &str, t: &[Token]) -> Option<SelectItem> {
    let (expr_len, expr) = parse_expr(t)?;
    let written = sql.get(t[0].start..t[expr_len - 1].end)?.to_string();
    let name = match &t[expr_len..] {
        [] => written,
        [alias] | [_, alias] if t.len() == expr_len + 1 || t[expr_len].is_word("AS") => match &alias.tok {
            Tok::Word(w) | Tok::Str(w) => w.clone(),
            _ => return None,
        },
        _ => return None,
    };
    Some(SelectItem { expr, name })
}

/// Parses an expression at the start of `t`; returns how many tokens it used.
fn parse_expr(t: &[Token]) -> Option<(usize, Expr)> {
    let first = t.first()?;
    let simple = match &first.tok {
        Tok::Num(n) => Some(Expr::Int(n.parse().ok()?)),
        Tok::Str(s) => Some(Expr::Text(s.clone())),
        Tok::SysVar(v) => Some(Expr::SysVar(v.clone())),
        Tok::Word(w) if w.eq_ignore_ascii_case("NULL") => Some(Expr::Null),
        _ => None,
    };
    if let Some(e) = simple {
        return Some((1, e));
    }
    let name = first.word()?.to_ascii_uppercase();
    let func = match name.as_str() {
        "DATABASE" | "SCHEMA" => Func::Database,
        "USER" | "SESSION_USER" | "SYSTEM_USER" => Func::User,
        "CURRENT_USER" => Func::CurrentUser,
        "VERSION" => Func::Version,
        "CONNECTION_ID" => Func::ConnectionId,
        _ => return None,
    };
    match t {
        [_, open, close, ..] if open.is_punct('(') && close.is_punct(')') => Some((3, Expr::Func(func))),
        _ if func == Func::CurrentUser => Some((1, Expr::Func(func))),
        _ => None,
    }
}

/// Splits `sql` into tokens; `None` on an unterminated quote or comment.
fn tokenize(sql: &str) -> Option<Vec<Token>> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0usize;
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80;
    while i < b.len() {
        let c = b[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'#'
            || (c == b'-' && b.get(i + 1) == Some(&b'-') && b.get(i + 2).is_none_or(|c| c.is_ascii_whitespace()))
        {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let end = sql[i + 2..].find("*/")?;
            i += 2 + end + 2;
            continue;
        }
        let tok = if c == b'\'' || c == b'"' {
            let (s, next) = quoted(b, i, c)?;
            i = next;
            Tok::Str(s)
        } else if c == b'`' {
            let (s, next) = quoted(b, i, c)?;
            i = next;
            Tok::Word(s)
        } else if c == b'@' && b.get(i + 1) == Some(&b'@') {
            i += 2;
            while i < b.len() && (ident(b[i]) || b[i] == b'.') {
                i += 1;
            }
            let full = sql[start + 2..i].to_ascii_lowercase();
            let name = ["global.", "session.", "local."]
                .iter()
                .find_map(|scope| full.strip_prefix(scope))
                .unwrap_or(&full)
                .to_string();
            if name.is_empty() {
                return None;
            }
            Tok::SysVar(name)
        } else if c.is_ascii_digit() {
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            Tok::Num(sql[start..i].to_string())
        } else if ident(c) {
            while i < b.len() && ident(b[i]) {
                i += 1;
            }
            Tok::Word(sql[start..i].to_string())
        } else {
            // One character, which may be multi-byte: step over all of it.
            let ch = sql[i..].chars().next()?;
            i += ch.len_utf8();
            Tok::Punct(ch)
        };
        out.push(Token { tok, start, end: i });
    }
    Some(out)
}

/// A quoted string or identifier starting at `b[start] == quote`: doubled quotes and (for strings) backslash
/// escapes. Returns the unquoted text and the index after the closing quote.
fn quoted(b: &[u8], start: usize, quote: u8) -> Option<(String, usize)> {
    let mut out = Vec::new();
    let mut i = start + 1;
    loop {
        let c = *b.get(i)?;
        if c == quote {
            if b.get(i + 1) == Some(&quote) {
                out.push(quote);
                i += 2;
                continue;
            }
            return Some((String::from_utf8_lossy(&out).into_owned(), i + 1));
        }
        if c == b'\\' && quote != b'`' {
            let escaped = *b.get(i + 1)?;
            match escaped {
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'0' => out.push(0),
                // LIKE patterns keep `\%` and `\_` for the matcher (MariaDB does the same).
                b'%' | b'_' => out.extend_from_slice(&[b'\\', escaped]),
                other => out.push(other),
            }
            i += 2;
            continue;
        }
        out.push(c);
        i += 1;
    }
}

#[cfg(test)]
mod tests;
