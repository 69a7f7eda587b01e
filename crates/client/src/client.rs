//! The client: endpoints, master resolution, a pool per endpoint, and the retrying helpers.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql_async::prelude::{FromRow, Queryable};
use mysql_async::{ClientIdentity, Conn, OptsBuilder, Params, Pool, PoolConstraints, PoolOpts, SslOpts};

use crate::{Error, Stage, Transaction};

/// Default bound on riding out one failover (from an operation's first failure).
pub const DEFAULT_FAILOVER_DEADLINE: Duration = Duration::from_secs(10);
/// Default bound on one connection attempt (TCP connect, handshake, login) to one endpoint.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default first pause between two rounds over the endpoints; it doubles up to [`DEFAULT_BACKOFF_MAX`].
pub const DEFAULT_BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Default longest pause between two rounds over the endpoints.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_millis(1000);
/// Default cap on pooled connections per endpoint.
pub const DEFAULT_POOL_MAX: usize = 16;

/// Builds a [`Client`]. Only `endpoint` (at least one) is required.
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    endpoints: Vec<String>,
    user: Option<String>,
    password: Option<String>,
    database: Option<String>,
    failover_deadline: Duration,
    connect_timeout: Duration,
    backoff_min: Duration,
    backoff_max: Duration,
    pool_max: usize,
    /// The CA the nodes' certificates are checked against; set, every connection runs TLS.
    tls_ca: Option<std::path::PathBuf>,
    /// This client's certificate chain and key.
    tls_identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            endpoints: Vec::new(),
            user: None,
            password: None,
            database: None,
            failover_deadline: DEFAULT_FAILOVER_DEADLINE,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            backoff_min: DEFAULT_BACKOFF_MIN,
            backoff_max: DEFAULT_BACKOFF_MAX,
            pool_max: DEFAULT_POOL_MAX,
            tls_ca: None,
            tls_identity: None,
        }
    }
}

impl ClientBuilder {
    /// Adds a node's read-write endpoint, `host:port` (a paxsql proxy's RW port, or any MySQL server whose
    /// `@@read_only` tells whether it is the master).
    pub fn endpoint(mut self, host_port: impl Into<String>) -> Self {
        self.endpoints.push(host_port.into());
        self
    }

    /// Adds several endpoints.
    pub fn endpoints<I: IntoIterator<Item = S>, S: Into<String>>(mut self, host_ports: I) -> Self {
        self.endpoints.extend(host_ports.into_iter().map(Into::into));
        self
    }

    /// Account name.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Account password.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Default database of every connection.
    pub fn database(mut self, database: impl Into<String>) -> Self {
        self.database = Some(database.into());
        self
    }

    /// How long one operation keeps looking for a master after its first failure (default 10 s).
    pub fn failover_deadline(mut self, deadline: Duration) -> Self {
        self.failover_deadline = deadline;
        self
    }

