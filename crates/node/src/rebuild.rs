//! Rebuilding the local database from a healthy member (docs/ARCHITECTURE.md §5). A node whose data is no longer a prefix of the
//! global log — MariaDB refused to truncate an un-ACKed tail holding a DDL, or the local GTID state holds a
//! transaction the global log does not — gets a physical copy of an aligned replica's data (`mariabackup
//! --backup --stream=xbstream` on the donor, streamed over the authenticated admin service, unpacked with
//! `mbstream` and prepared here) and then replicates the rest of the global log like any replica.
//!
//! Only a replica donates: a master's binlog may hold transactions still waiting for their ACK, and a copy taken
//! there could carry one into the rebuilt node. The old data directory is kept beside the new one (`.diverged`)
//! for forensics until the next rebuild replaces it.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use paxsql_peer_transport::pb::admin_client::AdminClient;
use paxsql_peer_transport::pb::{BackupChunk, BackupRequest, StatusRequest};
use paxsql_peer_transport::{ClusterAuth, TlsConfig};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::sync::{mpsc, Semaphore};

use crate::config::MariaDbConfig;
use crate::mariadb::{LocalMariaDb, MariaDbError};

/// Where a rebuild is, for status and people.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RebuildProgress {
    pub donor: u64,
    /// "choosing a donor", "copying", "preparing", "starting".
    pub phase: &'static str,
    pub received_bytes: u64,
    pub estimated_bytes: u64,
}

impl std::fmt::Display for RebuildProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        write!(f, "{} from node {}", self.phase, self.donor)?;
        if self.estimated_bytes > 0 {
            let pct = (self.received_bytes as f64 * 100.0 / self.estimated_bytes as f64).min(100.0);
            write!(f, ", {:.1} of ~{:.1} MiB ({pct:.0}%)", mib(self.received_bytes), mib(self.estimated_bytes))
        } else {
            write!(f, ", {:.1} MiB", mib(self.received_bytes))
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    #[error("no member can give a copy now: {0}")]
    NoDonor(String),
    #[error("copy from node {donor}: {reason}")]
    Copy { donor: u64, reason: String },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("{tool} failed ({status}); last output: {tail}")]
    Tool { tool: String, status: String, tail: String },
    #[error(transparent)]
    MariaDb(#[from] MariaDbError),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RebuildError {
    let what = what.into();
    move |source| RebuildError::Io { what, source }
}

/// The other members, as the admin service reaches them.
#[derive(Clone)]
pub struct Donors {
    pub node_id: u64,
    /// Where the members are reached: the config's addresses, with the log's record in `recorded`.
    pub directory: crate::directory::Directory,
    /// The global log's status (the addresses it recorded).
    pub recorded: tokio::sync::watch::Receiver<crate::driver::NodeStatus>,
    pub auth: ClusterAuth,
    /// Mutual TLS of the peer port, when configured: a donor must prove it is the member asked.
    pub tls: Option<TlsConfig>,
}

impl Donors {
    /// An admin client of member `id` at `address`, over TLS when configured.
    pub fn endpoint(&self, id: u64, address: &str) -> Result<tonic::transport::Endpoint, String> {
        paxsql_peer_transport::peer_endpoint(self.tls.as_ref(), Some(id), address).map_err(|e| e.to_string())
    }

    /// Every known member's peer address.
    fn addresses(&self) -> Vec<(u64, String)> {
        let st = self.recorded.borrow();
        self.directory.all(&st).into_iter().map(|(id, a)| (id, a.peer.clone())).collect()
    }

    async fn client(&self, id: u64, address: &str) -> Result<AdminClient<tonic::transport::Channel>, String> {
        let endpoint = self.endpoint(id, address)?;
        let channel = endpoint.connect_timeout(Duration::from_secs(2)).connect().await.map_err(|e| e.to_string())?;
        // A copy of a large database is larger than gRPC's default message limit only per chunk, never whole.
        Ok(AdminClient::new(channel).max_decoding_message_size(16 << 20))
    }

