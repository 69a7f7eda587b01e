//! Supervision of the local mariadbd (docs/ARCHITECTURE.md §5): start it, stop it only with SIGKILL (a clean shutdown or a
//! KILL commits transactions still waiting for their semi-sync ACK), restart it so that `init-rpl-role=SLAVE`
//! rolls back and truncates an un-ACKed binlog tail, and the few SQL statements role changes need.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder};

use crate::config::MariaDbConfig;

#[derive(Debug, thiserror::Error)]
pub enum MariaDbError {
    #[error("cannot start {binary}: {source} (is MariaDB installed? run deploy/install-deps.sh)")]
    Spawn { binary: PathBuf, source: std::io::Error },
    #[error("mariadbd did not accept connections within {secs} s; last error: {last}")]
    NotReady { secs: u64, last: String },
    #[error("mariadbd exited during start with {status}; see its error log")]
    Exited {
        status: String,
        /// What mariadbd wrote to its error log during this start (empty when the log is not configured).
        log: String,
    },
    #[error("local GTID position {local} is not a prefix of the global log ({reason}); the node does not serve until it is, and a diverged server must be rebuilt from a healthy member")]
    NotAligned {
        local: String,
        reason: String,
        /// The global log holds other transactions where the local server has its own: certain divergence (as
        /// opposed to a position the global log has not reached yet).
        diverged: bool,
    },
    #[error("SQL `{sql}` failed: {source}")]
    Sql { sql: String, source: mysql_async::Error },
}

/// The local mariadbd and the account the node administers it with.
pub struct LocalMariaDb {
    cfg: MariaDbConfig,
    defaults_file: PathBuf,
    admin_password: String,
    child: Option<Child>,
}

/// The largest binlog transaction a cluster takes (MariaDB's `max_binlog_cache_size` on every member): one larger
/// fails in the client's session with ER_TRANS_CACHE_FULL (1197) before anything reaches the binlog. A transaction
/// larger than one log entry goes into the global log in parts; the bound is what a replica's stream can carry
/// (its positions are 32-bit and a virtual binlog file rotates at 1 GiB, so up to 3 GiB would fit) with room to
/// spare, and what the README promises. Non-transactional statements are not bounded this way (see the README).
pub const LARGEST_TRANSACTION_BYTES: usize = 2 << 30;

impl LocalMariaDb {
    pub fn new(cfg: MariaDbConfig, defaults_file: PathBuf, admin_password: String) -> Self {
        LocalMariaDb { cfg, defaults_file, admin_password, child: None }
    }

