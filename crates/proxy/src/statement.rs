//! What the proxy lets through of a client's SQL text: every way a session can interrupt a commit that waits for
//! its semi-sync ACK.
//!
//! MariaDB 10.11 ends the AFTER_SYNC wait when the waiting session is killed (`thd_killed()`, which reports only
//! *hard* kills), and the transaction then commits without any replica holding it: readers see it, and with
//! `KILL QUERY` the writer even gets OK. A *soft* kill (`KILL SOFT …`) is honoured by the SQL layer at its usual
//! check points but not by the wait: the commit stays pending until a majority holds it or the node fences the
//! server. So the proxy turns every `KILL` a client sends into `KILL SOFT`, and refuses the forms it cannot turn
//! (a `KILL` inside another statement, a `KILL` prepared from SQL text, SQL text prepared from an expression it
//! cannot read). The tests in `crates/proxy/tests/t30_kill.rs` show each path on a real server.
//!
//! The judge is conservative about the lexical modes it cannot see (`NO_BACKSLASH_ESCAPES`, `ANSI_QUOTES`): it
//! lexes the text in each mode and refuses when any reading could hide a `KILL`.
//!
//! It also keeps a privileged client's hands off the accounts the node runs its mariadbd with (the admin and the
//! replication account, [`crate::ProxyConfig::node_accounts`]): MariaDB's own test suite, run through the proxy,
//! truncated `mysql.global_priv` and left it so, and every node, the master included, lost its way into its own
//! server — a cluster that could neither serve nor elect. On a standalone server that is the DBA's own mistake; in
//! a cluster it takes away what fails over.

use std::collections::BTreeSet;

/// What to do with one statement text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send it unchanged.
    Forward,
    /// Send this text instead (a `KILL` made soft).
    Rewrite(Vec<u8>),
    /// Answer the client with this message and send nothing.
    Refuse(&'static str),
}

pub const REFUSE_EMBEDDED_KILL: &str =
    "paxsql: KILL is accepted only as a statement of its own (it is sent on as KILL SOFT, so that it cannot end a \
     commit that waits for its majority)";
/// What the server answers, at run time, for dynamic SQL built from an expression whose text holds a suspect word
/// (no quote or backslash: it goes inside a SQL literal inside a SQL literal).
pub const REFUSE_BUILT_SQL: &str =
    "paxsql: dynamic SQL built at run time that holds KILL, a replication or log word, or a node account is refused";
pub const REFUSE_DYNAMIC_SQL: &str =
    "paxsql: PREPARE ... FROM and EXECUTE IMMEDIATE of text holding KILL (or a replication or log word, or a node \
     account) are refused: the proxy must see every KILL to keep a commit from ending before a majority holds it";

pub const REFUSE_LOG_BYPASS: &str =
    "paxsql: this statement is refused through the proxy: it would write outside the global log or change what \
     keeps a commit from being acknowledged before a majority holds it (sql_log_bin, GTID and server ids, \
     read_only, rpl_semi_sync_*)";
pub const REFUSE_NODE_ACCOUNTS: &str =
    "paxsql: this statement is refused through the proxy: it would change an account the paxsql node runs this \
     server with, or write the privilege tables directly (mysql.global_priv, mysql.user, DROP DATABASE mysql); \
     use CREATE/ALTER/DROP USER and GRANT/REVOKE for other accounts";
pub const REFUSE_REPLICATION_CONTROL: &str =
    "paxsql: this statement is refused through the proxy: the paxsql node runs the binlog and replication of this \
     server (RESET/PURGE of the binlog, CHANGE MASTER, START/STOP/RESET SLAVE, INSTALL/UNINSTALL of plugins, \
     SHUTDOWN); use the paxsql commands instead";

pub const REFUSE_TEMPORARY_RENAME: &str =
    "paxsql: RENAME TABLE of a temporary table is refused: MariaDB 10.11 writes it to the binary log, where every \
     replica fails to apply it (error 1146) and stops; use ALTER TABLE ... RENAME TO, which it does not log";

/// Variables a session must not set through the proxy: each lets a commit bypass the global log or the semi-sync
/// wait, or breaks the log's GTID sequence, or lets a transaction larger than the cluster takes reach the binlog
/// (the node sets `max_binlog_cache_size` to what a replica's stream can carry).
const GUARDED_VARIABLES: [&[u8]; 10] = [
    b"sql_log_bin",
    b"gtid_seq_no",
    b"gtid_domain_id",
    b"server_id",
    b"gtid_binlog_state",
    b"gtid_slave_pos",
    b"gtid_strict_mode",
    b"read_only",
    b"log_bin_trust_function_creators",
    b"max_binlog_cache_size",
];
/// Adjacent keyword pairs that start a statement the node must run itself, never a client.
const REPLICATION_CONTROL: [(&[u8], &[u8]); 14] = [
    (b"reset", b"master"),
    (b"reset", b"slave"),
    (b"reset", b"replica"),
    (b"purge", b"binary"),
    (b"purge", b"master"),
    (b"change", b"master"),
    (b"start", b"slave"),
    (b"start", b"replica"),
    (b"stop", b"slave"),
    (b"stop", b"replica"),
    (b"install", b"plugin"),
    (b"install", b"soname"),
    (b"uninstall", b"plugin"),
    (b"uninstall", b"soname"),
];

/// Words that start every form this module cares about. A statement whose bytes contain none of them (in any case)
/// cannot hold a KILL, PREPARE or EXECUTE keyword: SQL keywords are written literally, no escape or comment
/// produces their letters. (A statement naming a node account contains that name: see [`is_suspect`].)
const SUSPECT_WORDS: [&[u8]; 18] = [
    b"kill",
    b"prepare",
    b"execute",
    b"sql_log_bin",
    b"gtid_",
    b"server_id",
    b"read_only",
    b"log_bin_trust",
    b"max_binlog",
    b"rpl_semi_sync",
    b"master",
    b"slave",
    b"replica",
    b"install",
    b"purge",
    b"shutdown",
    b"global_priv",
    b"mysql",
];

