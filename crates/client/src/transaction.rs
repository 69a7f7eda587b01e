//! One transaction on the master, handed to a `run_transaction` closure.

use mysql_async::prelude::{FromRow, Queryable};
use mysql_async::{Conn, Params};

use crate::{Error, Stage};

/// An open transaction on the master's connection. Statements map their errors so that
/// [`Error::is_transaction_retryable`] tells `run_transaction` whether the whole transaction may run again.
pub struct Transaction {
    conn: Conn,
    endpoint: String,
}

impl Transaction {
    pub(crate) fn new(conn: Conn, endpoint: String) -> Transaction {
        Transaction { conn, endpoint }
    }

    /// The endpoint this transaction runs through.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Runs a statement, drops its rows, returns the affected-row count.
    pub async fn exec_drop(&mut self, sql: &str, params: impl Into<Params> + Send) -> Result<u64, Error> {
        self.conn.exec_drop(sql, params).await.map_err(|e| Error::in_transaction(&self.endpoint, e))?;
        Ok(self.conn.affected_rows())
    }

    /// Runs a statement and collects its rows.
    pub async fn exec<T>(&mut self, sql: &str, params: impl Into<Params> + Send) -> Result<Vec<T>, Error>
    where
        T: FromRow + Send + 'static,
    {
        self.conn.exec(sql, params).await.map_err(|e| Error::in_transaction(&self.endpoint, e))
    }

    /// Runs a statement and returns its first row.
    pub async fn exec_first<T>(&mut self, sql: &str, params: impl Into<Params> + Send) -> Result<Option<T>, Error>
    where
        T: FromRow + Send + 'static,
    {
        self.conn.exec_first(sql, params).await.map_err(|e| Error::in_transaction(&self.endpoint, e))
    }

    /// `LAST_INSERT_ID()` of the last statement, if it generated one.
    pub fn last_insert_id(&self) -> Option<u64> {
        self.conn.last_insert_id()
    }

    pub(crate) async fn begin(&mut self) -> Result<(), Error> {
        self.conn.query_drop("START TRANSACTION").await.map_err(|e| Error::in_transaction(&self.endpoint, e))
    }

    /// `COMMIT`: once it is sent, a broken connection leaves the outcome unknown.
    pub(crate) async fn commit(&mut self) -> Result<(), Error> {
        self.conn.query_drop("COMMIT").await.map_err(|e| Error::after_send(&self.endpoint, Stage::Commit, e))
    }

    /// Best effort: a connection that cannot roll back is closed instead, so that the pool never hands out a
    /// session with an open transaction (the server rolls it back when the session ends).
    pub(crate) async fn rollback(mut self) {
        if self.conn.query_drop("ROLLBACK").await.is_err() {
            let _ = self.conn.disconnect().await;
        }
    }
}
