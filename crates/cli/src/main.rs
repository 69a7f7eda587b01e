//! `paxsql`: run a node, start and stop a local cluster, show a cluster's status.

mod cluster;
mod member;
mod pki;
mod secret_file;
mod status;
mod switchover;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "paxsql", version, about = "A Paxos-backed, strongly consistent MariaDB cluster")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one node (binlog server beside its mariadbd).
    Node {
        #[arg(long)]
        config: PathBuf,
        /// Only read and check the configuration, then exit.
        #[arg(long)]
        check_config: bool,
    },
    /// Ask running nodes for their status over their authenticated admin endpoint (the peer port).
    Status {
        #[command(flatten)]
        cluster: ClusterAddress,
        #[arg(long)]
        json: bool,
    },
    /// Move the master role to another member while clients write: the master drains its database and names its
    /// successor in the log; clients' connections to the old master are closed, none of their writes lost.
    Switchover {
        #[command(flatten)]
        cluster: ClusterAddress,
        #[command(flatten)]
        how: SwitchoverArgs,
    },
    /// Write the files of a cluster on 3 or 5 hosts: one bundle per host (node.toml, my.cnf, secrets, its
    /// certificates) to copy to its /var/lib/paxsql, and the operator's files (CA, operator certificate, secret).
    Init {
        /// Each host's IP address, node 1 first.
        #[arg(long, value_delimiter = ',', required_unless_present = "add_host", conflicts_with = "add_host")]
        hosts: Vec<String>,
        /// Write the bundle of one more host into `--out` (made by `paxsql init` earlier), to add it to the
        /// running cluster with `paxsql member add`.
        #[arg(long)]
        add_host: Option<String>,
        /// An empty directory for the bundles (with --add-host: the one `paxsql init` wrote).
        #[arg(long)]
        out: PathBuf,
        /// The configs name the bundles' own paths (several hosts on one machine, e.g. in network namespaces).
        #[arg(long)]
        in_place: bool,
        #[arg(long)]
        cluster_id: Option<String>,
        /// The account mariadbd runs as and the files belong to.
        #[arg(long, default_value = "mysql")]
        run_as: String,
        /// Refuse clients that do not use TLS on the RW, RO and admin ports (offered either way).
        #[arg(long)]
        require_tls: bool,
    },
    /// Prepare this host before its node starts (run as root; the systemd unit does, before every start): the
    /// directories the node and mariadbd write, and on the first host the database with its accounts.
    InitHost {
        #[arg(long, default_value = cluster::hosts::HOST_ROOT)]
        dir: PathBuf,
    },
    /// Add, remove or replace a voting member of a running cluster, online, one member at a time.
    Member {
        #[command(subcommand)]
        change: MemberCommand,
    },
    /// Follow the cluster's master and publish it to files, commands or webhooks (a naming-service updater).
    Watch {
        #[arg(long)]
        config: PathBuf,
        /// Only read and check the configuration (and the secret file), then exit.
        #[arg(long)]
        check_config: bool,
    },
    /// Manage a local cluster in one directory.
    Cluster {
        #[command(subcommand)]
        command: cluster::ClusterCommand,
    },
}

/// How to reach a cluster's nodes' admin endpoints (their peer ports) from anywhere.
#[derive(clap::Args)]
struct ClusterAddress {
    /// Peer addresses (host:port), comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    peers: Vec<String>,
    #[arg(long)]
    cluster_id: String,
    /// File holding the cluster secret.
    #[arg(long)]
    secret_file: PathBuf,
    /// CA of a cluster whose peer ports run mutual TLS (with --tls-cert and --tls-key; `cluster up` makes
    /// `tls/ca.pem` and the operator's `tls/operator.pem`/`.key`).
    #[arg(long, requires_all = ["tls_cert", "tls_key"])]
    tls_ca: Option<PathBuf>,
    #[arg(long, requires = "tls_ca")]
    tls_cert: Option<PathBuf>,
    #[arg(long, requires = "tls_ca")]
    tls_key: Option<PathBuf>,
}

