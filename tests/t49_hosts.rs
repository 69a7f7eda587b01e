//! A cluster on three "hosts" (issue 14, item 5): three network namespaces on one bridge, each with its own
//! address (10.231.0.1-3), like three machines on a LAN. `paxsql init --hosts … --in-place` writes the bundles;
//! each host runs exactly what deploy/systemd/paxsql-node.service runs — `paxsql init-host --dir D` as root, then
//! `paxsql node --config D/node.toml` as the `mysql` account — from the generated files only.
//!
//! Checked: a master is elected; the first host initialised its database and the others were provisioned with a
//! copy of it; a client verifying the server certificate against the cluster CA writes through host 2's RW port
//! and reads it back on host 3's RO port; `paxsql status` with the operator's files sees three members; every TCP
//! listener of a host is on its own address or loopback (nothing on a wildcard); a fourth host gets its bundle from
//! `paxsql init --add-host`, starts the same way and becomes a member with `paxsql member add`; after kill -9 of
//! the master's node and mariadbd another host serves writes. Every process and namespace is removed at the end.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{alive, kill9, operator_args, paxsql, read_pid};

/// Three hosts for the cluster, a fourth added later.
const HOSTS: [&str; 4] = ["10.231.0.1", "10.231.0.2", "10.231.0.3", "10.231.0.4"];

struct Hosts {
    prefix: String,
    dir: tempfile::TempDir,
    nodes: Vec<Option<Child>>,
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip").args(args).status().map(|s| s.success()).unwrap_or(false)
}

impl Hosts {
    fn ns(&self, n: usize) -> String {
        format!("{}-{n}", self.prefix)
    }

    fn root(&self, n: usize) -> PathBuf {
        self.dir.path().join(format!("node-{n}"))
    }