/// Statements that create, change or remove an account, or its privileges: `(first, second)`, `None` for any
/// second word. Whatever they name must not be one of the node's accounts.
const ACCOUNT_STATEMENTS: [(&[u8], Option<&[u8]>); 9] = [
    (b"create", Some(b"user".as_slice())),
    (b"create", Some(b"or".as_slice())), // CREATE OR REPLACE USER (and the other CREATE OR REPLACE forms)
    (b"alter", Some(b"user".as_slice())),
    (b"drop", Some(b"user".as_slice())),
    (b"rename", Some(b"user".as_slice())),
    (b"set", Some(b"password".as_slice())),
    (b"grant", None),
    (b"revoke", None),
    (b"set", Some(b"default".as_slice())), // SET DEFAULT ROLE … FOR account
];
/// The privilege tables that hold global privileges and passwords; `mysql.user` is a view over `global_priv` in
/// 10.4+, but the test suite turns it back into a table (`switch_to_mysql_user.inc`).
const PRIVILEGE_TABLES: [&[u8]; 2] = [b"global_priv", b"user"];
/// Statement verbs that write a table or change its definition.
const WRITE_VERBS: [&[u8]; 10] =
    [b"insert", b"update", b"delete", b"replace", b"truncate", b"drop", b"alter", b"rename", b"load", b"create"];

/// Judges one SQL text (a `COM_QUERY` or `COM_STMT_PREPARE` payload after its command byte); `node_accounts` are
/// the user names of the accounts the node runs mariadbd with.
pub fn judge(sql: &[u8], node_accounts: &BTreeSet<String>) -> Verdict {
    if !is_suspect(sql, node_accounts) {
        return Verdict::Forward;
    }
    let verdicts: Vec<Verdict> = LexMode::ALL.iter().map(|mode| judge_in(sql, *mode, node_accounts)).collect();
    if let Some(Verdict::Refuse(why)) = verdicts.iter().find(|v| matches!(v, Verdict::Refuse(_))) {
        return Verdict::Refuse(why);
    }
    match verdicts.as_slice() {
        [first, rest @ ..] if rest.iter().all(|v| v == first) => first.clone(),
        // Readings that disagree on whether or where there is a KILL: do not guess, never send a hard one.
        _ => Verdict::Refuse(REFUSE_EMBEDDED_KILL),
    }
}

/// The words a command of 16 MiB or more is scanned for as it streams past (it cannot be lexed whole): every
/// suspect word but `mysql` and the node's account names, which a large document may well hold. Such a command
/// that writes `mysql.user` or names a node account is not judged (stated in the README).
pub fn is_suspect_in_bulk(bytes: &[u8]) -> bool {
    contains_any_ignore_case(bytes, SUSPECT_WORDS.iter().copied().filter(|w| *w != b"mysql"))
}

/// The length of the longest word [`is_suspect_in_bulk`] looks for.
pub const LONGEST_BULK_WORD: usize = 13;

/// Whether `bytes` contain one of [`SUSPECT_WORDS`] or the name of a node account, ignoring ASCII case.
pub fn is_suspect(bytes: &[u8], node_accounts: &BTreeSet<String>) -> bool {
    contains_any_ignore_case(bytes, SUSPECT_WORDS.iter().copied().chain(node_accounts.iter().map(|a| a.as_bytes())))
}

/// Whether `hay` contains one of `needles`, ignoring ASCII case (an empty needle is in every text). Every command
/// through the RW port is scanned: one pass that compares only where a needle's first letter stands, not one pass
/// per needle (that was 5 % of the master node's CPU under sysbench oltp_insert at 64 threads).
fn contains_any_ignore_case<'a>(hay: &[u8], needles: impl Iterator<Item = &'a [u8]> + Clone) -> bool {
    let mut starts = [false; 256];
    for n in needles.clone() {
        let Some(c) = n.first() else { return true };
        starts[usize::from(c.to_ascii_lowercase())] = true;
        starts[usize::from(c.to_ascii_uppercase())] = true;
    }
    (0..hay.len()).any(|i| {
        starts[usize::from(hay[i])]
            && needles.clone().any(|n| hay.get(i..i + n.len()).is_some_and(|w| w.eq_ignore_ascii_case(n)))
    })
}

/// The SQL-mode dependent parts of MariaDB's lexer: whether a backslash escapes the next character inside
/// `'…'` and inside `"…"` (`NO_BACKSLASH_ESCAPES` turns both off; `ANSI_QUOTES` makes `"…"` an identifier, where
/// a backslash is an ordinary character).
#[derive(Clone, Copy, Debug)]
struct LexMode {
    backslash_in_single: bool,
    backslash_in_double: bool,
}

impl LexMode {
    const ALL: [LexMode; 4] = [
        LexMode { backslash_in_single: true, backslash_in_double: true },
        LexMode { backslash_in_single: true, backslash_in_double: false },
        LexMode { backslash_in_single: false, backslash_in_double: true },
        LexMode { backslash_in_single: false, backslash_in_double: false },
    ];
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    /// A bare word, lower-cased; `start..end` in the text; whether it stood inside `/*! … */`.
    Word {
        lower: Vec<u8>,
        start: usize,
        end: usize,
        in_executable_comment: bool,
    },
    /// A `'…'` or `"…"` literal: its bytes between the quotes, escapes left in.
    Text(Vec<u8>),
    /// A backtick-quoted identifier: its bytes between the backticks, lower-cased.
    QuotedIdent(Vec<u8>),
    Semicolon,
    /// Any other character.
    Punct(u8),
}

