//! Helpers for the cluster tests: a local cluster started with the real `paxsql` binary, real mariadbd servers
//! and the real `mariadb` client, always torn down (also on panic).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn paxsql() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_paxsql"))
}

/// Adds what an operator's tool (`paxsql status|switchover|member …`) needs to reach a cluster on its own: every
/// peer port, the cluster id, the cluster secret and the operator's certificate, from `dir` — a local cluster's
/// directory and the `operator/` of `paxsql init` hold them under the same names.
pub fn operator_args<'c>(cmd: &'c mut Command, peers: &[String], cluster_id: &str, dir: &Path) -> &'c mut Command {
    cmd.args(["--peers", &peers.join(","), "--cluster-id", cluster_id])
        .arg("--secret-file")
        .arg(dir.join("secrets/cluster.secret"))
        .arg("--tls-ca")
        .arg(dir.join("tls/ca.pem"))
        .arg("--tls-cert")
        .arg(dir.join("tls/operator.pem"))
        .arg("--tls-key")
        .arg(dir.join("tls/operator.key"))
}

/// A running local cluster; `Drop` runs `paxsql cluster down` (and deletes its network namespace, if any).
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub info: Value,
    /// The network namespace the test created for this cluster: every node on its own loopback address inside it.
    pub netns: Option<String>,
}