    /// Whether the mariadbd this node started is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn pid_file(&self) -> PathBuf {
        self.cfg.datadir.join("mariadbd.pid")
    }

    /// Kills whatever mariadbd still runs on this data directory (a previous node process's), with SIGKILL.
    pub fn kill_stale(&self) {
        if let Ok(text) = std::fs::read_to_string(self.pid_file()) {
            if let Ok(pid) = text.trim().parse::<i32>() {
                // SAFETY: kill(2) with a pid read from our own pid file; a stale pid of another process is
                // guarded against by checking its command line first.
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                if String::from_utf8_lossy(&cmdline).contains("mariadbd") {
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                    }
                    wait_gone(pid as u32, Duration::from_secs(10));
                }
            }
        }
    }

    /// Starts mariadbd and waits until the admin account can log in.
    ///
    /// A server that refuses to start because InnoDB holds prepared transactions its binlog cannot resolve — a
    /// mariabackup copy taken while the donor's applier was between prepare and commit carries no binlog (MDEV-36025,
    /// seen in the fault suite after a rebuild) — gets one heuristic recovery run that rolls them back, then starts.
    /// Rolling back is what the copy's GTID position says: those transactions are not in it, and replication brings
    /// them again from the global log.
    pub async fn start(&mut self, timeout: Duration) -> Result<(), MariaDbError> {
        match self.start_once(timeout).await {
            Err(MariaDbError::Exited { log, .. })
                if log.contains("prepared transactions!") && log.contains("tc-heuristic-recover") =>
            {
                tracing::warn!("InnoDB holds prepared transactions no binlog resolves: rolling them back");
                self.heuristic_rollback(timeout).await?;
                self.start_once(timeout).await
            }
            other => other,
        }
    }

    /// Runs mariadbd once with `--tc-heuristic-recover=ROLLBACK`, which always exits after the recovery.
    async fn heuristic_rollback(&mut self, timeout: Duration) -> Result<(), MariaDbError> {
        let mut child = self
            .mariadbd_command()
            .arg("--tc-heuristic-recover=ROLLBACK")
            .spawn()
            .map_err(|source| MariaDbError::Spawn { binary: self.cfg.mariadbd.clone(), source })?;
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    tracing::info!(%status, "heuristic recovery run ended");
                    return Ok(());
                }
                Ok(None) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(100)).await,
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(MariaDbError::NotReady {
                        secs: timeout.as_secs(),
                        last: "the heuristic recovery run (--tc-heuristic-recover=ROLLBACK) did not exit".into(),
                    });
                }
            }
        }
    }

    /// mariadbd with this node's option file and pid file, its output discarded, bound to die with the node.
    fn mariadbd_command(&self) -> Command {
        let mut cmd = Command::new(&self.cfg.mariadbd);
        cmd.arg(format!("--defaults-file={}", self.defaults_file.display()))
            .arg(format!("--pid-file={}", self.pid_file().display()))
            // Options every member must run with, whatever its option file says (the command line wins):
            // - the transactional binlog cache no larger than the largest transaction the cluster takes
            //   (`LARGEST_TRANSACTION_BYTES`). The statement cache keeps MariaDB's default: tools read it to tell
            //   the server's word size (mysql-test-run refuses to start on any other value).
            // - functions without a DETERMINISTIC/NO SQL/READS SQL DATA characteristic accepted everywhere: with
            //   row-based logging their effects replicate as rows, and a master that accepted one (an operator's SET
            //   GLOBAL) while its replicas refuse it (1418) stopped every replica's applier at the same transaction of
            //   the global log, which no member could then apply — found by MariaDB's test suite through the RW port.
            //   The proxy refuses SET of it, so no client can make members differ again.
            .arg(format!("--max-binlog-cache-size={LARGEST_TRANSACTION_BYTES}"))
            .arg("--log-bin-trust-function-creators=ON")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // mariadbd dies with its node, by SIGKILL (the only safe way, docs/ARCHITECTURE.md §3): a node that crashed must not leave
        // a server behind that still takes writes with read_only=OFF while another member becomes master.
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }

    async fn start_once(&mut self, timeout: Duration) -> Result<(), MariaDbError> {
        self.kill_stale();
        let log_offset = self.cfg.error_log.as_ref().and_then(|p| std::fs::metadata(p).ok()).map_or(0, |m| m.len());
        let mut cmd = self.mariadbd_command();
        let child = cmd.spawn().map_err(|source| MariaDbError::Spawn { binary: self.cfg.mariadbd.clone(), source })?;
        tracing::info!(pid = child.id(), "mariadbd started");
        self.child = Some(child);
        let deadline = Instant::now() + timeout;
        let mut last: String;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(MariaDbError::Exited {
                        status: status.to_string(),
                        log: self.error_log_since(log_offset),
                    });
                }
            }
            match self.conn().await {
                Ok(c) => {
                    let _ = c.disconnect().await;
                    return Ok(());
                }
                Err(e) => last = e.to_string(),
            }
            if Instant::now() >= deadline {
                return Err(MariaDbError::NotReady { secs: timeout.as_secs(), last });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The error log from `offset` on (at most its last 64 KiB).
    fn error_log_since(&self, offset: u64) -> String {
        let Some(path) = &self.cfg.error_log else { return String::new() };
        let Ok(bytes) = std::fs::read(path) else { return String::new() };
        let start = (offset as usize).min(bytes.len()).max(bytes.len().saturating_sub(64 << 10));
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }

    /// SIGKILL, and wait until the process is gone. Never a clean shutdown (docs/ARCHITECTURE.md §3 hazards).
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            tracing::warn!(pid = child.id(), "mariadbd killed with SIGKILL");
        } else {
            self.kill_stale();
        }
    }

    fn opts(&self) -> Opts {
        OptsBuilder::default()
            .socket(Some(self.cfg.socket.to_string_lossy().into_owned()))
            .user(Some(self.cfg.admin_user.clone()))
            .pass(Some(self.admin_password.clone()))
            .prefer_socket(true)
            .into()
    }

    pub async fn conn(&self) -> Result<Conn, mysql_async::Error> {
        Conn::new(self.opts()).await
    }

    /// Runs statements on one admin session.
    pub async fn exec(&self, statements: &[&str]) -> Result<(), MariaDbError> {
        let mut c = self.conn().await.map_err(|source| MariaDbError::Sql { sql: "connect".into(), source })?;
        for sql in statements {
            c.query_drop(*sql).await.map_err(|source| MariaDbError::Sql { sql: redact(sql), source })?;
        }
        let _ = c.disconnect().await;
        Ok(())
    }

    pub async fn query_string(&self, sql: &str) -> Result<String, MariaDbError> {
        let mut c = self.conn().await.map_err(|source| MariaDbError::Sql { sql: "connect".into(), source })?;
        let v: Option<Option<String>> =
            c.query_first(sql).await.map_err(|source| MariaDbError::Sql { sql: redact(sql), source })?;
        let _ = c.disconnect().await;
        Ok(v.flatten().unwrap_or_default())
    }

    /// The replica's position and its applier, read on one session: `gtid_binlog_pos` and `SHOW SLAVE STATUS`.
    pub async fn replica_state(&self) -> Result<ReplicaState, MariaDbError> {
        let sql_err = |sql: &str| {
            let sql = sql.to_string();
            move |source| MariaDbError::Sql { sql, source }
        };
        let mut c = self.conn().await.map_err(sql_err("connect"))?;
        const POSITION: &str = "SELECT @@GLOBAL.gtid_binlog_pos, @@GLOBAL.require_secure_transport";
        let (position, fenced): (Option<String>, u8) =
            c.query_first(POSITION).await.map_err(sql_err(POSITION))?.unwrap_or_default();
        let row: Option<mysql_async::Row> =
            c.query_first("SHOW SLAVE STATUS").await.map_err(sql_err("SHOW SLAVE STATUS"))?;
        let _ = c.disconnect().await;
        let field = |name: &str| -> String {
            row.as_ref()
                .and_then(|r| r.get_opt::<Option<String>, _>(name))
                .and_then(Result::ok)
                .flatten()
                .unwrap_or_default()
        };
        let stopped = |running: String, errno: String, error: String| match running.as_str() {
            // "Connecting" is an applier waiting for its source (the node's replication server), not a failure.
            "Yes" | "Connecting" => None,
            _ => Some(format!("{running} (error {errno}: {error})")),
        };
        Ok(ReplicaState {
            tcp_logins: fenced == 0,
            position: position.unwrap_or_default(),
            configured: row.is_some(),
            io_stopped: stopped(field("Slave_IO_Running"), field("Last_IO_Errno"), field("Last_IO_Error")),
            sql_stopped: stopped(field("Slave_SQL_Running"), field("Last_SQL_Errno"), field("Last_SQL_Error")),
        })
    }

    /// User names of the accounts that hold READ ONLY ADMIN, directly or through roles granted to them (any host
    /// part: the proxy knows the name a client logs in with, not which host entry will match).
    pub async fn privileged_users(&self) -> Result<std::collections::BTreeSet<String>, MariaDbError> {
        let sql_err = |sql: &str| {
            let sql = sql.to_string();
            move |source| MariaDbError::Sql { sql, source }
        };
        // Users through the documented view; roles are not in it, so also `mysql.global_priv`, where READ ONLY
        // ADMIN is bit 33 of `access` (measured on 10.11.19: a role granted only READ ONLY ADMIN has access
        // 8589934592). `t47_replica_health` fails if either stops naming a privileged account.
        const GRANTEES: &str = "SELECT GRANTEE FROM information_schema.USER_PRIVILEGES \
                                WHERE PRIVILEGE_TYPE = 'READ_ONLY ADMIN' \
                                UNION SELECT QUOTE(User) FROM mysql.global_priv \
                                WHERE CAST(JSON_VALUE(Priv, '$.access') AS UNSIGNED) & 8589934592 <> 0";
        const ROLES: &str = "SELECT User, Role FROM mysql.roles_mapping";
        let mut c = self.conn().await.map_err(sql_err("connect"))?;
        let grantees: Vec<String> = c.query(GRANTEES).await.map_err(sql_err(GRANTEES))?;
        let roles: Vec<(String, String)> = c.query(ROLES).await.map_err(sql_err(ROLES))?;
        let _ = c.disconnect().await;
        Ok(privileged_closure(&grantees, &roles))
    }

    /// `MASTER_GTID_WAIT`: true once the local server has applied `gtid`, false on timeout.
    pub async fn wait_applied(&self, gtid: &str, timeout: Duration) -> Result<bool, MariaDbError> {
        let sql = format!("SELECT CAST(MASTER_GTID_WAIT('{}', {}) AS CHAR)", gtid, timeout.as_secs_f64());
        Ok(self.query_string(&sql).await? == "0")
    }
}