    /// Bound on one connection attempt to one endpoint (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Pause between rounds over the endpoints: starts at `min`, doubles up to `max` (default 50 ms .. 1 s).
    pub fn backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff_min = min;
        self.backoff_max = max;
        self
    }

    /// Cap on pooled connections per endpoint (default 16).
    pub fn pool_max(mut self, max: usize) -> Self {
        self.pool_max = max;
        self
    }

    /// Connects with TLS and verifies each node's certificate against the CA in `ca` (PEM) and the host name of
    /// its endpoint. A paxsql proxy terminates TLS itself, so the certificate checked is the dialled node's,
    /// whichever node's mariadbd serves behind it: a failover needs no new configuration.
    pub fn tls_ca(mut self, ca: impl Into<std::path::PathBuf>) -> Self {
        self.tls_ca = Some(ca.into());
        self
    }

    /// This client's certificate chain and key (PEM), for servers that ask for one. Needs [`ClientBuilder::tls_ca`].
    pub fn tls_identity(mut self, cert: impl Into<std::path::PathBuf>, key: impl Into<std::path::PathBuf>) -> Self {
        self.tls_identity = Some((cert.into(), key.into()));
        self
    }

    /// Checks the configuration and builds the client. Connects lazily: the first operation finds the master.
    pub fn build(self) -> Result<Client, Error> {
        if self.endpoints.is_empty() {
            return Err(Error::InvalidConfig("at least one endpoint (host:port) is needed".into()));
        }
        if self.pool_max == 0 {
            return Err(Error::InvalidConfig("pool_max must be at least 1".into()));
        }
        if self.backoff_min.is_zero() || self.backoff_min > self.backoff_max {
            return Err(Error::InvalidConfig("backoff: need 0 < min <= max".into()));
        }
        let ssl_opts = match (&self.tls_ca, &self.tls_identity) {
            (None, Some(_)) => {
                return Err(Error::InvalidConfig("tls_identity needs tls_ca: the CA that signs the nodes".into()))
            }
            (Some(ca), identity) => {
                if let Err(e) = std::fs::metadata(ca) {
                    return Err(Error::InvalidConfig(format!("tls_ca {}: {e}", ca.display())));
                }
                let identity =
                    identity.as_ref().map(|(cert, key)| ClientIdentity::new(cert.clone().into(), key.clone().into()));
                Some(SslOpts::default().with_root_certs(vec![ca.clone().into()]).with_client_identity(identity))
            }
            (None, None) => None,
        };
        let mut endpoints = Vec::with_capacity(self.endpoints.len());
        for addr in &self.endpoints {
            let (host, port) = split_host_port(addr)?;
            let constraints = PoolConstraints::new(0, self.pool_max)
                .ok_or_else(|| Error::InvalidConfig(format!("pool_max {} is not usable", self.pool_max)))?;
            let opts = OptsBuilder::default()
                .ip_or_hostname(host)
                .tcp_port(port)
                .user(self.user.clone())
                .pass(self.password.clone())
                .db_name(self.database.clone())
                // On loopback mysql_async would otherwise switch to the server's unix socket, around the proxy.
                .prefer_socket(false)
                .ssl_opts(ssl_opts.clone())
                .pool_opts(PoolOpts::default().with_constraints(constraints));
            endpoints.push(Endpoint { addr: addr.clone(), opts });
        }
        let state = State { active: None, last_good: 0, pools: vec![None; endpoints.len()], lost: false, failovers: 0 };
        Ok(Client {
            inner: Arc::new(Inner {
                endpoints,
                failover_deadline: self.failover_deadline,
                connect_timeout: self.connect_timeout,
                backoff_min: self.backoff_min,
                backoff_max: self.backoff_max,
                state: Mutex::new(state),
            }),
        })
    }
}

fn split_host_port(addr: &str) -> Result<(String, u16), Error> {
    let bad = || Error::InvalidConfig(format!("endpoint {addr:?} is not host:port"));
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_string(), port.parse().map_err(|_| bad())?))
}

/// The result of a write: what the server's OK packet said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteResult {
    pub affected_rows: u64,
    pub last_insert_id: Option<u64>,
}

/// A handle on a paxsql cluster; cheap to clone, share it between tasks.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Endpoint {
    addr: String,
    opts: OptsBuilder,
}

struct Inner {
    endpoints: Vec<Endpoint>,
    failover_deadline: Duration,
    connect_timeout: Duration,
    backoff_min: Duration,
    backoff_max: Duration,
    state: Mutex<State>,
}

struct State {
    /// The endpoint known to lead to the master, used without a check until it fails.
    active: Option<usize>,
    /// Where the next resolution starts: the last endpoint that led to the master.
    last_good: usize,
    pools: Vec<Option<Pool>>,
    /// The master was lost and not found again yet.
    lost: bool,
    failovers: u64,
}

/// One operation's budget for riding out a failover.
struct Retry {
    first_failure: Option<Instant>,
    attempts: u32,
    backoff: Duration,
    last_error: String,
}

impl Retry {
    fn new(inner: &Inner) -> Retry {
        Retry { first_failure: None, attempts: 0, backoff: inner.backoff_min, last_error: String::new() }
    }

