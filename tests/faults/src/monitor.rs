//! The monitor: about every 100 ms it reads every node's status file (who serves which master term, who holds the
//! lease), publishes the write endpoint for the clients, and samples `@@read_only` on every mariadbd.
//!
//! Two nodes with `read_only=0` in the same round is measured and reported as a window (a stale master is
//! writable until its node demotes it, but cannot acknowledge: its commits wait for a Paxos ACK that never
//! comes). It is a violation only when both also claim, by their status files, to serve as master under a lease
//! whose deadline has not passed. The strict property — never two nodes acknowledging writes — is what the
//! histories check.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use tokio::sync::watch;

use crate::cluster::TestCluster;
use crate::workload::{connect, node_endpoint, write_endpoint, Endpoint};

#[derive(Debug, Default, Clone)]
pub struct MonitorReport {
    pub rounds: u64,
    /// Rounds in which two or more nodes answered `read_only=0`.
    pub two_writable_rounds: u64,
    /// The longest run of consecutive such rounds, in ms of wall time.
    pub longest_two_writable_ms: u64,
    /// Rounds without any master serving (by fresh status files).
    pub no_master_rounds: u64,
    /// Rounds in which two writable nodes both claimed the lease and the master role.
    pub violations: Vec<String>,
    /// Distinct masters seen, in order.
    pub masters: Vec<u64>,
}

/// Samples until `stop`; returns what it saw.
pub async fn run(
    cluster: Arc<TestCluster>,
    endpoint: watch::Sender<Option<Endpoint>>,
    stop: Arc<AtomicBool>,
) -> MonitorReport {
    let mut report = MonitorReport::default();
    let mut conns: Vec<Option<Conn>> = cluster.nodes.iter().map(|_| None).collect();
    let mut window_start: Option<Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        let round_start = Instant::now();
        let view = cluster.view();
        let round_unix_ms =
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        let ep = write_endpoint(&cluster.nodes, &view);
        match view.master() {
            None => report.no_master_rounds += 1,
            Some(m) if report.masters.last() != Some(&m) => report.masters.push(m),
            _ => {}
        }
        endpoint.send_if_modified(|cur| {
            let changed = *cur != ep;
            *cur = ep.clone();
            changed
        });
        // Each probe owns its node's connection for the round, so the three run concurrently.
        let mut probes = tokio::task::JoinSet::new();
        for (i, n) in cluster.nodes.iter().enumerate() {
            let (app, ep, slot) = (cluster.app.clone(), node_endpoint(n), conns[i].take());
            probes.spawn(async move {
                let mut conn = match slot {
                    Some(c) => c,
                    None => match connect(&app, &ep, Duration::from_millis(300)).await {
                        Ok(c) => c,
                        Err(_) => return (i, None, None),
                    },
                };
                let r =
                    tokio::time::timeout(Duration::from_millis(300), conn.query_first::<i64, _>("SELECT @@read_only"))
                        .await;
                match r {
                    Ok(Ok(Some(v))) => (i, Some(conn), Some(v == 0)),
                    _ => (i, None, None),
                }
            });
        }
        let mut writable: Vec<Option<bool>> = vec![None; cluster.nodes.len()];
        while let Some(joined) = probes.join_next().await {
            if let Ok((i, conn, w)) = joined {
                conns[i] = conn;
                writable[i] = w;
            }
        }
        report.rounds += 1;
        let writable_ids: Vec<u64> =
            cluster.nodes.iter().zip(&writable).filter(|(_, w)| **w == Some(true)).map(|(n, _)| n.id).collect();
        if writable_ids.len() >= 2 {
            report.two_writable_rounds += 1;
            let start = *window_start.get_or_insert(round_start);
            report.longest_two_writable_ms = report.longest_two_writable_ms.max(start.elapsed().as_millis() as u64);
            let claimants: Vec<u64> = writable_ids
                .iter()
                .copied()
                .filter(|id| {
                    // A claim counts while the deadline the node wrote has not passed: a paused process's file
                    // keeps saying "lease held" long after its lease ran out (CI, pause-master: a file 1481 ms old
                    // paired with the new master's claim was a false alarm before the deadline was written).
                    // Whether two masters ever acknowledged in overlapping intervals is what the register and
                    // append histories check.
                    view.nodes.iter().any(|v| v.id == *id && v.claims_lease_at(round_unix_ms))
                })
                .collect();
            if claimants.len() >= 2 {
                report.violations.push(format!(
                    "nodes {claimants:?} writable and both claiming lease + master role in the same round ({:?})",
                    view.nodes.iter().map(|v| (v.id, v.master_version, v.status_age.as_millis())).collect::<Vec<_>>()
                ));
            }
        } else {
            window_start = None;
        }
        let spent = round_start.elapsed();
        tokio::time::sleep(Duration::from_millis(100).saturating_sub(spent)).await;
    }
    report
}