    /// Aligned replicas, least lag first, each as `(id, address, is_master)`; when there is none, the master. A
    /// master gives a copy only as the last resort: the copy costs it I/O under load, and one taken while a commit
    /// waits for its ACK may carry that transaction. That is safe: the rebuilt node serves nothing until the
    /// alignment check finds its position in the global log, and a position the log never reaches (the master died
    /// before the transaction was chosen) is a divergence, rebuilt again from a member. Without it, replicas that all
    /// stop at the same transaction (a statement MariaDB binlogs but cannot apply) could never be rebuilt.
    async fn candidates(&self) -> Vec<(u64, String, bool)> {
        let mut ranked = Vec::new();
        let mut master = None;
        for (id, url) in self.addresses().iter().filter(|(id, _)| *id != self.node_id) {
            let Ok(mut client) = self.client(*id, url).await else { continue };
            let mut req = tonic::Request::new(StatusRequest {});
            req.set_timeout(Duration::from_secs(2));
            self.auth.attach(&mut req);
            let Ok(reply) = client.status(req).await.map(tonic::Response::into_inner) else { continue };
            match reply.details.get("database").map(String::as_str) {
                Some("replica") => {
                    let lag =
                        reply.details.get("lag_transactions").and_then(|l| l.parse::<u64>().ok()).unwrap_or(u64::MAX);
                    ranked.push((lag, *id, url.clone()));
                }
                Some("master") => master = Some((*id, url.clone(), true)),
                _ => {}
            }
        }
        ranked.sort();
        let replicas: Vec<_> = ranked.into_iter().map(|(_, id, url)| (id, url, false)).collect();
        if replicas.is_empty() {
            return master.into_iter().collect();
        }
        replicas
    }
}

/// Replaces the local data directory with a copy of a donor's and starts mariadbd on it, its binlog state set to
/// the copy's GTID position. `db` must be the (stopped or running) local server; it is killed first.
pub async fn rebuild(
    cfg: &MariaDbConfig,
    donors: &Donors,
    db: &mut LocalMariaDb,
    report: &(dyn Fn(RebuildProgress) + Send + Sync),
) -> Result<(), RebuildError> {
    report(RebuildProgress { phase: "choosing a donor", ..Default::default() });
    let candidates = donors.candidates().await;
    if candidates.is_empty() {
        return Err(RebuildError::NoDonor("no reachable member serves as an aligned replica or as master".into()));
    }
    db.kill9();
    let staging = sibling(&cfg.datadir, "rebuild");
    let mut last_error = None;
    let mut copied_from = 0;
    for (donor, url, master) in candidates {
        if master {
            tracing::warn!(donor, "no replica can give a copy: rebuilding from the master's (node {donor})");
        } else {
            tracing::warn!(donor, "rebuilding the local database from a copy of node {donor}'s");
        }
        match copy_from(cfg, donors, (donor, master), &url, &staging, report).await {
            Ok(()) => {
                last_error = None;
                copied_from = donor;
                break;
            }
            Err(e) => {
                tracing::error!(donor, error = %e, "copy failed; trying the next member");
                last_error = Some(e);
            }
        }
    }
    if let Some(e) = last_error {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    report(RebuildProgress { donor: copied_from, phase: "preparing", ..Default::default() });
    run_tool(
        Command::new(&cfg.mariabackup).arg("--prepare").arg(format!("--target-dir={}", staging.display())),
        "mariabackup --prepare",
    )
    .await?;
    let position = copy_position(&staging)?;
    let kept = sibling(&cfg.datadir, "diverged");
    if kept.exists() {
        std::fs::remove_dir_all(&kept).map_err(io(format!("cannot remove {}", kept.display())))?;
    }
    if cfg.datadir.exists() {
        std::fs::rename(&cfg.datadir, &kept).map_err(io(format!("cannot move {} aside", cfg.datadir.display())))?;
    }
    std::fs::rename(&staging, &cfg.datadir).map_err(io(format!("cannot install {}", staging.display())))?;
    tracing::warn!(old = %kept.display(), position = %position, "new data directory installed; the old one is kept");

    report(RebuildProgress { donor: copied_from, phase: "starting", ..Default::default() });
    db.start(Duration::from_secs(300)).await?;
    let mut statements = vec!["STOP SLAVE".to_string(), "RESET SLAVE ALL".to_string(), "RESET MASTER".to_string()];
    // The copy carries no binlog: its GTID state is where the copy was taken, so replication resumes after it and
    // the alignment check finds it in the global log.
    if !position.is_empty() {
        statements.push(format!("SET GLOBAL gtid_binlog_state = '{position}'"));
    }
    let refs: Vec<&str> = statements.iter().map(String::as_str).collect();
    db.exec(&refs).await?;
    tracing::warn!(position = %position, "rebuild complete: the local database continues from the copy's position");
    Ok(())
}

async fn copy_from(
    cfg: &MariaDbConfig,
    donors: &Donors,
    (donor, master): (u64, bool),
    url: &str,
    staging: &Path,
    report: &(dyn Fn(RebuildProgress) + Send + Sync),
) -> Result<(), RebuildError> {
    let copy_err = |reason: String| RebuildError::Copy { donor, reason };
    if staging.exists() {
        std::fs::remove_dir_all(staging).map_err(io(format!("cannot clear {}", staging.display())))?;
    }
    std::fs::create_dir_all(staging).map_err(io(format!("cannot create {}", staging.display())))?;
    let mut client = donors.client(donor, url).await.map_err(copy_err)?;
    let mut req = tonic::Request::new(BackupRequest { requester: donors.node_id, from_master: master });
    donors.auth.attach(&mut req);
    let mut stream = client.backup(req).await.map_err(|s| copy_err(s.message().to_string()))?.into_inner();

    let mut unpack = Command::new(&cfg.mbstream)
        .arg("-x")
        .arg("-C")
        .arg(staging)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(io(format!("cannot run {}", cfg.mbstream.display())))?;
    let tail = collect_tail(unpack.stderr.take(), "mbstream");
    let mut stdin = unpack.stdin.take().ok_or_else(|| copy_err("mbstream has no stdin".into()))?;
    let mut progress = RebuildProgress { donor, phase: "copying", ..Default::default() };
    let mut last_report = Instant::now();
    report(progress.clone());
    loop {
        let chunk = match stream.message().await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(s) => return Err(copy_err(format!("donor ended the copy: {}", s.message()))),
        };
        if chunk.estimated_bytes > 0 {
            progress.estimated_bytes = chunk.estimated_bytes;
        }
        stdin.write_all(&chunk.data).await.map_err(io("mbstream stopped reading the copy"))?;
        progress.received_bytes += chunk.data.len() as u64;
        if last_report.elapsed() >= Duration::from_secs(1) {
            last_report = Instant::now();
            tracing::info!(progress = %progress, "rebuild");
            report(progress.clone());
        }
    }
    drop(stdin);
    let status = unpack.wait().await.map_err(io("mbstream"))?;
    if !status.success() {
        return Err(RebuildError::Tool { tool: "mbstream -x".into(), status: status.to_string(), tail: tail.await });
    }
    tracing::info!(progress = %progress, "copy received");
    report(progress);
    Ok(())
}

