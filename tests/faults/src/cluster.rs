//! The cluster under test: a network namespace the suite creates (node N on 127.0.0.N inside it), a 3-node
//! `paxsql cluster up --address-per-node` started in it, and the process- and network-level levers the nemesis
//! pulls. Dropping [`TestCluster`] stops every process (`cluster down`, after SIGCONT of anything paused) and
//! deletes the namespace, also while unwinding from a panic.
//!
//! Clients reach the nodes from threads that joined the namespace with `setns(2)` ([`Netns::enter_current_thread`]):
//! one process holds every history on one monotonic clock, and sockets opened by such a thread live in the
//! namespace. Tools (iptables, tc, the paxsql binary) run through `ip netns exec`.

use std::fs;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;

use crate::FaultError;

/// A network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn create(name: &str) -> Result<Netns, FaultError> {
        require_tool("ip")?;
        // A namespace left behind by a crashed earlier run of the same name would hold stale rules.
        let _ = Command::new("ip").args(["netns", "del", name]).stderr(Stdio::null()).status();
        run(Command::new("ip").args(["netns", "add", name]))?;
        let ns = Netns { name: name.to_string() };
        run(Command::new("ip").args(["-n", name, "link", "set", "lo", "up"]))?;
        Ok(ns)
    }

    /// Moves the calling thread into the namespace; threads it spawns afterwards start there too.
    pub fn enter_current_thread(&self) -> Result<(), FaultError> {
        let path = format!("/run/netns/{}", self.name);
        let f =
            fs::File::open(&path).map_err(|e| FaultError::Netns { name: self.name.clone(), reason: e.to_string() })?;
        // SAFETY: setns(2) on a namespace file we just opened; it only changes this thread's network namespace.
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc != 0 {
            let reason = format!("setns: {}", std::io::Error::last_os_error());
            return Err(FaultError::Netns { name: self.name.clone(), reason });
        }
        Ok(())
    }

    /// `program` run inside the namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

fn require_tool(tool: &str) -> Result<(), FaultError> {
    let found = Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output().map(|o| o.status.success());
    if found.unwrap_or(false) {
        Ok(())
    } else {
        Err(FaultError::ToolMissing { tool: tool.to_string() })
    }
}

/// Runs a command to completion; an error carries its output.
fn run(cmd: &mut Command) -> Result<String, FaultError> {
    let command = format!("{cmd:?}");
    let out = cmd.output().map_err(|source| FaultError::Spawn { what: command.clone(), source })?;
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        Ok(text)
    } else {
        Err(FaultError::Command { command, output: text.trim().to_string() })
    }
}

/// Where the `paxsql` binary is: `PAXSQL_BIN`, else beside (or one level above) the running executable — a test
/// runs from `target/release/deps/`, `paxsql-faults` from `target/release/`, both next to `paxsql`.
pub fn paxsql_binary() -> Result<PathBuf, FaultError> {
    if let Some(p) = std::env::var_os("PAXSQL_BIN") {
        let p = PathBuf::from(p);
        return if p.is_file() { Ok(p) } else { Err(FaultError::BinaryMissing(p)) };
    }
    let exe = std::env::current_exe().map_err(|source| FaultError::Spawn { what: "current_exe".into(), source })?;
    let mut candidates = Vec::new();
    if let Some(dir) = exe.parent() {
        candidates.push(dir.join("paxsql"));
        if let Some(up) = dir.parent() {
            candidates.push(up.join("paxsql"));
        }
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("target"));
    candidates.push(target.join("release/paxsql"));
    candidates.iter().find(|p| p.is_file()).cloned().ok_or_else(|| FaultError::BinaryMissing(candidates[0].clone()))
}

/// What `cluster.json` says about one node (a subset).
#[derive(Clone, Debug, Deserialize)]
pub struct NodeLayout {
    pub id: u64,
    pub host: String,
    pub mariadb_port: u16,
    pub peer_port: u16,
    pub proxy_rw_port: u16,
    pub dir: PathBuf,
}

#[derive(Clone, Debug, Deserialize)]
struct ClusterFile {
    app_user: String,
    app_password: String,
    app_database: String,
    nodes: Vec<NodeLayout>,
    /// Whether the proxies offer TLS (then every client here verifies them against `tls/ca.pem`).
    #[serde(default)]
    client_tls: bool,
}

