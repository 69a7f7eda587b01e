//! `paxsql member add|remove|replace` (any cluster, through the nodes' authenticated admin endpoints) and the
//! membership half of `paxsql cluster add-node|remove-node|replace-node`: who votes in the global log, changed
//! online, one member at a time, each change one value in the log.
//!
//! Adding: the new node runs already (its config names the initial members, and itself under `peers`), with an
//! empty data directory. The master records its addresses in the log, so every member connects to it; the node
//! catches the log up as a non-voting learner and provisions its database with a copy of a member's (mariabackup);
//! only once its database is a caught-up replica does the master propose it as a member. Until then it counts in
//! no majority, so a new node that never comes up costs nothing. Removing: a master is switched over first; the
//! master proposes the smaller membership; the removed node then stops voting and campaigning (the operator stops
//! its process). Replacing: add the new node, then remove the old one (a dead node included: the new one's copy
//! comes from a live member, and the majority of the grown membership is made of live ones).

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use paxsql_peer_transport::pb::admin_client::AdminClient;
use paxsql_peer_transport::pb::{ChangeMembershipRequest, RecordMemberRequest, StatusReply};
use paxsql_peer_transport::{peer_endpoint, ClusterAuth, TlsConfig};

use crate::status::ask_all;

/// How to reach the cluster's admin endpoints.
pub struct Admin<'a> {
    pub peers: Vec<String>,
    pub auth: &'a ClusterAuth,
    pub tls: Option<&'a TlsConfig>,
}

/// A node to add: its id and where it is reached.
#[derive(Clone, Debug)]
pub struct NewMember {
    pub node: u64,
    /// Its peer endpoint, host:port.
    pub peer: String,
    /// Its mariadbd for the other members' proxies, host:port.
    pub mariadb: String,
}

/// Limits of a membership change.
pub struct Patience {
    /// How long a new node may take to provision its database and catch up before it is given up (it never
    /// became a member: nothing to undo).
    pub catch_up: Duration,
    /// How many transactions behind the global log a new node may be when it becomes a member.
    pub max_lag: u64,
    pub json: bool,
}

impl Patience {
    /// A removal waits for no new node.
    pub fn removal(json: bool) -> Patience {
        Patience { catch_up: Duration::ZERO, max_lag: 0, json }
    }
}

pub fn add(admin: &Admin<'_>, new: &NewMember, patience: &Patience) -> anyhow::Result<()> {
    block_on(async {
        let out = add_member(admin, new, patience).await?;
        print_json(patience.json, &out)
    })
}

/// Whether `node` votes, as the serving master's log says.
pub fn is_member(admin: &Admin<'_>, node: u64) -> anyhow::Result<bool> {
    block_on(async { Ok(master(admin).await?.1.members.contains(&node)) })
}

pub fn remove(admin: &Admin<'_>, node: u64, patience: &Patience) -> anyhow::Result<()> {
    block_on(async {
        let out = remove_member(admin, node).await?;
        print_json(patience.json, &out)
    })
}

/// Adds `new`, then removes `old`: the membership never shrinks below what it was.
pub fn replace(admin: &Admin<'_>, old: u64, new: &NewMember, patience: &Patience) -> anyhow::Result<()> {
    block_on(async {
        let added = add_member(admin, new, patience).await?;
        let removed = remove_member(admin, old).await?;
        print_json(patience.json, &serde_json::json!({ "added": added, "removed": removed }))
    })
}

fn block_on<T>(f: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(f)
}

fn print_json(json: bool, out: &serde_json::Value) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(out)?);
    }
    Ok(())
}

fn detail<'a>(s: &'a StatusReply, key: &str) -> &'a str {
    s.details.get(key).map(String::as_str).unwrap_or("")
}

/// The serving master's status and peer address, waiting up to 10 s for one (an election may be under way).
async fn master(admin: &Admin<'_>) -> anyhow::Result<(String, StatusReply)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let all = ask_all(&admin.peers, admin.auth, admin.tls).await;
        if let Some(found) =
            all.into_iter().find_map(|(peer, s)| s.ok().filter(|s| s.role == "master").map(|s| (peer, s)))
        {
            return Ok(found);
        }
        if Instant::now() >= deadline {
            bail!("no node serves as master (asked {}): a membership change needs one", admin.peers.join(", "));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn client(admin: &Admin<'_>, peer: &str) -> anyhow::Result<AdminClient<tonic::transport::Channel>> {
    let endpoint = peer_endpoint(admin.tls, None, peer).map_err(|e| anyhow!("{peer}: {e}"))?;
    let channel = tokio::time::timeout(Duration::from_secs(3), endpoint.connect())
        .await
        .map_err(|_| anyhow!("{peer}: connect timed out"))?
        .with_context(|| format!("cannot reach {peer}"))?;
    Ok(AdminClient::new(channel))
}

/// Asks the serving master to add (`add`) or remove (`remove`) one member and waits until the master's membership
/// shows it. A master change meanwhile is followed: the next master is asked again if the change is not chosen.
async fn change(admin: &Admin<'_>, add: u64, remove: u64) -> anyhow::Result<Vec<u64>> {
    let done = |members: &[u64]| if add != 0 { members.contains(&add) } else { !members.contains(&remove) };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (peer, st) = master(admin).await?;
        if done(&st.members) {
            return Ok(st.members);
        }
        let mut req = tonic::Request::new(ChangeMembershipRequest { add, remove });
        admin.auth.attach(&mut req);
        req.set_timeout(Duration::from_secs(5));
        match client(admin, &peer).await?.change_membership(req).await {
            Ok(_) => {}
            // Another master took over between the status and the call: ask it.
            Err(s) if s.code() == tonic::Code::FailedPrecondition && s.message().contains("does not serve") => {}
            // Our earlier proposal (or another operator's) is still on its way: wait for it.
            Err(s) if s.message().contains("already pending") => {}
            Err(s) => bail!("node {} refused the membership change: {}", st.node_id, s.message()),
        }
        let asked = Instant::now();
        while asked.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if let Ok((_, st)) = master(admin).await {
                if done(&st.members) {
                    return Ok(st.members);
                }
            }
        }
        if Instant::now() >= deadline {
            bail!("the membership change was not chosen within 30 s");
        }
    }
}