/// `<dir>.<suffix>` next to `dir`, on the same file system so that the final rename is atomic.
fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "data".into());
    dir.with_file_name(format!("{name}.{suffix}"))
}

/// The GTID position the copy was taken at (`mariadb_backup_binlog_info`: file, offset, GTID list).
fn copy_position(dir: &Path) -> Result<String, RebuildError> {
    for name in ["mariadb_backup_binlog_info", "xtrabackup_binlog_info"] {
        let path = dir.join(name);
        if let Ok(text) = std::fs::read_to_string(&path) {
            return Ok(text.split('\t').nth(2).map(|g| g.trim().to_string()).unwrap_or_default());
        }
    }
    // A donor without a binlog position has never written a transaction: the copy starts from nothing.
    Ok(String::new())
}

/// The last lines a child process wrote on `pipe`, once it closes it.
fn collect_tail<R>(pipe: Option<R>, tool: &'static str) -> impl std::future::Future<Output = String>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    let task = tokio::spawn(async move {
        let mut tail = VecDeque::new();
        if let Some(pipe) = pipe {
            let mut lines = tokio::io::BufReader::new(pipe).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(tool, "{line}");
                if tail.len() == 20 {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        }
        Vec::from(tail).join(" | ")
    });
    async move { task.await.unwrap_or_default() }
}

async fn run_tool(cmd: &mut Command, tool: &str) -> Result<(), RebuildError> {
    let out = cmd.stdin(Stdio::null()).output().await.map_err(io(format!("cannot run {tool}")))?;
    if out.status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = text.lines().rev().take(10).collect();
    Err(RebuildError::Tool {
        tool: tool.into(),
        status: out.status.to_string(),
        tail: tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
    })
}

/// The donor side: streams `mariabackup --backup --stream=xbstream` of the local server, one copy at a time.
pub struct BackupDonor {
    cfg: MariaDbConfig,
    defaults_file: PathBuf,
    admin_password: String,
    work_dir: PathBuf,
    busy: Arc<Semaphore>,
}

const CHUNK: usize = 1 << 20;

impl BackupDonor {
    pub fn new(cfg: MariaDbConfig, defaults_file: PathBuf, admin_password: String, work_dir: PathBuf) -> Self {
        BackupDonor { cfg, defaults_file, admin_password, work_dir, busy: Arc::new(Semaphore::new(1)) }
    }

