//! The proxy alone in front of one mariadbd, which is both "the master" and "the local server"; for benchmarks
//! and manual tries. Stops on SIGINT/SIGTERM and prints the counters.
//!
//! ```text
//! standalone_proxy --backend 127.0.0.1:3306 [--rw 127.0.0.1:31900] [--ro 127.0.0.1:31901]
//!                  [--mode splice|copy] [--proxy-protocol] [--threads N]
//! ```

use std::net::SocketAddr;

use anyhow::{bail, Context};
use paxsql_proxy::{Backend, ForwardMode, Proxy, ProxyConfig, Route};

struct Args {
    cfg: ProxyConfig,
    backend: SocketAddr,
    threads: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut cfg = ProxyConfig::default();
    let mut backend: Option<SocketAddr> = None;
    let mut threads = 2;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--backend" => backend = Some(value()?.parse()?),
            "--rw" => cfg.rw_listen = Some(value()?.parse()?),
            "--ro" => cfg.ro_listen = Some(value()?.parse()?),
            "--threads" => threads = value()?.parse()?,
            "--mode" => {
                cfg.forward_mode = match value()?.as_str() {
                    "splice" => ForwardMode::Splice,
                    "copy" => ForwardMode::Copy,
                    other => bail!("--mode {other}: expected splice or copy"),
                }
            }
            "--proxy-protocol" => cfg.proxy_protocol = true,
            other => bail!("unknown argument {other}; see the doc comment of examples/standalone_proxy.rs"),
        }
    }
    let backend: SocketAddr = backend.context("--backend is required")?;
    cfg.local_backend = Backend::Tcp(backend);
    if cfg.rw_listen.is_none() && cfg.ro_listen.is_none() {
        cfg.rw_listen = Some(SocketAddr::from(([127, 0, 0, 1], 31900)));
    }
    Ok(Args { cfg, backend, threads })
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let Args { cfg, backend, threads } = parse_args()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()?;
    runtime.block_on(async move {
        let route = Route::Master { node_id: 1, master_version: 1, backend: Backend::Tcp(backend) };
        let (_routes, rx) = tokio::sync::watch::channel(route);
        let mode = cfg.forward_mode;
        let proxy = Proxy::bind(cfg, rx).await?;
        println!("rw={:?} ro={:?} mode={mode:?}", proxy.rw_addr(), proxy.ro_addr());
        let stats = proxy.stats();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(proxy.run(stopped));
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        stop.send_replace(true);
        task.await??;
        println!("{:?}", stats.snapshot());
        Ok(())
    })
}