/// The names of `grantees` (`'name'@'host'`, or a role's `'name'`), and of every user a role among them is granted
/// to, through any chain of roles.
fn privileged_closure(grantees: &[String], roles: &[(String, String)]) -> std::collections::BTreeSet<String> {
    let name = |grantee: &str| -> Option<String> {
        let rest = grantee.strip_prefix('\'')?;
        Some(rest[..rest.find('\'')?].to_string())
    };
    let mut names: std::collections::BTreeSet<String> = grantees.iter().filter_map(|g| name(g)).collect();
    loop {
        let before = names.len();
        for (user, role) in roles {
            if names.contains(role) {
                names.insert(user.clone());
            }
        }
        if names.len() == before {
            return names;
        }
    }
}

/// A replica's position and the state of its two replication threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaState {
    /// `@@GLOBAL.gtid_binlog_pos`: every transaction the server holds, applied or written locally.
    pub position: String,
    /// Whether replication is configured at all (`SHOW SLAVE STATUS` returned a row).
    pub configured: bool,
    /// The IO thread is stopped: its state and last error.
    pub io_stopped: Option<String>,
    /// The SQL thread (the applier) is stopped: its state and last error.
    pub sql_stopped: Option<String>,
    /// `require_secure_transport` is OFF: the server takes logins over TCP, which a replica must not.
    pub tcp_logins: bool,
}