/// The tokens of `sql` read in `mode`, each with its `start..end` in the text (a literal's and an identifier's
/// quotes included).
fn lex_spanned(sql: &[u8], mode: LexMode) -> (Vec<Token>, Vec<std::ops::Range<usize>>) {
    let mut out = Vec::new();
    let mut spans = Vec::new();
    let mut i = 0;
    let mut in_exec = false;
    let n = sql.len();
    while i < n {
        let c = sql[i];
        match c {
            b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => i += 1,
            b'#' => i = skip_line(sql, i),
            b'-' if sql.get(i + 1) == Some(&b'-')
                && sql.get(i + 2).is_none_or(|c| c.is_ascii_whitespace() || *c < 32) =>
            {
                i = skip_line(sql, i)
            }
            b'/' if sql.get(i + 1) == Some(&b'*') => {
                let exec_start = match (sql.get(i + 2), sql.get(i + 3)) {
                    (Some(b'!'), _) => Some(i + 3),
                    (Some(b'M'), Some(b'!')) => Some(i + 4),
                    _ => None,
                };
                match exec_start {
                    // `/*!NNNNN …*/` and `/*M!NNNNNN …*/`: MariaDB runs the content as SQL (when its version is at
                    // least NNNNN; we assume it always is).
                    Some(mut j) if !in_exec => {
                        while j < n && sql[j].is_ascii_digit() {
                            j += 1;
                        }
                        in_exec = true;
                        i = j;
                    }
                    _ => i = skip_block_comment(sql, i + 2),
                }
            }
            b'*' if in_exec && sql.get(i + 1) == Some(&b'/') => {
                in_exec = false;
                i += 2;
            }
            b'\'' | b'"' => {
                let backslash = if c == b'\'' { mode.backslash_in_single } else { mode.backslash_in_double };
                let (content, next) = quoted(sql, i, c, backslash);
                out.push(Token::Text(content));
                spans.push(i..next);
                i = next;
            }
            b'`' => {
                let (name, next) = quoted(sql, i, b'`', false);
                out.push(Token::QuotedIdent(name.to_ascii_lowercase()));
                spans.push(i..next);
                i = next;
            }
            b';' => {
                out.push(Token::Semicolon);
                spans.push(i..i + 1);
                i += 1;
            }
            c if is_word_byte(c) => {
                let start = i;
                while i < n && is_word_byte(sql[i]) {
                    i += 1;
                }
                out.push(Token::Word {
                    lower: sql[start..i].to_ascii_lowercase(),
                    start,
                    end: i,
                    in_executable_comment: in_exec,
                });
                spans.push(start..i);
            }
            _ => {
                out.push(Token::Punct(c));
                spans.push(i..i + 1);
                i += 1;
            }
        }
    }
    (out, spans)
}

fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

fn skip_line(sql: &[u8], mut i: usize) -> usize {
    while i < sql.len() && sql[i] != b'\n' {
        i += 1;
    }
    i
}

fn skip_block_comment(sql: &[u8], mut i: usize) -> usize {
    while i + 1 < sql.len() {
        if sql[i] == b'*' && sql[i + 1] == b'/' {
            return i + 2;
        }
        i += 1;
    }
    sql.len()
}

/// Reads a quoted run starting at `sql[open]` (the quote); a doubled quote stands for one. Returns the bytes
/// between the quotes (escapes and doubled quotes as written) and the index after the closing quote.
fn quoted(sql: &[u8], open: usize, quote: u8, backslash: bool) -> (Vec<u8>, usize) {
    let mut i = open + 1;
    while i < sql.len() {
        let c = sql[i];
        if backslash && c == b'\\' {
            i += 2;
            continue;
        }
        if c == quote {
            if sql.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            return (sql[open + 1..i].to_vec(), i + 1);
        }
        i += 1;
    }
    (sql[(open + 1).min(sql.len())..].to_vec(), sql.len())
}

fn is_word(t: Option<&Token>, word: &[u8]) -> bool {
    matches!(t, Some(Token::Word { lower, .. }) if lower == word)
}

fn judge_in(sql: &[u8], mode: LexMode, node_accounts: &BTreeSet<String>) -> Verdict {
    let (tokens, spans) = lex_spanned(sql, mode);
    // Dynamic SQL first: its text is hidden from the KILL check below. A literal source is judged here; a source
    // built at run time is wrapped so that the server checks the text it built before running it
    // ([`guard_dynamic_sources`]).
    let mut guarded = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let (source_at, execute) = if is_word(Some(t), b"prepare") && is_word(tokens.get(i + 2), b"from") {
            (i + 3, false)
        } else if is_word(Some(t), b"execute") && is_word(tokens.get(i + 1), b"immediate") {
            (i + 2, true)
        } else {
            continue;
        };
        match literal_source(&tokens[source_at..], node_accounts) {
            LiteralSource::Clean => {}
            LiteralSource::Suspect => return Verdict::Refuse(REFUSE_DYNAMIC_SQL),
            LiteralSource::NotLiteral => match expression_span(sql, &tokens, &spans, source_at, execute) {
                Some(span) => guarded.push(span),
                None => return Verdict::Refuse(REFUSE_DYNAMIC_SQL),
            },
        }
    }
    if let Some(why) = operator_hazard(&tokens, node_accounts) {
        return Verdict::Refuse(why);
    }
    let kills: Vec<usize> =
        tokens.iter().enumerate().filter(|(_, t)| is_word(Some(t), b"kill")).map(|(i, _)| i).collect();
    if !guarded.is_empty() {
        if !kills.is_empty() {
            return Verdict::Refuse(REFUSE_EMBEDDED_KILL);
        }
        return Verdict::Rewrite(guard_dynamic_sources(sql, &guarded, node_accounts));
    }
    let Some(&first) = kills.first() else { return Verdict::Forward };
    // The only KILL we pass on: a statement of its own, `KILL …` with nothing before it and at most a `;` after.
    let Token::Word { start, end, in_executable_comment, .. } = &tokens[first] else {
        return Verdict::Refuse(REFUSE_EMBEDDED_KILL);
    };
    let alone = first == 0
        && kills.len() == 1
        && !in_executable_comment
        && !tokens.iter().any(|t| matches!(t, Token::Word { in_executable_comment: true, .. }))
        && match tokens.iter().position(|t| *t == Token::Semicolon) {
            None => true,
            Some(p) => tokens[p..].iter().all(|t| *t == Token::Semicolon),
        };
    if !alone {
        return Verdict::Refuse(REFUSE_EMBEDDED_KILL);
    }
    // `KILL [HARD|SOFT] …` → `KILL SOFT …`, the rest of the text as the client wrote it.
    let rest_from = match tokens.get(1) {
        Some(Token::Word { lower, end, .. }) if lower == b"hard" || lower == b"soft" => *end,
        _ => *end,
    };
    let mut text = Vec::with_capacity(sql.len() + 5);
    text.extend_from_slice(&sql[..*start]);
    text.extend_from_slice(b"KILL SOFT");
    text.extend_from_slice(&sql[rest_from..]);
    Verdict::Rewrite(text)
}