    /// Three namespaces, each with an `eth0` on one bridge (in a fourth namespace).
    fn new() -> Hosts {
        let prefix = format!("pxh{}", std::process::id());
        let sw = format!("{prefix}-sw");
        assert!(ip(&["netns", "add", &sw]), "cannot create network namespace {sw} (needs root and iproute2)");
        let h = Hosts {
            prefix,
            dir: tempfile::Builder::new().prefix("paxsql-hosts-").tempdir().expect("temp dir"),
            nodes: Vec::new(),
        };
        assert!(ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"]));
        assert!(ip(&["-n", &sw, "link", "set", "br0", "up"]));
        for (i, addr) in HOSTS.iter().enumerate() {
            let (ns, port) = (h.ns(i + 1), format!("p{}", i + 1));
            assert!(ip(&["netns", "add", &ns]), "cannot create {ns}");
            assert!(ip(&["-n", &ns, "link", "add", "eth0", "type", "veth", "peer", "name", &port, "netns", &sw]));
            assert!(ip(&["-n", &sw, "link", "set", &port, "master", "br0"]));
            assert!(ip(&["-n", &sw, "link", "set", &port, "up"]));
            assert!(ip(&["-n", &ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"]));
            assert!(ip(&["-n", &ns, "link", "set", "eth0", "up"]));
            assert!(ip(&["-n", &ns, "link", "set", "lo", "up"]));
        }
        h
    }

    fn in_ns(&self, n: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(n)]).arg(program);
        c
    }

    /// What the systemd unit runs: init-host, then the node (its output to the host's log).
    fn start(&mut self, n: usize) {
        let root = self.root(n);
        let out = self.in_ns(n, paxsql()).arg("init-host").arg("--dir").arg(&root).output().expect("init-host");
        assert!(out.status.success(), "init-host on host {n}: {}", String::from_utf8_lossy(&out.stderr));
        eprintln!("host {n}: {}", String::from_utf8_lossy(&out.stderr).trim());
        let log = std::fs::File::create(root.join("log/node.log")).expect("node log");
        // As the unit does: User=mysql (setpriv execs the node itself: the pid kept here is the node's).
        let child = self
            .in_ns(n, "setpriv")
            .args(["--reuid=mysql", "--regid=mysql", "--init-groups", "--"])
            .arg(paxsql())
            .arg("node")
            .arg("--config")
            .arg(root.join("node.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start node");
        while self.nodes.len() < n {
            self.nodes.push(None);
        }
        self.nodes[n - 1] = Some(child);
    }

    /// kill -9 of host `n`'s node and its mariadbd.
    fn kill9(&mut self, n: usize) {
        if let Some(mut c) = self.nodes.get_mut(n - 1).and_then(Option::take) {
            let _ = c.kill();
            let _ = c.wait();
        }
        // The node's own record of its pid (the lock file) must name a dead process now.
        if let Some(pid) = read_pid(&self.root(n).join("node/node.lock")) {
            assert!(!alive(pid), "host {n}'s node (pid {pid}) survived kill -9");
        }
        if let Some(pid) = read_pid(&self.root(n).join("data/mariadbd.pid")) {
            kill9(pid);
        }
    }

    fn operator(&self, file: &str) -> PathBuf {
        self.dir.path().join("operator").join(file)
    }

    /// `paxsql <command> --peers … --cluster-id … --secret-file … --tls-*` with the operator's files, from host
    /// `from`.
    fn operator_cmd(&self, from: usize, command: &[&str]) -> Command {
        let about: serde_json::Value =
            serde_json::from_slice(&std::fs::read(self.operator("cluster.json")).expect("operator/cluster.json"))
                .expect("json");
        let peers: Vec<String> =
            about["peers"].as_array().expect("peers").iter().filter_map(|p| p.as_str()).map(String::from).collect();
        let mut cmd = self.in_ns(from, paxsql());
        cmd.args(command);
        operator_args(
            &mut cmd,
            &peers,
            about["cluster_id"].as_str().expect("cluster id"),
            &self.dir.path().join("operator"),
        );
        cmd
    }

    /// `paxsql status --json` from host 1.
    fn status(&self) -> serde_json::Value {
        let out = self.operator_cmd(1, &["status", "--json"]).output().expect("paxsql status");
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
    }

    fn wait_master(&self, not: Option<u64>, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(m) = self.status()["master"].as_u64().filter(|m| Some(*m) != not) {
                return m;
            }
            assert!(Instant::now() < deadline, "no master within {timeout:?}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// SQL as the application account from inside host `from`, to `host:port`, verifying the server's
    /// certificate against the cluster CA and the address dialled.
    fn sql(&self, from: usize, to: &str, port: u16, sql: &str) -> Result<String, String> {
        let pw = std::fs::read_to_string(self.operator("secrets/app.password")).expect("app password");
        let out = self
            .in_ns(from, "mariadb")
            .args([&format!("-h{to}"), &format!("-P{port}"), "-uapp", "-N", "-B", "--connect-timeout=5"])
            .arg("--ssl-verify-server-cert")
            .arg(format!("--ssl-ca={}", self.operator("tls/ca.pem").display()))
            .args(["app", "-e", sql])
            .env("MYSQL_PWD", pw.trim())
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }

    fn eventually(&self, what: &str, timeout: Duration, mut f: impl FnMut() -> Result<String, String>, want: &str) {
        let deadline = Instant::now() + timeout;
        loop {
            let got = f();
            if got.as_deref() == Ok(want) {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: got {got:?}, want {want:?}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn log(&self, n: usize) -> String {
        std::fs::read_to_string(self.root(n).join("log/node.log")).unwrap_or_default()
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        for n in 1..=HOSTS.len() {
            for f in ["log/node.log", "log/mariadbd.err"] {
                let text = std::fs::read_to_string(self.root(n).join(f)).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                s += &format!("--- host {n} {f} ---\n{}\n", lines[lines.len().saturating_sub(15)..].join("\n"));
            }
        }
        s
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for n in 1..=HOSTS.len() {
            if let Some(mut c) = self.nodes.get_mut(n - 1).and_then(Option::take) {
                // SAFETY: signalling the node this test started (it kills its mariadbd itself).
                unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
                let deadline = Instant::now() + Duration::from_secs(15);
                while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(100));
                }
                let _ = c.kill();
                let _ = c.wait();
            }
            if let Some(pid) = read_pid(&self.root(n).join("data/mariadbd.pid")).filter(|p| alive(*p)) {
                kill9(pid);
            }
        }
        for n in 1..=HOSTS.len() {
            ip(&["netns", "del", &self.ns(n)]);
        }
        ip(&["netns", "del", &format!("{}-sw", self.prefix)]);
    }
}

/// Every TCP listener in host `n`'s namespace, as `address:port`.
fn listeners(h: &Hosts, n: usize) -> Vec<String> {
    let out = h.in_ns(n, "ss").args(["-H", "-l", "-t", "-n"]).output().expect("ss (iproute2)");
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.split_whitespace().nth(3).map(String::from)).collect()
}

#[test]
fn three_hosts_run_from_the_generated_files() {
    common::require_mariadb();
    let mut h = Hosts::new();
    // The unit's commands, which this test runs with the bundles' own root instead of /var/lib/paxsql.
    let unit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/systemd/paxsql-node.service"),
    )
    .expect("deploy/systemd/paxsql-node.service");
    for line in [
        "User=mysql",
        "ExecStartPre=+/usr/local/bin/paxsql init-host --dir /var/lib/paxsql",
        "ExecStart=/usr/local/bin/paxsql node --config /var/lib/paxsql/node.toml",
    ] {
        assert!(unit.lines().any(|l| l == line), "the unit no longer says {line:?}");
    }
    // The mysql account walks to the bundles, as it does to /var/lib/paxsql.
    std::fs::set_permissions(h.dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o711)).expect("chmod");
    let out = Command::new(paxsql())
        .args(["init", "--hosts", &HOSTS[..3].join(","), "--in-place", "--out"])
        .arg(h.dir.path())
        .output()
        .expect("paxsql init");
    assert!(out.status.success(), "paxsql init: {}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    // The first host alone holds the bootstrap marker; no host holds the CA key.
    assert!(h.root(1).join("bootstrap").exists() && !h.root(2).join("bootstrap").exists());
    for n in 1..=3 {
        assert!(!h.root(n).join("tls/ca.key").exists(), "host {n} got the CA key");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(h.root(n).join("secrets/cluster.secret")).expect("secret").permissions(),
        );
        assert_eq!(mode & 0o077, 0, "host {n}'s secret is readable by others");
    }
    for n in 1..=3 {
        h.start(n);
    }
    let m = h.wait_master(None, Duration::from_secs(120));
    eprintln!("master: host {m}");
    assert_eq!(m, 1, "only the first host has a database at the start");
    for n in 2..=3 {
        let deadline = Instant::now() + Duration::from_secs(120);
        while h.status()["nodes"][n - 1]["details"]["database"].as_str().is_none_or(|d| d != "replica") {
            assert!(Instant::now() < deadline, "host {n} never became a replica\n{}", h.logs());
            std::thread::sleep(Duration::from_millis(500));
        }
        let log = h.log(n);
        assert!(
            log.contains("no database in the data directory") && log.contains("rebuild complete"),
            "host {n} was not provisioned by a copy\n{}",
            h.logs()
        );
    }
    let st = h.status();
    assert_eq!(st["nodes"][0]["members"].as_array().map(Vec::len), Some(3), "{st}");

    h.sql(2, HOSTS[1], 3306, "CREATE TABLE hosts (id INT PRIMARY KEY, host TEXT)").expect("create through host 2");
    h.sql(2, HOSTS[1], 3306, "INSERT INTO hosts VALUES (1, 'via host 2')").expect("insert through host 2");
    h.eventually(
        "read on host 3's RO port",
        Duration::from_secs(30),
        || h.sql(3, HOSTS[2], 3307, "SELECT host FROM hosts WHERE id = 1"),
        "via host 2",
    );

    for n in 1..=3 {
        let ls = listeners(&h, n);
        assert!(!ls.is_empty(), "no listener on host {n}");
        for l in &ls {
            assert!(
                l.starts_with(&format!("{}:", HOSTS[n - 1])) || l.starts_with("127.0.0.1:"),
                "host {n} listens on {l} (beyond its configured address): {ls:?}"
            );
        }
    }

    eprintln!("phase: a fourth host joins");
    let out = Command::new(paxsql())
        .args(["init", "--add-host", HOSTS[3], "--out"])
        .arg(h.dir.path())
        .output()
        .expect("paxsql init --add-host");
    assert!(out.status.success(), "init --add-host: {}", String::from_utf8_lossy(&out.stderr));
    assert!(!h.root(4).join("bootstrap").exists(), "an added host must not initialise a database");
    h.start(4);
    let out = h
        .operator_cmd(1, &["member", "add", "--json"])
        .args(["--new-node", "4", "--new-peer", &format!("{}:7100", HOSTS[3])])
        .args(["--new-mariadb", &format!("{}:3316", HOSTS[3]), "--catch-up-timeout", "120"])
        .output()
        .expect("paxsql member add");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "member add: {}\n{}", String::from_utf8_lossy(&out.stderr), h.logs());
    let st = h.status();
    assert_eq!(st["nodes"][0]["members"].as_array().map(Vec::len), Some(4), "{st}");
    h.eventually(
        "read on host 4's RO port",
        Duration::from_secs(30),
        || h.sql(4, HOSTS[3], 3307, "SELECT host FROM hosts WHERE id = 1"),
        "via host 2",
    );

    eprintln!("phase: kill -9 of the master's node and mariadbd");
    h.kill9(m as usize);
    let next = h.wait_master(Some(m), Duration::from_secs(30));
    let via = if next == 2 { 3 } else { 2 };
    h.eventually(
        "a write after the failover",
        Duration::from_secs(30),
        || {
            h.sql(
                via,
                HOSTS[via - 1],
                3306,
                "INSERT IGNORE INTO hosts VALUES (2, 'after failover'); SELECT COUNT(*) FROM hosts",
            )
        },
        "2",
    );
}
