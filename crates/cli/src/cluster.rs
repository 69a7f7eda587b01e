//! `paxsql cluster up|down|status|switchover|restart`: a complete local cluster in one directory — real mariadbd servers, real nodes —
//! for trying paxsql out and for the cluster tests.
//!
//! Layout of `--dir`: `cluster.json` (ports, accounts), `secrets/` (0600 files), `tls/` (CA and certificates, keys
//! 0600), and per node `nN/` with
//! `data/` (mariadbd), `node/` (global log, status.json, `node.lock` naming the running node's pid), `run/`,
//! `log/`, `my.cnf`, `node.toml`, `node.pid` (the pid `cluster up` started; `down` and `status` go by the lock).

use std::fs;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Subcommand;
use paxsql_peer_transport::TlsConfig;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// The application account's password, 0600, under the cluster directory (status output names the file, never the
/// password).
const APP_PASSWORD_FILE: &str = "secrets/app.password";

use crate::pki::ClusterPki;
use crate::secret_file::write_secret;

pub(crate) mod hosts;
pub(crate) mod membership;
mod restart;

#[derive(Subcommand)]
pub enum ClusterCommand {
    /// Initialise and start a local cluster, wait for a master, print how to connect.
    Up {
        #[arg(long, default_value_t = 3)]
        nodes: u64,
        #[arg(long)]
        dir: PathBuf,
        /// Node N uses ports base+10*(N-1) .. +6 (mariadbd, peer, replication, admin SQL, proxy RW, proxy RO, metrics).
        #[arg(long, default_value_t = 24000)]
        base_port: u16,
        /// Seconds to wait for a master.
        #[arg(long, default_value_t = 90)]
        timeout: u64,
        /// Give node N its own loopback address 127.0.0.N (for fault tests that filter traffic between nodes,
        /// inside a network namespace of their own); default: every node on 127.0.0.1.
        #[arg(long)]
        address_per_node: bool,
        /// No TLS anywhere: peer links in plaintext (the cluster secret in clear on the wire) and client ports
        /// without a certificate. Default: a CA made for this cluster in `--dir`/tls, mutual TLS between members,
        /// and TLS offered on every node's RW, RO and admin ports.
        #[arg(long, conflicts_with = "require_tls")]
        no_tls: bool,
        /// Refuse clients that do not use TLS on the RW, RO and admin ports.
        #[arg(long)]
        require_tls: bool,
    },
    /// Stop every process of the cluster in `--dir`.
    Down {
        #[arg(long)]
        dir: PathBuf,
    },
    /// Move the master role to another node of the cluster in `--dir` while clients write.
    Switchover {
        #[arg(long)]
        dir: PathBuf,
        #[command(flatten)]
        how: crate::SwitchoverArgs,
    },
    /// Restart every node of the cluster in `--dir`, one at a time: replicas first, each back as a caught-up
    /// replica before the next stops; the master last, after a switchover.
    Restart {
        #[arg(long)]
        dir: PathBuf,
        /// Seconds a restarted node may take to serve again as a caught-up replica.
        #[arg(long, default_value_t = 180)]
        node_timeout: u64,
        /// How many transactions behind the global log a restarted replica may be before the next node stops.
        #[arg(long, default_value_t = 100)]
        max_lag: u64,
        #[arg(long)]
        json: bool,
    },
    /// Add a node to the cluster in `--dir` while clients write: it provisions its database with a copy of a
    /// member's, catches up, and only then votes.
    AddNode {
        #[arg(long)]
        dir: PathBuf,
        #[command(flatten)]
        patience: crate::PatienceArgs,
    },
    /// Take node `--node` out of the cluster in `--dir` (a master is switched over first), then stop it.
    RemoveNode {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        node: u64,
        #[arg(long)]
        json: bool,
    },
    /// Replace node `--node` (running or dead) with a new node: add the new one, then remove the old one.
    ReplaceNode {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        node: u64,
        #[command(flatten)]
        patience: crate::PatienceArgs,
    },
    /// Show the cluster in `--dir`.
    Status {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: ClusterCommand) -> anyhow::Result<()> {
    match cmd {
        ClusterCommand::Up { nodes, dir, base_port, timeout, address_per_node, no_tls, require_tls } => {
            let tls = match (no_tls, require_tls) {
                (true, _) => TlsMode::Off,
                (false, false) => TlsMode::Offered,
                (false, true) => TlsMode::Required,
            };
            up(nodes, &dir, base_port, Duration::from_secs(timeout), address_per_node, tls)
        }
        ClusterCommand::Down { dir } => down(&dir),
        ClusterCommand::Status { dir, json } => status(&dir, json),
        ClusterCommand::Switchover { dir, how } => switchover(&dir, &how),
        ClusterCommand::AddNode { dir, patience } => membership::add_node(&dir, &patience.patience()),
        ClusterCommand::RemoveNode { dir, node, json } => {
            membership::remove_node(&dir, node, &crate::member::Patience::removal(json))
        }
        ClusterCommand::ReplaceNode { dir, node, patience } => {
            membership::replace_node(&dir, node, &patience.patience())
        }
        ClusterCommand::Restart { dir, node_timeout, max_lag, json } => {
            let plan = restart::RestartPlan { node_timeout: Duration::from_secs(node_timeout), max_lag, json };
            restart::run(&dir, &plan)
        }
    }
}

/// Ports and paths of one node.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct NodeLayout {
    id: u64,
    /// Address every endpoint of the node binds (loopback).
    #[serde(default = "default_host")]
    host: String,
    mariadb_port: u16,
    peer_port: u16,
    replication_port: u16,
    admin_port: u16,
    proxy_rw_port: u16,
    proxy_ro_port: u16,
    dir: PathBuf,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct ClusterFile {
    cluster_id: String,
    app_user: String,
    app_password: String,
    app_database: String,
    nodes: Vec<NodeLayout>,
    /// Whether the peer links run mutual TLS with the certificates in `tls/`.
    #[serde(default)]
    tls: bool,
    /// Whether the client ports offer TLS (`tls/node-<id>-clients.pem`), and whether they require it.
    #[serde(default)]
    client_tls: bool,
    #[serde(default)]
    client_tls_required: bool,
    /// The initial membership as `cluster up` made it (every node's config names it, whoever joined or left
    /// since); empty in a file written before nodes could be added: then `nodes` is still the initial membership.
    #[serde(default)]
    initial_nodes: Vec<NodeLayout>,
    /// The highest node id ever given: a node id is never reused (a removed member's id could otherwise come back
    /// with someone else's data in the other members' logs).
    #[serde(default)]
    last_id: u64,
}

impl ClusterFile {
    fn initial(&self) -> &[NodeLayout] {
        if self.initial_nodes.is_empty() {
            &self.nodes
        } else {
            &self.initial_nodes
        }
    }

