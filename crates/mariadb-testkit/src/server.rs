//! One `mariadbd` process: data dir initialisation, start, readiness, crash, restart, stop, cleanup.

use std::collections::HashSet;
use std::fs;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::config::{render_option_file, Layout, MariaDbOptions, Profile};
use crate::spawner::spawn_tied_to_process;
use crate::TestkitError;

/// Password the testkit gives MariaDB's `root` accounts (`root@localhost`, `root@127.0.0.1`, `root@::1`).
pub const ROOT_PASSWORD: &str = "paxsql-test-root";

/// Bound on waiting for a process to exit after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(30);
/// Bound on a clean shutdown (SIGTERM) before we fall back to SIGKILL.
const STOP_WAIT: Duration = Duration::from_secs(60);
/// Port collisions between `bind(:0)` and mariadbd's own bind are retried with a new port this often.
const PORT_ATTEMPTS: usize = 5;
/// Lines of the error log quoted in errors.
const LOG_TAIL_LINES: usize = 30;

/// A running (or stopped) `mariadbd` owned by a test.
///
/// Dropping it always ends the process (SIGKILL) and removes its temp dir unless
/// [`MariaDbOptions::keep_dir`] was set; this also happens when the test panics. Should the test process die
/// without unwinding, the server still gets SIGKILL (`PR_SET_PDEATHSIG`), only the temp dir stays behind.
///
/// Lifecycle calls are blocking and may be made from sync or async tests; SQL helpers come in blocking form
/// (`query`, `exec`, ...: each runs on a helper thread with its own runtime, bounded by
/// [`MariaDbOptions::sql_timeout`]) and async form ([`MariaDb::conn`]).
#[derive(Debug)]
pub struct MariaDb {
    pub(crate) opts: MariaDbOptions,
    pub(crate) layout: Layout,
    pub(crate) port: u16,
    child: Option<Child>,
    /// Owned temp dir (`None` with a caller-given base dir).
    temp: Option<tempfile::TempDir>,
    mariadbd: PathBuf,
}

impl MariaDb {
    /// Initialises a data dir (unless the base dir already holds one), starts `mariadbd` with the profile's
    /// option file on a free loopback port, waits until root can log in, and on the first start sets the root
    /// password ([`ROOT_PASSWORD`]) with `sql_log_bin=0`, so `@@gtid_binlog_pos` of a fresh server is empty.
    pub fn start(opts: MariaDbOptions) -> Result<MariaDb, TestkitError> {
        opts.validate().map_err(TestkitError::InvalidOptions)?;
        let mariadbd = find_program("mariadbd")?;
        let install_db = find_program("mariadb-install-db")?;

        let (temp, base) = match &opts.base_dir {
            Some(dir) => {
                fs::create_dir_all(dir).map_err(|e| TestkitError::io(format!("create {}", dir.display()), e))?;
                (None, dir.clone())
            }
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("pxmdb-")
                    .tempdir()
                    .map_err(|e| TestkitError::io("create temp dir for mariadbd", e))?;
                let path = dir.path().to_path_buf();
                (Some(dir), path)
            }
        };
        let layout = Layout::new(&base);
        // sun_path holds 108 bytes including the terminating NUL.
        let socket_len = layout.socket.as_os_str().len();
        if socket_len >= 108 {
            return Err(TestkitError::InvalidOptions(format!(
                "socket path {} is {socket_len} bytes; a unix socket path must be shorter than 108",
                layout.socket.display()
            )));
        }

