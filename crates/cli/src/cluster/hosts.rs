//! A cluster on several hosts. `paxsql init --hosts A,B,C --out DIR` writes one bundle per host (`DIR/node-N/`, to
//! be copied to that host's `/var/lib/paxsql`): `node.toml`, `my.cnf`, the secrets (0600) and the host's
//! certificates; and `DIR/operator/` with what an operator's tools need (the CA and its key, the operator's
//! certificate, the cluster secret, the application password, the peers). `paxsql init-host --dir
//! /var/lib/paxsql`, run as root before every start of the node (deploy/systemd/paxsql-node.service runs it as
//! `ExecStartPre`), makes the directories the node and mariadbd write, owned by the account mariadbd runs as, and
//! on the first host only (the bundle carries a `bootstrap` marker) initialises the database with the accounts.
//! The other hosts start with an empty data directory and get a copy of a member's database, as a node added later
//! does. Every host runs the same ports: RW 3306, RO 3307, mariadbd 3316, peer 7100, replication 7101 (for the
//! local mariadbd), admin SQL 7102, metrics 7105.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use paxsql_peer_transport::TlsConfig;

use super::{init_mariadb, random_secret, NodeFiles, NodeLayout};
use crate::pki::ClusterPki;
use crate::secret_file::write_secret;

/// Where a host's bundle is installed unless `--in-place`.
pub const HOST_ROOT: &str = "/var/lib/paxsql";

/// What `paxsql init` is asked to write.
pub struct InitPlan {
    /// Each host's address, node 1 first: every endpoint of its node binds it.
    pub hosts: Vec<String>,
    pub out: PathBuf,
    /// The configs name the bundle's own paths (for trying several "hosts" on one machine, in network
    /// namespaces): nothing to copy.
    pub in_place: bool,
    pub cluster_id: Option<String>,
    /// The account mariadbd runs as (and owns the files).
    pub run_as: String,
    /// TLS on the client ports required of every client (it is offered either way; peers always use mutual TLS).
    pub require_tls: bool,
}

const SECRETS: [&str; 5] =
    ["cluster.secret", "admin.password", "replication.password", "admin_sql.password", "app.password"];

fn layout(id: u64, host: &str, root: &Path) -> NodeLayout {
    NodeLayout {
        id,
        host: host.to_string(),
        mariadb_port: 3316,
        peer_port: 7100,
        replication_port: 7101,
        admin_port: 7102,
        proxy_rw_port: 3306,
        proxy_ro_port: 3307,
        dir: root.to_path_buf(),
    }
}

/// `host:port` of one of a host's endpoints, as the layout places it (hosts are IPv4: `check_address`).
fn address(host: &str, port: impl Fn(&NodeLayout) -> u16) -> String {
    format!("{host}:{}", port(&layout(0, host, Path::new(HOST_ROOT))))
}

/// What `DIR/operator/cluster.json` records: enough to write the bundle of a host added later.
#[derive(serde::Serialize, serde::Deserialize)]
struct OperatorRecord {
    cluster_id: String,
    /// `(id, address)` of the initial members: every host's config names them.
    initial: Vec<(u64, String)>,
    /// Every host given a bundle since, `(id, address)`; ids are never reused.
    added: Vec<(u64, String)>,
    run_as: String,
    require_tls: bool,
    in_place: bool,
    /// For people and scripts: every host's peer and RW endpoints.
    peers: Vec<String>,
    rw_endpoints: Vec<String>,
    app_user: String,
    app_database: String,
}

impl OperatorRecord {
    fn hosts(&self) -> impl Iterator<Item = &(u64, String)> {
        self.initial.iter().chain(&self.added)
    }

    fn save(&mut self, operator: &Path) -> anyhow::Result<()> {
        self.peers = self.hosts().map(|(_, h)| address(h, |n| n.peer_port)).collect();
        self.rw_endpoints = self.hosts().map(|(_, h)| address(h, |n| n.proxy_rw_port)).collect();
        fs::write(operator.join("cluster.json"), serde_json::to_string_pretty(self)?)?;
        Ok(())
    }
}

