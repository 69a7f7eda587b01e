//! The watch configuration (TOML). Every key, its meaning and default:
//!
//! ```toml
//! # Admin endpoints of the nodes: their peer ports, host:port (required, at least one).
//! peers = ["10.0.0.1:24001", "10.0.0.2:24011", "10.0.0.3:24021"]
//! # The cluster's id (required).
//! cluster_id = "prod-1"
//! # File holding the cluster secret (required; trailing newline ignored).
//! secret_file = "/etc/paxsql/cluster.secret"
//! # How often every node is asked for its status (default 200).
//! poll_interval_ms = 200
//! # A new master is published once it was seen for this long without change (default 300).
//! debounce_ms = 300
//! # Bound on one status call to one node (default 1000).
//! status_timeout_ms = 1000
//! # A failed target update is retried after this pause, doubling up to retry_max_ms (defaults 200, 5000).
//! retry_min_ms = 200
//! retry_max_ms = 5000
//! # Mutual TLS to peer ports that run it: a certificate signed by the cluster CA (`cluster up` makes
//! # tls/operator.pem and .key); each node's certificate must carry the host given in `peers`.
//! [tls]
//! cert = "/etc/paxsql/tls/operator.pem"
//! key = "/etc/paxsql/tls/operator.key"
//! ca = "/etc/paxsql/tls/ca.pem"
//!
//! # Targets: any number of each kind, at least one in all.
//! [[file]]
//! path = "/etc/app/master.env"          # required; written atomically (temp file, fsync, rename)
//! template = "MASTER={mariadb_host}:{mariadb_port}\n"   # default: "{mariadb_host}:{mariadb_port}\n"
//!
//! [[command]]
//! argv = ["/usr/local/bin/update-dns", "--zone", "db"]  # required; the master is appended as arguments
//! timeout_ms = 10000                                    # default 10000; a command past it is killed
//!
//! [[webhook]]
//! url = "http://10.0.0.9:8080/paxsql/master"   # required; http only (no TLS)
//! timeout_ms = 5000                            # default 5000
//! ```
//!
//! Template placeholders: `{cluster_id}` `{master_id}` `{master_version}` `{mariadb_host}` `{mariadb_port}`
//! `{proxy_rw}` `{changed_at}`; `{{` and `}}` are literal braces.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::template::Template;
use crate::WatchError;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchConfig {
    /// Admin endpoints (peer ports) of the nodes, host:port.
    pub peers: Vec<String>,
    /// The cluster id every node checks on each admin call.
    pub cluster_id: String,
    /// File holding the cluster secret.
    pub secret_file: PathBuf,
    /// Mutual TLS to the peer ports, when the cluster runs it.
    #[serde(default)]
    pub tls: Option<paxsql_peer_transport::TlsConfig>,
    /// How often every node is asked for its status.
    #[serde(default = "defaults::poll_interval_ms")]
    pub poll_interval_ms: u64,
    /// How long a new master must be seen unchanged before it is published.
    #[serde(default = "defaults::debounce_ms")]
    pub debounce_ms: u64,
    /// Bound on one status call to one node.
    #[serde(default = "defaults::status_timeout_ms")]
    pub status_timeout_ms: u64,
    /// First pause before retrying a failed target update.
    #[serde(default = "defaults::retry_min_ms")]
    pub retry_min_ms: u64,
    /// Longest pause between retries of a failed target update.
    #[serde(default = "defaults::retry_max_ms")]
    pub retry_max_ms: u64,
    /// File targets.
    #[serde(default)]
    pub file: Vec<FileTarget>,
    /// Command targets.
    #[serde(default)]
    pub command: Vec<CommandTarget>,
    /// Webhook targets.
    #[serde(default)]
    pub webhook: Vec<WebhookTarget>,
}

/// A file rewritten atomically on every change.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileTarget {
    /// The file to write; its directory must exist.
    pub path: PathBuf,
    /// What to write (see the placeholders above).
    #[serde(default = "defaults::template")]
    pub template: String,
}

/// A program run on every change with the master appended to `argv` and in the environment.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandTarget {
    /// Program and its first arguments.
    pub argv: Vec<String>,
    /// The command is killed and counted as failed after this long.
    #[serde(default = "defaults::command_timeout_ms")]
    pub timeout_ms: u64,
}

/// An HTTP endpoint that gets a JSON POST on every change.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookTarget {
    /// `http://host:port/path` (plain HTTP only).
    pub url: String,
    /// Bound on the whole request (connect, send, response).
    #[serde(default = "defaults::webhook_timeout_ms")]
    pub timeout_ms: u64,
}

mod defaults {
    pub fn poll_interval_ms() -> u64 {
        200
    }
    pub fn debounce_ms() -> u64 {
        300
    }
    pub fn status_timeout_ms() -> u64 {
        1000
    }
    pub fn retry_min_ms() -> u64 {
        200
    }
    pub fn retry_max_ms() -> u64 {
        5000
    }
    pub fn template() -> String {
        "{mariadb_host}:{mariadb_port}\n".to_string()
    }
    pub fn command_timeout_ms() -> u64 {
        10_000
    }
    pub fn webhook_timeout_ms() -> u64 {
        5000
    }
}

