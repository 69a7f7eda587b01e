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

/// A running local cluster; `Drop` runs `paxsql cluster down`.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub info: Value,
}

fn require_mariadb() {
    for tool in ["mariadbd", "mariadb", "mariadb-install-db"] {
        let found = Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output().map(|o| o.status.success());
        assert!(found.unwrap_or(false), "{tool} is missing: run deploy/install-deps.sh");
    }
}

impl Cluster {
    pub fn up(nodes: u64, base_port: u16) -> Cluster {
        require_mariadb();
        let dir = tempfile::Builder::new().prefix("paxsql-cluster-").tempdir().expect("temp dir");
        let out = Command::new(paxsql())
            .args(["cluster", "up", "--nodes", &nodes.to_string(), "--base-port", &base_port.to_string(), "--dir"])
            .arg(dir.path())
            .output()
            .expect("run paxsql cluster up");
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        let mut c = Cluster { dir, info: Value::Null };
        assert!(out.status.success(), "cluster up failed:\n{text}\n{}", c.logs());
        c.info = c.status();
        eprintln!("{text}");
        c
    }

    pub fn status(&self) -> Value {
        let out = Command::new(paxsql())
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
        let v = st["nodes"][(m - 1) as usize]["master_version"].as_u64()?;
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
        let st = self.status();
        let ep = st["nodes"][(id - 1) as usize]["endpoints"]["mariadb"].as_str().unwrap_or("").to_string();
        ep.rsplit(':').next().and_then(|p| p.parse().ok()).expect("mariadb port in status")
    }

    pub fn password(&self) -> String {
        self.info["application_account"]["password"].as_str().unwrap_or("").to_string()
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
        let out = Command::new("timeout")
            .arg(format!("{}", timeout.as_secs_f64()))
            .args(["mariadb", "-h127.0.0.1", "-uapp", "-N", "-B", "app"])
            .arg(format!("-P{}", self.port(id)))
            .env("MYSQL_PWD", self.password())
            .arg("-e")
            .arg(sql)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(format!("exit {:?}: {}", out.status.code(), String::from_utf8_lossy(&out.stderr).trim()))
        }
    }

    pub fn kill9_mariadbd(&self, id: u64) {
        let pid = read_pid(&self.node_dir(id).join("data/mariadbd.pid")).expect("mariadbd pid");
        kill9(pid);
    }

    pub fn kill9_node(&self, id: u64) {
        let pid = read_pid(&self.node_dir(id).join("node.pid")).expect("node pid");
        kill9(pid);
    }

    /// Starts node `id`'s process again (as `cluster up` does).
    pub fn restart_node(&self, id: u64) {
        let dir = self.node_dir(id);
        let log = std::fs::File::create(dir.join("log/node-restart.log")).expect("log");
        let child = Command::new(paxsql())
            .args(["node", "--config"])
            .arg(dir.join("node.toml"))
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn node");
        std::fs::write(dir.join("node.pid"), child.id().to_string()).expect("pid file");
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
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for id in 1..=5 {
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
        let _ = Command::new(paxsql()).args(["cluster", "down", "--dir"]).arg(self.dir.path()).output();
    }
}

pub fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

pub fn kill9(pid: i32) {
    let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
}
