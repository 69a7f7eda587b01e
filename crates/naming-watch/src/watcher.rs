//! The run loop: poll every node's Admin.Status, debounce, hand each new master to one worker per target.

use std::time::{Duration, Instant, SystemTime};

use paxsql_peer_transport::pb::admin_client::AdminClient;
use paxsql_peer_transport::pb::{StatusReply, StatusRequest};
use paxsql_peer_transport::{ClusterAuth, ClusterSecret};
use tokio::sync::watch;
use tonic::transport::Channel;

use crate::master::{pick_master, rfc3339_utc};
use crate::targets::Target;
use crate::{MasterInfo, WatchConfig, WatchError};

/// Reads the cluster secret and builds the admin credentials: the checks `run` makes before it starts, also
/// used by `--check-config`.
pub fn load_auth(cfg: &WatchConfig) -> Result<ClusterAuth, WatchError> {
    let secret = std::fs::read_to_string(&cfg.secret_file)
        .map_err(|source| WatchError::Secret { path: cfg.secret_file.clone(), source })?;
    let secret = ClusterSecret::new(secret.trim_end_matches(['\n', '\r']));
    ClusterAuth::new(&cfg.cluster_id, &secret).map_err(|e| WatchError::Config(e.to_string()))
}

/// Follows the master until `stop` turns true. Fails only on bad configuration or an unreadable secret; an
/// unreachable cluster or a failing target is logged and retried.
pub async fn run(cfg: WatchConfig, mut stop: watch::Receiver<bool>) -> Result<(), WatchError> {
    cfg.validate()?;
    let auth = load_auth(&cfg)?;
    let timeout = Duration::from_millis(cfg.status_timeout_ms);
    let mut peers = Vec::with_capacity(cfg.peers.len());
    for p in &cfg.peers {
        let endpoint = paxsql_peer_transport::peer_endpoint(cfg.tls.as_ref(), None, p)
            .map_err(|e| WatchError::Config(format!("peer {p:?}: {e}")))?
            .connect_timeout(timeout)
            .timeout(timeout);
        peers.push((p.clone(), AdminClient::new(endpoint.connect_lazy())));
    }
    let targets = Target::from_config(&cfg).map_err(WatchError::Config)?;
    let mut senders = Vec::with_capacity(targets.len());
    let mut workers = tokio::task::JoinSet::new();
    let retry = (Duration::from_millis(cfg.retry_min_ms), Duration::from_millis(cfg.retry_max_ms));
    for t in targets {
        let (tx, rx) = watch::channel(None);
        senders.push(tx);
        workers.spawn(target_worker(t, rx, retry, stop.clone()));
    }
    tracing::info!(peers = cfg.peers.len(), targets = senders.len(), cluster = %cfg.cluster_id, "paxsql watch started");

    let mut candidate: Option<(MasterInfo, Instant)> = None;
    let mut latest_agrees = false;
    let mut published: Option<(u64, u64)> = None;
    let mut reachable_before = true;
    let mut next_poll = Instant::now();
    loop {
        let publish_at = candidate
            .as_ref()
            .filter(|(m, _)| latest_agrees && published != Some(m.term()))
            .map(|(_, since)| *since + cfg.debounce());
        let wake = publish_at.map_or(next_poll, |p| p.min(next_poll));
        tokio::select! {
            _ = tokio::time::sleep_until(wake.into()) => {}
            _ = stop.changed() => break,
        }
        let now = Instant::now();
        if now >= next_poll {
            next_poll = now + cfg.poll_interval();
            let replies = poll(&peers, &auth).await;
            let reachable = !replies.is_empty();
            if reachable != reachable_before {
                if reachable {
                    tracing::info!("nodes reachable again");
                } else {
                    tracing::warn!("no node answers Admin.Status");
                }
                reachable_before = reachable;
            }
            match pick_master(&cfg.cluster_id, &replies, &rfc3339_utc(SystemTime::now())) {
                Some(m) => {
                    if candidate.as_ref().map(|(c, _)| c.term()) != Some(m.term()) {
                        tracing::debug!(master = m.master_id, version = m.master_version, "new master seen");
                        candidate = Some((m, Instant::now()));
                    }
                    latest_agrees = true;
                }
                None => latest_agrees = false,
            }
        }
        if let Some((m, since)) = &candidate {
            if latest_agrees && published != Some(m.term()) && since.elapsed() >= cfg.debounce() {
                tracing::info!(
                    master = m.master_id,
                    version = m.master_version,
                    mariadb = %m.mariadb,
                    proxy_rw = %m.proxy_rw,
                    previous = ?published,
                    "master changed: publishing"
                );
                published = Some(m.term());
                for s in &senders {
                    s.send_replace(Some(m.clone()));
                }
            }
        }
    }
    drop(senders);
    while workers.join_next().await.is_some() {}
    tracing::info!("paxsql watch stopped");
    Ok(())
}