/// A command, run inside `netns` when there is one.
fn command(netns: &Option<String>, program: impl AsRef<std::ffi::OsStr>) -> Command {
    match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

pub fn require_mariadb() {
    for tool in ["mariadbd", "mariadb", "mariadb-install-db"] {
        let found = Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output().map(|o| o.status.success());
        assert!(found.unwrap_or(false), "{tool} is missing: run deploy/install-deps.sh");
    }
}

impl Cluster {
    pub fn up(nodes: u64, base_port: u16) -> Cluster {
        Self::start(nodes, base_port, None, |_| {})
    }

    /// Like [`Cluster::up`], with more `cluster up` arguments (e.g. `--require-tls`).
    pub fn up_with(nodes: u64, base_port: u16, args: &[&str]) -> Cluster {
        Self::start_with(nodes, base_port, None, |_| {}, args)
    }

    /// Like [`Cluster::up`], with `prepare` run on the (empty) cluster directory before `cluster up` fills it, e.g.
    /// to put a node's directories on a filesystem of the test's own.
    pub fn up_prepared(nodes: u64, base_port: u16, prepare: impl FnOnce(&Path)) -> Cluster {
        Self::start(nodes, base_port, None, prepare)
    }

    /// A cluster inside a network namespace created for it, node N on 127.0.0.N, so that the test can cut
    /// links between nodes with iptables without touching the machine's own network.
    pub fn up_in_netns(nodes: u64, base_port: u16) -> Cluster {
        let ns = format!("paxsql-t{}-{base_port}", std::process::id());
        let ok = |args: &[&str]| Command::new("ip").args(args).status().map(|s| s.success()).unwrap_or(false);
        assert!(
            ok(&["netns", "add", &ns]),
            "cannot create network namespace {ns} (needs root and iproute2: deploy/install-deps.sh)"
        );
        assert!(ok(&["-n", &ns, "link", "set", "lo", "up"]), "cannot bring up lo in {ns}");
        Self::start(nodes, base_port, Some(ns), |_| {})
    }

    fn start(nodes: u64, base_port: u16, netns: Option<String>, prepare: impl FnOnce(&Path)) -> Cluster {
        Self::start_with(nodes, base_port, netns, prepare, &[])
    }

    fn start_with(
        nodes: u64,
        base_port: u16,
        netns: Option<String>,
        prepare: impl FnOnce(&Path),
        args: &[&str],
    ) -> Cluster {
        require_mariadb();
        let dir = tempfile::Builder::new().prefix("paxsql-cluster-").tempdir().expect("temp dir");
        prepare(dir.path());
        let mut cmd = command(&netns, paxsql());
        cmd.args(["cluster", "up", "--nodes", &nodes.to_string(), "--base-port", &base_port.to_string(), "--dir"]);
        cmd.arg(dir.path());
        if netns.is_some() {
            cmd.arg("--address-per-node");
        }
        cmd.args(args);
        let out = cmd.output().expect("run paxsql cluster up");
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        let mut c = Cluster { dir, info: Value::Null, netns };
        assert!(out.status.success(), "cluster up failed:\n{text}\n{}", c.logs());
        c.info = c.status();
        eprintln!("{text}");
        c
    }

    pub fn status(&self) -> Value {
        let out = command(&None, paxsql())
            .args(["cluster", "status", "--json", "--dir"])
            .arg(self.dir.path())
            .output()
            .expect("run paxsql cluster status");
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    }

    pub fn node_dir(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("n{id}"))
    }

    /// The master and its term (master_version), if one serves.
    pub fn master_term(&self) -> Option<(u64, u64)> {
        let st = self.status();
        let m = st["master"].as_u64()?;
        let v = node_of(&st, m)["master_version"].as_u64()?;
        Some((m, v))
    }

    /// Waits for a master serving a term after `term`.
    pub fn wait_new_term(&self, term: u64, timeout: Duration) -> (u64, u64) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((m, v)) = self.master_term() {
                if v > term {
                    return (m, v);
                }
            }
            assert!(Instant::now() < deadline, "no new master term within {timeout:?}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn master(&self) -> Option<u64> {
        self.status()["master"].as_u64()
    }

    pub fn port(&self, id: u64) -> u16 {
        self.endpoint(id, "mariadb").1
    }

    /// (host, port) of one of node `id`'s endpoints: "mariadb", "peer" or "replication".
    pub fn endpoint(&self, id: u64, which: &str) -> (String, u16) {
        let st = self.status();
        let ep = node_of(&st, id)["endpoints"][which].as_str().unwrap_or("").to_string();
        let (host, port) = ep.rsplit_once(':').expect("host:port in status");
        (host.to_string(), port.parse().expect("port"))
    }

    /// Cuts node `id` off from every other node's Paxos traffic, both ways (inside the cluster's namespace).
    pub fn isolate(&self, id: u64, nodes: &[u64]) {
        let (host, port) = self.endpoint(id, "peer");
        self.iptables(&["-A", "INPUT", "-p", "tcp", "--dport", &port.to_string(), "-j", "DROP"]);
        for &other in nodes.iter().filter(|n| **n != id) {
            let (_, p) = self.endpoint(other, "peer");
            self.iptables(&["-A", "INPUT", "-s", &host, "-p", "tcp", "--dport", &p.to_string(), "-j", "DROP"]);
        }
    }

    pub fn heal(&self) {
        self.iptables(&["-F", "INPUT"]);
    }

    fn iptables(&self, args: &[&str]) {
        let ns = self.netns.as_ref().expect("network faults need a cluster in its own namespace");
        let ok = Command::new("ip").args(["netns", "exec", ns, "iptables"]).args(args).status().map(|s| s.success());
        assert!(ok.unwrap_or(false), "iptables {args:?} in {ns} failed (deploy/install-deps.sh installs iptables)");
    }

    pub fn password(&self) -> String {
        let file = self.info["application_account"]["password_file"].as_str().unwrap_or("");
        std::fs::read_to_string(file).map(|p| p.trim().to_string()).unwrap_or_default()
    }

    /// Waits for a master other than `not`, returns it.
    pub fn wait_master(&self, not: Option<u64>, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(m) = self.master() {
                if Some(m) != not {
                    return m;
                }
            }
            assert!(Instant::now() < deadline, "no new master within {timeout:?}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs SQL as the application account on node `id`, with a time limit. Ok(stdout) or Err(stderr).
    pub fn sql(&self, id: u64, sql: &str, timeout: Duration) -> Result<String, String> {
        self.sql_via(id, "mariadb", sql, timeout)
    }

    /// Like [`Cluster::sql`], through node `id`'s endpoint `which`: "mariadb" is the server's unix socket (a
    /// replica's mariadbd refuses TCP logins); "mariadb_tcp", "proxy_rw" and "proxy_ro" are TCP without TLS, so
    /// that a proxy's ERR packet reads plainly.
    pub fn sql_via(&self, id: u64, which: &str, sql: &str, timeout: Duration) -> Result<String, String> {
        self.client_sql(id, which, ("app", &self.password()), Some("app"), sql, timeout)
    }

    /// [`Cluster::sql_via`] with the statements read from `script` (the client's standard input), for statements
    /// longer than one command-line argument may be.
    pub fn sql_script_via(&self, id: u64, which: &str, script: &Path, timeout: Duration) -> Result<String, String> {
        let stdin = std::fs::File::open(script).map_err(|e| format!("{}: {e}", script.display()))?;
        let out = self
            .client_command(id, which, timeout)
            .args(["-uapp", "--max-allowed-packet=64M", "app"])
            .env("MYSQL_PWD", self.password())
            .stdin(stdin)
            .output()
            .map_err(|e| e.to_string())?;
        cli_outcome(out)
    }

    /// [`Cluster::sql_via`] as another account (user, password), with no default database.
    pub fn sql_as(&self, id: u64, which: &str, account: (&str, &str), sql: &str) -> Result<String, String> {
        self.client_sql(id, which, account, None, sql, Duration::from_secs(10))
    }

    /// `sql` with the `mariadb` client to node `id`'s endpoint `which`, as `account` (user, password),
    /// inside the cluster's namespace if it has one (network faults only ever cut Paxos traffic, so clients reach
    /// every node).
    fn client_sql(
        &self,
        id: u64,
        which: &str,
        account: (&str, &str),
        database: Option<&str>,
        sql: &str,
        timeout: Duration,
    ) -> Result<String, String> {
        run_cli(self.client_command(id, which, timeout), account, database, sql)
    }

    /// The `mariadb` client (batch mode, within `timeout`) pointed at node `id`'s endpoint `which`, inside the
    /// cluster's namespace if it has one; account and SQL are the caller's to add.
    fn client_command(&self, id: u64, which: &str, timeout: Duration) -> Command {
        let mut cmd = command(&self.netns, "timeout");
        cmd.arg(format!("{}", timeout.as_secs_f64())).args(["mariadb", "-N", "-B"]);
        if which == "mariadb" {
            cmd.arg(format!("--socket={}", self.node_dir(id).join("run/mysqld.sock").display()));
        } else {
            // "mariadb_tcp": the server's TCP port, which only the master's mariadbd answers.
            let (host, port) = self.endpoint(id, which.strip_suffix("_tcp").unwrap_or(which));
            cmd.args(["--protocol=tcp", "--skip-ssl"]).arg(format!("-h{host}")).arg(format!("-P{port}"));
        }
        cmd
    }

    /// `sql` through node `id`'s TCP endpoint `which` over TLS that verifies the node's certificate against the
    /// cluster CA, as `account`; `extra` arguments go to the `mariadb` client too.
    pub fn tls_sql(
        &self,
        id: u64,
        which: &str,
        account: (&str, &str),
        extra: &[&str],
        sql: &str,
    ) -> Result<String, String> {
        let (host, port) = self.endpoint(id, which);
        let mut cmd = command(&self.netns, "timeout");
        cmd.args(["10", "mariadb", "-N", "-B", "--protocol=tcp", "--ssl-verify-server-cert"])
            .arg(format!("--ssl-ca={}", self.dir.path().join("tls/ca.pem").display()))
            .arg(format!("-h{host}"))
            .arg(format!("-P{port}"));
        run_cli(cmd, account, extra, sql)
    }

    /// `host:port` of the RW port of each node in `order`.
    pub fn rw_endpoints(&self, order: &[u64]) -> Vec<String> {
        order
            .iter()
            .map(|n| {
                let (h, p) = self.endpoint(*n, "proxy_rw");
                format!("{h}:{p}")
            })
            .collect()
    }

    /// The client library as the application account, on the RW ports of the nodes in `order` (the first is used
    /// until it fails), riding through failovers of up to 30 s.
    pub fn app_client(&self, order: &[u64]) -> paxsql_client::Client {
        paxsql_client::Client::builder()
            .endpoints(self.rw_endpoints(order))
            .user("app")
            .password(self.password())
            .database("app")
            .failover_deadline(Duration::from_secs(30))
            .build()
            .expect("client")
    }

    /// The admin SQL port's account (user, password).
    pub fn admin_account(&self) -> (String, String) {
        let pw = std::fs::read_to_string(self.dir.path().join("secrets/admin_sql.password")).unwrap_or_default();
        ("paxsql".to_string(), pw.trim().to_string())
    }

    /// Runs SQL as root over node `id`'s unix socket with the admin password: what an operator on the machine
    /// has, outside every proxy.
    pub fn root_sql(&self, id: u64, sql: &str) -> Result<String, String> {
        let pw = std::fs::read_to_string(self.dir.path().join("secrets/admin.password")).map_err(|e| e.to_string())?;
        let out = Command::new("timeout")
            .args(["10", "mariadb", "-uroot", "-N", "-B"])
            .arg(format!("--socket={}", self.node_dir(id).join("run/mysqld.sock").display()))
            .env("MYSQL_PWD", pw.trim())
            .arg("-e")
            .arg(sql)
            .output()
            .map_err(|e| e.to_string())?;
        cli_outcome(out)
    }

    pub fn kill9_mariadbd(&self, id: u64) {
        let pid = read_pid(&self.node_dir(id).join("data/mariadbd.pid")).expect("mariadbd pid");
        kill9(pid);
    }

    pub fn kill9_node(&self, id: u64) {
        let pid = read_pid(&self.node_dir(id).join("node.pid")).expect("node pid");
        kill9(pid);
    }

    /// kill -9 of each node's process and of its mariadbd, as if its machine died.
    pub fn kill9_nodes(&self, ids: &[u64]) {
        for &id in ids {
            self.kill9_node(id);
            self.kill9_mariadbd(id);
        }
    }

    /// SIGSTOP node `id`'s process (it stops answering its peers, as if its machine froze).
    pub fn pause_node(&self, id: u64) {
        let pid = read_pid(&self.node_dir(id).join("node.pid")).expect("node pid");
        let _ = Command::new("kill").arg("-STOP").arg(pid.to_string()).status();
    }

    /// SIGCONT node `id`'s process.
    pub fn resume_node(&self, id: u64) {
        let pid = read_pid(&self.node_dir(id).join("node.pid")).expect("node pid");
        let _ = Command::new("kill").arg("-CONT").arg(pid.to_string()).status();
    }

    /// Waits until node `id`'s log (after a restart) contains `text`.
    pub fn wait_log(&self, id: u64, file: &str, text: &str, timeout: Duration) {
        let path = self.node_dir(id).join(file);
        let deadline = Instant::now() + timeout;
        while !std::fs::read_to_string(&path).unwrap_or_default().contains(text) {
            assert!(Instant::now() < deadline, "node {id}: no `{text}` in {file} within {timeout:?}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Starts node `id`'s process again (as `cluster up` does). A port of the killed process can stay busy for a
    /// moment (seen in CI: "Address already in use"), so a node that exits at once is started again, boundedly.
    pub fn restart_node(&self, id: u64) {
        let dir = self.node_dir(id);
        for attempt in 0..20 {
            let log = std::fs::File::create(dir.join("log/node-restart.log")).expect("log");
            let mut child = command(&self.netns, paxsql())
                .args(["node", "--config"])
                .arg(dir.join("node.toml"))
                .stdout(log.try_clone().expect("log"))
                .stderr(log)
                .spawn()
                .expect("spawn node");
            std::fs::write(dir.join("node.pid"), child.id().to_string()).expect("pid file");
            std::thread::sleep(Duration::from_secs(1));
            match child.try_wait() {
                Ok(Some(status)) => eprintln!("node {id} restart attempt {attempt} exited with {status}; retrying"),
                _ => return,
            }
        }
        panic!("node {id} did not start again\n{}", self.logs());
    }

    /// Waits until `sql` gives `expected` on every node listed.
    pub fn wait_all(&self, nodes: &[u64], sql: &str, expected: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        for &id in nodes {
            loop {
                let got = self.sql(id, sql, Duration::from_secs(5));
                if got.as_deref() == Ok(expected) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "node {id}: `{sql}` gave {got:?}, want {expected:?}\n{}",
                    self.logs()
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }

    /// The tail of every node's log, for failure messages.
    /// Runs SQL on node `id`'s admin SQL port as the admin account (inside the cluster's namespace, if any).
    pub fn admin_sql(&self, id: u64, sql: &str) -> Result<String, String> {
        let pw =
            std::fs::read_to_string(self.dir.path().join("secrets/admin_sql.password")).map_err(|e| e.to_string())?;
        self.client_sql(id, "admin_sql", ("paxsql", pw.trim()), None, sql, Duration::from_secs(10))
    }

    /// Node `id`'s `members_reachable` as its admin SQL port reports it (itself included).
    pub fn members_reachable(&self, id: u64) -> Option<u64> {
        let out = self.admin_sql(id, "SHOW STATUS LIKE 'members_reachable'").ok()?;
        out.split_whitespace().nth(1)?.parse().ok()
    }

    /// Node `id`'s Prometheus text from `/metrics`.
    pub fn metrics(&self, id: u64) -> String {
        use std::io::{Read, Write};
        let (host, port) = self.endpoint(id, "metrics");
        let mut s = std::net::TcpStream::connect((host.as_str(), port)).expect("metrics port");
        s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("request");
        let mut body = String::new();
        let _ = s.read_to_string(&mut body);
        body
    }

    /// On a failed test, with `PAXSQL_TEST_LOGS=DIR` set, copies every node's whole logs (the panic message holds
    /// only their tails) to DIR/<cluster dir name>/nN/, for a failure that does not reproduce at will.
    fn keep_logs(&self) {
        let Some(root) = std::env::var_os("PAXSQL_TEST_LOGS") else { return };
        let Some(name) = self.dir.path().file_name() else { return };
        for id in 1..=8 {
            let from = self.node_dir(id).join("log");
            let Ok(entries) = std::fs::read_dir(&from) else { continue };
            let to = Path::new(&root).join(name).join(format!("n{id}"));
            if std::fs::create_dir_all(&to).is_err() {
                return;
            }
            for e in entries.flatten() {
                let _ = std::fs::copy(e.path(), to.join(e.file_name()));
            }
        }
        eprintln!("node logs kept in {}", Path::new(&root).join(name).display());
    }

    pub fn logs(&self) -> String {
        let mut s = String::new();
        for id in 1..=8 {
            for f in ["log/node.log", "log/node-restart.log", "log/mariadbd.err"] {
                let p = self.node_dir(id).join(f);
                if let Ok(text) = std::fs::read_to_string(&p) {
                    let lines: Vec<&str> = text.lines().collect();
                    let tail = lines[lines.len().saturating_sub(15)..].join("\n");
                    s += &format!("--- {} ---\n{tail}\n", p.display());
                }
            }
        }
        s
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = command(&self.netns, paxsql()).args(["cluster", "down", "--dir"]).arg(self.dir.path()).output();
        if std::thread::panicking() {
            self.keep_logs();
        }
        if let Some(ns) = &self.netns {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Ok(stdout) of a `mariadb` CLI run that succeeded, or Err(exit code and stderr).
/// Runs a prepared `mariadb` command as `account` (the password through the environment, never the command line).
fn run_cli<I, S>(mut cmd: Command, account: (&str, &str), extra: I, sql: &str) -> Result<String, String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let out = cmd
        .arg(format!("-u{}", account.0))
        .args(extra)
        .env("MYSQL_PWD", account.1)
        .arg("-e")
        .arg(sql)
        .output()
        .map_err(|e| e.to_string())?;
    cli_outcome(out)
}

fn cli_outcome(out: std::process::Output) -> Result<String, String> {
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!("exit {:?}: {}", out.status.code(), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Node `id`'s entry in `cluster status --json` (nodes come and go: their ids need not be 1..=n).
pub fn node_of(status: &Value, id: u64) -> Value {
    status["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["id"].as_u64() == Some(id)).cloned())
        .unwrap_or(Value::Null)
}

pub fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether `pid` runs: a zombie (state Z) holds no sockets any more and counts as gone.
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
}

/// SIGKILL, and wait (bounded) until the process is gone, so that its ports are free again.
pub fn kill9(pid: i32) {
    let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if !alive(pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value of the first sample whose series name starts with `name` (labels follow it).
pub fn sample(body: &str, name: &str) -> Option<f64> {
    body.lines().find(|l| l.starts_with(name))?.rsplit(' ').next()?.parse().ok()
}