fn check_address(host: &str) -> anyhow::Result<()> {
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => Ok(()),
        // The generated configs write host:port unbracketed.
        Ok(std::net::IpAddr::V6(_)) => bail!("{host}: IPv6 addresses are not supported by paxsql init yet; use IPv4"),
        Err(_) => bail!("{host:?} is not an IPv4 address"),
    }
}

pub fn init(plan: &InitPlan) -> anyhow::Result<()> {
    if ![3, 5].contains(&plan.hosts.len()) {
        bail!("--hosts must name 3 or 5 hosts (got {})", plan.hosts.len());
    }
    for h in &plan.hosts {
        check_address(h).context("--hosts")?;
    }
    if plan.out.exists() && fs::read_dir(&plan.out)?.next().is_some() {
        bail!("{} is not empty: choose a new directory for the bundles", plan.out.display());
    }
    fs::DirBuilder::new().recursive(true).mode(0o700).create(&plan.out)?;
    let out = plan.out.canonicalize()?;
    let cluster_id = plan.cluster_id.clone().unwrap_or_else(|| format!("paxsql-{}", random_secret(8).to_lowercase()));
    let operator = out.join("operator");
    fs::DirBuilder::new().recursive(true).mode(0o700).create(operator.join("tls"))?;
    fs::DirBuilder::new().mode(0o700).create(operator.join("secrets"))?;
    for name in SECRETS {
        write_secret(
            &operator.join("secrets").join(name),
            &random_secret(if name == "cluster.secret" { 40 } else { 24 }),
        )?;
    }
    let pki = ClusterPki::at(&operator.join("tls"));
    let members: Vec<(u64, String)> = plan.hosts.iter().enumerate().map(|(i, h)| (i as u64 + 1, h.clone())).collect();
    pki.create(&cluster_id, &members).context("cannot create the cluster's certificates")?;
    let mut record = OperatorRecord {
        cluster_id,
        initial: members,
        added: Vec::new(),
        run_as: plan.run_as.clone(),
        require_tls: plan.require_tls,
        in_place: plan.in_place,
        peers: Vec::new(),
        rw_endpoints: Vec::new(),
        app_user: "app".into(),
        app_database: "app".into(),
    };
    for (id, _) in record.initial.clone() {
        write_bundle(&out, &record, id)?;
    }
    record.save(&operator)?;
    let o = operator.display();
    println!("paxsql cluster {}: bundles for {} hosts in {}", record.cluster_id, record.initial.len(), out.display());
    for (id, host) in &record.initial {
        print_install(&out, &record, *id, host);
    }
    println!(
        "Every host: install MariaDB 10.11 and paxsql, and deploy/systemd/paxsql-node.service; open the firewall:"
    );
    println!("  from clients: 3306 (RW), 3307 (RO), 7102 (admin SQL); between the hosts: 7100 (peer); metrics: 7105");
    println!(
        "Status: paxsql status --peers {} --cluster-id {} --secret-file {o}/secrets/cluster.secret --tls-ca {o}/tls/ca.pem --tls-cert {o}/tls/operator.pem --tls-key {o}/tls/operator.key",
        record.peers.join(","),
        record.cluster_id
    );
    println!("Clients: user app, database app, password in {o}/secrets/app.password; verify with --ssl-verify-server-cert --ssl-ca {o}/tls/ca.pem");
    println!("Keep {o} off the hosts: its tls/ca.key certifies hosts added later (`paxsql init --add-host`).");
    Ok(())
}

