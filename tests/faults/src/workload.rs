//! The workloads: concurrent clients (tokio tasks on the namespaced runtime, one MySQL connection each) that
//! record what they asked, when, and how it ended. Every write goes to [`write_endpoint`] — the one place that
//! decides where a client sends writes —, except [`bank_library_client`]'s, which go through the paxsql client
//! library given every node's proxy, as a Rust application would connect.
//!
//! Outcomes: `Ok`; `Fail` only when the server refused before anything could commit (read-only, deadlock, lock
//! wait, or an error before COMMIT was sent, after which the dropped connection rolls the transaction back);
//! `Unknown` for everything else (timeout or lost connection during an autocommit statement or a COMMIT).
//! A timed-out connection is dropped, never KILLed: KILL of a session waiting for its semi-sync ACK commits it
//! without the ACK (docs/ARCHITECTURE.md §3).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::watch;

use crate::cluster::{AppAccount, ClusterView, NodeLayout};
use crate::linearizability::{RegisterEntry, RegisterOp, RegisterOutcome};

/// Where a client sends its statements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub node: u64,
    pub host: String,
    pub port: u16,
    /// A unix socket to use instead of host:port (a node's own mariadbd: a replica refuses TCP logins).
    pub socket: Option<std::path::PathBuf>,
}

/// The write endpoint: the proxy read-write port of the node serving the newest master term (by the nodes'
/// status files, as `paxsql cluster status` reads them).
pub fn write_endpoint(nodes: &[NodeLayout], view: &ClusterView) -> Option<Endpoint> {
    // Through the master node's proxy read-write port, as an application would connect: the proxy forwards only
    // while that node serves under a valid lease and cuts its connections when the term ends.
    let m = view.master()?;
    let n = nodes.iter().find(|n| n.id == m)?;
    Some(Endpoint { node: n.id, host: n.host.clone(), port: n.proxy_rw_port, socket: None })
}

/// A node's own mariadbd (for reads checked on every node), over its unix socket: only the master's takes TCP
/// logins.
pub fn node_endpoint(n: &NodeLayout) -> Endpoint {
    Endpoint { node: n.id, host: n.host.clone(), port: n.mariadb_port, socket: Some(n.dir.join("run/mysqld.sock")) }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Fail,
    Unknown,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCounts {
    pub ok: u64,
    pub fail: u64,
    pub unknown: u64,
}

impl OpCounts {
    pub fn add(&mut self, o: Outcome) {
        match o {
            Outcome::Ok => self.ok += 1,
            Outcome::Fail => self.fail += 1,
            Outcome::Unknown => self.unknown += 1,
        }
    }
    pub fn merge(&mut self, other: OpCounts) {
        self.ok += other.ok;
        self.fail += other.fail;
        self.unknown += other.unknown;
    }
}

/// What every client shares.
#[derive(Clone)]
pub struct ClientContext {
    pub app: AppAccount,
    pub endpoint: watch::Receiver<Option<Endpoint>>,
    /// The clock every history uses.
    pub epoch: Instant,
    pub stop: Arc<AtomicBool>,
    pub op_timeout: Duration,
    /// Table name suffix of this schedule.
    pub suffix: String,
}

impl ClientContext {
    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

pub async fn connect(app: &AppAccount, ep: &Endpoint, timeout: Duration) -> Result<Conn, String> {
    let opts = OptsBuilder::default()
        .ip_or_hostname(ep.host.clone())
        .tcp_port(ep.port)
        .user(Some(app.user.clone()))
        .pass(Some(app.password.clone()))
        .db_name(Some(app.database.clone()))
        .socket(ep.socket.as_ref().map(|p| p.to_string_lossy().into_owned()))
        // Without one, stay on TCP inside the namespace (mysql_async would switch to a unix socket on loopback).
        .prefer_socket(false)
        // A proxy port of a cluster with client TLS: verified TLS, as an application would connect.
        .ssl_opts(
            app.tls_ca
                .as_ref()
                .filter(|_| ep.socket.is_none())
                .map(|ca| mysql_async::SslOpts::default().with_root_certs(vec![ca.clone().into()])),
        );
    match tokio::time::timeout(timeout, Conn::new(opts)).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("connect timed out".into()),
    }
}

/// Server errors after which nothing was committed.
fn refused_before_commit(e: &mysql_async::Error) -> bool {
    // 1290/1836 read-only, 1792 read-only transaction, 1213 deadlock, 1205 lock wait timeout, 1045 access denied.
    matches!(e, mysql_async::Error::Server(s) if [1290, 1836, 1792, 1213, 1205, 1045].contains(&s.code))
}

/// A client's connection, reopened when the write endpoint moves or after any error.
struct Session {
    ep: Option<Endpoint>,
    conn: Option<Conn>,
}

impl Session {
    fn new() -> Session {
        Session { ep: None, conn: None }
    }

    /// A connection to the current write endpoint, or None (no master known / cannot connect: no op is issued).
    async fn conn(&mut self, ctx: &ClientContext) -> Option<(&mut Conn, u64)> {
        let want = ctx.endpoint.borrow().clone();
        let Some(want) = want else {
            self.conn = None;
            tokio::time::sleep(Duration::from_millis(50)).await;
            return None;
        };
        if self.ep.as_ref() != Some(&want) || self.conn.is_none() {
            self.conn = None;
            match connect(&ctx.app, &want, Duration::from_secs(1)).await {
                Ok(c) => {
                    self.conn = Some(c);
                    self.ep = Some(want.clone());
                }
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    return None;
                }
            }
        }
        self.conn.as_mut().map(|c| (c, want.node))
    }
}