    fn note(&mut self, what: impl std::fmt::Display) {
        self.first_failure.get_or_insert_with(Instant::now);
        self.attempts += 1;
        self.last_error = what.to_string();
    }

    /// Sleeps before the next round, or gives up once the deadline has passed.
    async fn pause(&mut self, inner: &Inner) -> Result<(), Error> {
        let started = *self.first_failure.get_or_insert_with(Instant::now);
        let waited = started.elapsed();
        if waited >= inner.failover_deadline {
            return Err(Error::NoMaster {
                waited_ms: waited.as_millis() as u64,
                attempts: self.attempts,
                last_error: std::mem::take(&mut self.last_error),
            });
        }
        tokio::time::sleep(self.backoff.min(inner.failover_deadline - waited)).await;
        self.backoff = (self.backoff * 2).min(inner.backoff_max);
        Ok(())
    }
}

impl Client {
    /// Starts a builder.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The endpoint currently used for the master, if one is known.
    pub fn active_endpoint(&self) -> Option<String> {
        let st = self.lock();
        st.active.map(|i| self.inner.endpoints[i].addr.clone())
    }

    /// How many times the client lost its way to the master (a broken connection, a read-only answer, a proxy
    /// without master) and found a master again, on the same endpoint or another.
    pub fn failovers(&self) -> u64 {
        self.lock().failovers
    }

    /// A pooled connection on the master. Only getting it is retried; what the caller sends on it is the
    /// caller's business (prefer [`Client::execute`], [`Client::run_transaction`] and [`Client::query`]).
    pub async fn get_conn(&self) -> Result<Conn, Error> {
        let mut retry = Retry::new(&self.inner);
        Ok(self.master_conn(&mut retry).await?.1)
    }

    /// Runs one autocommit write on the master.
    ///
    /// Retried when the statement provably did not run (no connection, or refused because the server is
    /// read-only or the proxy knows no master). A connection that breaks after the statement was sent gives
    /// [`Error::OutcomeUnknown`], never a retry.
    pub async fn execute(&self, sql: &str, params: impl Into<Params>) -> Result<WriteResult, Error> {
        let params = params.into();
        let mut retry = Retry::new(&self.inner);
        loop {
            let (i, mut conn) = self.master_conn(&mut retry).await?;
            let endpoint = self.addr(i);
            let err = match conn.exec_drop(sql, params.clone()).await {
                Ok(()) => {
                    return Ok(WriteResult {
                        affected_rows: conn.affected_rows(),
                        last_insert_id: conn.last_insert_id(),
                    })
                }
                Err(e) => Error::after_send(&endpoint, Stage::Statement, e),
            };
            self.after_failure(i, &err);
            if !err.is_transaction_retryable() {
                return Err(err);
            }
            retry.note(&err);
            retry.pause(&self.inner).await?;
        }
    }

    /// Runs a read on the master and collects the rows. Reads change nothing, so every failure of the
    /// connection or the master is retried until the failover deadline.
    pub async fn query<T>(&self, sql: &str, params: impl Into<Params>) -> Result<Vec<T>, Error>
    where
        T: FromRow + Send + 'static,
    {
        let params = params.into();
        self.read(async |conn, endpoint| {
            conn.exec(sql, params.clone()).await.map_err(|e| Error::in_transaction(endpoint, e))
        })
        .await
    }

    /// Like [`Client::query`], the first row only.
    pub async fn query_first<T>(&self, sql: &str, params: impl Into<Params>) -> Result<Option<T>, Error>
    where
        T: FromRow + Send + 'static,
    {
        let params = params.into();
        self.read(async |conn, endpoint| {
            conn.exec_first(sql, params.clone()).await.map_err(|e| Error::in_transaction(endpoint, e))
        })
        .await
    }