/// Statements only an operator could send (the application account lacks the privileges) that would take a
/// commit past the global log or the semi-sync wait, or take the binlog and replication out of the node's hands.
fn operator_hazard(tokens: &[Token], node_accounts: &BTreeSet<String>) -> Option<&'static str> {
    let words: Vec<Option<&[u8]>> = tokens
        .iter()
        .map(|t| match t {
            Token::Word { lower, .. } => Some(lower.as_slice()),
            _ => None,
        })
        .collect();
    // Where a statement starts: the text's start, after a `;`, or after a compound statement's keywords. Only
    // there do `SET`, `RESET MASTER` and the rest mean what they say: `UPDATE t SET read_only = 1` and
    // `ALTER TABLE t CHANGE master …` name an application's own columns.
    let starts_statement = |i: usize| {
        i == 0
            || tokens[i - 1] == Token::Semicolon
            || matches!(words[i - 1], Some(w) if [&b"begin"[..], b"then", b"else", b"do", b"loop", b"repeat"].contains(&w))
    };
    let assigns_variables = (0..words.len()).any(|i| words[i] == Some(b"set") && starts_statement(i));
    let guarded = |w: &[u8]| GUARDED_VARIABLES.contains(&w) || w.starts_with(b"rpl_semi_sync");
    if assigns_variables && words.iter().flatten().any(|w| guarded(w)) {
        return Some(REFUSE_LOG_BYPASS);
    }
    for i in 0..words.len().saturating_sub(1) {
        if let (Some(a), Some(b)) = (words[i], words[i + 1]) {
            if starts_statement(i) && REPLICATION_CONTROL.iter().any(|(x, y)| *x == a && *y == b) {
                return Some(REFUSE_REPLICATION_CONTROL);
            }
        }
    }
    // `SHUTDOWN` as a statement: a clean stop commits every waiting transaction without its ACK.
    if (0..words.len()).any(|i| words[i] == Some(b"shutdown") && starts_statement(i)) {
        return Some(REFUSE_REPLICATION_CONTROL);
    }
    node_account_hazard(tokens, &words, &starts_statement, node_accounts)
}

/// An account statement naming a node account, a write to the privilege tables, or `DROP DATABASE mysql`.
/// Conservative by design: a statement that only reads a privilege table beside a write of its own (`CREATE TABLE
/// t AS SELECT … FROM mysql.user`) is refused too; such statements belong on the server's socket.
fn node_account_hazard(
    tokens: &[Token],
    words: &[Option<&[u8]>],
    starts_statement: &dyn Fn(usize) -> bool,
    node_accounts: &BTreeSet<String>,
) -> Option<&'static str> {
    let starts = |i: usize, first: &[u8]| words[i] == Some(first) && starts_statement(i);
    let names_node_account = tokens.iter().any(|t| {
        let name: &[u8] = match t {
            Token::Word { lower, .. } => lower,
            Token::Text(bytes) | Token::QuotedIdent(bytes) => bytes,
            _ => return false,
        };
        node_accounts.iter().any(|a| a.as_bytes().eq_ignore_ascii_case(name))
    });
    let account_statement = (0..words.len()).any(|i| {
        ACCOUNT_STATEMENTS
            .iter()
            .any(|(first, second)| starts(i, first) && second.is_none_or(|s| words.get(i + 1) == Some(&Some(s))))
    });
    if names_node_account && account_statement {
        return Some(REFUSE_NODE_ACCOUNTS);
    }
    let name_at = |i: usize| -> Option<&[u8]> {
        match tokens.get(i) {
            Some(Token::Word { lower, .. }) => Some(lower),
            Some(Token::QuotedIdent(name)) => Some(name),
            _ => None,
        }
    };
    // `mysql.global_priv`, `mysql.user` (any quoting), and `global_priv` alone (after `USE mysql`; the name is
    // MariaDB's own).
    let privilege_table = (0..tokens.len()).any(|i| {
        name_at(i) == Some(b"global_priv")
            || (name_at(i) == Some(b"mysql")
                && tokens.get(i + 1) == Some(&Token::Punct(b'.'))
                && name_at(i + 2).is_some_and(|t| PRIVILEGE_TABLES.contains(&t)))
    });
    let writes = (0..words.len()).any(|i| WRITE_VERBS.iter().any(|v| starts(i, v)));
    if privilege_table && writes {
        return Some(REFUSE_NODE_ACCOUNTS);
    }
    let drops_mysql = (0..words.len()).any(|i| {
        starts(i, b"drop")
            && matches!(words.get(i + 1), Some(Some(b"database" | b"schema")))
            && (name_at(i + 2) == Some(b"mysql")
                || (words.get(i + 2) == Some(&Some(b"if")) && name_at(i + 4) == Some(b"mysql")))
    });
    drops_mysql.then_some(REFUSE_NODE_ACCOUNTS)
}

/// What the source of `PREPARE s FROM …` / `EXECUTE IMMEDIATE …` is.
enum LiteralSource {
    /// One or more adjacent string literals (MariaDB concatenates them), then the end, a `;` or `USING`, their
    /// text free of every suspect word once backslashes are dropped (no escape makes a letter, so this reading
    /// covers every mode).
    Clean,
    /// Such literals holding a suspect word.
    Suspect,
    /// An expression (a user variable, `CONCAT(…)`, …): its text exists only at run time.
    NotLiteral,
}

fn literal_source(tokens: &[Token], node_accounts: &BTreeSet<String>) -> LiteralSource {
    let mut text = Vec::new();
    let mut n = 0;
    for t in tokens {
        match t {
            Token::Text(bytes) => {
                text.extend(bytes.iter().copied().filter(|c| *c != b'\\'));
                n += 1;
            }
            Token::Semicolon => break,
            Token::Word { lower, .. } if lower == b"using" && n > 0 => break,
            _ => return LiteralSource::NotLiteral,
        }
    }
    match (n, is_suspect(&text, node_accounts)) {
        (0, _) => LiteralSource::NotLiteral,
        (_, false) => LiteralSource::Clean,
        (_, true) => LiteralSource::Suspect,
    }
}