impl WatchConfig {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<WatchConfig, WatchError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| WatchError::Config(format!("cannot read {}: {e}", path.display())))?;
        let cfg = WatchConfig::parse(&text).map_err(|e| match e {
            WatchError::Config(m) => WatchError::Config(format!("{}: {m}", path.display())),
            other => other,
        })?;
        Ok(cfg)
    }

    /// Parses and validates TOML text.
    pub fn parse(text: &str) -> Result<WatchConfig, WatchError> {
        let cfg: WatchConfig = toml::from_str(text).map_err(|e| WatchError::Config(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks what serde cannot: non-empty lists, sane intervals, parseable templates and URLs.
    pub fn validate(&self) -> Result<(), WatchError> {
        let bad = |m: String| Err(WatchError::Config(m));
        if self.peers.is_empty() {
            return bad("peers: at least one node's admin endpoint (host:port) is needed".into());
        }
        if let Some(p) =
            self.peers.iter().find(|p| p.rsplit_once(':').is_none_or(|(_, port)| port.parse::<u16>().is_err()))
        {
            return bad(format!("peers: {p:?} is not host:port"));
        }
        if self.cluster_id.is_empty() {
            return bad("cluster_id must not be empty".into());
        }
        if self.poll_interval_ms == 0 || self.status_timeout_ms == 0 {
            return bad("poll_interval_ms and status_timeout_ms must be positive".into());
        }
        if self.retry_min_ms == 0 || self.retry_min_ms > self.retry_max_ms {
            return bad("retry: need 0 < retry_min_ms <= retry_max_ms".into());
        }
        if self.file.is_empty() && self.command.is_empty() && self.webhook.is_empty() {
            return bad("no target: add at least one [[file]], [[command]] or [[webhook]]".into());
        }
        for f in &self.file {
            Template::parse(&f.template).map_err(|e| WatchError::Config(format!("file {}: {e}", f.path.display())))?;
            if f.path.file_name().is_none() {
                return bad(format!("file: {} names no file", f.path.display()));
            }
        }
        for c in &self.command {
            if c.argv.is_empty() || c.argv[0].is_empty() {
                return bad("command: argv needs at least the program".into());
            }
            if c.timeout_ms == 0 {
                return bad("command: timeout_ms must be positive".into());
            }
        }
        for w in &self.webhook {
            crate::webhook::HttpUrl::parse(&w.url).map_err(|e| WatchError::Config(format!("webhook: {e}")))?;
            if w.timeout_ms == 0 {
                return bad("webhook: timeout_ms must be positive".into());
            }
        }
        Ok(())
    }

    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms)
    }

    pub fn debounce(&self) -> Duration {
        Duration::from_millis(self.debounce_ms)
    }

    /// Number of targets of every kind.
    pub fn target_count(&self) -> usize {
        self.file.len() + self.command.len() + self.webhook.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        peers = ["127.0.0.1:24001"]
        cluster_id = "c1"
        secret_file = "/tmp/secret"
        [[file]]
        path = "/tmp/master"
    "#;

    #[test]
    fn defaults_apply() {
        let cfg = WatchConfig::parse(MINIMAL).unwrap();
        assert_eq!(cfg.poll_interval_ms, 200);
        assert_eq!(cfg.debounce_ms, 300);
        assert_eq!(cfg.status_timeout_ms, 1000);
        assert_eq!((cfg.retry_min_ms, cfg.retry_max_ms), (200, 5000));
        assert_eq!(cfg.file[0].template, "{mariadb_host}:{mariadb_port}\n");
        assert!(cfg.command.is_empty() && cfg.webhook.is_empty());
    }

    #[test]
    fn every_kind_of_target_parses() {
        let text = format!(
            "{MINIMAL}\n[[command]]\nargv = [\"/bin/true\"]\n[[webhook]]\nurl = \"http://127.0.0.1:8080/x\"\ntimeout_ms = 100\n"
        );
        let cfg = WatchConfig::parse(&text).unwrap();
        assert_eq!(cfg.command[0].timeout_ms, 10_000);
        assert_eq!(cfg.webhook[0].timeout_ms, 100);
        assert_eq!(cfg.target_count(), 3);
    }

    #[test]
    fn unknown_keys_are_rejected_at_top_level_and_in_targets() {
        let top = format!("poll_intervall_ms = 5\n{MINIMAL}");
        let err = WatchConfig::parse(&top).unwrap_err().to_string();
        assert!(err.contains("poll_intervall_ms"), "{err}");
        let inner = format!("{MINIMAL}\nmode = 420\n");
        let err = WatchConfig::parse(&inner).unwrap_err().to_string();
        assert!(err.contains("mode"), "{err}");
    }

    #[test]
    fn bad_values_are_rejected() {
        for (text, what) in [
            (MINIMAL.replace("[\"127.0.0.1:24001\"]", "[]"), "peers"),
            (MINIMAL.replace("127.0.0.1:24001", "nohost"), "host:port"),
            (MINIMAL.replace("[[file]]\n        path = \"/tmp/master\"", ""), "no target"),
            (format!("{MINIMAL}\ntemplate = \"{{nope}}\"\n"), "nope"),
            (format!("{MINIMAL}\n[[webhook]]\nurl = \"https://x:1/\"\n"), "http://"),
            (format!("{MINIMAL}\n[[command]]\nargv = []\n"), "argv"),
        ] {
            let err = WatchConfig::parse(&text).unwrap_err().to_string();
            assert!(err.contains(what), "{what}: {err}");
        }
    }
}