    /// Starts a copy for `requester`; the chunks arrive on the returned channel, an error status ends it.
    pub fn start(&self, requester: u64) -> Result<mpsc::Receiver<Result<BackupChunk, tonic::Status>>, tonic::Status> {
        let permit = self
            .busy
            .clone()
            .try_acquire_owned()
            .map_err(|_| tonic::Status::resource_exhausted("this member is already sending a copy"))?;
        let dir = self.work_dir.join("backup");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("tmp"))
            .map_err(|e| tonic::Status::internal(format!("cannot create {}: {e}", dir.display())))?;
        // Credentials go in an option file only this process can read, never on a command line.
        let credentials = dir.join("credentials.cnf");
        let text = format!(
            "!include {}\n[mariabackup]\nuser={}\npassword={}\nsocket={}\n",
            self.defaults_file.display(),
            self.cfg.admin_user,
            self.admin_password,
            self.cfg.socket.display()
        );
        write_private(&credentials, &text)
            .map_err(|e| tonic::Status::internal(format!("cannot write {}: {e}", credentials.display())))?;
        let mut child = Command::new(&self.cfg.mariabackup)
            .arg(format!("--defaults-file={}", credentials.display()))
            .arg("--backup")
            .arg("--stream=xbstream")
            .arg(format!("--datadir={}", self.cfg.datadir.display()))
            .arg(format!("--target-dir={}", dir.join("tmp").display()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| tonic::Status::internal(format!("cannot run {}: {e}", self.cfg.mariabackup.display())))?;
        let estimated = dir_size(&self.cfg.datadir);
        let (tx, rx) = mpsc::channel(8);
        tokio::spawn(async move {
            let _permit = permit;
            tracing::warn!(requester, estimated_bytes = estimated, "sending a copy of the local database");
            let tail = collect_tail(child.stderr.take(), "mariabackup");
            let sent = match child.stdout.take() {
                Some(mut out) => stream_out(&mut out, &tx, estimated).await,
                None => Err("mariabackup has no stdout".to_string()),
            };
            let outcome = match sent {
                // The receiver went away: dropping `child` kills mariabackup.
                Err(e) => Err(e),
                Ok(bytes) => match child.wait().await {
                    Ok(s) if s.success() => Ok(bytes),
                    Ok(s) => Err(format!("mariabackup failed ({s}): {}", tail.await)),
                    Err(e) => Err(format!("mariabackup: {e}")),
                },
            };
            let _ = std::fs::remove_file(&credentials);
            let _ = std::fs::remove_dir_all(&dir);
            match outcome {
                Ok(bytes) => tracing::warn!(requester, bytes, "copy sent"),
                Err(e) => {
                    tracing::error!(requester, error = %e, "copy not completed");
                    let _ = tx.send(Err(tonic::Status::internal(e))).await;
                }
            }
        });
        Ok(rx)
    }
}

async fn stream_out(
    out: &mut tokio::process::ChildStdout,
    tx: &mpsc::Sender<Result<BackupChunk, tonic::Status>>,
    estimated: u64,
) -> Result<u64, String> {
    let mut total = 0u64;
    let mut first = true;
    loop {
        let mut buf = vec![0u8; CHUNK];
        let mut filled = 0;
        // Fill whole chunks: a pipe hands out 64 KiB at a time, and fewer, larger messages cost less.
        while filled < CHUNK {
            match out.read(&mut buf[filled..]).await {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) => return Err(format!("reading mariabackup's output: {e}")),
            }
        }
        if filled == 0 {
            return Ok(total);
        }
        buf.truncate(filled);
        total += filled as u64;
        let chunk = BackupChunk { data: buf, estimated_bytes: if first { estimated.max(1) } else { 0 } };
        first = false;
        tx.send(Ok(chunk)).await.map_err(|_| "the requester went away".to_string())?;
    }
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

/// Bytes under `dir` (files only), for progress estimates.
fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_position_reads_the_gtid_column() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("mariadb_backup_binlog_info"), "n2-bin.000003\t1234\t0-1000012-77\n").unwrap();
        assert_eq!(copy_position(dir.path()).unwrap(), "0-1000012-77");
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(copy_position(empty.path()).unwrap(), "");
    }

    #[test]
    fn progress_reads_at_a_glance() {
        let p = RebuildProgress { donor: 2, phase: "copying", received_bytes: 50 << 20, estimated_bytes: 200 << 20 };
        assert_eq!(p.to_string(), "copying from node 2, 50.0 of ~200.0 MiB (25%)");
    }

    #[test]
    fn siblings_stay_in_the_same_directory() {
        assert_eq!(sibling(Path::new("/x/n1/data"), "rebuild"), PathBuf::from("/x/n1/data.rebuild"));
    }
}