    fn node(&self, id: u64) -> anyhow::Result<&NodeLayout> {
        self.nodes.iter().find(|n| n.id == id).ok_or_else(|| {
            let ids: Vec<u64> = self.nodes.iter().map(|n| n.id).collect();
            anyhow::anyhow!("the cluster has no node {id} (its nodes: {ids:?})")
        })
    }

    fn save(&self, dir: &Path) -> anyhow::Result<()> {
        // It holds the application password: 0600, replaced whole.
        write_secret(&dir.join("cluster.json"), &serde_json::to_string_pretty(self)?)
    }
}

/// TLS of a local cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TlsMode {
    Off,
    /// Peers: mutual TLS; clients: offered.
    Offered,
    /// Peers: mutual TLS; clients: required.
    Required,
}

fn default_host() -> String {
    "127.0.0.1".to_string()
}

impl NodeLayout {
    fn new(dir: &Path, id: u64, base: u16, address_per_node: bool) -> Self {
        let b = base + 10 * (id as u16 - 1);
        NodeLayout {
            id,
            host: if address_per_node { format!("127.0.0.{id}") } else { default_host() },
            mariadb_port: b,
            peer_port: b + 1,
            replication_port: b + 2,
            admin_port: b + 3,
            proxy_rw_port: b + 4,
            proxy_ro_port: b + 5,
            dir: dir.join(format!("n{id}")),
        }
    }
    fn socket(&self) -> PathBuf {
        self.dir.join("run/mysqld.sock")
    }
    fn datadir(&self) -> PathBuf {
        self.dir.join("data")
    }
}

fn random_secret(len: usize) -> String {
    let mut rng = rand::thread_rng();
    (0..len)
        .map(|_| char::from(b"abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"[rng.gen_range(0..57)]))
        .collect()
}