impl ClusterAddress {
    fn tls(&self) -> Option<paxsql_peer_transport::TlsConfig> {
        match (&self.tls_ca, &self.tls_cert, &self.tls_key) {
            (Some(ca), Some(cert), Some(key)) => {
                Some(paxsql_peer_transport::TlsConfig { cert: cert.clone(), key: key.clone(), ca: ca.clone() })
            }
            _ => None,
        }
    }
}

#[derive(Subcommand)]
enum MemberCommand {
    /// Make a running node a member: its addresses go into the log, it provisions its database from a member and
    /// catches up, and only then votes. Start the node first (`paxsql node` with an empty data directory and a
    /// config naming the initial members, and itself under `peers`).
    Add {
        #[command(flatten)]
        cluster: ClusterAddress,
        #[command(flatten)]
        new: NewMemberArgs,
        #[command(flatten)]
        patience: PatienceArgs,
    },
    /// Take a member out of the membership (a master is switched over first); stop its process afterwards.
    Remove {
        #[command(flatten)]
        cluster: ClusterAddress,
        #[arg(long)]
        node: u64,
        #[arg(long)]
        json: bool,
    },
    /// Add a new node, then remove `--node` (which may be dead).
    Replace {
        #[command(flatten)]
        cluster: ClusterAddress,
        /// The member to take out.
        #[arg(long)]
        node: u64,
        #[command(flatten)]
        new: NewMemberArgs,
        #[command(flatten)]
        patience: PatienceArgs,
    },
}

#[derive(clap::Args)]
struct NewMemberArgs {
    /// The new node's id (never one a member had before).
    #[arg(long)]
    new_node: u64,
    /// Its peer endpoint, IP:port.
    #[arg(long)]
    new_peer: String,
    /// Its mariadbd for the other members' proxies, IP:port.
    #[arg(long)]
    new_mariadb: String,
}

impl NewMemberArgs {
    fn member(&self) -> member::NewMember {
        member::NewMember { node: self.new_node, peer: self.new_peer.clone(), mariadb: self.new_mariadb.clone() }
    }
}

#[derive(clap::Args)]
pub struct PatienceArgs {
    /// Seconds the new node may take to provision its database and catch up.
    #[arg(long, default_value_t = 600)]
    catch_up_timeout: u64,
    /// How many transactions behind the log the new node may be when it starts to vote.
    #[arg(long, default_value_t = 100)]
    max_lag: u64,
    #[arg(long)]
    json: bool,
}

impl PatienceArgs {
    fn patience(&self) -> member::Patience {
        member::Patience {
            catch_up: std::time::Duration::from_secs(self.catch_up_timeout),
            max_lag: self.max_lag,
            json: self.json,
        }
    }
}

/// What `switchover` and `cluster switchover` take besides the cluster's address.
#[derive(clap::Args)]
pub struct SwitchoverArgs {
    /// The node to hand the master role to; default: the most caught-up member.
    #[arg(long)]
    to: Option<u64>,
    /// Refuse a named successor further behind the global log than this many transactions.
    #[arg(long, default_value_t = 1000)]
    max_lag: u64,
    /// Seconds the drain may wait for running statements before the switchover is abandoned (the master keeps
    /// serving).
    #[arg(long, default_value_t = 5)]
    drain_timeout: u64,
    /// Seconds to follow the hand-over (successor serving, old master a replica again).
    #[arg(long, default_value_t = 60)]
    wait: u64,
    #[arg(long)]
    json: bool,
}

