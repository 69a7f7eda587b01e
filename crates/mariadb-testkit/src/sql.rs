//! Running SQL on a test server: async connections and bounded blocking helpers.

use std::future::Future;
use std::time::Duration;

use mysql_async::prelude::{FromRow, FromValue, Queryable as _};
use mysql_async::{Conn, Opts, OptsBuilder, Row};

use crate::server::ROOT_PASSWORD;
use crate::{MariaDb, TestkitError};

/// Bound on one readiness probe (connect + `SELECT 1`) while a server starts.
const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs the future built by `make` to completion on a fresh thread with its own current-thread runtime, bounded
/// by `timeout`. A separate thread makes this callable from sync code and from inside a tokio runtime alike
/// (`block_on` on a runtime thread would panic).
pub(crate) fn run_bounded<T, Fut, F>(sql: &str, port: u16, timeout: Duration, make: F) -> Result<T, TestkitError>
where
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = Result<T, TestkitError>>,
    T: Send,
{
    std::thread::scope(|scope| {
        let worker = scope.spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| TestkitError::io("build a tokio runtime for SQL", e))?;
            runtime.block_on(async {
                match tokio::time::timeout(timeout, make()).await {
                    Ok(result) => result,
                    Err(_) => {
                        Err(TestkitError::SqlTimeout { sql: sql.to_string(), port, timeout_ms: timeout.as_millis() })
                    }
                }
            })
        });
        worker.join().unwrap_or_else(|_| Err(TestkitError::WorkerPanicked { sql: sql.to_string() }))
    })
}

fn sql_error(sql: &str, port: u16) -> impl Fn(mysql_async::Error) -> TestkitError + '_ {
    move |source| TestkitError::Sql { sql: sql.to_string(), port, source }
}

impl MariaDb {
    /// Client options for `user` over TCP to 127.0.0.1 (never switched to the unix socket).
    pub fn opts_for(&self, user: &str, password: &str) -> Opts {
        OptsBuilder::default()
            .ip_or_hostname("127.0.0.1")
            .tcp_port(self.port)
            .user(Some(user))
            .pass(Some(password))
            .prefer_socket(false)
            .into()
    }

    /// Client options for root over TCP.
    pub fn opts(&self) -> Opts {
        self.opts_for("root", ROOT_PASSWORD)
    }

    /// A new async root connection over TCP (no timeout: wrap it in `tokio::time::timeout` where a statement
    /// may block, e.g. a commit on a master-profile server).
    pub async fn conn(&self) -> Result<Conn, TestkitError> {
        Conn::new(self.opts()).await.map_err(sql_error("<connect>", self.port))
    }

    /// Runs `sql` as root and returns all rows as `T` (a tuple, `Row`, or any `FromRow`). Blocking, bounded by
    /// the SQL timeout; text protocol, so every value arrives as bytes or NULL.
    pub fn query<T>(&self, sql: &str) -> Result<Vec<T>, TestkitError>
    where
        T: FromRow + Send + 'static,
    {
        self.query_within(sql, self.opts.sql_timeout)
    }

    /// [`MariaDb::query`] with its own bound instead of the SQL timeout of the options.
    pub fn query_within<T>(&self, sql: &str, timeout: Duration) -> Result<Vec<T>, TestkitError>
    where
        T: FromRow + Send + 'static,
    {
        let opts = self.opts();
        let port = self.port;
        run_bounded(sql, port, timeout, || async move {
            let mut conn = Conn::new(opts).await.map_err(sql_error(sql, port))?;
            let rows = conn.query::<T, _>(sql).await.map_err(sql_error(sql, port))?;
            // Best effort: the server closes the session anyway when the socket goes.
            let _ = conn.disconnect().await;
            Ok(rows)
        })
    }

    /// The first row of `sql`, if any.
    pub fn query_first<T>(&self, sql: &str) -> Result<Option<T>, TestkitError>
    where
        T: FromRow + Send + 'static,
    {
        Ok(self.query::<T>(sql)?.into_iter().next())
    }

    /// The first column of the first row, converted to `T`. Errors if there is no row; use `Option<_>` for
    /// columns that may be NULL. Example: `db.query_value::<i64>("SELECT @@gtid_strict_mode")`.
    pub fn query_value<T>(&self, sql: &str) -> Result<T, TestkitError>
    where
        T: FromValue + Send + 'static,
    {
        self.query_value_within(sql, self.opts.sql_timeout)
    }

    pub(crate) fn query_value_within<T>(&self, sql: &str, timeout: Duration) -> Result<T, TestkitError>
    where
        T: FromValue + Send + 'static,
    {
        let row = self
            .query_within::<Row>(sql, timeout)?
            .into_iter()
            .next()
            .ok_or_else(|| TestkitError::UnexpectedResult { sql: sql.to_string(), detail: "no row".into() })?;
        match row.get_opt::<T, usize>(0) {
            Some(Ok(value)) => Ok(value),
            Some(Err(e)) => Err(TestkitError::UnexpectedResult { sql: sql.to_string(), detail: e.to_string() }),
            None => Err(TestkitError::UnexpectedResult { sql: sql.to_string(), detail: "no column".into() }),
        }
    }

    /// Runs one statement as root, discarding results. Blocking, bounded.
    pub fn exec(&self, sql: &str) -> Result<(), TestkitError> {
        self.exec_batch(&[sql])
    }

    /// Runs statements in order in ONE root session (so `SET sql_log_bin=0` and other session variables carry
    /// over), stopping at the first error. Blocking, bounded as a whole.
    pub fn exec_batch<S: AsRef<str> + Sync>(&self, stmts: &[S]) -> Result<(), TestkitError> {
        self.exec_batch_as("root", ROOT_PASSWORD, stmts)
    }

    /// [`MariaDb::exec_batch`] as another user (for privilege tests, e.g. `read_only`).
    pub fn exec_batch_as<S: AsRef<str> + Sync>(
        &self,
        user: &str,
        password: &str,
        stmts: &[S],
    ) -> Result<(), TestkitError> {
        let opts = self.opts_for(user, password);
        let port = self.port;
        let label = stmts.iter().map(AsRef::as_ref).collect::<Vec<_>>().join("; ");
        run_bounded(&label, port, self.opts.sql_timeout, || async move {
            let mut conn = Conn::new(opts).await.map_err(sql_error("<connect>", port))?;
            for stmt in stmts {
                let stmt = stmt.as_ref();
                conn.query_drop(stmt).await.map_err(sql_error(stmt, port))?;
            }
            let _ = conn.disconnect().await;
            Ok(())
        })
    }

    /// Readiness probe: log in as root with `password` and run `SELECT 1`.
    pub(crate) fn ping(&self, password: &str) -> Result<(), TestkitError> {
        let opts = self.opts_for("root", password);
        let port = self.port;
        run_bounded("SELECT 1", port, PING_TIMEOUT, || async move {
            let mut conn = Conn::new(opts).await.map_err(sql_error("<connect>", port))?;
            conn.query_drop("SELECT 1").await.map_err(sql_error("SELECT 1", port))?;
            let _ = conn.disconnect().await;
            Ok(())
        })
    }
}