/// Runs `body` (which flags in `committing` when it sends the statement that may commit) with the op timeout,
/// and classifies how it ended. On anything but success the caller drops the connection.
async fn classify<T, F>(timeout: Duration, committing: &AtomicBool, body: F) -> (Outcome, Option<T>)
where
    F: std::future::Future<Output = Result<T, mysql_async::Error>>,
{
    let r = tokio::time::timeout(timeout, body).await;
    let sent = committing.load(Ordering::Relaxed);
    match r {
        Ok(Ok(v)) => (Outcome::Ok, Some(v)),
        Ok(Err(e)) => {
            if refused_before_commit(&e) || !sent {
                (Outcome::Fail, None)
            } else {
                (Outcome::Unknown, None)
            }
        }
        Err(_) => (if sent { Outcome::Unknown } else { Outcome::Fail }, None),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Bank

pub const BANK_ACCOUNTS: i64 = 5;
pub const BANK_INITIAL: i64 = 100;

#[derive(Debug, Default)]
pub struct BankResult {
    pub counts: OpCounts,
    pub reads: u64,
    /// Reads that broke the invariant: (node, sum, min).
    pub violations: Vec<String>,
}

pub fn bank_setup(suffix: &str) -> Vec<String> {
    let rows: Vec<String> = (0..BANK_ACCOUNTS).map(|i| format!("({i}, {BANK_INITIAL})")).collect();
    vec![
        format!("CREATE TABLE IF NOT EXISTS bank_{suffix} (id INT PRIMARY KEY, balance BIGINT NOT NULL) ENGINE=InnoDB"),
        format!("INSERT IGNORE INTO bank_{suffix} VALUES {}", rows.join(",")),
    ]
}

pub fn bank_check_sql(suffix: &str) -> String {
    format!("SELECT CAST(SUM(balance) AS SIGNED), MIN(balance), COUNT(*) FROM bank_{suffix}")
}

/// SUM, MIN (NULL on an empty table) and COUNT of the accounts.
pub type BankRow = (Option<i64>, Option<i64>, i64);

/// Checks one bank read: the total never changes and no account is negative.
pub fn bank_violation(node: u64, row: BankRow) -> Option<String> {
    let (sum, min, count) = (row.0.unwrap_or(0), row.1.unwrap_or(0), row.2);
    let want = BANK_ACCOUNTS * BANK_INITIAL;
    (sum != want || min < 0 || count != BANK_ACCOUNTS)
        .then(|| format!("node {node}: total {sum} (want {want}), min {min}, accounts {count}"))
}

/// One transfer client.
pub async fn bank_client(ctx: ClientContext, seed: u64) -> BankResult {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut res = BankResult::default();
    let mut session = Session::new();
    let t = format!("bank_{}", ctx.suffix);
    while !ctx.stopped() {
        let Some((conn, _node)) = session.conn(&ctx).await else { continue };
        let from = rng.gen_range(0..BANK_ACCOUNTS);
        let to = (from + rng.gen_range(1..BANK_ACCOUNTS)) % BANK_ACCOUNTS;
        let amount = rng.gen_range(1..=30i64);
        let committing = AtomicBool::new(false);
        let body = async {
            conn.query_drop("BEGIN").await?;
            let rows: Vec<(i64, i64)> = conn
                .exec(format!("SELECT id, balance FROM {t} WHERE id IN (?, ?) ORDER BY id FOR UPDATE"), (from, to))
                .await?;
            let balance = rows.iter().find(|r| r.0 == from).map(|r| r.1).unwrap_or(0);
            if balance >= amount {
                conn.exec_drop(format!("UPDATE {t} SET balance = balance - ? WHERE id = ?"), (amount, from)).await?;
                conn.exec_drop(format!("UPDATE {t} SET balance = balance + ? WHERE id = ?"), (amount, to)).await?;
            }
            committing.store(true, Ordering::Relaxed);
            conn.query_drop("COMMIT").await
        };
        let (outcome, _) = classify(ctx.op_timeout, &committing, body).await;
        if outcome != Outcome::Ok {
            session.conn = None;
        }
        res.counts.add(outcome);
    }
    res
}

/// One transfer client on the paxsql client library, given every node's proxy read-write port: the library finds
/// the master itself, rides out failovers, and retries a transaction only where nothing can have committed.
pub async fn bank_library_client(ctx: ClientContext, seed: u64, endpoints: Vec<String>) -> BankResult {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut res = BankResult::default();
    let mut builder = paxsql_client::Client::builder()
        .endpoints(endpoints)
        .user(ctx.app.user.clone())
        .password(ctx.app.password.clone())
        .database(ctx.app.database.clone())
        .connect_timeout(Duration::from_secs(1))
        .failover_deadline(ctx.op_timeout);
    if let Some(ca) = &ctx.app.tls_ca {
        builder = builder.tls_ca(ca);
    }
    let client = match builder.build() {
        Ok(c) => c,
        Err(e) => {
            res.violations.push(format!("client library refused its configuration: {e}"));
            return res;
        }
    };
    let t = format!("bank_{}", ctx.suffix);
    while !ctx.stopped() {
        let from = rng.gen_range(0..BANK_ACCOUNTS);
        let to = (from + rng.gen_range(1..BANK_ACCOUNTS)) % BANK_ACCOUNTS;
        let amount = rng.gen_range(1..=30i64);
        let select = format!("SELECT id, balance FROM {t} WHERE id IN (?, ?) ORDER BY id FOR UPDATE");
        let debit = format!("UPDATE {t} SET balance = balance - ? WHERE id = ?");
        let credit = format!("UPDATE {t} SET balance = balance + ? WHERE id = ?");
        let body = client.run_transaction(async move |tx| {
            let rows: Vec<(i64, i64)> = tx.exec(&select, (from, to)).await?;
            let balance = rows.iter().find(|r| r.0 == from).map(|r| r.1).unwrap_or(0);
            if balance >= amount {
                tx.exec_drop(&debit, (amount, from)).await?;
                tx.exec_drop(&credit, (amount, to)).await?;
            }
            Ok(())
        });
        // The library's own deadline ends a failover wait; this bound only catches a request that hangs, whose
        // COMMIT may have been sent.
        let outcome = match tokio::time::timeout(ctx.op_timeout * 2, body).await {
            Ok(Ok(())) => Outcome::Ok,
            Ok(Err(paxsql_client::Error::OutcomeUnknown { .. })) | Err(_) => Outcome::Unknown,
            Ok(Err(paxsql_client::Error::Driver(_))) => Outcome::Unknown,
            Ok(Err(_)) => Outcome::Fail,
        };
        if outcome == Outcome::Fail {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        res.counts.add(outcome);
    }
    res
}

/// Reads the bank on every node (their own mariadbd, replicas too) about every 200 ms.
pub async fn bank_reader(ctx: ClientContext, nodes: Vec<NodeLayout>) -> BankResult {
    let mut res = BankResult::default();
    let mut conns: BTreeMap<u64, Conn> = BTreeMap::new();
    let sql = bank_check_sql(&ctx.suffix);
    while !ctx.stopped() {
        for n in &nodes {
            if !conns.contains_key(&n.id) {
                if let Ok(c) = connect(&ctx.app, &node_endpoint(n), Duration::from_millis(500)).await {
                    conns.insert(n.id, c);
                }
            }
            let Some(c) = conns.get_mut(&n.id) else { continue };
            match tokio::time::timeout(Duration::from_secs(1), c.query_first::<BankRow, _>(sql.as_str())).await {
                // A replica that has not yet applied the accounts' creation has nothing to check.
                Ok(Ok(Some((_, _, 0)))) => {}
                Ok(Ok(Some(row))) => {
                    res.reads += 1;
                    if let Some(v) = bank_violation(n.id, row) {
                        res.violations.push(format!("during the run: {v}"));
                    }
                }
                _ => {
                    conns.remove(&n.id);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    res
}

// ---------------------------------------------------------------------------------------------------------------
// Registers

pub const REGISTER_KEYS: i64 = 4;

/// One register operation as recorded.
#[derive(Clone, Debug)]
pub struct RegisterRecord {
    pub client: u64,
    pub key: i64,
    pub entry: RegisterEntry,
    /// A plain autocommit SELECT (not fenced through the log): checked separately, informational.
    pub plain_read: bool,
    pub node: u64,
}

#[derive(Debug, Default)]
pub struct RegisterResult {
    pub counts: OpCounts,
    pub history: Vec<RegisterRecord>,
}

pub fn register_setup(suffix: &str) -> Vec<String> {
    let rows: Vec<String> = (0..REGISTER_KEYS).map(|k| format!("({k}, 0, 0)")).collect();
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS reg_{suffix} (k INT PRIMARY KEY, v BIGINT NOT NULL, n BIGINT NOT NULL) \
             ENGINE=InnoDB"
        ),
        format!("INSERT IGNORE INTO reg_{suffix} VALUES {}", rows.join(",")),
    ]
}

/// One register client. Reads and compare-and-sets run in a transaction that also bumps the row's counter, so an
/// acknowledged read went through the global log like a write (a stale master cannot acknowledge it). Writes use
/// unique values so that a read names the write it saw.
pub async fn register_client(ctx: ClientContext, client: u64, seed: u64) -> RegisterResult {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut res = RegisterResult::default();
    let mut session = Session::new();
    let t = format!("reg_{}", ctx.suffix);
    let mut last_seen: BTreeMap<i64, i64> = BTreeMap::new();
    let mut seq = 0i64;
    while !ctx.stopped() {
        let Some((conn, node)) = session.conn(&ctx).await else { continue };
        let key = rng.gen_range(0..REGISTER_KEYS);
        seq += 1;
        let unique = (client as i64 + 1) * 1_000_000 + seq;
        let roll = rng.gen_range(0..100);
        let (op, plain) = match roll {
            0..=29 => (RegisterOp::Read, false),
            30..=39 => (RegisterOp::Read, true),
            40..=69 => (RegisterOp::Write(unique), false),
            _ => (RegisterOp::Cas { expected: *last_seen.get(&key).unwrap_or(&0), new: unique }, false),
        };
        let committing = AtomicBool::new(false);
        let invoke_ns = ctx.now_ns();
        let body = async {
            match op {
                RegisterOp::Read if plain => {
                    committing.store(true, Ordering::Relaxed);
                    let v: Option<i64> = conn.exec_first(format!("SELECT v FROM {t} WHERE k = ?"), (key,)).await?;
                    Ok(RegisterOutcome::ReadOk(v.unwrap_or(i64::MIN)))
                }
                RegisterOp::Read => {
                    conn.query_drop("BEGIN").await?;
                    let v: Option<i64> =
                        conn.exec_first(format!("SELECT v FROM {t} WHERE k = ? FOR UPDATE"), (key,)).await?;
                    conn.exec_drop(format!("UPDATE {t} SET n = n + 1 WHERE k = ?"), (key,)).await?;
                    committing.store(true, Ordering::Relaxed);
                    conn.query_drop("COMMIT").await?;
                    Ok(RegisterOutcome::ReadOk(v.unwrap_or(i64::MIN)))
                }
                RegisterOp::Write(v) => {
                    committing.store(true, Ordering::Relaxed);
                    conn.exec_drop(format!("UPDATE {t} SET v = ?, n = n + 1 WHERE k = ?"), (v, key)).await?;
                    Ok(RegisterOutcome::WriteOk)
                }
                RegisterOp::Cas { expected, new } => {
                    conn.query_drop("BEGIN").await?;
                    let v: Option<i64> =
                        conn.exec_first(format!("SELECT v FROM {t} WHERE k = ? FOR UPDATE"), (key,)).await?;
                    let swap = v == Some(expected);
                    if swap {
                        conn.exec_drop(format!("UPDATE {t} SET v = ?, n = n + 1 WHERE k = ?"), (new, key)).await?;
                    } else {
                        conn.exec_drop(format!("UPDATE {t} SET n = n + 1 WHERE k = ?"), (key,)).await?;
                    }
                    committing.store(true, Ordering::Relaxed);
                    conn.query_drop("COMMIT").await?;
                    Ok(RegisterOutcome::CasOk(swap))
                }
            }
        };
        let (outcome, result) = classify(ctx.op_timeout, &committing, body).await;
        if outcome != Outcome::Ok {
            session.conn = None;
        }
        let complete_ns = ctx.now_ns();
        res.counts.add(outcome);
        let recorded = match (outcome, result) {
            (Outcome::Ok, Some(r)) => {
                match (op, r) {
                    (_, RegisterOutcome::ReadOk(v)) => {
                        last_seen.insert(key, v);
                    }
                    (RegisterOp::Write(v), _) | (RegisterOp::Cas { new: v, .. }, RegisterOutcome::CasOk(true)) => {
                        last_seen.insert(key, v);
                    }
                    _ => {}
                }
                Some(r)
            }
            // A read that did not answer constrains nothing; a failed op took no effect.
            (Outcome::Unknown, _) if op != RegisterOp::Read => Some(RegisterOutcome::Unknown),
            _ => None,
        };
        if let Some(outcome) = recorded {
            let entry = RegisterEntry { op, outcome, invoke_ns, complete_ns };
            res.history.push(RegisterRecord { client, key, entry, plain_read: plain, node });
        }
    }
    res
}

// ---------------------------------------------------------------------------------------------------------------
// Appends

#[derive(Clone, Debug)]
pub struct AppendRecord {
    pub client: u64,
    pub value: i64,
    pub invoke_ns: u64,
    pub complete_ns: u64,
    pub outcome: Outcome,
}

#[derive(Debug, Default)]
pub struct AppendResult {
    pub counts: OpCounts,
    pub history: Vec<AppendRecord>,
}

pub fn append_setup(suffix: &str) -> Vec<String> {
    vec![format!(
        "CREATE TABLE IF NOT EXISTS app_{suffix} (id BIGINT AUTO_INCREMENT PRIMARY KEY, client INT NOT NULL, \
         val BIGINT NOT NULL, UNIQUE KEY (client, val)) ENGINE=InnoDB"
    )]
}

pub fn append_read_sql(suffix: &str) -> String {
    format!("SELECT client, val FROM app_{suffix} ORDER BY id")
}

/// One append client: INSERTs unique (client, value) rows, each an autocommit statement.
pub async fn append_client(ctx: ClientContext, client: u64) -> AppendResult {
    let mut res = AppendResult::default();
    let mut session = Session::new();
    let t = format!("app_{}", ctx.suffix);
    let mut value = 0i64;
    while !ctx.stopped() {
        let Some((conn, _node)) = session.conn(&ctx).await else { continue };
        value += 1;
        let committing = AtomicBool::new(true);
        let invoke_ns = ctx.now_ns();
        let body = conn.exec_drop(format!("INSERT INTO {t} (client, val) VALUES (?, ?)"), (client, value));
        let (outcome, _) = classify(ctx.op_timeout, &committing, body).await;
        if outcome != Outcome::Ok {
            session.conn = None;
        }
        res.counts.add(outcome);
        res.history.push(AppendRecord { client, value, invoke_ns, complete_ns: ctx.now_ns(), outcome });
    }
    res
}

/// Checks the final append log of one node against the history: every acknowledged append present exactly once,
/// no refused append present, nothing never attempted, and the log order respects real time (an append
/// acknowledged before another was invoked comes first). Returns the problems found.
pub fn check_appends(history: &[AppendRecord], log: &[(u64, i64)]) -> Vec<String> {
    let mut problems = Vec::new();
    let by_key: BTreeMap<(u64, i64), &AppendRecord> = history.iter().map(|r| ((r.client, r.value), r)).collect();
    let mut position: BTreeMap<(u64, i64), usize> = BTreeMap::new();
    for (i, k) in log.iter().enumerate() {
        if position.insert(*k, i).is_some() {
            problems.push(format!("append {k:?} present twice"));
        }
        match by_key.get(k) {
            None => problems.push(format!("append {k:?} present but never attempted")),
            Some(r) if r.outcome == Outcome::Fail => problems.push(format!("refused append {k:?} present")),
            _ => {}
        }
    }
    for r in history.iter().filter(|r| r.outcome == Outcome::Ok) {
        if !position.contains_key(&(r.client, r.value)) {
            problems.push(format!("acknowledged append ({}, {}) lost", r.client, r.value));
        }
    }
    // Real-time order: walking the log, an entry completed before an earlier entry was even invoked is a violation.
    let mut max_invoke: Option<(u64, (u64, i64))> = None;
    for k in log {
        let Some(r) = by_key.get(k).filter(|r| r.outcome == Outcome::Ok) else { continue };
        if let Some((inv, earlier)) = max_invoke {
            if r.complete_ns < inv {
                problems
                    .push(format!("append {k:?} acknowledged before {earlier:?} was invoked, but ordered after it"));
            }
        }
        if max_invoke.is_none_or(|(inv, _)| r.invoke_ns > inv) {
            max_invoke = Some((r.invoke_ns, *k));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(client: u64, value: i64, inv: u64, done: u64, outcome: Outcome) -> AppendRecord {
        AppendRecord { client, value, invoke_ns: inv, complete_ns: done, outcome }
    }

    #[test]
    fn append_log_checks() {
        let h = vec![
            rec(1, 1, 0, 10, Outcome::Ok),
            rec(2, 1, 5, 15, Outcome::Ok),
            rec(1, 2, 20, 30, Outcome::Unknown),
            rec(2, 2, 20, 25, Outcome::Fail),
        ];
        assert!(check_appends(&h, &[(2, 1), (1, 1)]).is_empty(), "concurrent appends in either order");
        assert!(check_appends(&h, &[(1, 1), (2, 1), (1, 2)]).is_empty(), "unknown may be present");
        assert!(check_appends(&h, &[(1, 1)]).iter().any(|p| p.contains("lost")));
        assert!(check_appends(&h, &[(1, 1), (2, 1), (2, 2)]).iter().any(|p| p.contains("refused")));
        assert!(check_appends(&h, &[(1, 1), (1, 1), (2, 1)]).iter().any(|p| p.contains("twice")));
        assert!(check_appends(&h, &[(1, 1), (2, 1), (9, 9)]).iter().any(|p| p.contains("never attempted")));
        let ordered = vec![rec(1, 1, 0, 10, Outcome::Ok), rec(1, 2, 11, 20, Outcome::Ok)];
        assert!(check_appends(&ordered, &[(1, 2), (1, 1)]).iter().any(|p| p.contains("ordered after")));
    }

    #[test]
    fn bank_invariant() {
        assert_eq!(bank_violation(1, (Some(500), Some(0), 5)), None);
        assert!(bank_violation(1, (Some(499), Some(0), 5)).is_some());
        assert!(bank_violation(1, (Some(500), Some(-1), 5)).is_some());
        assert!(bank_violation(1, (None, None, 0)).is_some(), "accounts missing at the end");
    }
}

/// What the RW-port probe saw.
#[derive(Debug, Default)]
pub struct ProbeResult {
    /// Connections answered by a writable server (a master).
    pub answers: u64,
    /// Connections refused or held past the timeout (no master confirmed: allowed).
    pub refused: u64,
    /// Connections a RW port handed to a read-only server: a route that outlived its master.
    pub violations: Vec<String>,
}

/// A fresh connection through every node's RW port about every 50 ms, each asking whether the server that answers
/// is writable. A RW port may hold a connection or refuse it while no master is confirmed, never hand it to a
/// server that does not serve as master (a restarted former master, a replica).
pub async fn rw_probe(app: AppAccount, nodes: Vec<NodeLayout>, stop: Arc<AtomicBool>) -> ProbeResult {
    let probes: Vec<_> = nodes
        .into_iter()
        .map(|n| {
            let (app, stop) = (app.clone(), stop.clone());
            tokio::spawn(async move {
                let ep = Endpoint { node: n.id, host: n.host.clone(), port: n.proxy_rw_port, socket: None };
                let mut seen = ProbeResult::default();
                while !stop.load(Ordering::Relaxed) {
                    // The proxy holds a connection up to 5 s during an election.
                    match connect(&app, &ep, Duration::from_secs(7)).await {
                        Ok(mut c) => {
                            let row: Result<Option<(u8, u16)>, _> = c.query_first("SELECT @@read_only, @@port").await;
                            match row {
                                Ok(Some((0, _))) => seen.answers += 1,
                                Ok(Some((_, port))) => seen.violations.push(format!(
                                    "RW port of node {} handed a connection to a read-only server (mariadbd port {port})",
                                    n.id
                                )),
                                _ => seen.refused += 1,
                            }
                            let _ = c.disconnect().await;
                        }
                        Err(_) => seen.refused += 1,
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                seen
            })
        })
        .collect();
    let mut all = ProbeResult::default();
    for p in probes {
        if let Ok(seen) = p.await {
            all.answers += seen.answers;
            all.refused += seen.refused;
            all.violations.extend(seen.violations);
        }
    }
    all
}