async fn add_member(admin: &Admin<'_>, new: &NewMember, patience: &Patience) -> anyhow::Result<serde_json::Value> {
    let started = Instant::now();
    let (peer, st) = master(admin).await?;
    if st.members.contains(&new.node) {
        bail!("node {} is a member already (members: {:?})", new.node, st.members);
    }
    eprintln!(
        "member add: node {} (peer {}, mariadb {}): recording its addresses in the log",
        new.node, new.peer, new.mariadb
    );
    let mut req = tonic::Request::new(RecordMemberRequest {
        node_id: new.node,
        peer: new.peer.clone(),
        mariadb: new.mariadb.clone(),
    });
    admin.auth.attach(&mut req);
    req.set_timeout(Duration::from_secs(5));
    client(admin, &peer)
        .await?
        .record_member(req)
        .await
        .map_err(|s| anyhow!("node {} refused to record node {}: {}", st.node_id, new.node, s.message()))?;
    // The new node, asked directly: it is no member yet, so no other node reports on it.
    let me = [new.peer.clone()];
    let deadline = started + patience.catch_up;
    // A line when the database's state changes, and every 5 s while it does not.
    let mut shown = (String::new(), Instant::now());
    let caught_up = loop {
        let mine = ask_all(&me, admin.auth, admin.tls).await.pop().and_then(|(_, s)| s.ok());
        let (state, line) = match &mine {
            None => ("-".to_string(), "not answering yet".to_string()),
            Some(s) => {
                let database = match detail(s, "database") {
                    "" => "starting",
                    d => d,
                };
                let lag = detail(s, "lag_transactions");
                if database == "replica" && lag.parse::<u64>().is_ok_and(|l| l <= patience.max_lag) {
                    break started.elapsed();
                }
                let state = format!("{database} {}", detail(s, "database_detail"));
                let line = format!(
                    "log applied to instance {}; database {database}{}{}",
                    s.applied_instance,
                    match detail(s, "database_detail") {
                        "" => String::new(),
                        d => format!(" ({d})"),
                    },
                    if lag.is_empty() { String::new() } else { format!(", {lag} transactions behind") }
                );
                (state, line)
            }
        };
        if state != shown.0 || shown.1.elapsed() >= Duration::from_secs(5) {
            eprintln!("member add: node {}: {line} ({} s)", new.node, started.elapsed().as_secs());
            shown = (state, Instant::now());
        }
        if Instant::now() >= deadline {
            bail!(
                "node {} did not become a caught-up replica within {} s (last: {}); it is not a member, \
                 nothing was changed but its recorded address",
                new.node,
                patience.catch_up.as_secs(),
                shown.0
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!(
        "member add: node {} is a caught-up replica ({} ms); proposing it as a member",
        new.node,
        caught_up.as_millis()
    );
    let members = change(admin, new.node, 0).await?;
    eprintln!("member add: node {} votes; members {members:?} ({} ms)", new.node, started.elapsed().as_millis());
    Ok(serde_json::json!({
        "added": new.node,
        "members": members,
        "caught_up_ms": caught_up.as_millis() as u64,
        "total_ms": started.elapsed().as_millis() as u64,
    }))
}

async fn remove_member(admin: &Admin<'_>, node: u64) -> anyhow::Result<serde_json::Value> {
    let started = Instant::now();
    let (_, st) = master(admin).await?;
    if !st.members.contains(&node) {
        bail!("node {node} is not a member (members: {:?})", st.members);
    }
    let mut switched_to = None;
    if st.node_id == node {
        eprintln!("member remove: node {node} is the master: switching over first");
        let how = crate::switchover::Switchover {
            to: None,
            max_lag: 1000,
            drain_timeout: Duration::from_secs(5),
            wait: Duration::from_secs(60),
            json: false,
        };
        crate::switchover::switch(&admin.peers, admin.auth, admin.tls, &how).await?;
        let (_, now) = master(admin).await?;
        if now.node_id == node {
            bail!("node {node} is still the master after the switchover");
        }
        switched_to = Some(now.node_id);
    }
    eprintln!("member remove: proposing the membership without node {node}");
    let members = change(admin, 0, node).await?;
    eprintln!("member remove: node {node} votes no more; members {members:?} ({} ms)", started.elapsed().as_millis());
    Ok(serde_json::json!({
        "removed": node,
        "members": members,
        "switched_over_to": switched_to,
        "total_ms": started.elapsed().as_millis() as u64,
    }))
}