    async fn read<T>(&self, mut run: impl AsyncFnMut(&mut Conn, &str) -> Result<T, Error>) -> Result<T, Error> {
        let mut retry = Retry::new(&self.inner);
        loop {
            let (i, mut conn) = self.master_conn(&mut retry).await?;
            let endpoint = self.addr(i);
            match run(&mut conn, &endpoint).await {
                Ok(v) => return Ok(v),
                Err(err) => {
                    self.after_failure(i, &err);
                    if !err.is_transaction_retryable() {
                        return Err(err);
                    }
                    retry.note(&err);
                    retry.pause(&self.inner).await?;
                }
            }
        }
    }

    /// Runs `body` inside one transaction on the master and commits it.
    ///
    /// The whole transaction (a fresh `START TRANSACTION`, `body` again, `COMMIT`) is retried when it failed
    /// before `COMMIT` was sent — the server then rolled it back — or when the server refused or rolled back
    /// the `COMMIT` itself. A connection that breaks after `COMMIT` was sent gives [`Error::OutcomeUnknown`].
    /// `body` may therefore run more than once: keep side effects outside the database out of it. An error
    /// `body` returns that is not about the connection or the master (see [`Error::is_transaction_retryable`])
    /// rolls back and is returned as is; use [`Error::abort`] for the application's own reasons.
    /// No DDL inside `body`: MariaDB commits implicitly before and after a DDL statement.
    pub async fn run_transaction<T, F>(&self, mut body: F) -> Result<T, Error>
    where
        F: AsyncFnMut(&mut Transaction) -> Result<T, Error>,
    {
        let mut retry = Retry::new(&self.inner);
        loop {
            let (i, conn) = self.master_conn(&mut retry).await?;
            let mut tx = Transaction::new(conn, self.addr(i));
            let result = match tx.begin().await {
                Ok(()) => match body(&mut tx).await {
                    Ok(value) => tx.commit().await.map(|()| value),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            let err = match result {
                Ok(value) => return Ok(value),
                Err(e) => e,
            };
            match err {
                // A broken connection goes with its pool (after_failure); the server ends its transaction.
                Error::ConnectionLost { .. } | Error::OutcomeUnknown { .. } => drop(tx),
                _ => tx.rollback().await,
            }
            self.after_failure(i, &err);
            if !err.is_transaction_retryable() {
                return Err(err);
            }
            tracing::debug!(endpoint = %self.addr(i), error = %err, "paxsql-client: transaction rolled back, retrying");
            retry.note(&err);
            retry.pause(&self.inner).await?;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock leaves consistent data (plain assignments): keep going.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn addr(&self, i: usize) -> String {
        self.inner.endpoints[i].addr.clone()
    }

    fn pool(&self, i: usize) -> Pool {
        let mut st = self.lock();
        st.pools[i].get_or_insert_with(|| Pool::new(self.inner.endpoints[i].opts.clone())).clone()
    }

    /// Drops endpoint `i`'s pool (its connections are suspect) and stops treating it as the master.
    fn forget(&self, i: usize) {
        let mut st = self.lock();
        st.pools[i] = None;
        if st.active == Some(i) {
            st.active = None;
            st.lost = true;
        }
    }

    fn after_failure(&self, i: usize, err: &Error) {
        match err {
            Error::NotMaster { .. } | Error::ConnectionLost { .. } | Error::OutcomeUnknown { .. } => {
                tracing::info!(endpoint = %self.addr(i), error = %err, "paxsql-client: leaving endpoint");
                self.forget(i);
            }
            _ => {}
        }
    }

    fn set_active(&self, i: usize) {
        let mut st = self.lock();
        if st.active == Some(i) {
            return;
        }
        let rode_out = std::mem::take(&mut st.lost);
        st.failovers += u64::from(rode_out);
        st.active = Some(i);
        st.last_good = i;
        drop(st);
        tracing::info!(endpoint = %self.addr(i), after_failover = rode_out, "paxsql-client: master found");
    }

    /// A connection on the master: the active endpoint's pool if there is one, else a round over all endpoints
    /// (from the last good one) with a `SELECT @@read_only` check, repeated with backoff until the deadline.
    async fn master_conn(&self, retry: &mut Retry) -> Result<(usize, Conn), Error> {
        loop {
            let active = self.lock().active;
            if let Some(i) = active {
                match self.connect(i).await {
                    Ok(conn) => return Ok((i, conn)),
                    Err(e) => {
                        self.forget(i);
                        if let Some(fatal) = fatal_login_error(&self.addr(i), &e) {
                            return Err(fatal);
                        }
                        retry.note(format!("{}: {e}", self.addr(i)));
                    }
                }
            }
            let n = self.inner.endpoints.len();
            let start = self.lock().last_good;
            for i in (0..n).map(|k| (start + k) % n) {
                match self.probe(i).await {
                    Ok(Some(conn)) => {
                        self.set_active(i);
                        return Ok((i, conn));
                    }
                    Ok(None) => retry.note(format!("{}: read-only (not the master)", self.addr(i))),
                    Err(e) => {
                        self.forget(i);
                        if let Some(fatal) = fatal_login_error(&self.addr(i), &e) {
                            return Err(fatal);
                        }
                        retry.note(format!("{}: {e}", self.addr(i)));
                    }
                }
            }
            retry.pause(&self.inner).await?;
        }
    }

    async fn connect(&self, i: usize) -> Result<Conn, mysql_async::Error> {
        let pool = self.pool(i);
        match tokio::time::timeout(self.inner.connect_timeout, pool.get_conn()).await {
            Ok(r) => r,
            Err(_) => Err(mysql_async::Error::Io(mysql_async::IoError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection within {} ms", self.inner.connect_timeout.as_millis()),
            )))),
        }
    }

    /// `Some(conn)` when endpoint `i` leads to a writable server.
    async fn probe(&self, i: usize) -> Result<Option<Conn>, mysql_async::Error> {
        let mut conn = self.connect(i).await?;
        let read_only =
            tokio::time::timeout(self.inner.connect_timeout, conn.query_first::<i64, _>("SELECT @@read_only"))
                .await
                .map_err(|_| {
                mysql_async::Error::Io(mysql_async::IoError::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "SELECT @@read_only timed out",
                )))
            })??;
        Ok((read_only == Some(0)).then_some(conn))
    }
}

