//! `paxsql switchover` (any cluster, through the nodes' authenticated admin endpoints) and `paxsql cluster
//! switchover --dir` (a local cluster): moves the master role to another member while clients write. The serving
//! master drains its database and names its successor in the log (crates/node/src/switchover.rs); this tool picks
//! and checks the successor first, then follows the hand-over until the successor serves and the old master is a
//! replica again, showing each step on stderr and, with `--json`, printing the outcome on stdout.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use paxsql_peer_transport::pb::admin_client::AdminClient;
use paxsql_peer_transport::pb::{StatusReply, SwitchoverRequest};
use paxsql_peer_transport::{peer_endpoint, ClusterAuth, TlsConfig};

use crate::status::ask_all;

/// What a switchover is asked to do.
pub struct Switchover {
    /// The successor; `None`: the most caught-up member, as the master sees them.
    pub to: Option<u64>,
    /// A named successor further behind the global log than this many transactions is refused.
    pub max_lag: u64,
    pub drain_timeout: Duration,
    /// How long to follow the hand-over (successor serving, old master a replica again).
    pub wait: Duration,
    pub json: bool,
}

pub fn run(peers: &[String], auth: &ClusterAuth, tls: Option<&TlsConfig>, ask_for: &Switchover) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(switch(peers, auth, tls, ask_for))
}

/// Every peer's status; `None` for a peer that did not answer.
async fn statuses(peers: &[String], auth: &ClusterAuth, tls: Option<&TlsConfig>) -> Vec<(String, Option<StatusReply>)> {
    ask_all(peers, auth, tls).await.into_iter().map(|(peer, r)| (peer, r.ok())).collect()
}

fn detail<'a>(s: &'a StatusReply, key: &str) -> &'a str {
    s.details.get(key).map(String::as_str).unwrap_or("")
}

pub(crate) async fn switch(
    peers: &[String],
    auth: &ClusterAuth,
    tls: Option<&TlsConfig>,
    ask_for: &Switchover,
) -> anyhow::Result<()> {
    // The checks below read each node's last published status; one that cannot tell yet (a lag not read this
    // round, a node between two states) gets a few more rounds before the switchover is refused.
    let patience = Instant::now() + Duration::from_secs(5);
    loop {
        match check_and_switch(peers, auth, tls, ask_for).await {
            Err(Refusal::NotYet(_)) if Instant::now() < patience => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(Refusal::NotYet(why)) => bail!(why),
            Err(Refusal::Fatal(e)) => return Err(e),
            Ok(()) => return Ok(()),
        }
    }
}

/// Why a switchover did not happen: `NotYet` may change within seconds, `Fatal` will not.
enum Refusal {
    NotYet(String),
    Fatal(anyhow::Error),
}

impl From<anyhow::Error> for Refusal {
    fn from(e: anyhow::Error) -> Self {
        Refusal::Fatal(e)
    }
}

