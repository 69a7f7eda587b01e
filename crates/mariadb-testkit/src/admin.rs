//! Setup helpers paxsql needs on its servers: accounts, replication, semi-sync, GTID positions.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mysql_async::Row;

use crate::{MariaDb, TestkitError};

/// Quotes `s` as a SQL string literal (`'...'`, with `\` and `'` escaped).
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// Where a replica pulls from: a real MariaDB server or a paxsql binlog server.
#[derive(Debug, Clone)]
pub struct ReplicationSource {
    /// Host (an IP: the servers run with skip-name-resolve).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Replication account.
    pub user: String,
    /// Its password.
    pub password: String,
    /// `MASTER_CONNECT_RETRY` in seconds. MariaDB's default of 60 s would make reconnect tests slow.
    pub connect_retry_s: u32,
    /// `MASTER_HEARTBEAT_PERIOD` in seconds; `None` keeps MariaDB's default (half of `slave_net_timeout`).
    pub heartbeat_period_s: Option<f64>,
}

impl ReplicationSource {
    /// A source at 127.0.0.1:`port` with the given account, retrying every second.
    pub fn loopback(port: u16, user: &str, password: &str) -> Self {
        ReplicationSource {
            host: "127.0.0.1".into(),
            port,
            user: user.into(),
            password: password.into(),
            connect_retry_s: 1,
            heartbeat_period_s: None,
        }
    }
}

impl MariaDb {
    /// `CREATE USER` + `GRANT` with `SET sql_log_bin=0`: not binlogged, so it does not wait for a semi-sync ACK
    /// and does not add a GTID (docs/ARCHITECTURE.md §3). `privileges` is a GRANT list such as `"SELECT, INSERT ON test.*"`.
    pub fn create_user(&self, user: &str, host: &str, password: &str, privileges: &str) -> Result<(), TestkitError> {
        self.create_user_with(user, host, password, privileges, "")
    }

    fn create_user_with(
        &self,
        user: &str,
        host: &str,
        password: &str,
        privileges: &str,
        grant_suffix: &str,
    ) -> Result<(), TestkitError> {
        let account = format!("{}@{}", quote(user), quote(host));
        self.exec_batch(&[
            "SET sql_log_bin=0".to_string(),
            format!("CREATE USER IF NOT EXISTS {account} IDENTIFIED BY {}", quote(password)),
            format!("GRANT {privileges} TO {account}{grant_suffix}"),
        ])
    }

    /// A replication account for `%`: `REPLICATION SLAVE` (dump the binlog) and `BINLOG MONITOR` (positions,
    /// `SHOW MASTER STATUS`), not binlogged.
    pub fn create_replication_user(&self, user: &str, password: &str) -> Result<(), TestkitError> {
        self.create_user(user, "%", password, "REPLICATION SLAVE, BINLOG MONITOR ON *.*")
    }

    /// An admin account for `%` with `ALL PRIVILEGES ON *.* WITH GRANT OPTION` (which includes READ ONLY ADMIN:
    /// it writes through `read_only=ON`), not binlogged.
    pub fn create_admin_user(&self, user: &str, password: &str) -> Result<(), TestkitError> {
        self.create_user_with(user, "%", password, "ALL PRIVILEGES ON *.*", " WITH GRANT OPTION")
    }

    /// `CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos` (does not start the replica threads).
    pub fn change_master(&self, source: &ReplicationSource) -> Result<(), TestkitError> {
        let mut sql = format!(
            "CHANGE MASTER TO MASTER_HOST={}, MASTER_PORT={}, MASTER_USER={}, MASTER_PASSWORD={}, \
             MASTER_CONNECT_RETRY={}, MASTER_USE_GTID=slave_pos",
            quote(&source.host),
            source.port,
            quote(&source.user),
            quote(&source.password),
            source.connect_retry_s,
        );
        if let Some(period) = source.heartbeat_period_s {
            sql.push_str(&format!(", MASTER_HEARTBEAT_PERIOD={period}"));
        }
        self.exec(&sql)
    }

    /// `START SLAVE`.
    pub fn start_slave(&self) -> Result<(), TestkitError> {
        self.exec("START SLAVE")
    }

    /// `STOP SLAVE`.
    pub fn stop_slave(&self) -> Result<(), TestkitError> {
        self.exec("STOP SLAVE")
    }

