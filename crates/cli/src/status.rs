//! `paxsql status --peers ...`: asks each node's admin endpoint (on its peer port, behind the cluster secret) for
//! its status, and prints one line per node or, with `--json`, a document for machines.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use paxsql_peer_transport::pb::admin_client::AdminClient;
use paxsql_peer_transport::pb::{StatusReply, StatusRequest};
use paxsql_peer_transport::{peer_endpoint, ClusterAuth, ClusterSecret, TlsConfig};

pub fn run(
    peers: &[String],
    cluster_id: &str,
    secret_file: &Path,
    tls: Option<&TlsConfig>,
    json: bool,
) -> anyhow::Result<()> {
    let auth = cluster_auth(cluster_id, secret_file)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let replies = rt.block_on(ask_all(peers, &auth, tls));
    let master = replies.iter().find_map(|(_, r)| r.as_ref().ok().filter(|s| s.role == "master").map(|s| s.node_id));
    if json {
        let nodes: Vec<serde_json::Value> = replies
            .iter()
            .map(|(peer, r)| match r {
                Ok(s) => serde_json::json!({
                    "peer": peer,
                    "id": s.node_id,
                    "role": s.role,
                    "master_id": s.master_id,
                    "master_version": s.master_version,
                    "holds_lease": s.holds_lease,
                    "applied_instance": s.applied_instance,
                    "last_gtid": s.last_gtid,
                    "members": s.members,
                    "details": s.details,
                }),
                Err(e) => serde_json::json!({ "peer": peer, "error": e }),
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "master": master, "nodes": nodes }))?);
        return Ok(());
    }
    println!("master: {}", master.map_or("none".into(), |m| format!("node {m}")));
    println!(
        "{:<22} {:<5} {:<9} {:<7} {:<8} {:<10} {:<20} {:>6}",
        "peer", "node", "role", "master", "version", "applied", "last gtid", "lag"
    );
    for (peer, r) in &replies {
        match r {
            Ok(s) => println!(
                "{:<22} {:<5} {:<9} {:<7} {:<8} {:<10} {:<20} {:>6}",
                peer,
                s.node_id,
                s.role,
                s.master_id,
                s.master_version,
                s.applied_instance,
                if s.last_gtid.is_empty() { "-" } else { &s.last_gtid },
                s.details.get("lag_transactions").map(String::as_str).unwrap_or("-"),
            ),
            Err(e) => println!("{peer:<22} unreachable: {e}"),
        }
    }
    Ok(())
}

/// Every peer's status, in the order given, asked at once (an unreachable peer costs its timeout once, not once
/// per peer).
pub(crate) async fn ask_all(
    peers: &[String],
    auth: &ClusterAuth,
    tls: Option<&TlsConfig>,
) -> Vec<(String, Result<StatusReply, String>)> {
    let mut asked = tokio::task::JoinSet::new();
    for (i, peer) in peers.iter().enumerate() {
        let (peer, auth, tls) = (peer.clone(), auth.clone(), tls.cloned());
        asked.spawn(async move { (i, ask(peer, &auth, tls.as_ref()).await) });
    }
    let mut out = Vec::with_capacity(peers.len());
    while let Some(joined) = asked.join_next().await {
        if let Ok(answer) = joined {
            out.push(answer);
        }
    }
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}

async fn ask(peer: String, auth: &ClusterAuth, tls: Option<&TlsConfig>) -> (String, Result<StatusReply, String>) {
    let result = async {
        // The node is not known before it answers: its certificate must carry the address dialled.
        let endpoint = peer_endpoint(tls, None, &peer).map_err(|e| e.to_string())?;
        let channel = tokio::time::timeout(Duration::from_secs(3), endpoint.connect())
            .await
            .map_err(|_| "connect timed out".to_string())?
            .map_err(|e| e.to_string())?;
        let mut client = AdminClient::new(channel);
        let mut req = tonic::Request::new(StatusRequest {});
        auth.attach(&mut req);
        let reply = tokio::time::timeout(Duration::from_secs(3), client.status(req))
            .await
            .map_err(|_| "status timed out".to_string())?
            .map_err(|s| format!("{}: {}", s.code(), s.message()))?;
        Ok(reply.into_inner())
    }
    .await;
    (peer, result)
}

/// The credentials every admin call carries: the cluster id and the secret read from its file.
pub(crate) fn cluster_auth(cluster_id: &str, secret_file: &Path) -> anyhow::Result<ClusterAuth> {
    let secret = std::fs::read_to_string(secret_file)
        .with_context(|| format!("cannot read the cluster secret from {}", secret_file.display()))?;
    Ok(ClusterAuth::new(cluster_id, &ClusterSecret::new(secret.trim_end_matches(['\n', '\r'])))?)
}