impl SwitchoverArgs {
    fn request(&self) -> switchover::Switchover {
        switchover::Switchover {
            to: self.to,
            max_lag: self.max_lag,
            drain_timeout: std::time::Duration::from_secs(self.drain_timeout.max(1)),
            wait: std::time::Duration::from_secs(self.wait),
            json: self.json,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(cli.command, Command::Cluster { command: cluster::ClusterCommand::Status { .. } }) {
        stop_quietly_on_closed_pipe();
    }
    let result = match cli.command {
        Command::Node { config, check_config } => run_node(config, check_config),
        Command::Cluster { command } => cluster::run(command),
        Command::Watch { config, check_config } => watch::run(&config, check_config),
        Command::Status { cluster, json } => {
            status::run(&cluster.peers, &cluster.cluster_id, &cluster.secret_file, cluster.tls().as_ref(), json)
        }
        Command::Member { change } => run_member(&change),
        Command::Init { add_host: Some(host), out, .. } => cluster::hosts::add_host(&out, &host),
        Command::Init { hosts, add_host: None, out, in_place, cluster_id, run_as, require_tls } => {
            cluster::hosts::init(&cluster::hosts::InitPlan { hosts, out, in_place, cluster_id, run_as, require_tls })
        }
        Command::InitHost { dir } => cluster::hosts::init_host(&dir),
        Command::Switchover { cluster, how } => status::cluster_auth(&cluster.cluster_id, &cluster.secret_file)
            .and_then(|auth| switchover::run(&cluster.peers, &auth, cluster.tls().as_ref(), &how.request())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("paxsql: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_member(change: &MemberCommand) -> anyhow::Result<()> {
    let cluster = match change {
        MemberCommand::Add { cluster, .. }
        | MemberCommand::Remove { cluster, .. }
        | MemberCommand::Replace { cluster, .. } => cluster,
    };
    let auth = status::cluster_auth(&cluster.cluster_id, &cluster.secret_file)?;
    let tls = cluster.tls();
    let mut admin = member::Admin { peers: cluster.peers.clone(), auth: &auth, tls: tls.as_ref() };
    // Once a member, a new node may be master: the next steps find the master among these.
    if let MemberCommand::Add { new, .. } | MemberCommand::Replace { new, .. } = change {
        if !admin.peers.contains(&new.new_peer) {
            admin.peers.push(new.new_peer.clone());
        }
    }
    match change {
        MemberCommand::Add { new, patience, .. } => member::add(&admin, &new.member(), &patience.patience()),
        MemberCommand::Remove { node, json, .. } => member::remove(&admin, *node, &member::Patience::removal(*json)),
        MemberCommand::Replace { node, new, patience, .. } => {
            member::replace(&admin, *node, &new.member(), &patience.patience())
        }
    }
}

/// `paxsql cluster status | head` must end quietly when `head` has read enough, as other command-line tools do,
/// instead of panicking on the closed pipe (Rust ignores SIGPIPE by default). Only for that command, which reads
/// files and opens no socket: every command that talks to nodes must keep ignoring SIGPIPE, or a peer closing a
/// connection (a plaintext call to a TLS port) kills it before it can say why — found by t25.
fn stop_quietly_on_closed_pipe() {
    // SAFETY: restores the default disposition of one signal, before any thread or pipe exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// glibc gives each thread that allocates under contention an arena of its own (up to 8 per core) and rarely
/// returns their free pages: with a tokio pool, the driver thread and the dump tasks, a node's RSS then grows to the
/// high-water mark of every arena. Two arenas keep the node's memory close to what it holds (bench/RESULTS.md,
/// "Memory and disk under a steady write load").
///
/// A fixed mmap threshold of 1 MiB: glibc otherwise raises its threshold to the size of every large block freed, so
/// after the first 4 MiB part of a large transaction every later one (receive buffers, store batches, compression
/// buffers) came from the arenas and stayed there as free but resident memory. A 256 MiB transaction grew each
/// node's RSS by 76–98 MiB with the dynamic threshold, 49–50 MiB with this; a 1 GiB one by 49–65 MiB with this and
/// 58–78 MiB with a 4 MiB threshold (bench/RESULTS.md, "One transaction larger than a log entry"). Blocks this
/// large are rare on the small-transaction path.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

fn run_node(config: PathBuf, check_only: bool) -> anyhow::Result<()> {
    let cfg = paxsql_node::config::NodeConfig::load(&config)?;
    if check_only {
        println!(
            "{}: ok (node {}, cluster {}, {} members)",
            config.display(),
            cfg.node_id,
            cfg.cluster_id,
            cfg.members.len()
        );
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    limit_malloc_arenas();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return,
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            let _ = stop_tx.send(true);
        });
        paxsql_node::runtime::run(cfg, stop_rx).await
    })?;
    Ok(())
}