/// The application account (no READ ONLY ADMIN, so `read_only` holds it).
#[derive(Clone, Debug)]
pub struct AppAccount {
    pub user: String,
    pub password: String,
    pub database: String,
    /// The cluster CA when the proxy ports offer TLS: clients then connect over TLS and verify the node.
    pub tls_ca: Option<PathBuf>,
}

/// One node as its `status.json` shows it, with how old that file is.
#[derive(Clone, Debug, Default)]
pub struct NodeView {
    pub id: u64,
    pub node_alive: bool,
    pub mariadbd_alive: bool,
    pub holds_lease: bool,
    pub serving_as_master: bool,
    pub master_version: u64,
    /// Until when (wall-clock ms since the Unix epoch) the node held the lease when it wrote the file; 0 if not.
    pub lease_until_unix_ms: u64,
    /// The node rewrites its status every 500 ms; an older file (a paused or dead node) says nothing current.
    pub status_age: Duration,
}

impl NodeView {
    pub fn fresh(&self) -> bool {
        self.node_alive && self.status_age < Duration::from_millis(1500)
    }

    /// The node's own claim, by its last status file, to hold the lease at wall-clock time `now_unix_ms`. The
    /// node writes its lease deadline (all nodes share this machine's clock), so a paused process's old file
    /// does not count as a claim once its deadline has passed.
    pub fn claims_lease_at(&self, now_unix_ms: u64) -> bool {
        self.node_alive && self.holds_lease && self.serving_as_master && self.lease_until_unix_ms > now_unix_ms
    }
}

/// A snapshot of every node.
#[derive(Clone, Debug, Default)]
pub struct ClusterView {
    pub nodes: Vec<NodeView>,
}

impl ClusterView {
    /// The node serving the newest master term, by fresh status files.
    pub fn master(&self) -> Option<u64> {
        self.nodes.iter().filter(|n| n.fresh() && n.serving_as_master).max_by_key(|n| n.master_version).map(|n| n.id)
    }
}

/// A running cluster in its own namespace. Field order matters: the cluster stops before the namespace goes.
pub struct TestCluster {
    pub dir: PathBuf,
    pub nodes: Vec<NodeLayout>,
    pub app: AppAccount,
    paxsql: PathBuf,
    paused: Mutex<Vec<i32>>,
    children: Mutex<Vec<Child>>,
    /// Keep the cluster directory (logs) after the run, for a failed schedule.
    pub keep_dir: std::sync::atomic::AtomicBool,
    /// Set once every process of the cluster was stopped ([`TestCluster::shutdown`]).
    stopped: std::sync::atomic::AtomicBool,
    pub netns: Netns,
}

impl TestCluster {
    /// Creates namespace `ns_name`, and a cluster in a fresh directory under `parent` with ports from `base_port`.
    pub fn up(ns_name: &str, parent: &Path, base_port: u16) -> Result<TestCluster, FaultError> {
        for tool in ["mariadbd", "mariadb-install-db", "iptables", "tc"] {
            require_tool(tool)?;
        }
        let paxsql = paxsql_binary()?;
        let netns = Netns::create(ns_name)?;
        let dir = parent.join(format!("{ns_name}-cluster"));
        if dir.exists() {
            let _ = Command::new(&paxsql).args(["cluster", "down", "--dir"]).arg(&dir).output();
            let _ = fs::remove_dir_all(&dir);
        }
        let mut c = TestCluster {
            dir: dir.clone(),
            nodes: Vec::new(),
            app: AppAccount { user: String::new(), password: String::new(), database: String::new(), tls_ca: None },
            paxsql: paxsql.clone(),
            paused: Mutex::new(Vec::new()),
            children: Mutex::new(Vec::new()),
            keep_dir: std::sync::atomic::AtomicBool::new(false),
            stopped: std::sync::atomic::AtomicBool::new(false),
            netns,
        };
        let mut cmd = c.netns.command(&paxsql);
        cmd.args(["cluster", "up", "--nodes", "3", "--address-per-node", "--base-port", &base_port.to_string()]);
        cmd.arg("--dir").arg(&dir);
        if let Err(e) = run(&mut cmd) {
            c.keep_dir.store(true, std::sync::atomic::Ordering::Relaxed);
            return Err(e);
        }
        let path = dir.join("cluster.json");
        let text = fs::read_to_string(&path)
            .map_err(|e| FaultError::ClusterFile { path: path.clone(), reason: e.to_string() })?;
        let file: ClusterFile =
            serde_json::from_str(&text).map_err(|e| FaultError::ClusterFile { path, reason: e.to_string() })?;
        c.nodes = file.nodes;
        c.app = AppAccount {
            user: file.app_user,
            password: file.app_password,
            database: file.app_database,
            tls_ca: file.client_tls.then(|| dir.join("tls/ca.pem")),
        };
        Ok(c)
    }

