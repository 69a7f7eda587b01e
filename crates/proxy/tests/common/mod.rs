//! Helpers of the proxy's integration tests: a proxy on the test runtime, the `mariadb` CLI, a client-side
//! relay that makes connections come from another loopback address, bounded waits.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use paxsql_mariadb_testkit::mysql_async::{Opts, OptsBuilder};
use paxsql_proxy::{Proxy, ProxyConfig, ProxyStats, Route};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// Prints a phase header, so a failing run's log says which check it was in.
pub fn phase(text: &str) {
    eprintln!("=== {text}");
}

/// Ports of this task's range (31000-31999); each test file passes its own base so files never collide.
pub struct Ports(AtomicU16);

impl Ports {
    pub const fn new(base: u16) -> Self {
        Ports(AtomicU16::new(base))
    }

    pub fn next(&self) -> SocketAddr {
        let port = self.0.fetch_add(1, Ordering::Relaxed);
        assert!((31000..31900).contains(&port), "port {port} outside the test range");
        SocketAddr::from(([127, 0, 0, 1], port))
    }
}

/// A proxy running on the current runtime, with the sender of its routes.
pub struct RunningProxy {
    pub routes: watch::Sender<Route>,
    pub stats: Arc<ProxyStats>,
    pub rw: Option<SocketAddr>,
    pub ro: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<Result<(), paxsql_proxy::ProxyError>>>,
}

impl RunningProxy {
    pub async fn start(cfg: ProxyConfig, route: Route) -> anyhow::Result<RunningProxy> {
        let (routes, rx) = watch::channel(route);
        let proxy = Proxy::bind(cfg, rx).await?;
        let (rw, ro, stats) = (proxy.rw_addr(), proxy.ro_addr(), proxy.stats());
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(proxy.run(stopped));
        Ok(RunningProxy { routes, stats, rw, ro, stop, task: Some(task) })
    }

    pub fn set_route(&self, route: Route) {
        self.routes.send_replace(route);
    }

    /// Stops the proxy; `run` must return within 10 s.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        self.stop.send_replace(true);
        let task = self.task.take().context("already stopped")?;
        tokio::time::timeout(Duration::from_secs(10), task).await.context("proxy did not stop within 10 s")???;
        Ok(())
    }
}

impl Drop for RunningProxy {
    fn drop(&mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Logs in to `addr` as `user`, an account without a password (a throwaway of the test server), with a
/// hand-written handshake response, sends one command `payload` and returns the server's first answer packet.
pub async fn raw_command(addr: SocketAddr, user: &str, payload: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    read_packet(&mut s).await?; // greeting
    const CAPS: u32 = 0x1 | 0x200 | 0x8000 | 0x80000; // LONG_PASSWORD, PROTOCOL_41, SECURE_CONNECTION, PLUGIN_AUTH
    let mut p = Vec::new();
    p.extend_from_slice(&CAPS.to_le_bytes());
    p.extend_from_slice(&(16u32 << 20).to_le_bytes());
    p.push(33);
    p.extend_from_slice(&[0; 23]);
    p.extend_from_slice(user.as_bytes());
    p.push(0);
    p.push(0); // empty auth response
    p.extend_from_slice(b"mysql_native_password\0");
    write_packet(&mut s, 1, &p).await?;
    let ok = read_packet(&mut s).await?;
    anyhow::ensure!(ok.first() == Some(&0), "login as {user} failed: {ok:?}");
    write_packet(&mut s, 0, payload).await?;
    read_packet(&mut s).await
}

async fn write_packet(s: &mut tokio::net::TcpStream, seq: u8, payload: &[u8]) -> anyhow::Result<()> {
    use tokio::io::AsyncWriteExt as _;
    let mut p = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    p.push(seq);
    p.extend_from_slice(payload);
    s.write_all(&p).await?;
    Ok(())
}

async fn read_packet(s: &mut tokio::net::TcpStream) -> anyhow::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt as _;
    let mut h = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut h)).await??;
    let len = usize::from(h[0]) | usize::from(h[1]) << 8 | usize::from(h[2]) << 16;
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).await?;
    Ok(p)
}

/// mysql_async options for `addr` (never the unix socket).
pub fn opts_at(addr: SocketAddr, user: &str, password: &str) -> Opts {
    OptsBuilder::default()
        .ip_or_hostname(addr.ip().to_string())
        .tcp_port(addr.port())
        .user(Some(user))
        .pass(Some(password))
        .prefer_socket(false)
        .into()
}

/// What one `mariadb` CLI run printed.
#[derive(Debug)]
pub struct CliRun {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

/// Runs the `mariadb` CLI (batch mode, no column names) against `addr` with `extra` arguments, bounded by 30 s.
/// Blocking: call it from `spawn_blocking` in async tests.
pub fn mariadb_cli(addr: SocketAddr, user: &str, password: &str, extra: &[&str], sql: &str) -> anyhow::Result<CliRun> {
    let start = Instant::now();
    let out = Command::new("timeout")
        .arg("30")
        .arg("mariadb")
        .arg("--no-defaults")
        .arg("--protocol=TCP")
        .arg(format!("-h{}", addr.ip()))
        .arg(format!("-P{}", addr.port()))
        .arg(format!("-u{user}"))
        .arg(format!("-p{password}"))
        .arg("--batch")
        .arg("--skip-column-names")
        .args(extra)
        .arg("-e")
        .arg(sql)
        .output()
        .context("run mariadb CLI (installed by deploy/install-deps.sh)")?;
    Ok(CliRun {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        elapsed: start.elapsed(),
    })
}

/// Async wrapper of [`mariadb_cli`].
pub async fn cli(addr: SocketAddr, user: &str, password: &str, extra: &[&str], sql: &str) -> anyhow::Result<CliRun> {
    let (user, password, sql) = (user.to_string(), password.to_string(), sql.to_string());
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        mariadb_cli(addr, &user, &password, &extra, &sql)
    })
    .await?
}

/// A relay on `listen` that forwards each connection to `target` from the source address `source_ip`: clients
/// that cannot bind their source (mysql_async, the `mariadb` CLI) thereby reach `target` from another address.
/// Runs until the runtime ends.
pub async fn source_relay(listen: SocketAddr, source_ip: [u8; 4], target: SocketAddr) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                let socket = TcpSocket::new_v4()?;
                socket.bind(SocketAddr::from((source_ip, 0)))?;
                let mut outbound = socket.connect(target).await?;
                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await?;
                Ok::<_, std::io::Error>(())
            });
        }
    });
    Ok(())
}

/// Polls `check` every 50 ms until it returns true or `bound` passes.
pub async fn wait_until<F, Fut>(what: &str, bound: Duration, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + bound;
    loop {
        if check().await? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("{what}: not reached within {} ms", bound.as_millis());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
