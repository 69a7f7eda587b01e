//! Server profiles and the option file the testkit writes for each server.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Which role a server is configured for. All profiles share the durability and GTID settings of docs/ARCHITECTURE.md §3
/// ("Verified recipe"; lab record `docs/evidence/mariadb-config.md`); they differ in semi-sync and
/// `read_only`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// The current master: `rpl_semi_sync_master_enabled=ON`, wait point `AFTER_SYNC`, timeout
    /// 18446744073709551615 ms (never fall back to async), `wait_no_slave=ON`.
    ///
    /// **Every binlogged commit blocks until a semi-sync replica ACKs it**, including `CREATE USER` and DDL.
    /// Tests that write on such a server must either connect a semi-sync replica first (a replica-profile server
    /// has semi-sync slave on) or turn the wait off with
    /// [`MariaDb::set_semi_sync_master`](crate::MariaDb::set_semi_sync_master)`(false)`. Setup helpers of this
    /// crate run with `SET sql_log_bin=0` and so never wait.
    Master,
    /// A replica: `read_only=ON` (root keeps writing: it holds READ ONLY ADMIN), semi-sync slave ON,
    /// semi-sync master OFF (a replica with it ON hangs its own applier threads, docs/ARCHITECTURE.md §3),
    /// `slave_parallel_threads=4`, `slave_parallel_mode=optimistic`.
    Replica,
    /// Same binlog, GTID and durability settings, no semi-sync and no `read_only`: for baselines (plain MariaDB
    /// benchmarks) and tests that only need a writable server.
    Standalone,
}

/// Default SQL timeout of the blocking helpers.
pub const DEFAULT_SQL_TIMEOUT: Duration = Duration::from_secs(30);
/// Default bound on startup (data dir initialisation excluded).
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(60);

/// How to start a server. Build with [`MariaDbOptions::master`], [`MariaDbOptions::replica`] or
/// [`MariaDbOptions::standalone`], then adjust with the `with_*` methods.
#[derive(Debug, Clone)]
pub struct MariaDbOptions {
    /// Role profile.
    pub profile: Profile,
    /// `server-id`; must differ between servers that replicate from each other.
    pub server_id: u32,
    /// Base name of binlog files (`<base>.000001`, index `<base>.index`); relay logs are `<base>-relay.*`.
    pub binlog_basename: String,
    /// Lines appended to the `[mariadbd]` section after everything the testkit writes; a later line wins, so they
    /// can override defaults (e.g. `innodb_buffer_pool_size=512M` for a benchmark).
    pub extra_config: Vec<String>,
    /// Directory for data, logs, socket and option file. `None`: a fresh temp dir, removed on drop.
    /// A given directory is created if missing and never removed; if it already holds an initialised data dir
    /// (from an earlier run) it is reused as is.
    pub base_dir: Option<PathBuf>,
    /// Keep the temp dir on drop (its path is printed to stderr). Has no effect with `base_dir`.
    pub keep_dir: bool,
    /// Bound on waiting for the server to accept connections.
    pub start_timeout: Duration,
    /// Bound on each blocking SQL helper call.
    pub sql_timeout: Duration,
}

impl MariaDbOptions {
    /// Options for `profile` with `server_id` and defaults for everything else.
    pub fn new(profile: Profile, server_id: u32) -> Self {
        MariaDbOptions {
            profile,
            server_id,
            binlog_basename: "mariadb-bin".to_string(),
            extra_config: Vec::new(),
            base_dir: None,
            keep_dir: false,
            start_timeout: DEFAULT_START_TIMEOUT,
            sql_timeout: DEFAULT_SQL_TIMEOUT,
        }
    }

    /// A master-profile server (see [`Profile::Master`]: commits block without a semi-sync replica).
    pub fn master(server_id: u32) -> Self {
        Self::new(Profile::Master, server_id)
    }

    /// A replica-profile server.
    pub fn replica(server_id: u32) -> Self {
        Self::new(Profile::Replica, server_id)
    }

    /// A standalone server (no semi-sync, writable).
    pub fn standalone(server_id: u32) -> Self {
        Self::new(Profile::Standalone, server_id)
    }