        let mut db = MariaDb { opts, layout, port: 0, child: None, temp, mariadbd };
        // From here on, an early return drops `db`, which cleans up the dir (unless kept).
        fs::create_dir_all(&db.layout.tmp_dir)
            .map_err(|e| TestkitError::io(format!("create {}", db.layout.tmp_dir.display()), e))?;
        db.port = pick_free_port()?;
        db.write_option_file()?;
        if !db.layout.data_dir.join("mysql").is_dir() {
            db.install_db(&install_db)?;
        }
        let mut attempt = 1;
        loop {
            match db.launch() {
                Ok(()) => break,
                Err(TestkitError::ServerExited { log_tail, .. })
                    if attempt < PORT_ATTEMPTS && log_tail.contains("Address already in use") =>
                {
                    // Another process took the port between our probe and mariadbd's bind.
                    attempt += 1;
                    db.port = pick_free_port()?;
                    db.write_option_file()?;
                }
                Err(e) => return Err(e),
            }
        }
        if !db.layout.setup_marker.exists() {
            db.initial_setup()?;
        }
        Ok(db)
    }

    /// Starts the server again with the same option file, port and data dir, after [`MariaDb::kill9`],
    /// [`MariaDb::stop`] or a crash. With `init-rpl-role=SLAVE` (all profiles) MariaDB rolls back prepared
    /// transactions and truncates an un-ACKed binlog tail during this start (docs/ARCHITECTURE.md §5).
    ///
    /// Beware: that also rolls back the LAST commits that returned to the client (semi-sync ACKed or not) if
    /// the kill came before InnoDB flushed their commit records (MDEV-232: with the binlog on, InnoDB does not
    /// fsync at commit; the next transaction's prepare or the once-a-second flush does). Normal recovery would
    /// commit them from the binlog. Tests that expect data to survive kill -9 should commit one more
    /// transaction after it.
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        if let Some(pid) = self.running_pid() {
            return Err(TestkitError::AlreadyRunning { pid });
        }
        self.launch()
    }

    /// SIGKILL, then waits (bounded) until the process is gone. The way a master must be stopped (docs/ARCHITECTURE.md §3).
    pub fn kill9(&mut self) -> Result<(), TestkitError> {
        let Some(mut child) = self.child.take() else {
            return Err(TestkitError::NotRunning);
        };
        kill_and_reap(&mut child)
    }

    /// Clean shutdown (SIGTERM), bounded; falls back to SIGKILL and reports [`TestkitError::ExitTimeout`].
    ///
    /// Never do this to a production master: a clean shutdown commits every transaction that waits for a
    /// semi-sync ACK (docs/ARCHITECTURE.md §3). Tests may.
    pub fn stop(&mut self) -> Result<(), TestkitError> {
        let Some(mut child) = self.child.take() else {
            return Err(TestkitError::NotRunning);
        };
        let pid = child.id();
        if child.try_wait().ok().flatten().is_some() {
            return Ok(());
        }
        // SAFETY: plain kill(2) on our own child, which is not reaped yet, so the pid cannot be reused.
        let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        if rc != 0 {
            return Err(TestkitError::io(format!("SIGTERM mariadbd pid {pid}"), std::io::Error::last_os_error()));
        }
        match wait_exit(&mut child, STOP_WAIT) {
            Some(_) => Ok(()),
            None => {
                kill_and_reap(&mut child)?;
                Err(TestkitError::ExitTimeout { pid, signal: "SIGTERM", timeout_ms: STOP_WAIT.as_millis() })
            }
        }
    }

    /// Kills the server if running (SIGKILL) and then starts it again: a crash-restart.
    pub fn crash_restart(&mut self) -> Result<(), TestkitError> {
        if self.child.is_some() {
            self.kill9()?;
        }
        self.restart()
    }

    /// True while the process runs (it may still be starting or shutting down).
    pub fn is_running(&mut self) -> bool {
        self.running_pid().is_some()
    }

    fn running_pid(&mut self) -> Option<u32> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(None) => Some(child.id()),
            // Exited on its own (crash) or we cannot tell: treat as not running, and reap it.
            _ => {
                self.child = None;
                None
            }
        }
    }

    /// Process id while the server runs (as far as this handle knows: a crash shows only after
    /// [`MariaDb::is_running`]).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// TCP port on 127.0.0.1. Stays the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Unix socket path.
    pub fn socket_path(&self) -> &Path {
        &self.layout.socket
    }

    /// The data dir (`datadir`), where the binlogs live too.
    pub fn data_dir(&self) -> &Path {
        &self.layout.data_dir
    }

    /// The base dir holding data dir, logs, socket and option file.
    pub fn base_dir(&self) -> &Path {
        &self.layout.base
    }

    /// The error log (`log-error`).
    pub fn error_log_path(&self) -> &Path {
        &self.layout.error_log
    }

    /// The option file mariadbd runs with (`--defaults-file`).
    pub fn option_file_path(&self) -> &Path {
        &self.layout.option_file
    }

    /// `server-id` from the options (a test may change the running value with `SET GLOBAL server_id`).
    pub fn server_id(&self) -> u32 {
        self.opts.server_id
    }

    /// The profile the server was started with.
    pub fn profile(&self) -> Profile {
        self.opts.profile
    }

    /// The options the server was started with.
    pub fn options(&self) -> &MariaDbOptions {
        &self.opts
    }

    /// `mysql://root:<password>@127.0.0.1:<port>`, usable with `mysql_async::Opts::from_url` and most clients.
    /// (mysql_async switches such a URL to the unix socket unless `prefer_socket=false` is appended;
    /// [`MariaDb::opts`] already sets it.)
    pub fn root_url(&self) -> String {
        format!("mysql://root:{ROOT_PASSWORD}@127.0.0.1:{}", self.port)
    }

    /// Arguments for the `mariadb` CLI to log in as root over TCP.
    pub fn cli_args(&self) -> Vec<String> {
        vec![
            "--protocol=TCP".into(),
            "-h127.0.0.1".into(),
            format!("-P{}", self.port),
            "-uroot".into(),
            format!("-p{ROOT_PASSWORD}"),
        ]
    }

    /// The last `lines` lines of the error log (empty if there is none yet).
    pub fn error_log_tail(&self, lines: usize) -> String {
        tail_of_file(&self.layout.error_log, 0, lines)
    }

    fn write_option_file(&self) -> Result<(), TestkitError> {
        // SAFETY: geteuid has no preconditions.
        let as_root = unsafe { libc::geteuid() } == 0;
        let text = render_option_file(&self.opts, &self.layout, self.port, as_root);
        fs::write(&self.layout.option_file, text)
            .map_err(|e| TestkitError::io(format!("write {}", self.layout.option_file.display()), e))
    }

    fn install_db(&self, install_db: &Path) -> Result<(), TestkitError> {
        let log = fs::File::create(&self.layout.install_log)
            .map_err(|e| TestkitError::io(format!("create {}", self.layout.install_log.display()), e))?;
        let log2 = log.try_clone().map_err(|e| TestkitError::io("dup install log handle", e))?;
        let mut cmd = Command::new(install_db);
        cmd.arg(format!("--defaults-file={}", self.layout.option_file.display()))
            // root@localhost / root@127.0.0.1 / root@::1 with an empty password; initial_setup() sets one.
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            // No root@<hostname> entry, which skip-name-resolve would ignore with a warning at every start.
            .arg("--skip-name-resolve")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        let mut child =
            spawn_tied_to_process(cmd).map_err(|e| TestkitError::io(format!("run {}", install_db.display()), e))?;
        let status = match wait_exit(&mut child, self.opts.start_timeout) {
            Some(status) => status,
            None => {
                kill_and_reap(&mut child)?;
                return Err(TestkitError::InvalidOptions(format!(
                    "mariadb-install-db did not finish within {} ms; see {}",
                    self.opts.start_timeout.as_millis(),
                    self.layout.install_log.display()
                )));
            }
        };
        if !status.success() {
            return Err(TestkitError::InstallDbFailed {
                status,
                data_dir: self.layout.data_dir.clone(),
                log_tail: format!(
                    "{}\n--- {} ---\n{}",
                    tail_of_file(&self.layout.install_log, 0, 8),
                    self.layout.error_log.display(),
                    tail_of_file(&self.layout.error_log, 0, LOG_TAIL_LINES)
                ),
            });
        }
        Ok(())
    }

    /// Spawns mariadbd and waits until root can log in over TCP.
    fn launch(&mut self) -> Result<(), TestkitError> {
        let log_offset = fs::metadata(&self.layout.error_log).map(|m| m.len()).unwrap_or(0);
        let stdout_offset = fs::metadata(&self.layout.stdout_log).map(|m| m.len()).unwrap_or(0);
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.layout.stdout_log)
            .map_err(|e| TestkitError::io(format!("open {}", self.layout.stdout_log.display()), e))?;
        let err = out.try_clone().map_err(|e| TestkitError::io("dup stdout log handle", e))?;
        let mut cmd = Command::new(&self.mariadbd);
        cmd.arg(format!("--defaults-file={}", self.layout.option_file.display()))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let child =
            spawn_tied_to_process(cmd).map_err(|e| TestkitError::io(format!("run {}", self.mariadbd.display()), e))?;
        let pid = child.id();
        self.child = Some(child);

        let password = if self.layout.setup_marker.exists() { ROOT_PASSWORD } else { "" };
        let deadline = Instant::now() + self.opts.start_timeout;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(self.exited_error(status, log_offset, stdout_offset));
                }
            }
            let last_error = match self.ping(password) {
                Ok(()) => return Ok(()),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                if let Some(mut child) = self.child.take() {
                    kill_and_reap(&mut child)?;
                }
                return Err(TestkitError::StartTimeout {
                    pid,
                    port: self.port,
                    timeout_ms: self.opts.start_timeout.as_millis(),
                    last_error,
                    error_log: self.layout.error_log.clone(),
                    log_tail: tail_of_file(&self.layout.error_log, log_offset, LOG_TAIL_LINES),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn exited_error(&self, status: ExitStatus, log_offset: u64, stdout_offset: u64) -> TestkitError {
        let mut log_tail = tail_of_file(&self.layout.error_log, log_offset, LOG_TAIL_LINES);
        let stdout_tail = tail_of_file(&self.layout.stdout_log, stdout_offset, LOG_TAIL_LINES);
        if !stdout_tail.trim().is_empty() {
            log_tail.push_str("\n--- stdout/stderr ---\n");
            log_tail.push_str(&stdout_tail);
        }
        TestkitError::ServerExited { status, error_log: self.layout.error_log.clone(), log_tail }
    }

    /// First start only: give root a password without writing the binlog, so the GTID state stays empty and
    /// a master-profile server does not wait for a semi-sync ACK.
    fn initial_setup(&self) -> Result<(), TestkitError> {
        let pw = crate::admin::quote(ROOT_PASSWORD);
        let stmts = [
            "SET sql_log_bin=0".to_string(),
            format!("ALTER USER 'root'@'localhost' IDENTIFIED BY {pw}"),
            format!("ALTER USER 'root'@'127.0.0.1' IDENTIFIED BY {pw}"),
            format!("ALTER USER 'root'@'::1' IDENTIFIED BY {pw}"),
        ];
        self.exec_batch_as("root", "", &stmts)?;
        fs::write(&self.layout.setup_marker, b"root password set\n")
            .map_err(|e| TestkitError::io(format!("write {}", self.layout.setup_marker.display()), e))
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Err(e) = kill_and_reap(&mut child) {
                eprintln!("mariadb-testkit: {e}");
            }
        }
        if let Some(temp) = self.temp.take() {
            if self.opts.keep_dir {
                let path = temp.keep();
                eprintln!("mariadb-testkit: kept {} (server port {})", path.display(), self.port);
            } else if let Err(e) = temp.close() {
                eprintln!("mariadb-testkit: cannot remove {}: {e}", self.layout.base.display());
            }
        }
    }
}

/// SIGKILL and wait, bounded.
fn kill_and_reap(child: &mut Child) -> Result<(), TestkitError> {
    let pid = child.id();
    if child.try_wait().ok().flatten().is_some() {
        return Ok(());
    }
    // Fails only if the child already exited, which the wait below handles.
    let _ = child.kill();
    match wait_exit(child, KILL_WAIT) {
        Some(_) => Ok(()),
        None => Err(TestkitError::ExitTimeout { pid, signal: "SIGKILL", timeout_ms: KILL_WAIT.as_millis() }),
    }
}

/// Polls until the child exits or `bound` passes.
fn wait_exit(child: &mut Child, bound: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + bound;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            // ECHILD: already reaped elsewhere; nothing left to wait for.
            Err(_) => return Some(std::os::unix::process::ExitStatusExt::from_raw(0)),
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Looks `program` up on PATH, then in /usr/sbin and /usr/bin (sbin is often missing from PATH).
pub(crate) fn find_program(program: &'static str) -> Result<PathBuf, TestkitError> {
    let path_dirs = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default();
    path_dirs
        .into_iter()
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
        .ok_or(TestkitError::MissingProgram { program })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    fs::metadata(path).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

/// A loopback port nobody listens on right now, and that this process has not handed out before (servers of
/// one test binary would otherwise race for the same port). The kernel may still give it to someone else before
/// mariadbd binds it; [`MariaDb::start`] retries then.
fn pick_free_port() -> Result<u16, TestkitError> {
    static HANDED_OUT: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    let handed_out = HANDED_OUT.get_or_init(|| Mutex::new(HashSet::new()));
    for _ in 0..100 {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| TestkitError::io("bind 127.0.0.1:0 to find a free port", e))?;
        let port =
            listener.local_addr().map_err(|e| TestkitError::io("read the port of a 127.0.0.1:0 listener", e))?.port();
        drop(listener);
        let mut set = handed_out.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if set.insert(port) {
            return Ok(port);
        }
    }
    Err(TestkitError::InvalidOptions("no fresh loopback port found in 100 tries".into()))
}

/// The last `lines` lines of `path` from byte `offset` on (lossy UTF-8; empty if the file is missing).
fn tail_of_file(path: &Path, offset: u64, lines: usize) -> String {
    let mut buf = Vec::new();
    let read = fs::File::open(path).and_then(|mut f| {
        f.seek(SeekFrom::Start(offset))?;
        f.read_to_end(&mut buf)
    });
    if read.is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
