//! `paxsql cluster add-node|remove-node|replace-node --dir D`: membership changes of a local cluster. The files
//! of a new node are made here (ports after the last node's, its certificates from the cluster's CA, a config naming
//! the initial members and the others under `peers`, an empty data directory the node provisions with a copy of a
//! member's); the change itself is `paxsql member`'s (crates/cli/src/member.rs).

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use super::{admin_address, load, spawn_node, stop_node, ClusterFile, NodeFiles, NodeLayout};
use crate::member::{self, Admin, NewMember, Patience};
use crate::pki::ClusterPki;

pub fn add_node(dir: &Path, patience: &Patience) -> anyhow::Result<()> {
    let mut file = load(dir)?;
    let new = prepare_node(dir, &mut file)?;
    change(dir, &file, |admin| member::add(admin, &new, patience))
}

pub fn remove_node(dir: &Path, node: u64, patience: &Patience) -> anyhow::Result<()> {
    let mut file = load(dir)?;
    let n = file.node(node)?.clone();
    // A node whose add-node never completed votes in nothing: it only needs stopping.
    if change(dir, &file, |admin| member::is_member(admin, node))? {
        change(dir, &file, |admin| member::remove(admin, node, patience))?;
    } else {
        eprintln!("node {node} is not a member (its add-node never completed): stopping it");
    }
    retire(dir, &mut file, &n)
}

pub fn replace_node(dir: &Path, node: u64, patience: &Patience) -> anyhow::Result<()> {
    let mut file = load(dir)?;
    let old = file.node(node)?.clone();
    let new = prepare_node(dir, &mut file)?;
    change(dir, &file, |admin| member::replace(admin, node, &new, patience))?;
    retire(dir, &mut file, &old)
}

fn change<T>(dir: &Path, file: &ClusterFile, f: impl FnOnce(&Admin<'_>) -> anyhow::Result<T>) -> anyhow::Result<T> {
    let (peers, auth, tls) = admin_address(dir, file)?;
    f(&Admin { peers, auth: &auth, tls: tls.as_ref() })
}

/// Stops a node that left the membership and takes it out of the cluster's file (its directory stays, renamed,
/// for whoever wants to look at it).
fn retire(dir: &Path, file: &mut ClusterFile, n: &NodeLayout) -> anyhow::Result<()> {
    stop_node(n);
    file.nodes.retain(|m| m.id != n.id);
    file.save(dir)?;
    let kept = n.dir.with_file_name(format!("n{}.removed", n.id));
    let _ = fs::remove_dir_all(&kept);
    if fs::rename(&n.dir, &kept).is_ok() {
        eprintln!("node {} stopped and out of the cluster; its files are in {}", n.id, kept.display());
    }
    Ok(())
}

/// Makes a new node's files and starts it, not yet a member: returns where it is reached.
fn prepare_node(dir: &Path, file: &mut ClusterFile) -> anyhow::Result<NewMember> {
    let initial = file.initial().to_vec();
    let first = initial.first().ok_or_else(|| anyhow::anyhow!("the cluster file names no node"))?;
    let base = first.mariadb_port - 10 * (first.id as u16 - 1);
    let address_per_node = first.host != super::default_host();
    let id = file.last_id.max(file.nodes.iter().chain(&initial).map(|n| n.id).max().unwrap_or(0)) + 1;
    let n = NodeLayout::new(dir, id, base, address_per_node);
    if n.dir.exists() {
        anyhow::bail!("{} exists already: remove it first", n.dir.display());
    }
    // No `data/`: the node finds no database and provisions one from a member (mariabackup).
    for sub in ["run", "log", "tmp", "node"] {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(n.dir.join(sub))?;
    }
    let pki = file.tls.then(|| ClusterPki::at(&dir.join("tls")));
    if let Some(pki) = &pki {
        pki.add_member(&file.cluster_id, id, &n.host)?;
    }
    // Every node that is no initial member, itself included, by address only: who votes is in the log.
    let mut peers: Vec<NodeLayout> =
        file.nodes.iter().filter(|m| !initial.iter().any(|i| i.id == m.id)).cloned().collect();
    peers.push(n.clone());
    NodeFiles {
        node: &n,
        run_as: "root",
        members: &initial,
        peers: &peers,
        secrets_in: dir,
        cluster_id: &file.cluster_id,
        certificates: pki.as_ref().map(|p| p.node(id)),
        client_tls_required: file.client_tls_required,
    }
    .write(&n.dir)?;
    // Recorded before it starts: `cluster down` stops it whatever happens next.
    file.initial_nodes = initial;
    file.last_id = id;
    file.nodes.push(n.clone());
    file.save(dir)?;
    let pid = spawn_node(&n)?;
    eprintln!("node {id} started (pid {pid}), log {}/log/node.log", n.dir.display());
    Ok(NewMember {
        node: id,
        peer: format!("{}:{}", n.host, n.peer_port),
        mariadb: format!("{}:{}", n.host, n.mariadb_port),
    })
}