async fn check_and_switch(
    peers: &[String],
    auth: &ClusterAuth,
    tls: Option<&TlsConfig>,
    ask_for: &Switchover,
) -> Result<(), Refusal> {
    let not_yet = |why: String| Err(Refusal::NotYet(why));
    let before = statuses(peers, auth, tls).await;
    let Some((master_peer, master)) =
        before.iter().find_map(|(p, s)| s.as_ref().filter(|s| s.role == "master").map(|s| (p.clone(), s.clone())))
    else {
        return not_yet("no node serves as master now (an election may be under way): nothing to switch over".into());
    };
    let (old, term) = (master.node_id, master.master_version);
    // The old master is a replica again only with a restarted mariadbd: a status published before the switchover
    // must not count.
    let old_pid = detail(&master, "mariadbd_pid").to_string();
    if let Some(to) = ask_for.to {
        if to == old {
            return Err(Refusal::Fatal(anyhow::anyhow!("node {to} is the master already")));
        }
        let Some(target) = before.iter().find_map(|(_, s)| s.as_ref().filter(|s| s.node_id == to)) else {
            return not_yet(format!("node {to} does not answer on any of the peers given ({})", peers.join(", ")));
        };
        if detail(target, "database") != "replica" {
            return not_yet(format!(
                "node {to} cannot serve as master: its database is {} {}",
                detail(target, "database"),
                detail(target, "database_detail")
            ));
        }
        let lag: u64 = detail(target, "lag_transactions").parse().unwrap_or(u64::MAX);
        if lag > ask_for.max_lag {
            return not_yet(format!(
                "node {to} is {} transactions behind the global log (more than --max-lag {}): writes would pause \
                 until it caught up",
                if lag == u64::MAX { "an unknown number of".to_string() } else { lag.to_string() },
                ask_for.max_lag
            ));
        }
    } else if !before
        .iter()
        .any(|(_, s)| s.as_ref().is_some_and(|s| s.node_id != old && detail(s, "database") == "replica"))
    {
        return not_yet("no other node has a database that can serve as master".into());
    }
    let target = ask_for.to.map_or("the most caught-up member".to_string(), |t| format!("node {t}"));
    eprintln!("switchover: node {old} (term {term}) drains its database and hands the master role to {target}");
    let started = Instant::now();
    let endpoint = peer_endpoint(tls, None, &master_peer).map_err(|e| anyhow::anyhow!("{master_peer}: {e}"))?;
    let channel = tokio::time::timeout(Duration::from_secs(3), endpoint.connect())
        .await
        .map_err(|_| anyhow::anyhow!("{master_peer}: connect timed out"))?
        .with_context(|| format!("cannot reach node {old} at {master_peer}"))?;
    let mut client = AdminClient::new(channel);
    let mut req = tonic::Request::new(SwitchoverRequest {
        to: ask_for.to.unwrap_or(0),
        drain_timeout_ms: ask_for.drain_timeout.as_millis() as u64,
    });
    auth.attach(&mut req);
    req.set_timeout(ask_for.drain_timeout + Duration::from_secs(15));
    let reply = client
        .switchover(req)
        .await
        .map_err(|s| anyhow::anyhow!("node {old} refused the switchover: {}", s.message()))?
        .into_inner();
    let successor = reply.successor;
    eprintln!(
        "switchover: drained in {} ms at {}; the log names node {successor} master",
        reply.drain_ms,
        if reply.drained_gtid.is_empty() { "-" } else { &reply.drained_gtid }
    );
    // Follow it: the successor serving a later term, then the old master back as a replica.
    let deadline = started + ask_for.wait;
    let mut serving_after = None;
    let mut new_term = None;
    let mut new_master = None;
    let mut replica_after = None;
    let mut outcome = "the successor did not serve within the wait".to_string();
    while Instant::now() < deadline {
        let now = statuses(peers, auth, tls).await;
        if serving_after.is_none() {
            if let Some(s) =
                now.iter().find_map(|(_, s)| s.as_ref().filter(|s| s.role == "master" && s.master_version > term))
            {
                serving_after = Some(started.elapsed());
                new_term = Some(s.master_version);
                new_master = Some(s.node_id);
                if s.node_id != successor {
                    eprintln!("switchover: node {successor} did not take over; node {} won the election", s.node_id);
                }
                eprintln!(
                    "switchover: node {} serves term {} ({} ms after the request)",
                    s.node_id,
                    s.master_version,
                    started.elapsed().as_millis()
                );
                outcome = format!("node {} serves", s.node_id);
            }
        }
        if serving_after.is_some() {
            let old_back = now.iter().any(|(_, s)| {
                s.as_ref().is_some_and(|s| {
                    s.node_id == old && detail(s, "database") == "replica" && detail(s, "mariadbd_pid") != old_pid
                })
            });
            if old_back {
                replica_after = Some(started.elapsed());
                eprintln!("switchover: node {old} is a replica again ({} ms)", started.elapsed().as_millis());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if serving_after.is_some() && replica_after.is_none() {
        outcome = format!("{outcome}; node {old} is not a replica yet (it restarts its database)");
    }
    if ask_for.json {
        let out = serde_json::json!({
            "old_master": old,
            "old_term": term,
            "successor": successor,
            "new_master": new_master,
            "new_term": new_term,
            "drained_gtid": reply.drained_gtid,
            "drain_ms": reply.drain_ms,
            "serving_after_ms": serving_after.map(|d| d.as_millis() as u64),
            "old_master_replica_after_ms": replica_after.map(|d| d.as_millis() as u64),
        });
        println!("{}", serde_json::to_string_pretty(&out).map_err(anyhow::Error::from)?);
    }
    if serving_after.is_none() {
        return Err(anyhow::anyhow!("switchover: {outcome} ({} s)", ask_for.wait.as_secs()).into());
    }
    Ok(())
}