/// A statement as it may appear in an error, a log line or `status.json`: the quoted value after each
/// `MASTER_PASSWORD=` / `IDENTIFIED BY` replaced, so that no password leaves the node through an error.
fn redact(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    loop {
        let upper = rest.to_ascii_uppercase();
        let found = ["MASTER_PASSWORD", "IDENTIFIED BY", "PASSWORD("]
            .iter()
            .filter_map(|k| upper.find(k).map(|at| at + k.len()))
            .min();
        let Some(after_key) = found else {
            out.push_str(rest);
            return out;
        };
        let Some(open) = rest[after_key..].find('\'').map(|o| after_key + o) else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..open]);
        out.push_str("'<redacted>'");
        // The value ends at the first quote not doubled ('' stands for one quote inside it).
        let bytes = rest.as_bytes();
        let mut i = open + 1;
        while i < bytes.len() {
            if bytes[i] == b'\'' {
                if bytes.get(i + 1) == Some(&b'\'') {
                    i += 2;
                    continue;
                }
                break;
            }
            i += 1;
        }
        rest = &rest[(i + 1).min(rest.len())..];
    }
}

impl Drop for LocalMariaDb {
    fn drop(&mut self) {
        // A node that goes away takes its mariadbd with it the only safe way.
        self.kill9();
    }
}

fn wait_gone(pid: u32, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while std::path::Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod redact_tests {
    use super::redact;

    #[test]
    fn passwords_never_reach_an_error() {
        let sql = "CHANGE MASTER TO MASTER_HOST='h', MASTER_USER='u', MASTER_PASSWORD='s3cr''et', MASTER_PORT=1";
        let r = redact(sql);
        assert!(!r.contains("s3cr"), "{r}");
        assert_eq!(r, "CHANGE MASTER TO MASTER_HOST='h', MASTER_USER='u', MASTER_PASSWORD='<redacted>', MASTER_PORT=1");
        assert_eq!(
            redact("ALTER USER x IDENTIFIED BY 'pw'; SELECT 1"),
            "ALTER USER x IDENTIFIED BY '<redacted>'; SELECT 1"
        );
        assert_eq!(redact("SELECT 1"), "SELECT 1");
        assert_eq!(redact("master_password='unterminated"), "master_password='<redacted>'");
    }
}

#[cfg(test)]
mod privileged_tests {
    use super::privileged_closure;

    #[test]
    fn roles_pass_the_privilege_on_through_any_chain() {
        let grantees = vec!["'root'@'localhost'".to_string(), "'dba_role'@''".to_string(), "'odd".to_string()];
        let roles = [("ops", "junior_role"), ("junior_role", "dba_role"), ("app", "reader_role")]
            .map(|(u, r)| (u.to_string(), r.to_string()));
        let names = privileged_closure(&grantees, &roles);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(names, ["dba_role", "junior_role", "ops", "root"]);
    }
}