    /// Appends one option line (`name=value`) to the `[mariadbd]` section.
    pub fn with_config_line(mut self, line: impl Into<String>) -> Self {
        self.extra_config.push(line.into());
        self
    }

    /// Uses `dir` (created if missing, never removed) instead of a temp dir.
    pub fn with_base_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.base_dir = Some(dir.into());
        self
    }

    /// Keeps the temp dir after drop, for post-mortems.
    pub fn keep_dir(mut self, keep: bool) -> Self {
        self.keep_dir = keep;
        self
    }

    /// Sets the binlog base name.
    pub fn with_binlog_basename(mut self, base: impl Into<String>) -> Self {
        self.binlog_basename = base.into();
        self
    }

    /// Sets the startup bound.
    pub fn with_start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Sets the bound of each blocking SQL helper call.
    pub fn with_sql_timeout(mut self, timeout: Duration) -> Self {
        self.sql_timeout = timeout;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.server_id == 0 {
            // MariaDB: server_id 0 refuses to act as a replica ("Misconfigured slave: server_id was not set").
            return Err("server_id must not be 0".into());
        }
        let base = &self.binlog_basename;
        if base.is_empty() || !base.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(format!("binlog_basename {base:?} must be non-empty [A-Za-z0-9_-]"));
        }
        if let Some(line) = self.extra_config.iter().find(|l| l.contains('\n')) {
            return Err(format!("extra config line {line:?} contains a newline"));
        }
        Ok(())
    }
}

/// Paths of one server's files, all below its base dir.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub base: PathBuf,
    pub data_dir: PathBuf,
    pub socket: PathBuf,
    pub pid_file: PathBuf,
    pub error_log: PathBuf,
    pub stdout_log: PathBuf,
    pub install_log: PathBuf,
    pub option_file: PathBuf,
    /// `tmpdir`: private, so concurrent servers never share internal temp table files.
    pub tmp_dir: PathBuf,
    /// Exists once the first start's account setup finished (root has its password from then on).
    pub setup_marker: PathBuf,
}

impl Layout {
    pub fn new(base: &Path) -> Self {
        Layout {
            base: base.to_path_buf(),
            data_dir: base.join("data"),
            socket: base.join("mysqld.sock"),
            pid_file: base.join("mysqld.pid"),
            error_log: base.join("error.log"),
            stdout_log: base.join("stdout.log"),
            install_log: base.join("install-db.log"),
            option_file: base.join("my.cnf"),
            tmp_dir: base.join("tmp"),
            setup_marker: base.join("testkit-setup-done"),
        }
    }
}