/// Who mariadbd runs as: root for a local cluster (whoever runs `cluster up`), `mysql` on a host (`paxsql init`).
fn my_cnf(n: &NodeLayout, run_as: &str) -> String {
    let d = n.dir.display();
    // The node's relay reaches a master's mariadbd from the node's own address, and sends the client's with the
    // PROXY protocol: that address must be trusted (loopback always is).
    let proxy_networks = if n.host.starts_with("127.") {
        "127.0.0.0/8,localhost".to_string()
    } else {
        format!("127.0.0.0/8,localhost,{}", n.host)
    };
    format!(
        "# Written by paxsql (`cluster up`, `init`). Recipe: docs/ARCHITECTURE.md §3 (docs/evidence/mariadb-config.md).\n\
         [mariadbd]\n\
         user={run_as}\n\
         bind-address={host}\n\
         port={port}\n\
         socket={d}/run/mysqld.sock\n\
         datadir={d}/data\n\
         tmpdir={d}/tmp\n\
         log-error={d}/log/mariadbd.err\n\
         log-bin=n{id}-bin\n\
         log-bin-index=n{id}-bin.index\n\
         relay-log=n{id}-relay-bin\n\
         relay-log-index=n{id}-relay-bin.index\n\
         server-id={id}\n\
         gtid_domain_id=0\n\
         gtid_strict_mode=ON\n\
         log_slave_updates=ON\n\
         binlog_format=ROW\n\
         sync_binlog=1\n\
         # The node purges the oldest files the global log holds beyond [mariadb] binlog_retain_bytes (1 GiB): files\n\
         # of this size let it free space in steps well below that.\n\
         max_binlog_size=256M\n\
         innodb_flush_log_at_trx_commit=1\n\
         skip-name-resolve\n\
         # The proxies pass the client's address with the PROXY protocol (docs/ARCHITECTURE.md §7); connections without the\n\
         # header from these networks are still accepted (the node's own, verified on 10.11).\n\
         proxy_protocol_networks={proxy_networks}\n\
         # Every node starts as a read-only replica; the node promotes the master (SET GLOBAL at promotion).\n\
         read_only=ON\n\
         # read_only does not bind READ ONLY ADMIN (root, DBAs): a server that is not the master refuses every login\n\
         # over TCP (no TLS is configured here), so none writes into it from the network. Its unix socket, in a\n\
         # directory only this user opens, serves the node and its proxy. The node lifts this at promotion.\n\
         require_secure_transport=ON\n\
         skip-slave-start\n\
         init-rpl-role=SLAVE\n\
         rpl_semi_sync_master_enabled=OFF\n\
         rpl_semi_sync_master_wait_point=AFTER_SYNC\n\
         rpl_semi_sync_master_timeout=18446744073709551615\n\
         rpl_semi_sync_master_wait_no_slave=ON\n\
         slave_parallel_threads=16\n\
         slave_parallel_mode=optimistic\n\
         max_allowed_packet=64M\n\
         slave_max_allowed_packet=1G\n\
         innodb_buffer_pool_size=64M\n\
         innodb_log_file_size=32M\n\
         performance_schema=OFF\n",
        port = n.mariadb_port,
        id = n.id,
        host = n.host,
    )
}

/// A node's own files, my.cnf for its mariadbd and node.toml for the node, as they read wherever they are written:
/// into the node's directory of a local cluster (`cluster up`, `add-node`) or into a host's bundle (`paxsql init`).
/// Certificates are not among them: a local node names the cluster's `tls/`, a host carries copies in its bundle.
struct NodeFiles<'a> {
    node: &'a NodeLayout,
    /// Who mariadbd runs as (see [`my_cnf`]).
    run_as: &'a str,
    /// The initial members, named by every node's config whoever joined or left since.
    members: &'a [NodeLayout],
    /// Nodes reached by address only (who votes is in the log).
    peers: &'a [NodeLayout],
    /// Where `secrets/` is, as the node reads it: the cluster's directory, or the host's root.
    secrets_in: &'a Path,
    cluster_id: &'a str,
    /// The member certificate and the client ports' certificate ([`ClusterPki::node`]); none without TLS.
    certificates: Option<(TlsConfig, TlsConfig)>,
    client_tls_required: bool,
}

