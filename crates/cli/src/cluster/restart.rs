//! `paxsql cluster restart --dir D`: a rolling restart of a local cluster (after an upgrade of the binary or of
//! MariaDB, or a change to `node.toml`/`my.cnf`). One node at a time, replicas first; the master last, after a
//! switchover moved its role to a caught-up replica. Every node must be up and serving before it starts, and each
//! node must be a caught-up replica again before the next one stops, so the cluster never runs on less than all but
//! one of its members — a majority of three or five.

use std::time::{Duration, Instant};

use anyhow::bail;

use super::{admin_address, load, node_pid, read_status, spawn_node, stop_node, wait_for, NodeLayout};

/// How a rolling restart goes.
pub struct RestartPlan {
    /// A restarted node must come back within this long as a replica at most `max_lag` transactions behind.
    pub node_timeout: Duration,
    pub max_lag: u64,
    pub json: bool,
}

fn serving_role(n: &NodeLayout) -> Option<String> {
    node_pid(n)?;
    let st = read_status(n)?;
    if st["serving_as_master"] == true {
        return Some("master".into());
    }
    st["database"].as_str().map(str::to_string)
}

fn lag(n: &NodeLayout) -> Option<u64> {
    read_status(n)?["lag_transactions"].as_u64()
}

/// Stops node `n` and starts it again, then waits until it is a replica at most `max_lag` behind. Returns how long
/// it took.
fn restart_one(n: &NodeLayout, plan: &RestartPlan) -> anyhow::Result<Duration> {
    let started = Instant::now();
    eprintln!("restart: node {}: stopping", n.id);
    stop_node(n);
    let pid = spawn_node(n)?;
    eprintln!("restart: node {}: started (pid {pid}); waiting until its database serves as a caught-up replica", n.id);
    // The status file of the previous process must not count: wait for the new pid to write it.
    wait_for(plan.node_timeout, &format!("node {} to come back as a caught-up replica", n.id), || {
        let st = read_status(n)?;
        let fresh = st["node_pid"].as_u64() == Some(u64::from(pid));
        let ready = st["database"] == "replica" && st["lag_transactions"].as_u64().is_some_and(|l| l <= plan.max_lag);
        (fresh && ready).then_some(())
    })?;
    let took = started.elapsed();
    eprintln!("restart: node {}: a replica again, {} behind ({:.1} s)", n.id, lag(n).unwrap_or(0), took.as_secs_f64());
    Ok(took)
}

pub fn run(dir: &std::path::Path, plan: &RestartPlan) -> anyhow::Result<()> {
    let file = load(dir)?;
    let roles: Vec<(u64, Option<String>)> = file.nodes.iter().map(|n| (n.id, serving_role(n))).collect();
    if let Some((id, role)) = roles.iter().find(|(_, r)| !matches!(r.as_deref(), Some("master" | "replica"))) {
        bail!(
            "node {id} is {}: a rolling restart needs every node serving (it would leave the cluster short of a \
             majority, or of a failover candidate)",
            role.as_deref().unwrap_or("down")
        );
    }
    let Some(master) = roles.iter().find(|(_, r)| r.as_deref() == Some("master")).map(|(id, _)| *id) else {
        bail!("no node serves as master: nothing to restart around");
    };
    let started = Instant::now();
    let mut restarted = Vec::new();
    for n in file.nodes.iter().filter(|n| n.id != master) {
        restarted.push(serde_json::json!({ "node": n.id, "seconds": restart_one(n, plan)?.as_secs_f64() }));
    }
    // The master last: move its role to a caught-up replica first, then restart it as one.
    eprintln!("restart: node {master} is the master: switching over first");
    let (peers, auth, tls) = admin_address(dir, &file)?;
    let switch = crate::switchover::Switchover {
        to: None,
        max_lag: plan.max_lag,
        drain_timeout: Duration::from_secs(5),
        wait: plan.node_timeout,
        json: false,
    };
    crate::switchover::run(&peers, &auth, tls.as_ref(), &switch)?;
    let Some(old) = file.nodes.iter().find(|n| n.id == master) else { bail!("node {master} left the cluster file") };
    restarted.push(serde_json::json!({ "node": master, "seconds": restart_one(old, plan)?.as_secs_f64() }));
    let new_master = file.nodes.iter().find(|n| serving_role(n).as_deref() == Some("master")).map(|n| n.id);
    eprintln!(
        "restart: all {} nodes restarted in {:.1} s; master is node {}",
        file.nodes.len(),
        started.elapsed().as_secs_f64(),
        new_master.map_or("none".to_string(), |m| m.to_string())
    );
    if plan.json {
        let out = serde_json::json!({
            "restarted": restarted,
            "old_master": master,
            "master": new_master,
            "seconds": started.elapsed().as_secs_f64(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(())
}
