//! The client's errors, and the classification of a MySQL error that decides what may be retried.

use mysql_async::{DriverError, ServerError};

/// Where a request was when its connection failed with its outcome unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// An autocommit statement had been sent: it may have committed on the server.
    Statement,
    /// `COMMIT` had been sent: the transaction may have committed.
    Commit,
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stage::Statement => "an autocommit statement",
            Stage::Commit => "COMMIT",
        })
    }
}

/// Errors of the paxsql client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The write may or may not have committed: the connection broke (or the session was ended) after the
    /// statement or `COMMIT` was sent and before the server answered. Never retried by this library, because a
    /// retry could apply the write twice. The application decides: check with a read, or use an idempotent write.
    #[error("outcome unknown: the connection to {endpoint} failed after {during} was sent: {source}")]
    OutcomeUnknown {
        endpoint: String,
        during: Stage,
        #[source]
        source: mysql_async::Error,
    },
    /// No endpoint led to a writable master before the failover deadline passed.
    #[error("no master found within {waited_ms} ms ({attempts} attempts); last error: {last_error}")]
    NoMaster { waited_ms: u64, attempts: u32, last_error: String },
    /// The server refused the statement because it is not (or no longer) the master, or a paxsql proxy has no
    /// master: nothing was executed. Retried by the helpers; seen by a caller only inside a transaction closure.
    #[error("{endpoint} is not the master: {source}")]
    NotMaster {
        endpoint: String,
        #[source]
        source: mysql_async::Error,
    },
    /// The connection broke before anything of the current transaction could commit (no `COMMIT` was sent).
    /// Retried by the helpers; seen by a caller only inside a transaction closure.
    #[error("connection to {endpoint} lost: {source}")]
    ConnectionLost {
        endpoint: String,
        #[source]
        source: mysql_async::Error,
    },
    /// The server rolled the transaction back (deadlock). Retried by `run_transaction`.
    #[error("{endpoint} rolled the transaction back: {source}")]
    RolledBack {
        endpoint: String,
        #[source]
        source: ServerError,
    },
    /// A definitive answer from the server about this statement (syntax, duplicate key, access denied...):
    /// retrying would give the same answer.
    #[error("{endpoint}: {source}")]
    Server {
        endpoint: String,
        #[source]
        source: ServerError,
    },
    /// A client-side error that says nothing about the server (a row that does not convert, bad parameters).
    #[error("client error: {0}")]
    Driver(#[source] mysql_async::Error),
    /// The transaction closure gave up (see [`Error::abort`]); the transaction was rolled back.
    #[error("transaction aborted: {0}")]
    Aborted(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The builder was given something unusable.
    #[error("invalid client configuration: {0}")]
    InvalidConfig(String),
}

impl Error {
    /// Aborts a transaction from inside a `run_transaction` closure with the application's own reason; the
    /// transaction is rolled back and not retried.
    pub fn abort(reason: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
        Error::Aborted(reason.into())
    }

    /// True for the errors after which nothing of the current transaction can have committed and the whole
    /// transaction may run again on a fresh connection (the helpers do this themselves).
    pub fn is_transaction_retryable(&self) -> bool {
        matches!(self, Error::NotMaster { .. } | Error::ConnectionLost { .. } | Error::RolledBack { .. })
    }

    /// Maps an error of a statement sent inside an open transaction (before `COMMIT`).
    pub(crate) fn in_transaction(endpoint: &str, e: mysql_async::Error) -> Error {
        let endpoint = endpoint.to_string();
        match (classify(&e), e) {
            (ErrorClass::NotMaster, source) => Error::NotMaster { endpoint, source },
            (ErrorClass::ConnectionBroken, source) => Error::ConnectionLost { endpoint, source },
            (ErrorClass::RolledBack, mysql_async::Error::Server(source)) => Error::RolledBack { endpoint, source },
            (_, mysql_async::Error::Server(source)) => Error::Server { endpoint, source },
            (_, other) => Error::Driver(other),
        }
    }

    /// Maps an error of a statement whose effects may have committed when the connection broke (an autocommit
    /// write, or `COMMIT`).
    pub(crate) fn after_send(endpoint: &str, during: Stage, e: mysql_async::Error) -> Error {
        match classify(&e) {
            ErrorClass::ConnectionBroken => Error::OutcomeUnknown { endpoint: endpoint.to_string(), during, source: e },
            _ => Error::in_transaction(endpoint, e),
        }
    }
}

/// What a MySQL error says about the state of the server and the statement, which decides what is safe to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The server refused the statement because it is read-only (not the master), or a paxsql proxy answered
    /// that it knows no master: the statement was not executed.
    NotMaster,
    /// The connection broke or the server ended the session: a statement in flight may or may not have taken
    /// effect; an open transaction that had not reached `COMMIT` is rolled back by the server.
    ConnectionBroken,
    /// The server rolled back the whole transaction (deadlock).
    RolledBack,
    /// A definitive answer about this statement; retrying gives the same.
    Statement,
}

