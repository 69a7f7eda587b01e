//! Where the master is published: files, commands, webhooks. Each update either fully happens or reports an
//! error; the watcher retries.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::config::WatchConfig;
use crate::template::Template;
use crate::webhook::{post_json, HttpUrl};
use crate::MasterInfo;

/// One configured target, ready to use.
#[derive(Debug, Clone)]
pub enum Target {
    File { path: PathBuf, template: Template },
    Command { argv: Vec<String>, timeout: Duration },
    Webhook { url: HttpUrl, raw: String, timeout: Duration },
}

impl Target {
    /// The targets of a validated config.
    pub fn from_config(cfg: &WatchConfig) -> Result<Vec<Target>, String> {
        let mut out = Vec::with_capacity(cfg.target_count());
        for f in &cfg.file {
            out.push(Target::File { path: f.path.clone(), template: Template::parse(&f.template)? });
        }
        for c in &cfg.command {
            out.push(Target::Command { argv: c.argv.clone(), timeout: Duration::from_millis(c.timeout_ms) });
        }
        for w in &cfg.webhook {
            out.push(Target::Webhook {
                url: HttpUrl::parse(&w.url)?,
                raw: w.url.clone(),
                timeout: Duration::from_millis(w.timeout_ms),
            });
        }
        Ok(out)
    }

    /// For logs.
    pub fn describe(&self) -> String {
        match self {
            Target::File { path, .. } => format!("file {}", path.display()),
            Target::Command { argv, .. } => format!("command {}", argv[0]),
            Target::Webhook { raw, .. } => format!("webhook {raw}"),
        }
    }

    /// Publishes `m` to this target.
    pub async fn update(&self, m: &MasterInfo) -> Result<(), String> {
        match self {
            Target::File { path, template } => {
                let (path, text) = (path.clone(), template.render(m));
                tokio::task::spawn_blocking(move || write_atomically(&path, text.as_bytes()))
                    .await
                    .map_err(|e| format!("writer task: {e}"))?
                    .map_err(|e| e.to_string())
            }
            Target::Command { argv, timeout } => run_command(argv, *timeout, m).await,
            Target::Webhook { url, timeout, .. } => {
                let body = serde_json::to_vec(m).map_err(|e| format!("json: {e}"))?;
                post_json(url, body, *timeout).await.map(|_| ())
            }
        }
    }
}

/// Replaces `path` so that readers see the old or the new content, never a part: a temp file in the same
/// directory (rename is atomic only within one file system), fsync, rename, fsync of the directory (so the
/// rename itself survives a crash).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().ok_or_else(|| std::io::Error::other(format!("{} names no file", path.display())))?;
    let tmp = dir.join(format!(".{}.paxsql-watch.{}.tmp", name.to_string_lossy(), std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(&dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(|e| std::io::Error::new(e.kind(), format!("writing {}: {e}", path.display())))
}

/// Runs `argv` + `<master_id> <master_version> <mariadb host:port> <proxy_rw>`, with the same in `PAXSQL_*`
/// environment variables; success is exit status 0 within `timeout` (the command is killed after it).
async fn run_command(argv: &[String], timeout: Duration, m: &MasterInfo) -> Result<(), String> {
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .arg(m.master_id.to_string())
        .arg(m.master_version.to_string())
        .arg(&m.mariadb)
        .arg(&m.proxy_rw)
        .env("PAXSQL_CLUSTER_ID", &m.cluster_id)
        .env("PAXSQL_MASTER_ID", m.master_id.to_string())
        .env("PAXSQL_MASTER_VERSION", m.master_version.to_string())
        .env("PAXSQL_MARIADB", &m.mariadb)
        .env("PAXSQL_MARIADB_HOST", m.mariadb_host())
        .env("PAXSQL_MARIADB_PORT", m.mariadb_port())
        .env("PAXSQL_PROXY_RW", &m.proxy_rw)
        .env("PAXSQL_CHANGED_AT", &m.changed_at)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().map_err(|e| format!("cannot start {}: {e}", argv[0]))?;
    let out = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .map_err(|_| format!("{} still running after {} ms: killed", argv[0], timeout.as_millis()))?
        .map_err(|e| format!("{}: {e}", argv[0]))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: String = stderr.trim().chars().rev().take(300).collect::<Vec<_>>().into_iter().rev().collect();
    Err(format!("{} exited with {}: {tail}", argv[0], out.status))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn master() -> MasterInfo {
        MasterInfo {
            cluster_id: "c1".into(),
            master_id: 3,
            master_version: 9,
            mariadb: "127.0.0.3:24020".into(),
            proxy_rw: "127.0.0.3:24024".into(),
            changed_at: "2026-01-02T03:04:05.678Z".into(),
        }
    }

    #[test]
    fn atomic_write_replaces_the_file_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.env");
        write_atomically(&path, b"old\n").unwrap();
        write_atomically(&path, b"new\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("master.env")], "no temp file left behind");
        let missing = dir.path().join("no/such/dir/file");
        assert!(write_atomically(&missing, b"x").is_err());
    }

    #[tokio::test]
    async fn file_target_renders_its_template() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m");
        let t = Target::File { path: path.clone(), template: Template::parse("{master_id}@{mariadb_host}\n").unwrap() };
        t.update(&master()).await.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "3@127.0.0.3\n");
    }

    #[tokio::test]
    async fn command_target_gets_arguments_and_environment() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let script = format!(
            "echo \"$@|$PAXSQL_CLUSTER_ID|$PAXSQL_MASTER_ID|$PAXSQL_MASTER_VERSION|$PAXSQL_MARIADB_HOST|$PAXSQL_MARIADB_PORT|$PAXSQL_PROXY_RW\" > {}",
            out.display()
        );
        let argv = vec!["sh".into(), "-c".into(), script, "sh".into(), "first".into()];
        let t = Target::Command { argv, timeout: Duration::from_secs(10) };
        t.update(&master()).await.unwrap();
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "first 3 9 127.0.0.3:24020 127.0.0.3:24024|c1|3|9|127.0.0.3|24020|127.0.0.3:24024\n"
        );
    }

    #[tokio::test]
    async fn command_failures_and_timeouts_are_errors() {
        let fail = Target::Command {
            argv: vec!["sh".into(), "-c".into(), "echo broken >&2; exit 3".into()],
            timeout: Duration::from_secs(10),
        };
        let err = fail.update(&master()).await.unwrap_err();
        assert!(err.contains("exit status: 3") && err.contains("broken"), "{err}");
        let slow = Target::Command {
            argv: vec!["sh".into(), "-c".into(), "sleep 30".into()],
            timeout: Duration::from_millis(200),
        };
        let started = std::time::Instant::now();
        let err = slow.update(&master()).await.unwrap_err();
        assert!(err.contains("killed") && started.elapsed() < Duration::from_secs(5), "{err}");
        let missing = Target::Command { argv: vec!["/no/such/program".into()], timeout: Duration::from_secs(1) };
        assert!(missing.update(&master()).await.unwrap_err().contains("cannot start"));
    }
}