/// Writes the bundle of a host added to the cluster whose files are in `out` (made by `paxsql init`): the next
/// node id, the initial members and every other added host in its config, its certificates from the cluster's CA.
pub fn add_host(out: &Path, host: &str) -> anyhow::Result<()> {
    check_address(host).context("--add-host")?;
    let out = out.canonicalize().with_context(|| format!("no cluster files in {}", out.display()))?;
    let operator = out.join("operator");
    let path = operator.join("cluster.json");
    let text =
        fs::read_to_string(&path).with_context(|| format!("cannot read {} (made by paxsql init)", path.display()))?;
    let mut record: OperatorRecord = serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
    if record.hosts().any(|(_, h)| h == host) {
        bail!("{host} has a bundle already; a host that left is given a new address or a fresh bundle directory");
    }
    let id = record.hosts().map(|(id, _)| *id).max().unwrap_or(0) + 1;
    ClusterPki::at(&operator.join("tls")).add_member(&record.cluster_id, id, host)?;
    record.added.push((id, host.to_string()));
    write_bundle(&out, &record, id)?;
    record.save(&operator)?;
    print_install(&out, &record, id, host);
    let o = operator.display();
    println!(
        "Then: paxsql member add --new-node {id} --new-peer {} --new-mariadb {} --peers {} --cluster-id {} \
  --secret-file {o}/secrets/cluster.secret --tls-ca {o}/tls/ca.pem --tls-cert {o}/tls/operator.pem --tls-key {o}/tls/operator.key",
        address(host, |n| n.peer_port),
        address(host, |n| n.mariadb_port),
        record.peers.join(","),
        record.cluster_id
    );
    Ok(())
}

fn print_install(out: &Path, record: &OperatorRecord, id: u64, host: &str) {
    if record.in_place {
        println!("  node {id} ({host}): {}/node-{id}", out.display());
    } else {
        println!(
            "  node {id} ({host}): copy {}/node-{id}/ to {HOST_ROOT}/ on that host (e.g. rsync -a), then `systemctl enable --now paxsql-node`",
            out.display()
        );
    }
}

/// Writes `out/node-<id>/`: the config naming the initial members (and the added hosts under `peers`), my.cnf,
/// the secrets, and the host's own certificates (its key moved out of the operator's directory).
fn write_bundle(out: &Path, record: &OperatorRecord, id: u64) -> anyhow::Result<()> {
    let operator = out.join("operator");
    let pki = ClusterPki::at(&operator.join("tls"));
    let root = |id: u64| if record.in_place { out.join(format!("node-{id}")) } else { PathBuf::from(HOST_ROOT) };
    let initial: Vec<NodeLayout> = record.initial.iter().map(|(i, h)| layout(*i, h, &root(*i))).collect();
    let added: Vec<NodeLayout> = record.added.iter().map(|(i, h)| layout(*i, h, &root(*i))).collect();
    let n =
        initial.iter().chain(&added).find(|n| n.id == id).cloned().ok_or_else(|| anyhow::anyhow!("no node {id}"))?;
    let bundle = out.join(format!("node-{id}"));
    fs::DirBuilder::new().mode(0o700).create(&bundle)?;
    fs::DirBuilder::new().mode(0o700).create(bundle.join("secrets"))?;
    fs::DirBuilder::new().mode(0o700).create(bundle.join("tls"))?;
    for name in SECRETS {
        let value = fs::read_to_string(operator.join("secrets").join(name))?;
        write_secret(&bundle.join("secrets").join(name), value.trim_end())?;
    }
    // The host's own certificates only (never the CA key), named as the config names them.
    let (member, clients) = pki.node(id);
    for from in [&member, &clients] {
        fs::copy(&from.cert, bundle.join("tls").join(from.cert.file_name().unwrap_or_default()))?;
        let key = fs::read_to_string(&from.key)?;
        write_secret(&bundle.join("tls").join(from.key.file_name().unwrap_or_default()), key.trim_end())?;
        fs::remove_file(&from.key)?;
    }
    fs::copy(pki.ca(), bundle.join("tls/ca.pem"))?;
    let installed = |t: &TlsConfig| {
        let at = |p: &Path| n.dir.join("tls").join(p.file_name().unwrap_or_default());
        TlsConfig { cert: at(&t.cert), key: at(&t.key), ca: at(&t.ca) }
    };
    NodeFiles {
        node: &n,
        run_as: &record.run_as,
        members: &initial,
        peers: &added,
        secrets_in: &n.dir,
        cluster_id: &record.cluster_id,
        certificates: Some((installed(&member), installed(&clients))),
        client_tls_required: record.require_tls,
    }
    .write(&bundle)?;
    // A new cluster's first host initialises its database; every other host is provisioned with a copy.
    if id == 1 && record.added.is_empty() {
        fs::write(
            bundle.join("bootstrap"),
            "paxsql init-host initialises this host's database once (the accounts), then removes this file.\n",
        )?;
    }
    Ok(())
}