/// SQLSTATE of the ERR packet a paxsql proxy sends when no master holds a lease (docs/ARCHITECTURE.md §7).
pub const PROXY_NO_MASTER_STATE: &str = "08S01";
/// Message prefix of that ERR packet.
pub const PROXY_NO_MASTER_PREFIX: &str = "paxsql: no master";

// MariaDB server error codes (include/mysqld_error.h).
const ER_SERVER_SHUTDOWN: u16 = 1053;
const ER_NET_ERRORS: std::ops::RangeInclusive<u16> = 1152..=1161;
const ER_LOCK_DEADLOCK: u16 = 1213;
const ER_OPTION_PREVENTS_STATEMENT: u16 = 1290;
const ER_READ_ONLY_MODE: u16 = 1836;
const ER_CONNECTION_KILLED: u16 = 1927;
// Client-side codes a server or proxy may relay.
const CR_SERVER_GONE_ERROR: u16 = 2006;
const CR_SERVER_LOST: u16 = 2013;

/// Classifies a `mysql_async` error.
pub fn classify(e: &mysql_async::Error) -> ErrorClass {
    match e {
        mysql_async::Error::Server(s) => classify_server(s),
        mysql_async::Error::Io(_) | mysql_async::Error::Other(_) => ErrorClass::ConnectionBroken,
        mysql_async::Error::Driver(d) => match d {
            DriverError::ConnectionClosed
            | DriverError::PoolDisconnected
            | DriverError::PacketOutOfOrder
            | DriverError::UnexpectedPacket { .. }
            | DriverError::BadCompressedPacketHeader
            | DriverError::PacketTooLarge => ErrorClass::ConnectionBroken,
            _ => ErrorClass::Statement,
        },
        mysql_async::Error::Url(_) => ErrorClass::Statement,
    }
}

