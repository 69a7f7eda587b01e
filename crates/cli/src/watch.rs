//! `paxsql watch --config watch.toml`: follows the cluster's master and publishes it to files, commands and
//! webhooks (crate paxsql-naming-watch); SIGTERM or Ctrl-C stops it.

use std::path::Path;

use paxsql_naming_watch::{load_auth, WatchConfig};

pub fn run(config: &Path, check_only: bool) -> anyhow::Result<()> {
    let cfg = WatchConfig::load(config)?;
    // An unreadable secret is a configuration error too: report it before running, also with --check-config.
    load_auth(&cfg)?;
    if check_only {
        println!(
            "{}: ok (cluster {}, {} peers, {} targets)",
            config.display(),
            cfg.cluster_id,
            cfg.peers.len(),
            cfg.target_count()
        );
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async move {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            let _ = stop_tx.send(true);
        });
        paxsql_naming_watch::run(cfg, stop_rx).await?;
        anyhow::Ok(())
    })
}