/// Asks every node at once; the replies of those that answered.
async fn poll(peers: &[(String, AdminClient<Channel>)], auth: &ClusterAuth) -> Vec<StatusReply> {
    let mut set = tokio::task::JoinSet::new();
    for (name, client) in peers {
        let (name, mut client, auth) = (name.clone(), client.clone(), auth.clone());
        set.spawn(async move {
            let mut req = tonic::Request::new(StatusRequest {});
            auth.attach(&mut req);
            match client.status(req).await {
                Ok(r) => Some(r.into_inner()),
                Err(e) => {
                    tracing::debug!(peer = %name, error = %e.message(), "status failed");
                    None
                }
            }
        });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        if let Ok(Some(reply)) = r {
            out.push(reply);
        }
    }
    out
}

/// Keeps one target up to date: applies the newest master, retries failures with doubling pauses, and jumps to
/// a newer master at once if one arrives meanwhile.
async fn target_worker(
    target: Target,
    mut rx: watch::Receiver<Option<MasterInfo>>,
    (retry_min, retry_max): (Duration, Duration),
    mut stop: watch::Receiver<bool>,
) {
    let what = target.describe();
    loop {
        tokio::select! {
            r = rx.changed() => if r.is_err() { return },
            _ = stop.changed() => return,
        }
        let mut pause = retry_min;
        let mut attempt = 1u32;
        loop {
            let Some(m) = rx.borrow_and_update().clone() else { break };
            let started = Instant::now();
            match target.update(&m).await {
                Ok(()) => {
                    tracing::info!(target = %what, master = m.master_id, version = m.master_version, attempt,
                        took_ms = started.elapsed().as_millis() as u64, "target updated");
                    break;
                }
                Err(e) => {
                    tracing::warn!(target = %what, master = m.master_id, attempt, error = %e,
                        retry_in_ms = pause.as_millis() as u64, "target update failed");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                r = rx.changed() => if r.is_err() { return },
                _ = stop.changed() => return,
            }
            pause = (pause * 2).min(retry_max);
            attempt += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failing_target_is_retried_with_backoff_until_it_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        let count = dir.path().join("attempts");
        // Fails on the first two runs, succeeds on the third.
        let script = format!("echo \"$1\" >> {0}; [ $(wc -l < {0}) -ge 3 ]", count.display());
        let target = Target::Command {
            argv: vec!["sh".into(), "-c".into(), script, "sh".into()],
            timeout: Duration::from_secs(10),
        };
        let (tx, rx) = watch::channel(None);
        let (_stop_tx, stop_rx) = watch::channel(false);
        let worker =
            tokio::spawn(target_worker(target, rx, (Duration::from_millis(50), Duration::from_millis(100)), stop_rx));
        let started = Instant::now();
        tx.send_replace(Some(crate::targets::tests::master()));
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::fs::read_to_string(&count).map(|s| s.lines().count()).unwrap_or(0) < 3 {
            assert!(Instant::now() < deadline, "target not retried");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Pauses of 50 and 100 ms came between the attempts.
        assert!(started.elapsed() >= Duration::from_millis(150), "{:?}", started.elapsed());
        tokio::time::sleep(Duration::from_millis(400)).await;
        let lines = std::fs::read_to_string(&count).unwrap();
        assert_eq!(lines, "3\n3\n3\n", "three attempts with master 3, none after the success");
        drop(tx);
        tokio::time::timeout(Duration::from_secs(5), worker).await.expect("worker ends with its channel").unwrap();
    }
}