/// Renders the option file. Read with `mariadbd --defaults-file=...`, so no global /etc/mysql file applies.
pub(crate) fn render_option_file(opts: &MariaDbOptions, layout: &Layout, port: u16, run_as_root: bool) -> String {
    let mut s = String::new();
    let b = &opts.binlog_basename;
    let mut line = |l: &str| {
        s.push_str(l);
        s.push('\n');
    };
    line("# Written by paxsql-mariadb-testkit. Recipe: docs/ARCHITECTURE.md §3, docs/evidence/mariadb-config.md.");
    line("[mariadbd]");
    if run_as_root {
        // mariadbd refuses to run as root unless told to; tests run as root.
        line("user=root");
    }
    line("bind-address=127.0.0.1");
    line(&format!("port={port}"));
    line(&format!("socket={}", layout.socket.display()));
    line(&format!("pid-file={}", layout.pid_file.display()));
    line(&format!("datadir={}", layout.data_dir.display()));
    line(&format!("log-error={}", layout.error_log.display()));
    line(&format!("tmpdir={}", layout.tmp_dir.display()));
    line(&format!("server-id={}", opts.server_id));
    line("gtid_domain_id=0");
    line("# Explicit names: never mix log-basename with a bare log-bin (docs/evidence/mariadb-config.md).");
    line(&format!("log-bin={b}"));
    line(&format!("log-bin-index={b}.index"));
    line(&format!("relay-log={b}-relay"));
    line(&format!("relay-log-index={b}-relay.index"));
    line("gtid_strict_mode=ON");
    line("log_slave_updates=ON");
    line("binlog_format=ROW");
    line("sync_binlog=1");
    line("innodb_flush_log_at_trx_commit=1");
    line("skip-name-resolve");
    line("# Start as SLAVE role so a crash truncates the un-ACKed binlog tail (MDEV-21117, docs/ARCHITECTURE.md §5).");
    line("init-rpl-role=SLAVE");
    line("# Small footprint: many servers run at once on a 2-core machine.");
    line("innodb_buffer_pool_size=32M");
    line("innodb_log_file_size=16M");
    line("innodb_log_buffer_size=2M");
    line("key_buffer_size=1M");
    line("aria_pagecache_buffer_size=8M");
    line("performance_schema=OFF");
    line("# Each server would reserve kernel AIO contexts (fs.aio-max-nr is shared); simulated AIO is enough here.");
    line("innodb_use_native_aio=OFF");
    line("max_connections=200");
    match opts.profile {
        Profile::Master => {
            line("# Profile: master (semi-sync master ON: commits wait for a replica ACK, forever).");
            line("rpl_semi_sync_master_enabled=ON");
            line("rpl_semi_sync_master_wait_point=AFTER_SYNC");
            line("rpl_semi_sync_master_timeout=18446744073709551615");
            line("rpl_semi_sync_master_wait_no_slave=ON");
            line("rpl_semi_sync_slave_enabled=ON");
        }
        Profile::Replica => {
            line("# Profile: replica (semi-sync master OFF, or its own applier threads hang).");
            line("read_only=ON");
            line("rpl_semi_sync_slave_enabled=ON");
            line("rpl_semi_sync_master_enabled=OFF");
            line("rpl_semi_sync_master_wait_point=AFTER_SYNC");
            line("rpl_semi_sync_master_timeout=18446744073709551615");
            line("slave_parallel_threads=4");
            line("slave_parallel_mode=optimistic");
        }
        Profile::Standalone => {
            line("# Profile: standalone (no semi-sync, writable).");
            line("rpl_semi_sync_master_enabled=OFF");
        }
    }
    if !opts.extra_config.is_empty() {
        line("# Extra lines from the test.");
        for l in &opts.extra_config {
            line(l);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_profile_has_semi_sync_and_recipe() {
        let layout = Layout::new(Path::new("/tmp/x"));
        let cnf = render_option_file(&MariaDbOptions::master(7), &layout, 4242, true);
        for want in [
            "user=root",
            "port=4242",
            "server-id=7",
            "log-bin=mariadb-bin",
            "log-bin-index=mariadb-bin.index",
            "relay-log=mariadb-bin-relay",
            "gtid_strict_mode=ON",
            "log_slave_updates=ON",
            "binlog_format=ROW",
            "sync_binlog=1",
            "innodb_flush_log_at_trx_commit=1",
            "init-rpl-role=SLAVE",
            "rpl_semi_sync_master_enabled=ON",
            "rpl_semi_sync_master_wait_point=AFTER_SYNC",
            "rpl_semi_sync_master_timeout=18446744073709551615",
            "rpl_semi_sync_master_wait_no_slave=ON",
        ] {
            assert!(cnf.lines().any(|l| l == want), "missing {want:?} in\n{cnf}");
        }
        assert!(!cnf.contains("read_only"));
    }

    #[test]
    fn replica_profile_is_read_only_without_semi_sync_master() {
        let layout = Layout::new(Path::new("/tmp/x"));
        let opts = MariaDbOptions::replica(2).with_config_line("slave_parallel_threads=8");
        let cnf = render_option_file(&opts, &layout, 1, false);
        assert!(!cnf.contains("user=root"));
        for want in ["read_only=ON", "rpl_semi_sync_master_enabled=OFF", "slave_parallel_mode=optimistic"] {
            assert!(cnf.lines().any(|l| l == want), "missing {want:?}");
        }
        // The extra line comes last, so it wins over the profile's 4 threads.
        assert_eq!(cnf.lines().last(), Some("slave_parallel_threads=8"));
    }

    #[test]
    fn validate_rejects_bad_options() {
        assert!(MariaDbOptions::master(0).validate().is_err());
        assert!(MariaDbOptions::master(1).with_binlog_basename("a/b").validate().is_err());
        assert!(MariaDbOptions::master(1).with_config_line("a\nb").validate().is_err());
        assert!(MariaDbOptions::master(1).validate().is_ok());
    }
}