    pub fn ids(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    pub fn node(&self, id: u64) -> &NodeLayout {
        &self.nodes[(id - 1) as usize]
    }

    pub fn node_pid(&self, id: u64) -> Option<i32> {
        read_pid(&self.node(id).dir.join("node.pid")).filter(|p| alive(*p))
    }

    pub fn mariadbd_pid(&self, id: u64) -> Option<i32> {
        read_pid(&self.node(id).dir.join("data/mariadbd.pid")).filter(|p| alive(*p))
    }

    /// Every node's status file, read now.
    pub fn view(&self) -> ClusterView {
        let nodes = self
            .nodes
            .iter()
            .map(|n| {
                let path = n.dir.join("node/status.json");
                let mut v = NodeView {
                    id: n.id,
                    node_alive: self.node_pid(n.id).is_some(),
                    mariadbd_alive: self.mariadbd_pid(n.id).is_some(),
                    status_age: Duration::MAX,
                    ..Default::default()
                };
                if let Ok(meta) = fs::metadata(&path) {
                    let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                    v.status_age = SystemTime::now().duration_since(modified).unwrap_or_default();
                }
                if let Some(st) =
                    fs::read_to_string(&path).ok().and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                {
                    v.holds_lease = st["holds_lease"] == true;
                    v.serving_as_master = st["serving_as_master"] == true;
                    v.master_version = st["master_version"].as_u64().unwrap_or(0);
                    v.lease_until_unix_ms = st["lease_until_unix_ms"].as_u64().unwrap_or(0);
                }
                v
            })
            .collect();
        ClusterView { nodes }
    }

    pub async fn wait_master(&self, timeout: Duration) -> Result<u64, FaultError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(m) = self.view().master() {
                return Ok(m);
            }
            if Instant::now() >= deadline {
                return Err(FaultError::NoMaster { secs: timeout.as_secs() });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Drops `from`'s Paxos traffic towards `to` (one direction): `from`'s requests to `to`'s peer port and
    /// `from`'s answers on connections `to` opened. Client traffic to mariadbd is never cut.
    pub fn drop_one_way(&self, from: u64, to: u64) -> Result<(), FaultError> {
        let (f, t) = (self.node(from), self.node(to));
        let (tp, fp) = (t.peer_port.to_string(), f.peer_port.to_string());
        self.iptables(&["-A", "INPUT", "-s", &f.host, "-d", &t.host, "-p", "tcp", "--dport", &tp, "-j", "DROP"])?;
        self.iptables(&["-A", "INPUT", "-s", &f.host, "-d", &t.host, "-p", "tcp", "--sport", &fp, "-j", "DROP"])
    }

    pub fn cut(&self, a: u64, b: u64) -> Result<(), FaultError> {
        self.drop_one_way(a, b)?;
        self.drop_one_way(b, a)
    }

    pub fn heal_network(&self) -> Result<(), FaultError> {
        self.iptables(&["-F", "INPUT"])?;
        // No qdisc installed is fine.
        let _ = run(self.netns.command("tc").args(["qdisc", "del", "dev", "lo", "root"]));
        Ok(())
    }

    fn iptables(&self, args: &[&str]) -> Result<(), FaultError> {
        run(self.netns.command("iptables").args(args)).map(|_| ())
    }

    /// Slows every packet on the namespace's loopback. `tc netem` where the kernel has it; this machine's kernel
    /// lacks sch_netem, so the fallback is a token bucket (tbf) at `rate_kbit`: queueing delay up to `delay_ms`
    /// under load, drops beyond. Returns what was installed.
    pub fn slow_network(&self, delay_ms: u64, jitter_ms: u64, rate_kbit: u64) -> Result<String, FaultError> {
        let netem = format!("netem delay {delay_ms}ms {jitter_ms}ms");
        let mut cmd = self.netns.command("tc");
        cmd.args(["qdisc", "replace", "dev", "lo", "root"]).args(netem.split(' '));
        if run(&mut cmd).is_ok() {
            return Ok(netem);
        }
        let tbf = format!("tbf rate {rate_kbit}kbit burst 16kb latency {delay_ms}ms");
        let mut cmd = self.netns.command("tc");
        cmd.args(["qdisc", "replace", "dev", "lo", "root"]).args(tbf.split(' '));
        run(&mut cmd)?;
        Ok(tbf)
    }

    pub fn kill9_node(&self, id: u64) {
        if let Some(pid) = self.node_pid(id) {
            self.paused.lock().unwrap_or_else(|e| e.into_inner()).retain(|p| *p != pid);
            kill9(pid);
        }
    }

    pub fn kill9_mariadbd(&self, id: u64) {
        if let Some(pid) = self.mariadbd_pid(id) {
            kill9(pid);
        }
    }

    /// SIGSTOP of node `id`'s process (not its mariadbd).
    pub fn pause_node(&self, id: u64) {
        if let Some(pid) = self.node_pid(id) {
            signal(pid, libc::SIGSTOP);
            self.paused.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
        }
    }

    pub fn resume_all(&self) {
        for pid in self.paused.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            signal(pid, libc::SIGCONT);
        }
    }

    /// Starts node `id`'s process again as `cluster up` does. A port of the killed process can stay busy for a
    /// moment, so a node that exits at once is started again, boundedly.
    pub async fn restart_node(&self, id: u64) -> Result<(), FaultError> {
        let dir = self.node(id).dir.clone();
        for _attempt in 0..20 {
            let log_path = dir.join("log/node-restart.log");
            let log = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .map_err(|source| FaultError::Spawn { what: log_path.display().to_string(), source })?;
            let err = log.try_clone().map_err(|source| FaultError::Spawn { what: "log".into(), source })?;
            let mut child = self
                .netns
                .command(&self.paxsql)
                .args(["node", "--config"])
                .arg(dir.join("node.toml"))
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(err)
                .spawn()
                .map_err(|source| FaultError::Spawn { what: "paxsql node".into(), source })?;
            let _ = fs::write(dir.join("node.pid"), child.id().to_string());
            tokio::time::sleep(Duration::from_secs(1)).await;
            let exited = matches!(child.try_wait(), Ok(Some(_)));
            self.children.lock().unwrap_or_else(|e| e.into_inner()).push(child);
            if !exited {
                return Ok(());
            }
        }
        Err(FaultError::Command { command: format!("paxsql node (node {id})"), output: "exits at once".into() })
    }

    /// The tail of every node's logs, for a failure report.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut s = String::new();
        for n in &self.nodes {
            for f in ["log/node.log", "log/node-restart.log", "log/mariadbd.err"] {
                let p = n.dir.join(f);
                if let Ok(text) = fs::read_to_string(&p) {
                    let all: Vec<&str> = text.lines().collect();
                    s += &format!("--- {} ---\n{}\n", p.display(), all[all.len().saturating_sub(lines)..].join("\n"));
                }
            }
        }
        s
    }
}

impl TestCluster {
    /// Stops every process of the cluster (nodes, and their mariadbds with them), now. Idempotent. The runner calls
    /// it before it moves a failed cluster's directory away: waiting for the last `Arc` to drop let node processes
    /// outlive the rename and run on in the next cluster's directory, which has the same path (seen in a long run:
    /// three node processes and two mariadbds on one data directory).
    pub fn shutdown(&self) {
        if self.stopped.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        self.resume_all();
        let _ = self.heal_network();
        let _ = Command::new(&self.paxsql).args(["cluster", "down", "--dir"]).arg(&self.dir).output();
        for mut child in self.children.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        self.shutdown();
        if !self.keep_dir.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = fs::remove_dir_all(&self.dir);
        }
        // The namespace itself goes when `self.netns` drops, after this.
    }
}

pub fn read_pid(path: &Path) -> Option<i32> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Alive and not a zombie.
pub fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) on a pid read from the cluster's own pid files, checked alive just before.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// SIGKILL, and wait (bounded) until the process is gone so that its ports are free again.
pub fn kill9(pid: i32) {
    signal(pid, libc::SIGKILL);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && alive(pid) {
        std::thread::sleep(Duration::from_millis(20));
    }
}