fn classify_server(s: &ServerError) -> ErrorClass {
    // 1290 also reports other options (--skip-grant-tables, --secure-file-priv): only read-only means "not the
    // master".
    let read_only = s.message.contains("read-only") || s.message.contains("read_only");
    match s.code {
        ER_OPTION_PREVENTS_STATEMENT if read_only => ErrorClass::NotMaster,
        ER_READ_ONLY_MODE => ErrorClass::NotMaster,
        _ if s.state == PROXY_NO_MASTER_STATE && s.message.starts_with(PROXY_NO_MASTER_PREFIX) => ErrorClass::NotMaster,
        ER_LOCK_DEADLOCK => ErrorClass::RolledBack,
        // A KILLed or shut-down session may have committed its waiting transaction (docs/ARCHITECTURE.md §3): broken, not
        // refused.
        ER_SERVER_SHUTDOWN | ER_CONNECTION_KILLED | CR_SERVER_GONE_ERROR | CR_SERVER_LOST => {
            ErrorClass::ConnectionBroken
        }
        c if ER_NET_ERRORS.contains(&c) => ErrorClass::ConnectionBroken,
        _ if s.state == PROXY_NO_MASTER_STATE => ErrorClass::ConnectionBroken,
        _ => ErrorClass::Statement,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: u16, state: &str, message: &str) -> mysql_async::Error {
        mysql_async::Error::Server(ServerError { code, state: state.into(), message: message.into() })
    }

    fn io(kind: std::io::ErrorKind) -> mysql_async::Error {
        mysql_async::Error::Io(mysql_async::IoError::Io(std::io::Error::from(kind)))
    }

    #[test]
    fn read_only_and_proxy_without_master_mean_not_master() {
        let ro = server(
            1290,
            "HY000",
            "The MariaDB server is running with the --read-only option so it cannot execute this statement",
        );
        assert_eq!(classify(&ro), ErrorClass::NotMaster);
        assert_eq!(classify(&server(1836, "HY000", "Running in read-only mode")), ErrorClass::NotMaster);
        let proxy = server(1105, "08S01", "paxsql: no master: lease expired");
        assert_eq!(classify(&proxy), ErrorClass::NotMaster);
    }

    #[test]
    fn other_uses_of_1290_are_statement_errors() {
        let e = server(1290, "HY000", "The MariaDB server is running with the --secure-file-priv option");
        assert_eq!(classify(&e), ErrorClass::Statement);
    }

    #[test]
    fn broken_connections_and_ended_sessions() {
        for kind in [std::io::ErrorKind::ConnectionReset, std::io::ErrorKind::UnexpectedEof] {
            assert_eq!(classify(&io(kind)), ErrorClass::ConnectionBroken);
        }
        assert_eq!(classify(&mysql_async::Error::Driver(DriverError::ConnectionClosed)), ErrorClass::ConnectionBroken);
        assert_eq!(classify(&server(1927, "70100", "Connection was killed")), ErrorClass::ConnectionBroken);
        assert_eq!(classify(&server(1053, "08S01", "Server shutdown in progress")), ErrorClass::ConnectionBroken);
        assert_eq!(
            classify(&server(1158, "08S01", "Got an error reading communication packets")),
            ErrorClass::ConnectionBroken
        );
    }

    #[test]
    fn deadlock_rolls_back_and_statement_errors_are_final() {
        let deadlock = server(1213, "40001", "Deadlock found when trying to get lock; try restarting transaction");
        assert_eq!(classify(&deadlock), ErrorClass::RolledBack);
        assert_eq!(classify(&server(1062, "23000", "Duplicate entry '1' for key 'PRIMARY'")), ErrorClass::Statement);
        assert_eq!(classify(&server(1064, "42000", "You have an error in your SQL syntax")), ErrorClass::Statement);
        let conv = mysql_async::Error::Driver(DriverError::MixedParams);
        assert_eq!(classify(&conv), ErrorClass::Statement);
    }

    #[test]
    fn a_broken_connection_after_send_is_outcome_unknown_but_a_refusal_is_not() {
        let e = Error::after_send("n1:3306", Stage::Commit, io(std::io::ErrorKind::ConnectionReset));
        assert!(matches!(e, Error::OutcomeUnknown { during: Stage::Commit, .. }), "{e:?}");
        assert!(!e.is_transaction_retryable());
        let ro = server(1290, "HY000", "running with the --read-only option");
        let e = Error::after_send("n1:3306", Stage::Commit, ro);
        assert!(matches!(e, Error::NotMaster { .. }), "{e:?}");
        assert!(e.is_transaction_retryable());
        let dup = server(1062, "23000", "Duplicate entry");
        let e = Error::after_send("n1:3306", Stage::Statement, dup);
        assert!(matches!(e, Error::Server { ref source, .. } if source.code == 1062), "{e:?}");
        assert!(!e.is_transaction_retryable());
    }

    #[test]
    fn inside_a_transaction_a_broken_connection_is_retryable() {
        let e = Error::in_transaction("n1:3306", io(std::io::ErrorKind::BrokenPipe));
        assert!(matches!(e, Error::ConnectionLost { .. }), "{e:?}");
        assert!(e.is_transaction_retryable());
        let e = Error::in_transaction("n1:3306", server(1213, "40001", "Deadlock"));
        assert!(matches!(e, Error::RolledBack { .. }), "{e:?}");
        assert!(Error::abort("insufficient funds").to_string().contains("insufficient funds"));
    }
}