/// Errors that no failover cures: wrong password, unknown database, a certificate that does not verify against the
/// configured CA. Retrying them would only hide them.
fn fatal_login_error(endpoint: &str, e: &mysql_async::Error) -> Option<Error> {
    const ER_DBACCESS_DENIED: u16 = 1044;
    const ER_ACCESS_DENIED: u16 = 1045;
    const ER_BAD_DB: u16 = 1049;
    match e {
        mysql_async::Error::Server(s) if [ER_DBACCESS_DENIED, ER_ACCESS_DENIED, ER_BAD_DB].contains(&s.code) => {
            Some(Error::Server { endpoint: endpoint.to_string(), source: s.clone() })
        }
        mysql_async::Error::Io(mysql_async::IoError::Tls(t)) => Some(tls_failed(endpoint, t)),
        // The handshake's verdict comes back from tokio-rustls as an io::Error carrying the rustls error.
        mysql_async::Error::Io(mysql_async::IoError::Io(io))
            if io.get_ref().is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()) =>
        {
            Some(tls_failed(endpoint, io))
        }
        _ => None,
    }
}
fn tls_failed(endpoint: &str, e: &dyn std::fmt::Display) -> Error {
    Error::InvalidConfig(format!("TLS with {endpoint} failed (check tls_ca and the node's address): {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_must_be_host_port() {
        assert_eq!(split_host_port("127.0.0.1:3306").unwrap(), ("127.0.0.1".to_string(), 3306));
        assert_eq!(split_host_port("[::1]:24004").unwrap(), ("::1".to_string(), 24004));
        for bad in ["localhost", ":3306", "h:port", "h:70000"] {
            assert!(matches!(split_host_port(bad), Err(Error::InvalidConfig(_))), "{bad}");
        }
        assert!(matches!(Client::builder().build(), Err(Error::InvalidConfig(_))));
        assert!(Client::builder().endpoint("127.0.0.1:1").build().is_ok());
    }
}