/// The bytes of a dynamic-SQL source expression starting at token `at`: up to the `;` that ends its statement,
/// or (`execute`) the `USING` of `EXECUTE IMMEDIATE`, at parenthesis depth 0, or the end of the text. `None` for
/// what this reading would not rewrite safely: an empty source, unbalanced parentheses, a comment inside it.
fn expression_span(
    sql: &[u8],
    tokens: &[Token],
    spans: &[std::ops::Range<usize>],
    at: usize,
    execute: bool,
) -> Option<std::ops::Range<usize>> {
    let mut depth = 0usize;
    let mut last = None;
    for (j, t) in tokens.iter().enumerate().skip(at) {
        match t {
            Token::Semicolon if depth == 0 => break,
            Token::Word { lower, .. } if execute && depth == 0 && lower == b"using" => break,
            Token::Punct(b'(') => depth += 1,
            Token::Punct(b')') => depth = depth.checked_sub(1)?,
            _ => {}
        }
        last = Some(j);
    }
    let span = spans.get(at)?.start..spans.get(last?)?.end;
    let text = sql.get(span.clone())?;
    // An executable comment anywhere would move the wrapper's own text in or out of it.
    let executable = sql.windows(3).any(|w| w == b"/*!") || sql.windows(4).any(|w| w == b"/*M!");
    let commented =
        executable || text.windows(2).any(|w| w == b"/*" || w == b"*/" || w == b"--") || text.contains(&b'#');
    (depth == 0 && !commented).then_some(span)
}

/// The user variable a guarded source is evaluated into, once, so that the text checked is the text run.
const GUARD_VARIABLE: &str = "@paxsql_dynamic_sql";

/// Wraps each source expression in `spans` so that the server itself refuses, at run time, a built text holding a
/// suspect word ([`guard_pattern`]): the text is evaluated once into [`GUARD_VARIABLE`], and replaced by a `SIGNAL`
/// of ERR 1235 when it matches. Built-in functions only: MariaDB takes no stored function or subquery in a
/// dynamic-SQL source. `PREPARE` prepares the SIGNAL; its `EXECUTE` raises it. (In a UCS-2, UTF-16 or UTF-32
/// connection MariaDB reads the SIGNAL's own text wrongly and answers ERR 1407 instead: still refused.)
fn guard_dynamic_sources(sql: &[u8], spans: &[std::ops::Range<usize>], node_accounts: &BTreeSet<String>) -> Vec<u8> {
    // No backslash anywhere in what is added: it reads the same with and without NO_BACKSLASH_ESCAPES.
    let pattern = guard_pattern(node_accounts);
    let signal = format!("'SIGNAL SQLSTATE ''42000'' SET MYSQL_ERRNO = 1235, MESSAGE_TEXT = ''{REFUSE_BUILT_SQL}'''");
    let mut out = Vec::with_capacity(sql.len() + spans.len() * (pattern.len() + signal.len() + 96));
    let mut from = 0;
    for span in spans {
        out.extend_from_slice(&sql[from..span.start]);
        out.extend_from_slice(format!("IF(CAST(({GUARD_VARIABLE} := ").as_bytes());
        out.extend_from_slice(&sql[span.clone()]);
        out.extend_from_slice(format!(") AS BINARY) REGEXP {pattern}, {signal}, {GUARD_VARIABLE})").as_bytes());
        from = span.end;
    }
    out.extend_from_slice(&sql[from..]);
    out
}

/// The `_binary` literal [`guard_dynamic_sources`] matches a built text's bytes against: each word of
/// [`SUSPECT_WORDS`] (`mysql` as `mysql.user`: alone it would match every `…_mysql500_ci` collation) and each node
/// account name, case-insensitively, with up to three control bytes allowed between characters, so that the
/// same word in UCS-2, UTF-16 or UTF-32 (NUL bytes beside each ASCII letter) matches too. Bytes, not characters:
/// converting the text would warn on bytes invalid in the target character set, and a plain literal in a UCS-2
/// connection would turn the pattern itself into wide characters (measured: a KILL then ran). A second match, or a
/// second reference to the variable, made MariaDB evaluate the source twice (measured), which would let the text
/// checked differ from the text run.
fn guard_pattern(node_accounts: &BTreeSet<String>) -> String {
    const GAP: &str = "[[:cntrl:]]{0,3}";
    let spell = |word: &str| {
        word.chars()
            .filter(|c| c.is_ascii_graphic() && *c != '\'' && *c != '\\')
            .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c.to_string() } else { format!("[{c}]") })
            .collect::<Vec<_>>()
            .join(GAP)
    };
    let words = SUSPECT_WORDS.iter().filter(|w| **w != b"mysql").map(|w| spell(&String::from_utf8_lossy(w)));
    let user_table = [spell("mysql"), "[`]?".into(), "[.]".into(), "[`]?".into(), spell("user")].join(GAP);
    let accounts = node_accounts.iter().map(|a| spell(a));
    let alternatives: Vec<String> =
        words.chain(std::iter::once(user_table)).chain(accounts).filter(|w| !w.is_empty()).collect();
    format!("_binary'(?i){}'", alternatives.join("|"))
}

/// The temporary tables one client session has created, as far as the statements it sent through the proxy tell.
/// MariaDB 10.11 writes `RENAME TABLE` of a temporary table to the binary log in row format (measured on 10.11.19:
/// `CREATE TEMPORARY TABLE a1 …; RENAME TABLE a1 TO a2` adds a GTID whose `rename table a1 to a2` every replica
/// fails to apply, error 1146 — MariaDB's own `main.backup_log` test stopped both replicas of a cluster this way),
/// while `ALTER TABLE … RENAME` of one is not logged. Names are kept without their database, lower-cased: a
/// `RENAME TABLE` naming a real table that shares a temporary table's name is refused too (conservative).
#[derive(Debug, Default)]
pub struct SessionTables {
    temporary: BTreeSet<Vec<u8>>,
}