impl NodeFiles<'_> {
    /// Both files into `to`.
    fn write(&self, to: &Path) -> anyhow::Result<()> {
        self.write_my_cnf(to)?;
        self.write_node_toml(to)
    }

    fn write_my_cnf(&self, to: &Path) -> anyhow::Result<()> {
        fs::write(to.join("my.cnf"), my_cnf(self.node, self.run_as))?;
        Ok(())
    }

    fn write_node_toml(&self, to: &Path) -> anyhow::Result<()> {
        fs::write(to.join("node.toml"), self.node_toml())?;
        Ok(())
    }

    fn node_toml(&self) -> String {
        let (n, cluster_id) = (self.node, self.cluster_id);
        let d = n.dir.display();
        let s = self.secrets_in.join("secrets");
        let mut out = format!(
            "# Written by paxsql (`cluster up`, `init`).\n\
             node_id = {id}\n\
             cluster_id = \"{cluster_id}\"\n\
             cluster_secret_file = \"{s}/cluster.secret\"\n\
             data_dir = \"{d}/node\"\n\
             \n[listen]\n\
             peer = \"{host}:{peer}\"\n\
             replication = \"{host}:{repl}\"\n\
             proxy_rw = \"{host}:{prw}\"\n\
             proxy_ro = \"{host}:{pro}\"\n\
             admin = \"{host}:{admin}\"\n\
             metrics = \"{host}:{metrics}\"\n\
             \n[mariadb]\n\
             port = {port}\n\
             socket = \"{d}/run/mysqld.sock\"\n\
             datadir = \"{d}/data\"\n\
             defaults_file = \"{d}/my.cnf\"\n\
             replication_password_file = \"{s}/replication.password\"\n\
             admin_password_file = \"{s}/admin.password\"\n\
             error_log = \"{d}/log/mariadbd.err\"\n\
             \n[admin]\n\
             user = \"paxsql\"\n\
             password_file = \"{s}/admin_sql.password\"\n",
            id = n.id,
            host = n.host,
            s = s.display(),
            peer = n.peer_port,
            repl = n.replication_port,
            prw = n.proxy_rw_port,
            pro = n.proxy_ro_port,
            admin = n.admin_port,
            metrics = n.admin_port + 3,
            port = n.mariadb_port,
        );
        if let Some((member, clients)) = &self.certificates {
            out += &format!(
                "\n[tls]\ncert = \"{}\"\nkey = \"{}\"\nca = \"{}\"\n",
                member.cert.display(),
                member.key.display(),
                member.ca.display()
            );
            out += &format!(
                "\n[client_tls]\ncert = \"{}\"\nkey = \"{}\"\nrequire = {}\n",
                clients.cert.display(),
                clients.key.display(),
                self.client_tls_required
            );
        }
        for (table, list) in [("members", self.members), ("peers", self.peers)] {
            for m in list {
                out += &format!(
                    "\n[[{table}]]\nid = {}\npeer = \"{}:{}\"\nmariadb = \"{}:{}\"\n",
                    m.id, m.host, m.peer_port, m.host, m.mariadb_port
                );
            }
        }
        out
    }
}