    /// `SHOW SLAVE STATUS` as column → value (NULL as empty string); `None` if no replication is configured.
    pub fn slave_status(&self) -> Result<Option<BTreeMap<String, String>>, TestkitError> {
        let Some(row) = self.query_first::<Row>("SHOW SLAVE STATUS")? else {
            return Ok(None);
        };
        let mut map = BTreeMap::new();
        for (i, column) in row.columns_ref().iter().enumerate() {
            let value = match row.as_ref(i) {
                Some(mysql_async::Value::Bytes(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
                Some(mysql_async::Value::NULL) | None => String::new(),
                Some(other) => other.as_sql(true),
            };
            map.insert(column.name_str().into_owned(), value);
        }
        Ok(Some(map))
    }

    /// Waits (bounded) until both replica threads run. Fails at once if a thread stopped with an error.
    pub fn wait_slave_running(&self, timeout: Duration) -> Result<(), TestkitError> {
        let deadline = Instant::now() + timeout;
        loop {
            let status = self.slave_status()?;
            let detail = match &status {
                None => "no replication configured (CHANGE MASTER missing)".to_string(),
                Some(s) => {
                    let get = |k: &str| s.get(k).map(String::as_str).unwrap_or("");
                    if get("Slave_IO_Running") == "Yes" && get("Slave_SQL_Running") == "Yes" {
                        return Ok(());
                    }
                    let detail = format!(
                        "Slave_IO_Running={} Slave_SQL_Running={} Last_IO_Error={:?} Last_SQL_Error={:?}",
                        get("Slave_IO_Running"),
                        get("Slave_SQL_Running"),
                        get("Last_IO_Error"),
                        get("Last_SQL_Error"),
                    );
                    if get("Slave_SQL_Running") == "No" && !get("Last_SQL_Error").is_empty() {
                        return Err(TestkitError::ReplicationNotRunning { port: self.port, detail });
                    }
                    detail
                }
            };
            if Instant::now() >= deadline {
                return Err(TestkitError::ReplicationNotRunning { port: self.port, detail });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `MASTER_GTID_WAIT(gtid, timeout)`: waits until this replica has applied `gtid` (`@@gtid_slave_pos`).
    pub fn wait_for_gtid(&self, gtid: &str, timeout: Duration) -> Result<(), TestkitError> {
        let sql = format!("SELECT MASTER_GTID_WAIT({}, {})", quote(gtid), timeout.as_secs_f64());
        // The statement itself waits up to `timeout`; give the client bound some slack on top.
        let result = self.query_value_within::<i64>(&sql, timeout + self.opts.sql_timeout);
        match result? {
            0 => Ok(()),
            _ => Err(TestkitError::GtidWaitTimeout {
                port: self.port,
                gtid: gtid.to_string(),
                slave_pos: self.gtid_slave_pos().unwrap_or_else(|e| format!("<{e}>")),
                timeout_ms: timeout.as_millis(),
            }),
        }
    }

    /// `@@global.gtid_binlog_pos`: last GTIDs written to the binlog (includes commits still waiting for an ACK).
    pub fn gtid_binlog_pos(&self) -> Result<String, TestkitError> {
        self.query_value::<String>("SELECT @@global.gtid_binlog_pos")
    }

    /// `@@global.gtid_slave_pos`: last GTIDs applied by replication.
    pub fn gtid_slave_pos(&self) -> Result<String, TestkitError> {
        self.query_value::<String>("SELECT @@global.gtid_slave_pos")
    }

    /// `SET GLOBAL rpl_semi_sync_master_enabled=ON/OFF` (turning it on is part of a promotion, docs/ARCHITECTURE.md §5).
    pub fn set_semi_sync_master(&self, on: bool) -> Result<(), TestkitError> {
        self.exec(if on {
            "SET GLOBAL rpl_semi_sync_master_enabled=ON"
        } else {
            "SET GLOBAL rpl_semi_sync_master_enabled=OFF"
        })
    }

    /// `Rpl_semi_sync_master_clients`: semi-sync replicas connected right now.
    pub fn semi_sync_master_clients(&self) -> Result<u64, TestkitError> {
        let sql = "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'";
        let row = self.query_first::<(String, String)>(sql)?;
        let value = row.map(|(_, v)| v).unwrap_or_default();
        value
            .parse()
            .map_err(|_| TestkitError::UnexpectedResult { sql: sql.into(), detail: format!("value {value:?}") })
    }

    /// Waits (bounded) until at least `n` semi-sync replicas are connected.
    pub fn wait_semi_sync_clients(&self, n: u64, timeout: Duration) -> Result<(), TestkitError> {
        let deadline = Instant::now() + timeout;
        loop {
            let have = self.semi_sync_master_clients()?;
            if have >= n {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(TestkitError::UnexpectedResult {
                    sql: "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'".into(),
                    detail: format!("{have} semi-sync clients after {} ms, wanted {n}", timeout.as_millis()),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