impl SessionTables {
    /// Follows one statement text the session sends (`COM_QUERY`): records the temporary tables it creates,
    /// renames with `ALTER TABLE` or drops, and refuses a `RENAME TABLE` of one. A refused statement changes
    /// nothing.
    pub fn observe(&mut self, sql: &[u8]) -> Option<&'static str> {
        if self.temporary.is_empty() && !contains_any_ignore_case(sql, [&b"temporary"[..]].into_iter()) {
            return None;
        }
        if !self.temporary.is_empty()
            && !contains_any_ignore_case(sql, [&b"rename"[..], b"drop", b"temporary"].into_iter())
        {
            return None;
        }
        let (tokens, _) = lex_spanned(sql, LexMode::ALL[0]);
        let mut next = self.temporary.clone();
        for statement in tokens.split(|t| *t == Token::Semicolon) {
            if let Some(why) = Self::step(&mut next, statement) {
                return Some(why);
            }
        }
        self.temporary = next;
        None
    }

    fn step(temporary: &mut BTreeSet<Vec<u8>>, t: &[Token]) -> Option<&'static str> {
        let word = |i: usize| match t.get(i) {
            Some(Token::Word { lower, .. }) => Some(lower.as_slice()),
            _ => None,
        };
        let mut i = 0;
        match word(0)? {
            b"create" => {
                i += 1;
                if word(i) == Some(b"or") && word(i + 1) == Some(b"replace") {
                    i += 2;
                }
                if word(i) != Some(b"temporary") || word(i + 1) != Some(b"table") {
                    return None;
                }
                i += 2;
                if word(i) == Some(b"if") && word(i + 1) == Some(b"not") && word(i + 2) == Some(b"exists") {
                    i += 3;
                }
                if let Some((name, _)) = table_name(t, i) {
                    temporary.insert(name);
                }
            }
            b"drop" => {
                i += 1;
                if word(i) == Some(b"temporary") {
                    i += 1;
                }
                if word(i) != Some(b"table") && word(i) != Some(b"tables") {
                    return None;
                }
                i += 1;
                if word(i) == Some(b"if") && word(i + 1) == Some(b"exists") {
                    i += 2;
                }
                while let Some((name, after)) = table_name(t, i) {
                    temporary.remove(&name);
                    if t.get(after) != Some(&Token::Punct(b',')) {
                        break;
                    }
                    i = after + 1;
                }
            }
            b"alter" => {
                while word(i).is_some_and(|w| w != b"table") {
                    i += 1;
                }
                let (name, after) = table_name(t, i + 1)?;
                if !temporary.contains(&name) {
                    return None;
                }
                // `ALTER TABLE tmp …, RENAME [TO|AS] new`: the temporary table goes on under its new name.
                let rename = (after..t.len()).find(|&k| word(k) == Some(b"rename"))?;
                let mut k = rename + 1;
                match word(k) {
                    // RENAME COLUMN/INDEX/KEY: the table keeps its name.
                    Some(b"column" | b"index" | b"key") => return None,
                    Some(b"to" | b"as") => k += 1,
                    _ => {}
                }
                let (new, _) = table_name(t, k)?;
                temporary.remove(&name);
                temporary.insert(new);
            }
            b"rename" if word(1) == Some(b"table") || word(1) == Some(b"tables") => {
                i = 2;
                while let Some((from, after)) = table_name(t, i) {
                    if temporary.contains(&from) {
                        return Some(REFUSE_TEMPORARY_RENAME);
                    }
                    // `from TO to`, then `,` and the next pair.
                    let Some((_, after_to)) = table_name(t, after + 1) else { break };
                    if t.get(after_to) != Some(&Token::Punct(b',')) {
                        break;
                    }
                    i = after_to + 1;
                }
            }
            _ => {}
        }
        None
    }
}

