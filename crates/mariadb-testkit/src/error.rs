//! The one error type of the testkit.

use std::path::PathBuf;
use std::process::ExitStatus;

/// Everything that can go wrong while running a test server. Messages carry what a developer needs to act:
/// the program or path involved and, when mariadbd failed, the tail of its error log.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    /// A MariaDB program is not installed. Tests fail on this (never skip): install the dependencies.
    #[error(
        "`{program}` not found on PATH, in /usr/sbin or in /usr/bin; \
         run `bash deploy/install-deps.sh` (as root) to install MariaDB"
    )]
    MissingProgram {
        /// The program looked for, e.g. `mariadbd`.
        program: &'static str,
    },

    /// A filesystem or process operation failed.
    #[error("{action}: {source}")]
    Io {
        /// What we were doing, with the path involved.
        action: String,
        #[source]
        source: std::io::Error,
    },

    /// The options cannot work (for example a socket path longer than a unix socket allows).
    #[error("invalid testkit options: {0}")]
    InvalidOptions(String),

    /// `mariadb-install-db` did not initialise the data dir.
    #[error("mariadb-install-db failed ({status}) for {data_dir}; its output ends with:\n{log_tail}")]
    InstallDbFailed {
        /// Exit status of the script.
        status: ExitStatus,
        /// The data dir it was initialising.
        data_dir: PathBuf,
        /// Last lines of its output.
        log_tail: String,
    },

    /// mariadbd exited before it accepted connections.
    #[error("mariadbd exited during startup ({status}); {error_log} ends with:\n{log_tail}")]
    ServerExited {
        /// Exit status of mariadbd.
        status: ExitStatus,
        /// Path of the error log.
        error_log: PathBuf,
        /// Last lines of the error log (and of stdout/stderr if they hold anything).
        log_tail: String,
    },

    /// mariadbd kept running but did not accept a root login in time.
    #[error(
        "mariadbd (pid {pid}) did not accept connections on port {port} within {timeout_ms} ms \
         (last attempt: {last_error}); {error_log} ends with:\n{log_tail}"
    )]
    StartTimeout {
        /// Process id.
        pid: u32,
        /// TCP port it should listen on.
        port: u16,
        /// The bound that passed.
        timeout_ms: u128,
        /// Error of the last connection attempt.
        last_error: String,
        /// Path of the error log.
        error_log: PathBuf,
        /// Last lines of the error log.
        log_tail: String,
    },

    /// mariadbd did not exit in time after a signal.
    #[error("mariadbd (pid {pid}) did not exit within {timeout_ms} ms after {signal}")]
    ExitTimeout {
        /// Process id.
        pid: u32,
        /// Signal sent (`SIGTERM`, `SIGKILL`).
        signal: &'static str,
        /// The bound that passed.
        timeout_ms: u128,
    },

    /// `restart()` on a server that is still running.
    #[error("mariadbd is still running (pid {pid}); kill9() or stop() it before restart()")]
    AlreadyRunning {
        /// Process id of the running server.
        pid: u32,
    },

    /// An operation that needs a running server was called on a stopped one.
    #[error("mariadbd is not running (call restart() first)")]
    NotRunning,

    /// A statement failed.
    #[error("SQL `{sql}` on port {port} failed: {source}")]
    Sql {
        /// The statement (or a label for a batch).
        sql: String,
        /// Port of the server.
        port: u16,
        #[source]
        source: mysql_async::Error,
    },

    /// A statement did not finish within the SQL timeout (for example a commit on a master-profile server that
    /// waits for a semi-sync ACK no replica sends).
    #[error("SQL `{sql}` on port {port} did not finish within {timeout_ms} ms")]
    SqlTimeout {
        /// The statement.
        sql: String,
        /// Port of the server.
        port: u16,
        /// The bound that passed.
        timeout_ms: u128,
    },

    /// A result did not have the expected shape (missing row or column, wrong type).
    #[error("unexpected result of `{sql}`: {detail}")]
    UnexpectedResult {
        /// The statement.
        sql: String,
        /// What was wrong.
        detail: String,
    },

    /// The replica threads stopped with an error or did not start in time.
    #[error("replication on port {port} is not running: {detail}")]
    ReplicationNotRunning {
        /// Port of the replica.
        port: u16,
        /// IO/SQL thread states and their last errors.
        detail: String,
    },

    /// `MASTER_GTID_WAIT` returned -1.
    #[error("replica on port {port} did not reach GTID position '{gtid}' within {timeout_ms} ms (gtid_slave_pos is '{slave_pos}')")]
    GtidWaitTimeout {
        /// Port of the replica.
        port: u16,
        /// Position waited for.
        gtid: String,
        /// Its `@@gtid_slave_pos` when the wait ended.
        slave_pos: String,
        /// The bound that passed.
        timeout_ms: u128,
    },

    /// A helper thread running SQL panicked (a bug in the testkit or in mysql_async).
    #[error("SQL worker thread panicked while running `{sql}`")]
    WorkerPanicked {
        /// The statement.
        sql: String,
    },
}

impl TestkitError {
    pub(crate) fn io(action: impl Into<String>, source: std::io::Error) -> Self {
        TestkitError::Io { action: action.into(), source }
    }
}