/// Makes `root`'s directories the node and mariadbd write (0700, owned by the account in `root/my.cnf`), and
/// initialises the database where the bundle says so. Idempotent: run before every start.
pub fn init_host(root: &Path) -> anyhow::Result<()> {
    let cnf = root.join("my.cnf");
    let text = fs::read_to_string(&cnf).with_context(|| format!("cannot read {}", cnf.display()))?;
    let run_as = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("user="))
        .map(str::trim)
        .ok_or_else(|| anyhow::anyhow!("{} names no user= for mariadbd", cnf.display()))?
        .to_string();
    let cfg = paxsql_node::config::NodeConfig::load(&root.join("node.toml"))?;
    let bootstrap = root.join("bootstrap");
    let initialise = bootstrap.exists() && !root.join("data/mysql").is_dir();
    let mut subdirs = vec!["run", "log", "tmp", "node"];
    if initialise {
        subdirs.push("data");
    }
    for sub in &subdirs {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(root.join(sub))?;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 && run_as != "root" {
        let (uid, gid) = account(&run_as)?;
        // Whatever is not owned by the account yet (the bundle as copied, directories made just now) is handed to
        // it whole; what is (a data directory of any size, after the first start) is not walked again.
        for entry in std::iter::once(Ok(root.to_path_buf())).chain(fs::read_dir(root)?.map(|e| e.map(|e| e.path()))) {
            let path = entry?;
            if std::os::unix::fs::MetadataExt::uid(&fs::symlink_metadata(&path)?) != uid {
                chown_tree(&path, uid, gid)?;
            }
        }
    }
    if initialise {
        let pw = |name: &str| -> anyhow::Result<String> {
            let path = root.join("secrets").join(name);
            Ok(fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?
                .trim_end()
                .to_string())
        };
        let n = NodeLayout {
            id: cfg.node_id,
            host: cfg.listen.peer.ip().to_string(),
            mariadb_port: cfg.mariadb.port,
            peer_port: cfg.listen.peer.port(),
            replication_port: 0,
            admin_port: 0,
            proxy_rw_port: 0,
            proxy_ro_port: 0,
            dir: root.to_path_buf(),
        };
        eprintln!("init-host: initialising the database of node {} in {}/data", n.id, root.display());
        init_mariadb(&n, &pw("admin.password")?, &pw("replication.password")?, &pw("app.password")?, "app")?;
        fs::remove_file(&bootstrap)?;
    } else if !root.join("data/mysql").is_dir() {
        eprintln!("init-host: no database here: the node provisions it with a copy of a member's");
    }
    Ok(())
}

fn account(name: &str) -> anyhow::Result<(u32, u32)> {
    let c = std::ffi::CString::new(name)?;
    // SAFETY: getpwnam reads the passwd database; the pointer it returns is read at once, before any other call.
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        bail!("no account {name:?} on this host (install mariadb-server, which creates `mysql`)");
    }
    // SAFETY: non-null, from getpwnam just above.
    Ok(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

fn chown_tree(path: &Path, uid: u32, gid: u32) -> anyhow::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).with_context(|| format!("chown {}", path.display()))?;
    if path.is_dir() && !path.is_symlink() {
        for entry in fs::read_dir(path)? {
            chown_tree(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
}