/// The table named at `tokens[i]` (`name`, `` `name` `` or `db.name`): its name without the database, and the
/// index after it.
fn table_name(tokens: &[Token], i: usize) -> Option<(Vec<u8>, usize)> {
    let part = |k: usize| match tokens.get(k) {
        Some(Token::Word { lower, .. }) => Some(lower.clone()),
        Some(Token::QuotedIdent(q)) => Some(q.clone()),
        _ => None,
    };
    let first = part(i)?;
    if tokens.get(i + 1) == Some(&Token::Punct(b'.')) {
        return Some((part(i + 2)?, i + 3));
    }
    Some((first, i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accounts() -> BTreeSet<String> {
        ["root".to_string(), "paxsql_repl".to_string()].into()
    }

    fn rewritten(sql: &str) -> String {
        match judge(sql.as_bytes(), &accounts()) {
            Verdict::Rewrite(t) => String::from_utf8(t).unwrap(),
            other => panic!("{sql:?}: {other:?}"),
        }
    }

    fn refused(sql: &str) {
        assert!(matches!(judge(sql.as_bytes(), &accounts()), Verdict::Refuse(_)), "{sql:?} was not refused");
    }

    fn forwarded(sql: &str) {
        assert_eq!(judge(sql.as_bytes(), &accounts()), Verdict::Forward, "{sql:?}");
    }

    #[test]
    fn every_form_of_kill_becomes_soft() {
        assert_eq!(rewritten("KILL 5"), "KILL SOFT 5");
        assert_eq!(rewritten("kill query 5"), "KILL SOFT query 5");
        assert_eq!(rewritten("KILL QUERY ID 9"), "KILL SOFT QUERY ID 9");
        assert_eq!(rewritten("KILL CONNECTION 5;"), "KILL SOFT CONNECTION 5;");
        assert_eq!(rewritten("KILL HARD QUERY 5"), "KILL SOFT QUERY 5");
        assert_eq!(rewritten("KILL SOFT 5"), "KILL SOFT 5");
        assert_eq!(rewritten("  /* why */ Kill USER app"), "  /* why */ KILL SOFT USER app");
        assert_eq!(rewritten("-- x\nKILL 7 ;"), "-- x\nKILL SOFT 7 ;");
    }

    #[test]
    fn kill_anywhere_else_is_refused() {
        refused("SELECT 1; KILL 5");
        refused("KILL 5; SELECT 1");
        refused("/*!KILL 5*/");
        refused("/*M!100000 KILL 5 */");
        refused("/*!50000 SELECT 1*/; KILL 5");
        refused("BEGIN NOT ATOMIC KILL 5; END");
        refused("CREATE PROCEDURE p() KILL 5");
        refused("CREATE EVENT e ON SCHEDULE EVERY 1 SECOND DO KILL 5");
        refused("KILL 5; KILL 6");
    }

    #[test]
    fn a_kill_hidden_by_one_quoting_mode_is_refused() {
        // With NO_BACKSLASH_ESCAPES the string ends at the backslash and the KILL runs.
        refused(r"SELECT 'a\'; KILL 5; -- '");
        // With ANSI_QUOTES, "…" is an identifier in which a backslash is an ordinary character.
        refused(r#"SELECT "a\"; KILL 5; -- ""#);
    }

    #[test]
    fn dynamic_sql_from_literals_is_judged_and_from_expressions_guarded() {
        refused("PREPARE s FROM 'KILL 5'");
        refused("PREPARE s FROM 'KI' 'LL 5'");
        refused(r"PREPARE s FROM 'K\ILL 5'");
        refused("EXECUTE IMMEDIATE 'kill 5'");
        refused("EXECUTE IMMEDIATE 'EXECUTE IMMEDIATE ?' USING @q");
        // Built at run time: the server checks the text it built (t30_kill runs these against MariaDB).
        let guard = |expr: &str| {
            format!("IF(CAST((@paxsql_dynamic_sql := {expr}) AS BINARY) REGEXP _binary'(?i)k[[:cntrl:]]{{0,3}}i")
        };
        assert!(rewritten("PREPARE s FROM @q").starts_with(&format!("PREPARE s FROM {}", guard("@q"))));
        assert!(rewritten("PREPARE s FROM CONCAT('KI','LL 5');")
            .starts_with(&format!("PREPARE s FROM {}", guard("CONCAT('KI','LL 5')"))));
        let using = rewritten("EXECUTE IMMEDIATE CONCAT('SELECT ', '?') USING 5");
        assert!(using.starts_with(&format!("EXECUTE IMMEDIATE {}", guard("CONCAT('SELECT ', '?')"))), "{using}");
        assert!(using.ends_with(", @paxsql_dynamic_sql) USING 5"), "{using}");
        let pattern = rewritten("EXECUTE IMMEDIATE @q");
        assert!(pattern.contains("|m[[:cntrl:]]{0,3}y"), "{pattern}");
        assert!(pattern.contains("|r[[:cntrl:]]{0,3}o[[:cntrl:]]{0,3}o[[:cntrl:]]{0,3}t', 'SIGNAL"), "{pattern}");
        let body = rewritten("CREATE PROCEDURE p(q TEXT) BEGIN PREPARE s FROM q; EXECUTE s; EXECUTE IMMEDIATE q; END");
        assert_eq!(body.matches("@paxsql_dynamic_sql :=").count(), 2, "{body}");
        assert!(body.ends_with(", @paxsql_dynamic_sql); END"), "{body}");
        assert!(!rewritten("EXECUTE IMMEDIATE @q").contains('\\'), "must read alike with NO_BACKSLASH_ESCAPES");
        // What this reading does not rewrite: a KILL beside it, a comment inside the source, unbalanced parentheses.
        refused("EXECUTE IMMEDIATE @q; KILL 5");
        refused("EXECUTE IMMEDIATE /*!@q*/");
        refused("EXECUTE IMMEDIATE CONCAT(@q -- x\n)");
        refused("EXECUTE IMMEDIATE CONCAT(@q");
        forwarded("PREPARE s FROM 'SELECT * FROM t WHERE id = ?'");
        forwarded("EXECUTE IMMEDIATE 'SELECT ?' USING 1");
        forwarded("EXECUTE s USING @a");
        forwarded("XA PREPARE 'x1'");
        forwarded("DEALLOCATE PREPARE s");
    }

    #[test]
    fn statements_that_bypass_the_log_or_run_replication_are_refused() {
        for sql in [
            "SET sql_log_bin = 0",
            "SET SESSION sql_log_bin=OFF",
            "SET @@session.sql_log_bin = 0; INSERT INTO t VALUES (1)",
            "SET STATEMENT sql_log_bin=0 FOR INSERT INTO t VALUES (1)",
            "SET gtid_seq_no = 100",
            "SET GLOBAL server_id = 7",
            "SET GLOBAL read_only = OFF",
            "SET GLOBAL max_binlog_cache_size = 1073741824",
            "set @@global.max_binlog_cache_size = DEFAULT",
            "SET GLOBAL rpl_semi_sync_master_enabled = OFF",
            "set global rpl_semi_sync_master_timeout = 10",
            "RESET MASTER",
            "PURGE BINARY LOGS BEFORE NOW()",
            "CHANGE MASTER TO MASTER_HOST='x'",
            "STOP SLAVE",
            "START REPLICA",
            "INSTALL SONAME 'x'",
            "UNINSTALL PLUGIN rpl_semi_sync_master",
            "SHUTDOWN",
            "SELECT 1; SHUTDOWN",
            "/*!SET sql_log_bin=0*/",
        ] {
            refused(sql);
        }
        forwarded("SELECT @@sql_log_bin, @@server_id, @@read_only, @@gtid_binlog_pos");
        forwarded("SELECT * FROM master_accounts");
        forwarded("INSERT INTO log VALUES ('RESET MASTER now')");
        forwarded("SET SESSION TRANSACTION READ ONLY");
        forwarded("SHOW SLAVE STATUS");
        forwarded("SHOW MASTER STATUS");
        forwarded("UPDATE t SET status = 'shutdown'");
        // An application's own columns that share a name with a guarded variable or keyword.
        forwarded("UPDATE servers SET server_id = 5, read_only = 1 WHERE id = 2");
        forwarded("INSERT INTO docs SET read_only = 0");
        forwarded("ALTER TABLE t CHANGE master master_id INT");
        forwarded("SELECT shutdown, purge FROM settings");
        refused("CREATE PROCEDURE p() BEGIN SET sql_log_bin = 0; INSERT INTO t VALUES (1); END");
    }

    #[test]
    fn the_node_accounts_and_the_privilege_tables_are_out_of_reach() {
        for sql in [
            "ALTER USER root@localhost IDENTIFIED BY 'x'",
            "alter user 'root'@'localhost' account lock",
            "DROP USER IF EXISTS `paxsql_repl`@`127.0.0.1`",
            "SET PASSWORD FOR 'root'@'localhost' = PASSWORD('x')",
            "RENAME USER paxsql_repl@localhost TO other@localhost",
            "REVOKE ALL PRIVILEGES, GRANT OPTION FROM root@localhost",
            "GRANT PROXY ON 'root'@'localhost' TO eve",
            "CREATE OR REPLACE USER root@localhost",
            "TRUNCATE TABLE mysql.global_priv",
            "truncate `mysql`.`global_priv`",
            "DELETE FROM global_priv",
            "UPDATE mysql.global_priv SET priv = '{}' WHERE user = 'x'",
            "INSERT mysql.global_priv SELECT * FROM t1",
            "TRUNCATE TABLE mysql.user",
            "DROP TABLE mysql.global_priv",
            "RENAME TABLE mysql.global_priv TO mysql.gp_old",
            "DROP DATABASE mysql",
            "drop schema if exists `mysql`",
            "CREATE PROCEDURE p() TRUNCATE mysql.global_priv",
            "PREPARE s FROM 'TRUNCATE mysql.global_priv'",
            "PREPARE s FROM 'ALTER USER root@localhost ACCOUNT LOCK'",
        ] {
            refused(sql);
        }
        forwarded("CREATE USER app2@'%' IDENTIFIED BY 'pw'");
        forwarded("GRANT SELECT ON app.* TO app2@'%'");
        forwarded("ALTER USER app2@'%' IDENTIFIED BY 'new'");
        forwarded("DROP USER app2@'%'");
        forwarded("SELECT user, host FROM mysql.user");
        forwarded("SELECT * FROM mysql.global_priv WHERE user = 'root'");
        forwarded("DROP DATABASE mysql_archive");
        forwarded("INSERT INTO users (name) VALUES ('rooted')");
        forwarded("UPDATE t SET user = 'root'");
    }

    #[test]
    fn bulk_scan_sees_every_word_it_looks_for() {
        let longest = SUSPECT_WORDS.iter().filter(|w| **w != b"mysql").map(|w| w.len()).max();
        assert_eq!(longest, Some(LONGEST_BULK_WORD));
        assert!(is_suspect_in_bulk(b"xx SET GLOBAL rpl_semi_sync_master_enabled=0"));
        assert!(!is_suspect_in_bulk(b"INSERT INTO docs VALUES ('about mysql and root')"));
    }

    #[test]
    fn the_one_pass_scan_finds_what_a_scan_per_word_finds() {
        // The definition: some word occurs at some place, case aside.
        fn naive(hay: &[u8], words: &[&[u8]]) -> bool {
            words.iter().any(|w| hay.len() >= w.len() && hay.windows(w.len()).any(|x| x.eq_ignore_ascii_case(w)))
        }
        let accounts: BTreeSet<String> = ["paxsql_node".to_string(), "repl".to_string()].into();
        let mut words: Vec<&[u8]> = SUSPECT_WORDS.to_vec();
        words.extend(accounts.iter().map(|a| a.as_bytes()));
        let alphabet = b"kKiLlmMyYsSqQ_lLrReEpPaAtTxXcCuU'\" ;\xc3\x9f";
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..2_000usize {
            let hay: Vec<u8> = (0..len % 40)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    alphabet[(seed % alphabet.len() as u64) as usize]
                })
                .collect();
            assert_eq!(is_suspect(&hay, &accounts), naive(&hay, &words), "{:?}", String::from_utf8_lossy(&hay));
        }
        for hit in [&b"KILL 5"[..], b"x RePl y", b"sElEcT 1 FROM MYSQL.user", b"paxsql_NODE", b"...gtid_"] {
            assert!(is_suspect(hit, &accounts), "{:?}", String::from_utf8_lossy(hit));
        }
        assert!(!is_suspect(b"INSERT INTO sbtest1 (id, k, c, pad) VALUES (0, 5, '83868-6', '6708')", &accounts));
        assert!(contains_any_ignore_case(b"anything", [&b""[..]].into_iter()));
    }

    #[test]
    fn ordinary_statements_pass_untouched() {
        forwarded("INSERT INTO t VALUES (1)");
        forwarded("SELECT 'kill me' AS txt");
        forwarded("SELECT `kill` FROM t");
        forwarded("INSERT INTO log VALUES ('please KILL 5; now')");
        forwarded("SELECT 1 -- KILL 5");
        forwarded("SELECT 1 /* KILL 5 */");
        forwarded("SELECT 1 # KILL 5\n");
        forwarded("UPDATE t SET skill = 1");
        forwarded("");
    }

    #[test]
    fn never_panics_on_arbitrary_bytes() {
        let samples: [&[u8]; 8] =
            [b"kill", b"'", b"/*!", b"/*M!", b"kill '\\", b"\xff\xfekill\x00", b"prepare s from", b"execute immediate"];
        for s in samples {
            let _ = judge(s, &accounts());
        }
        // Every prefix of a tricky text.
        let text = br#"/*!1 KILL*/ 'a\'' "b\"" `c``` ; PREPARE s FROM 'x' ; EXECUTE IMMEDIATE 'y' USING 1; kill 5"#;
        for end in 0..=text.len() {
            let _ = judge(&text[..end], &accounts());
        }
    }

    #[test]
    fn rename_of_a_temporary_table_is_refused_and_nothing_else() {
        let mut session = SessionTables::default();
        let observe = |s: &mut SessionTables, sql: &str| s.observe(sql.as_bytes());
        // Real tables rename freely (online schema change tools rely on it).
        assert_eq!(observe(&mut session, "RENAME TABLE t1 TO t2, t3 TO t4"), None);
        assert_eq!(observe(&mut session, "create temporary table tmp_t10 (a int) engine=myisam"), None);
        assert_eq!(observe(&mut session, "alter table tmp_t10 add column b int"), None);
        assert_eq!(observe(&mut session, "alter table tmp_t10 rename column b to c"), None);
        assert_eq!(observe(&mut session, "alter table tmp_t10 rename as tmp_t11"), None);
        assert_eq!(observe(&mut session, "rename table tmp_t11 to tmp_t10"), Some(REFUSE_TEMPORARY_RENAME));
        // Refused: nothing changed, the table is still tmp_t11.
        assert_eq!(observe(&mut session, "RENAME TABLE `test`.`TMP_T11` TO x"), Some(REFUSE_TEMPORARY_RENAME));
        assert_eq!(observe(&mut session, "rename table a to b, tmp_t11 to c"), Some(REFUSE_TEMPORARY_RENAME));
        assert_eq!(observe(&mut session, "drop table if exists x, tmp_t11"), None);
        assert_eq!(observe(&mut session, "rename table tmp_t11 to tmp_t10"), None);
        // Multi-statements and IF NOT EXISTS / OR REPLACE.
        let mut s2 = SessionTables::default();
        assert_eq!(
            observe(&mut s2, "CREATE OR REPLACE TEMPORARY TABLE IF NOT EXISTS a1 (a int); RENAME TABLE a1 TO a2"),
            Some(REFUSE_TEMPORARY_RENAME)
        );
        assert_eq!(observe(&mut s2, "CREATE TEMPORARY TABLE a1 (a int)"), None);
        assert_eq!(observe(&mut s2, "DROP TEMPORARY TABLE a1"), None);
        assert_eq!(observe(&mut s2, "RENAME TABLE a1 TO a2"), None);
    }
}