/// Runs `sql` as root over node `n`'s unix socket. The SQL (it may carry passwords) goes through stdin and the
/// password through the environment: neither appears on a command line that `ps` shows.
fn mariadb_cli(n: &NodeLayout, password: Option<&str>, sql: &str) -> anyhow::Result<String> {
    let mut cmd = Command::new("mariadb");
    cmd.arg(format!("--socket={}", n.socket().display())).arg("-uroot").arg("-N").arg("-B");
    if let Some(pw) = password {
        cmd.env("MYSQL_PWD", pw);
    }
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().context("cannot run the mariadb client (run deploy/install-deps.sh)")?;
    if let Some(mut stdin) = child.stdin.take() {
        // A client that exits early (SHUTDOWN, a failed login) closes its end: what it answered says why.
        let _ = stdin.write_all(sql.as_bytes());
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("mariadb client on node {}: {}", n.id, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn wait_for<T>(timeout: Duration, what: &str, mut probe: impl FnMut() -> Option<T>) -> anyhow::Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe() {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {} s waiting for {what}", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Initialises one mariadbd data directory and creates the accounts, binlog off, identically on every node.
fn init_mariadb(n: &NodeLayout, admin_pw: &str, repl_pw: &str, app_pw: &str, app_db: &str) -> anyhow::Result<()> {
    // 0700: the unix socket in run/ is the only way into a replica's mariadbd, for this user alone.
    for sub in ["data", "run", "log", "tmp", "node"] {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(n.dir.join(sub))?;
    }
    let out = Command::new("mariadb-install-db")
        .arg(format!("--defaults-file={}", n.dir.join("my.cnf").display()))
        .arg("--auth-root-authentication-method=normal")
        .arg("--skip-test-db")
        .output()
        .context("cannot run mariadb-install-db (run deploy/install-deps.sh)")?;
    if !out.status.success() {
        bail!("mariadb-install-db for node {}: {}", n.id, String::from_utf8_lossy(&out.stderr));
    }
    let mut child = Command::new("mariadbd")
        .arg(format!("--defaults-file={}", n.dir.join("my.cnf").display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start mariadbd (run deploy/install-deps.sh)")?;
    let ready = wait_for(Duration::from_secs(60), "mariadbd to accept connections", || {
        if let Ok(Some(_)) = child.try_wait() {
            return Some(false);
        }
        mariadb_cli(n, None, "SELECT 1").ok().map(|_| true)
    })?;
    if !ready {
        bail!("mariadbd of node {} exited during initialisation; see {}/log/mariadbd.err", n.id, n.dir.display());
    }
    // Accounts are created with the binlog off, before any replica exists, or they would wait for an ACK
    // forever (docs/ARCHITECTURE.md §3). The application account gets neither ALL ON *.* nor READ ONLY ADMIN, so read_only
    // holds it (docs/ARCHITECTURE.md §5).
    // mariadb-install-db leaves root@127.0.0.1, root@::1 and root@<hostname> without a password (and, on some
    // versions, anonymous accounts): every account but root@localhost (which gets a password) and the locked
    // mariadb.sys goes, so that no account without a password remains on any port.
    let strays = mariadb_cli(
        n,
        None,
        "SELECT CONCAT(QUOTE(user), '@', QUOTE(host)) FROM mysql.user \
         WHERE NOT (user = 'root' AND host = 'localhost') AND user <> 'mariadb.sys'",
    )?;
    let drops: String = strays.lines().map(|account| format!("DROP USER {account};")).collect();
    let sql = format!(
        "SET sql_log_bin=0;\
         {drops}\
         ALTER USER 'root'@'localhost' IDENTIFIED BY '{admin_pw}';\
         CREATE USER 'paxsql_repl'@'localhost' IDENTIFIED BY '{repl_pw}';\
         CREATE USER 'paxsql_repl'@'127.0.0.1' IDENTIFIED BY '{repl_pw}';\
         GRANT REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR ON *.* TO 'paxsql_repl'@'localhost';\
         GRANT REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR ON *.* TO 'paxsql_repl'@'127.0.0.1';\
         CREATE DATABASE `{app_db}`;\
         CREATE USER 'app'@'%' IDENTIFIED BY '{app_pw}';\
         GRANT ALL PRIVILEGES ON `{app_db}`.* TO 'app'@'%';\
         SHUTDOWN;"
    );
    // SHUTDOWN ends the connection; the statements before it are what matter.
    let _ = mariadb_cli(n, None, &sql);
    wait_for(Duration::from_secs(60), "mariadbd to stop after initialisation", || child.try_wait().ok().flatten())?;
    Ok(())
}

fn spawn_node(n: &NodeLayout) -> anyhow::Result<u32> {
    let exe = std::env::current_exe()?;
    // Appended to: a restarted node's log keeps what the previous process wrote.
    let log = fs::OpenOptions::new().create(true).append(true).open(n.dir.join("log/node.log"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("node").arg("--config").arg(n.dir.join("node.toml"));
    cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    // SAFETY: setsid() in the child before exec only detaches it from our session, so the node outlives the
    // `cluster up` command.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    fs::write(n.dir.join("node.pid"), child.id().to_string())?;
    Ok(child.id())
}

fn read_status(n: &NodeLayout) -> Option<serde_json::Value> {
    let text = fs::read_to_string(n.dir.join("node/status.json")).ok()?;
    serde_json::from_str(&text).ok()
}

fn load(dir: &Path) -> anyhow::Result<ClusterFile> {
    let path = dir.join("cluster.json");
    let text =
        fs::read_to_string(&path).with_context(|| format!("no cluster in {} (missing cluster.json)", dir.display()))?;
    Ok(serde_json::from_str(&text)?)
}

fn up(
    count: u64,
    dir: &Path,
    base: u16,
    timeout: Duration,
    address_per_node: bool,
    mode: TlsMode,
) -> anyhow::Result<()> {
    let tls = mode != TlsMode::Off;
    if ![3, 5].contains(&count) && count != 1 {
        bail!("--nodes must be 3 or 5 (or 1 for a single-node trial)");
    }
    if dir.join("cluster.json").exists() {
        bail!(
            "{} already holds a cluster: `paxsql cluster down --dir {}` and remove it first",
            dir.display(),
            dir.display()
        );
    }
    // Created 0700 from the start (a directory the operator made keeps its mode; what holds secrets is 0700/0600).
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir.join("secrets"))?;
    let dir = dir.canonicalize()?;
    let cluster_id = format!("paxsql-local-{base}");
    let (admin_pw, repl_pw, app_pw) = (random_secret(24), random_secret(24), random_secret(20));
    write_secret(&dir.join("secrets/cluster.secret"), &random_secret(40))?;
    write_secret(&dir.join("secrets/admin.password"), &admin_pw)?;
    write_secret(&dir.join("secrets/replication.password"), &repl_pw)?;
    write_secret(&dir.join("secrets/admin_sql.password"), &random_secret(24))?;
    // The application account's password, for people and scripts: never printed, never on a command line.
    write_secret(&dir.join(APP_PASSWORD_FILE), &app_pw)?;
    let nodes: Vec<NodeLayout> = (1..=count).map(|id| NodeLayout::new(&dir, id, base, address_per_node)).collect();
    let file = ClusterFile {
        cluster_id: cluster_id.clone(),
        app_user: "app".into(),
        app_password: app_pw.clone(),
        app_database: "app".into(),
        nodes: nodes.clone(),
        tls,
        client_tls: tls,
        client_tls_required: mode == TlsMode::Required,
        initial_nodes: nodes.clone(),
        last_id: count,
    };
    let pki = tls.then(|| ClusterPki::at(&dir.join("tls")));
    if let Some(pki) = &pki {
        fs::DirBuilder::new().mode(0o700).create(dir.join("tls"))?;
        let members: Vec<(u64, String)> = nodes.iter().map(|n| (n.id, n.host.clone())).collect();
        pki.create(&cluster_id, &members).context("cannot create the cluster's certificates")?;
    }
    // It holds the application password: 0600 from its creation.
    write_secret(&dir.join("cluster.json"), &serde_json::to_string_pretty(&file)?)?;
    for n in &nodes {
        eprintln!("initialising node {} (mariadbd on {}:{})", n.id, n.host, n.mariadb_port);
        fs::DirBuilder::new().recursive(true).mode(0o700).create(&n.dir)?;
        let files = NodeFiles {
            node: n,
            run_as: "root",
            members: &nodes,
            peers: &[],
            secrets_in: &dir,
            cluster_id: &cluster_id,
            certificates: pki.as_ref().map(|p| p.node(n.id)),
            client_tls_required: file.client_tls_required,
        };
        // The database is initialised with my.cnf (mariadb-install-db, then mariadbd, read it).
        files.write_my_cnf(&n.dir)?;
        init_mariadb(n, &admin_pw, &repl_pw, &app_pw, &file.app_database)?;
        files.write_node_toml(&n.dir)?;
    }
    for n in &nodes {
        let pid = spawn_node(n)?;
        eprintln!("node {} started (pid {pid}), log {}/log/node.log", n.id, n.dir.display());
    }
    let master = wait_for(timeout, "a master to be elected and serving", || {
        nodes.iter().find(|n| read_status(n).is_some_and(|s| s["serving_as_master"] == true)).cloned()
    })?;
    println!("paxsql cluster is up: {} nodes, master is node {}", nodes.len(), master.id);
    println!();
    println!(
        "Connect through any node's proxy (read-write port: forwarded to the current master, also after a failover):"
    );
    // Verifying the node's certificate against the cluster CA: the proxy terminates TLS, so the name checked is the
    // node dialled, whichever node's mariadbd serves behind it.
    let verify = pki.as_ref().map(|p| format!(" --ssl-verify-server-cert --ssl-ca={}", p.ca().display()));
    println!(
        "  (account {}, its password in {}: `-p` asks for it, or set MYSQL_PWD=\"$(cat {})\")",
        file.app_user,
        dir.join(APP_PASSWORD_FILE).display(),
        dir.join(APP_PASSWORD_FILE).display()
    );
    for n in &nodes {
        println!(
            "  mariadb -h{} -P{} -u{} -p{} {}",
            n.host,
            n.proxy_rw_port,
            file.app_user,
            verify.as_deref().unwrap_or(""),
            file.app_database
        );
    }
    println!(
        "Read-only port of each node (its local replica): {}",
        nodes.iter().map(|n| format!("{}:{}", n.host, n.proxy_ro_port)).collect::<Vec<_>>().join(", ")
    );
    println!("The master's mariadbd directly: {}:{}", master.host, master.mariadb_port);
    println!();
    match &pki {
        Some(pki) => println!(
            "Peer links: mutual TLS, CA {}; operator certificate for `paxsql status`: {}",
            pki.ca().display(),
            pki.tls("operator").cert.display()
        ),
        None => println!("Peer links: plaintext (--no-tls): the cluster secret crosses the network in clear"),
    }
    match mode {
        TlsMode::Off => println!("Client ports: no TLS (--no-tls)"),
        TlsMode::Offered => {
            println!("Client ports (RW, RO, admin): TLS offered, certificates in {}/tls", dir.display())
        }
        TlsMode::Required => println!("Client ports (RW, RO, admin): TLS required (--require-tls)"),
    }
    println!("Status:  paxsql cluster status --dir {} [--json]", dir.display());
    println!("Stop:    paxsql cluster down --dir {}", dir.display());
    Ok(())
}

/// Whether `pid` runs: exists and is not a zombie (a process that exited and waits for its parent, e.g. a node
/// started by a test harness, is gone for every purpose here).
fn pid_alive(pid: i32) -> bool {
    pid > 0
        && fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
}

fn read_pid(path: &Path) -> Option<i32> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The pid of the node process running on `n`'s data directory, however it was started (`cluster up`, or by hand
/// with `paxsql node --config`): the holder of the directory's lock, which writes its pid into the lock file. A
/// lock that can be taken has no holder, whatever pid the file still names.
fn node_pid(n: &NodeLayout) -> Option<i32> {
    use std::os::unix::io::AsRawFd;
    let path = n.dir.join("node/node.lock");
    let file = fs::File::open(&path).ok()?;
    // SAFETY: flock(2) on a descriptor owned here; a lock taken is released when `file` closes below.
    let free = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0;
    if free {
        return None;
    }
    read_pid(&path).filter(|pid| pid_alive(*pid))
}

fn down(dir: &Path) -> anyhow::Result<()> {
    let file = load(dir)?;
    for n in &file.nodes {
        stop_node(n);
        eprintln!("node {} stopped", n.id);
    }
    Ok(())
}

/// Stops node `n`'s process however it was started (SIGTERM, SIGKILL after 15 s) and the mariadbd it leaves behind.
fn stop_node(n: &NodeLayout) {
    if let Some(pid) = node_pid(n) {
        // SAFETY: the process holding this node's data directory lock: this cluster's node, however started.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let gone = wait_for(Duration::from_secs(15), "node to stop", || (!pid_alive(pid)).then_some(()));
        if gone.is_err() {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    // A node killed hard leaves its mariadbd behind: it only ever gets SIGKILL (docs/ARCHITECTURE.md §3).
    if let Some(pid) = read_pid(&n.datadir().join("mariadbd.pid")) {
        if pid_alive(pid) {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// The same switchover as `paxsql switchover`, addressed from the cluster's files: every node's peer port, the
/// cluster secret, and the operator's certificate when the peers run TLS.
fn switchover(dir: &Path, how: &crate::SwitchoverArgs) -> anyhow::Result<()> {
    let (peers, auth, tls) = admin_address(dir, &load(dir)?)?;
    crate::switchover::run(&peers, &auth, tls.as_ref(), &how.request())
}

/// How an operator's tool reaches the admin endpoints of the cluster in `dir`: every node's peer port, the cluster
/// secret, and the operator's certificate when the peers run TLS.
fn admin_address(
    dir: &Path,
    file: &ClusterFile,
) -> anyhow::Result<(Vec<String>, paxsql_peer_transport::ClusterAuth, Option<TlsConfig>)> {
    let peers = file.nodes.iter().map(|n| format!("{}:{}", n.host, n.peer_port)).collect();
    let auth = crate::status::cluster_auth(&file.cluster_id, &dir.join("secrets/cluster.secret"))?;
    let tls = file.tls.then(|| ClusterPki::at(&dir.join("tls")).tls("operator"));
    Ok((peers, auth, tls))
}

fn status(dir: &Path, json: bool) -> anyhow::Result<()> {
    let file = load(dir)?;
    let mut rows = Vec::new();
    for n in &file.nodes {
        let st = read_status(n).unwrap_or(serde_json::Value::Null);
        let node_pid = node_pid(n);
        let mariadbd_pid = read_pid(&n.datadir().join("mariadbd.pid")).filter(|p| pid_alive(*p));
        let role = if node_pid.is_none() {
            "down".to_string()
        } else if st["serving_as_master"] == true {
            "master".to_string()
        } else {
            st["role"].as_str().unwrap_or("starting").to_string()
        };
        rows.push(serde_json::json!({
            "id": n.id,
            "role": role,
            "master_id": st["master_id"],
            "master_version": st["master_version"],
            "applied_instance": st["applied_instance"],
            "log_first_held": st["log_first_held"],
            "global_last_gtid": st["global_last_gtid"],
            "members": st["members"],
            "endpoints": {
                "mariadb": format!("{}:{}", n.host, n.mariadb_port),
                "peer": format!("{}:{}", n.host, n.peer_port),
                "replication": format!("{}:{}", n.host, n.replication_port),
                "proxy_rw": format!("{}:{}", n.host, n.proxy_rw_port),
                "proxy_ro": format!("{}:{}", n.host, n.proxy_ro_port),
                "admin_sql": format!("{}:{}", n.host, n.admin_port),
                "metrics": format!("{}:{}", n.host, n.admin_port + 3),
            },
            "database": st["database"],
            "database_detail": st["database_detail"],
            "database_gtid": st["database_gtid"],
            "lag_transactions": st["lag_transactions"],
            "pids": { "node": node_pid, "mariadbd": mariadbd_pid },
        }));
    }
    let master = rows.iter().find(|r| r["role"] == "master").map(|r| r["id"].clone());
    // Who votes, as the master's log says (else the most advanced node's).
    let members = rows
        .iter()
        .find(|r| r["role"] == "master")
        .or_else(|| rows.iter().max_by_key(|r| r["applied_instance"].as_u64().unwrap_or(0)))
        .map(|r| r["members"].clone())
        .unwrap_or(serde_json::Value::Null);
    if json {
        let out = serde_json::json!({
            "cluster_id": file.cluster_id,
            "master": master,
            "members": members,
            "nodes": rows,
            "application_account": {
                "user": file.app_user,
                "password_file": dir.join(APP_PASSWORD_FILE),
                "database": file.app_database,
            },
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let members: Vec<String> =
        members.as_array().map(|m| m.iter().map(|id| id.to_string()).collect()).unwrap_or_default();
    println!(
        "cluster {}   master: {}   members: {}",
        file.cluster_id,
        master.map_or("none".to_string(), |m| format!("node {m}")),
        if members.is_empty() { "unknown".to_string() } else { members.join(", ") }
    );
    println!(
        "{:<5} {:<9} {:<12} {:<7} {:<8} {:<12} {:<18} {:>7} {:<16} {:>8} {:>9}",
        "node",
        "role",
        "database",
        "master",
        "version",
        "applied",
        "last gtid",
        "behind",
        "mariadb",
        "node pid",
        "db pid"
    );
    // JSON values print with quotes and ignore widths: render each cell as plain text first.
    let cell = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) if !s.is_empty() => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        _ => "-".to_string(),
    };
    for r in &rows {
        println!(
            "{:<5} {:<9} {:<12} {:<7} {:<8} {:<12} {:<18} {:>7} {:<16} {:>8} {:>9}",
            cell(&r["id"]),
            cell(&r["role"]),
            cell(&r["database"]),
            cell(&r["master_id"]),
            cell(&r["master_version"]),
            cell(&r["applied_instance"]),
            cell(&r["global_last_gtid"]),
            cell(&r["lag_transactions"]),
            cell(&r["endpoints"]["mariadb"]),
            cell(&r["pids"]["node"]),
            cell(&r["pids"]["mariadbd"]),
        );
    }
    // A database that cannot serve says why, under the table: a stopped applier's error, a rebuild's progress.
    for r in rows.iter().filter(|r| r["database"] != "replica" && r["database"] != "master") {
        if let Some(detail) = r["database_detail"].as_str().filter(|d| !d.is_empty()) {
            println!("node {}: database {}: {detail}", cell(&r["id"]), cell(&r["database"]));
        }
    }
    println!(
        "application account: {} (database {}), password in {}",
        file.app_user,
        file.app_database,
        dir.join(APP_PASSWORD_FILE).display()
    );
    Ok(())
}
