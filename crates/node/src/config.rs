//! Node configuration: TOML, every key documented with its default, unknown keys rejected, and a `validate`
//! that checks what serde cannot (docs/ARCHITECTURE.md §5 timing rules, addresses, membership).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config: {0}")]
    Invalid(String),
}

/// Timing presets (docs/ARCHITECTURE.md §5): a LAN lease of about 1.5 s, a WAN one several round trips long.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    #[default]
    Lan,
    Wan,
}

/// Lease and Paxos timing. Each field left out takes the profile's value.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Timing {
    /// How long a master holds its lease after proposing a renewal. LAN 1500, WAN 6000.
    pub lease_ms: Option<u64>,
    /// Clock drift allowance added to a candidate's wait. LAN 300, WAN 1000.
    pub max_clock_drift_ms: Option<u64>,
    /// How often the master renews. Default: a third of the lease.
    pub renew_interval_ms: Option<u64>,
    /// Extra wait per member that has applied more than this one. LAN 200, WAN 800.
    pub stand_stagger_ms: Option<u64>,
    /// Leader heartbeat. LAN 100, WAN 300.
    pub heartbeat_ms: Option<u64>,
    /// Retransmission of unanswered Paxos messages. LAN 200, WAN 1000.
    pub retransmit_ms: Option<u64>,
    /// Instances in flight (pipeline depth). Default 64.
    pub max_in_flight: Option<usize>,
    /// Largest Paxos value in bytes (a batch of binlog transactions). Default 4 MiB.
    pub max_batch_bytes: Option<usize>,
    /// Instances between snapshots of the state machine; the log keeps this many behind the newest snapshot for
    /// lagging members. Default 100000.
    pub snapshot_every: Option<u64>,
    /// Bytes of the newest chosen values kept in memory for phase 1 and catch-up; older ones down to the snapshot
    /// are read from disk when a lagging member asks. Default 32 MiB.
    pub chosen_cache_bytes: Option<usize>,
}

/// Resolved timing, after applying the profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedTiming {
    pub lease_ms: u64,
    pub max_clock_drift_ms: u64,
    pub renew_interval_ms: u64,
    pub stand_stagger_ms: u64,
    pub heartbeat_ms: u64,
    pub retransmit_ms: u64,
    pub max_in_flight: usize,
    pub max_batch_bytes: usize,
    pub snapshot_every: u64,
    pub chosen_cache_bytes: usize,
}

/// One member of the initial membership.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MemberConfig {
    /// Node id, unique in the cluster, not 0.
    pub id: u64,
    /// Address the member's peer (Paxos) endpoint listens on.
    pub peer: SocketAddr,
    /// Address of its admin endpoint (status), if any.
    pub admin: Option<SocketAddr>,
    /// Address clients (and every member's read-write proxy) reach its mariadbd at. Required for the proxy to
    /// route writes to this member when it is master.
    pub mariadb: Option<SocketAddr>,
}

/// Who may log in to the admin SQL port.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AdminSettings {
    /// User name. Default `paxsql`.
    pub user: Option<String>,
    /// File holding its password (one line). Required when `listen.admin` is set.
    pub password_file: Option<PathBuf>,
}

/// The MySQL-protocol proxy (docs/ARCHITECTURE.md §7).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ProxySettings {
    /// How long a new read-write connection waits for a master during an election before it gets an error.
    /// Default 5000.
    #[serde(default = "default_hold_ms")]
    pub hold_during_election_ms: u64,
    /// Send the client's address to MariaDB with the PROXY protocol (the servers must list the proxies in
    /// `proxy_protocol_networks`). Default true.
    #[serde(default = "default_true")]
    pub proxy_protocol: bool,
    /// Most client connections over both ports. Default 4096.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
}

impl Default for ProxySettings {
    fn default() -> Self {
        ProxySettings { hold_during_election_ms: default_hold_ms(), proxy_protocol: true, max_connections: 4096 }
    }
}

fn default_hold_ms() -> u64 {
    5000
}

fn default_max_connections() -> usize {
    4096
}

/// Addresses this node listens on. Nothing else is opened.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ListenConfig {
    /// Paxos messages from the other members (gRPC). Required.
    pub peer: SocketAddr,
    /// The admin SQL port (`mariadb -P<port>`: `SELECT * FROM paxsql.members`, `paxsql.master`, `SHOW STATUS`).
    /// Optional; needs `[admin] password_file`.
    pub admin: Option<SocketAddr>,
    /// The MariaDB replication endpoint the local mariadbd replicates from. Keep it on loopback. Optional until the
    /// node serves replicas.
    pub replication: Option<SocketAddr>,
    /// Prometheus metrics over HTTP. Optional.
    pub metrics: Option<SocketAddr>,
    /// The proxy's read-write port: forwards to the current master's mariadbd. Optional.
    pub proxy_rw: Option<SocketAddr>,
    /// The proxy's read-only port: forwards to the local mariadbd. Optional.
    pub proxy_ro: Option<SocketAddr>,
}

/// The local mariadbd this node supervises.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MariaDbConfig {
    /// TCP port of the local mariadbd (loopback).
    pub port: u16,
    /// Its unix socket; the node's own admin account logs in through it only.
    pub socket: PathBuf,
    /// Its data directory.
    pub datadir: PathBuf,
    /// Option file the node starts mariadbd with. Default: `<data_dir>/my.cnf`, written by `paxsql cluster up`.
    pub defaults_file: Option<PathBuf>,
    /// The mariadbd binary. Default `/usr/sbin/mariadbd`.
    #[serde(default = "default_mariadbd")]
    pub mariadbd: PathBuf,
    /// Account the capture client and the local replica use. Default `paxsql_repl`.
    #[serde(default = "default_repl_user")]
    pub replication_user: String,
    /// File holding that account's password (one line).
    pub replication_password_file: PathBuf,
    /// Account the node administers mariadbd with (over the unix socket). Default `root`.
    #[serde(default = "default_admin_user")]
    pub admin_user: String,
    /// File holding that account's password (one line).
    pub admin_password_file: PathBuf,
    /// mariadbd's error log (its `log-error`). The node reads its tail when mariadbd refuses to start, to tell a
    /// binlog tail MariaDB cannot truncate (a DDL: rebuild) from other failures (retry). Without it such a node
    /// waits for an operator. Default: none.
    pub error_log: Option<PathBuf>,
    /// Rebuild the local database from a healthy member with mariabackup, automatically, when it is no longer a
    /// prefix of the global log (docs/ARCHITECTURE.md §5). Default true.
    #[serde(default = "default_true")]
    pub auto_rebuild: bool,
    /// The mariabackup binary. Default `/usr/bin/mariabackup`.
    #[serde(default = "default_mariabackup")]
    pub mariabackup: PathBuf,
    /// The mbstream binary (unpacks a streamed copy). Default `/usr/bin/mbstream`.
    #[serde(default = "default_mbstream")]
    pub mbstream: PathBuf,
    /// mariadbd's own binlog files beyond this many bytes are purged, oldest first, once the global log holds
    /// every transaction in them; the newest two files always stay. Default 1 GiB (with `cluster up`'s
    /// `max_binlog_size` of 256 MiB).
    pub binlog_retain_bytes: Option<u64>,
}

impl MariaDbConfig {
    /// `binlog_retain_bytes` or its default.
    pub fn binlog_retain_bytes(&self) -> u64 {
        self.binlog_retain_bytes.unwrap_or(1 << 30)
    }
}

fn default_true() -> bool {
    true
}

fn default_mariabackup() -> PathBuf {
    PathBuf::from("/usr/bin/mariabackup")
}

fn default_mbstream() -> PathBuf {
    PathBuf::from("/usr/bin/mbstream")
}

fn default_admin_user() -> String {
    "root".to_string()
}

fn default_mariadbd() -> PathBuf {
    PathBuf::from("/usr/sbin/mariadbd")
}

fn default_repl_user() -> String {
    "paxsql_repl".to_string()
}

/// `[tls]`: mutual TLS on the peer port (Paxos messages, admin calls, database copies): `cert` and `key` of this
/// node (the certificate names `node-<node_id>.paxsql`), `ca` that signs every member's certificate.
pub use paxsql_peer_transport::TlsConfig;

/// `[client_tls]`: the certificate this node's client-facing ports (proxy RW and RO, admin SQL) offer. The proxy
/// terminates TLS (the `paxsql_proxy::tls` module says why), so the certificate names this node's client address;
/// whichever node's mariadbd serves behind it, the client verifies the node it dialled.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ClientTlsConfig {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (mode 0600).
    pub key: PathBuf,
    /// Refuse clients that do not ask for TLS on the proxy and admin ports. Default false.
    #[serde(default)]
    pub require: bool,
}

/// `[served_binlog]`: the copy of the global log this node serves its local mariadbd from, on disk under
/// `data_dir/served-binlog`. Retention bounds its disk use; a local replica that falls behind it is rebuilt.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ServedBinlogSettings {
    /// Size at which a segment file is sealed; a restart reads the newest one whole. Default 16 MiB.
    pub segment_bytes: Option<u64>,
    /// Newest transactions kept in memory for replicas near the tail. Default 32 MiB.
    pub cache_bytes: Option<usize>,
    /// Oldest segments are purged beyond this many bytes. Default 2 GiB.
    pub retain_bytes: Option<u64>,
    /// ... or once sealed longer ago than this many hours (0: no age limit). Default 168 (7 days).
    pub retain_hours: Option<u64>,
}

impl ServedBinlogSettings {
    /// The served binlog's configuration for a node whose data directory is `data_dir`.
    pub fn resolve(&self, data_dir: &Path) -> paxsql_served_binlog::ServedBinlogConfig {
        let mut c = paxsql_served_binlog::ServedBinlogConfig::new(data_dir.join("served-binlog"));
        if let Some(v) = self.segment_bytes {
            c.segment_bytes = v;
        }
        if let Some(v) = self.cache_bytes {
            c.cache_bytes = v;
        }
        if let Some(v) = self.retain_bytes {
            c.retain_bytes = v;
        }
        if let Some(h) = self.retain_hours {
            c.retain_time = (h > 0).then(|| std::time::Duration::from_secs(h * 3600));
        }
        c
    }
}

/// `node.toml`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// This node's id: one of `members`, or a node about to be added.
    pub node_id: u64,
    /// Name of the cluster; peers from another cluster are refused.
    pub cluster_id: String,
    /// File holding the cluster secret every peer and admin call must present (one line, at least 16 bytes).
    pub cluster_secret_file: PathBuf,
    /// Where the node keeps its global log and state.
    pub data_dir: PathBuf,
    /// `lan` (default) or `wan`.
    #[serde(default)]
    pub profile: Profile,
    /// Overrides of the profile's timing.
    #[serde(default)]
    pub timing: Timing,
    pub listen: ListenConfig,
    /// The initial membership (the same list on every node). Never edited to add or remove a member: that would
    /// change no vote (only the log does) but give nodes different ideas of instance 1's quorum.
    pub members: Vec<MemberConfig>,
    /// Other nodes' addresses, none of them in the initial membership: members added later (and this node itself,
    /// when it is being added). Only where to reach them; who votes is in the log.
    #[serde(default)]
    pub peers: Vec<MemberConfig>,
    pub mariadb: MariaDbConfig,
    #[serde(default)]
    pub proxy: ProxySettings,
    #[serde(default)]
    pub admin: AdminSettings,
    pub tls: Option<TlsConfig>,
    pub client_tls: Option<ClientTlsConfig>,
    #[serde(default)]
    pub served_binlog: ServedBinlogSettings,
}

impl NodeConfig {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<NodeConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        let cfg = Self::parse(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse { path: path.into(), message },
            other => other,
        })?;
        Ok(cfg)
    }

    pub fn parse(text: &str) -> Result<NodeConfig, ConfigError> {
        let cfg: NodeConfig =
            toml::from_str(text).map_err(|e| ConfigError::Parse { path: PathBuf::new(), message: e.to_string() })?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.node_id == 0 {
            return bad("node_id must not be 0".into());
        }
        if self.listen.admin.is_some() && self.admin.password_file.is_none() {
            return bad("listen.admin is set: [admin] password_file is required".into());
        }
        if self.cluster_id.trim().is_empty() {
            return bad("cluster_id must not be empty".into());
        }
        if self.members.is_empty() {
            return bad("members must list the initial membership".into());
        }
        let mut ids = BTreeSet::new();
        let mut peers = BTreeSet::new();
        for m in self.known_members() {
            if m.id == 0 {
                return bad("member id 0 is reserved".into());
            }
            if !ids.insert(m.id) {
                return bad(format!("member id {} listed twice", m.id));
            }
            if !peers.insert(m.peer) {
                return bad(format!("peer address {} listed twice", m.peer));
            }
        }
        if let Some(me) = self.known_members().find(|m| m.id == self.node_id) {
            if me.peer != self.listen.peer {
                return bad(format!(
                    "listen.peer {} differs from this node's member entry {}",
                    self.listen.peer, me.peer
                ));
            }
        }
        let t = self.timing();
        if t.renew_interval_ms * 2 > t.lease_ms {
            return bad(format!(
                "renew_interval_ms {} must be at most half of lease_ms {} so one lost renewal does not drop the lease",
                t.renew_interval_ms, t.lease_ms
            ));
        }
        if t.heartbeat_ms == 0 || t.retransmit_ms == 0 || t.max_in_flight == 0 {
            return bad("heartbeat_ms, retransmit_ms and max_in_flight must be positive".into());
        }
        if t.max_clock_drift_ms * 20 < t.lease_ms {
            return bad(format!(
                "max_clock_drift_ms {} is below 5% of lease_ms {}: clocks drifting more than that would break the lease",
                t.max_clock_drift_ms, t.lease_ms
            ));
        }
        Ok(())
    }

    /// Every node this config names an address for: the initial members, then the other peers.
    pub fn known_members(&self) -> impl Iterator<Item = &MemberConfig> {
        self.members.iter().chain(&self.peers)
    }

    /// The profile's timing with this config's overrides.
    pub fn timing(&self) -> ResolvedTiming {
        let o = &self.timing;
        let (lease, drift, stagger, heartbeat, retransmit) = match self.profile {
            Profile::Lan => (1500, 300, 200, 100, 200),
            Profile::Wan => (6000, 1000, 800, 300, 1000),
        };
        let lease_ms = o.lease_ms.unwrap_or(lease);
        ResolvedTiming {
            lease_ms,
            max_clock_drift_ms: o.max_clock_drift_ms.unwrap_or(drift),
            renew_interval_ms: o.renew_interval_ms.unwrap_or(lease_ms / 3),
            stand_stagger_ms: o.stand_stagger_ms.unwrap_or(stagger),
            heartbeat_ms: o.heartbeat_ms.unwrap_or(heartbeat),
            retransmit_ms: o.retransmit_ms.unwrap_or(retransmit),
            max_in_flight: o.max_in_flight.unwrap_or(64),
            max_batch_bytes: o.max_batch_bytes.unwrap_or(4 << 20),
            snapshot_every: o.snapshot_every.unwrap_or(100_000),
            chosen_cache_bytes: o.chosen_cache_bytes.unwrap_or(32 << 20),
        }
    }

    /// The largest message a peer link carries: a batch of values travels whole in one.
    pub fn peer_message_bytes(&self) -> usize {
        (self.timing().max_batch_bytes * 2).max(16 << 20)
    }

    /// The global-log configuration this node runs with.
    pub fn global_log_config(&self) -> paxsql_global_log::GlobalLogConfig {
        let t = self.timing();
        let members = paxsql_paxos::Membership::new(self.members.iter().map(|m| m.id));
        let mut cfg = paxsql_global_log::GlobalLogConfig::lan(self.node_id, members);
        cfg.contacts = self.known_members().map(|m| m.id).filter(|id| *id != self.node_id).collect();
        cfg.max_value_bytes = self.peer_message_bytes() - paxsql_global_log::VALUE_MESSAGE_MARGIN;
        cfg.lease_ms = t.lease_ms;
        cfg.max_clock_drift_ms = t.max_clock_drift_ms;
        cfg.renew_interval_ms = t.renew_interval_ms;
        cfg.stand_stagger_ms = t.stand_stagger_ms;
        cfg.campaign_timeout_ms = t.lease_ms;
        cfg.snapshot_every = t.snapshot_every;
        cfg.paxos.heartbeat_ms = t.heartbeat_ms;
        cfg.paxos.retransmit_ms = t.retransmit_ms;
        cfg.paxos.max_in_flight = t.max_in_flight;
        cfg.paxos.max_batch_bytes = t.max_batch_bytes;
        cfg.paxos.chosen_cache_bytes = t.chosen_cache_bytes;
        cfg.paxos.leader_stickiness_ms = t.lease_ms * 2 / 3;
        cfg
    }

    /// Reads a one-line secret file (a password), without its line ending.
    pub fn read_password(path: &Path) -> Result<String, ConfigError> {
        let raw = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        Ok(raw.trim_end_matches(['\n', '\r']).to_string())
    }

    /// Reads the cluster secret. It is never logged or printed.
    pub fn read_cluster_secret(&self) -> Result<ClusterSecret, ConfigError> {
        let raw = std::fs::read_to_string(&self.cluster_secret_file)
            .map_err(|source| ConfigError::Read { path: self.cluster_secret_file.clone(), source })?;
        let secret = raw.trim_end_matches(['\n', '\r']).to_string();
        if secret.len() < 16 {
            return Err(ConfigError::Invalid(format!(
                "cluster secret in {} is shorter than 16 bytes",
                self.cluster_secret_file.display()
            )));
        }
        Ok(ClusterSecret(secret))
    }
}

/// The shared secret of a cluster. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret(String);

impl ClusterSecret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
node_id = 1
cluster_id = "test"
cluster_secret_file = "/tmp/secret"
data_dir = "/tmp/n1"

[listen]
peer = "127.0.0.1:7001"

[[members]]
id = 1
peer = "127.0.0.1:7001"
[[members]]
id = 2
peer = "127.0.0.1:7011"
[[members]]
id = 3
peer = "127.0.0.1:7021"

[mariadb]
port = 33061
socket = "/tmp/n1/mysqld.sock"
datadir = "/tmp/n1/data"
replication_password_file = "/tmp/n1/repl.pw"
admin_password_file = "/tmp/n1/admin.pw"
"#;

    #[test]
    fn good_config_parses_with_lan_defaults() {
        let cfg = NodeConfig::parse(GOOD).unwrap();
        let t = cfg.timing();
        assert_eq!((t.lease_ms, t.renew_interval_ms, t.max_clock_drift_ms), (1500, 500, 300));
        assert_eq!(cfg.mariadb.mariadbd, PathBuf::from("/usr/sbin/mariadbd"));
        let g = cfg.global_log_config();
        assert_eq!(g.initial_membership.members.len(), 3);
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_name() {
        let text = GOOD.replace("[listen]", "lease = 5\n[listen]");
        match NodeConfig::parse(&text) {
            Err(ConfigError::Parse { message, .. }) => assert!(message.contains("lease"), "{message}"),
            other => panic!("unknown key accepted: {other:?}"),
        }
        let text = GOOD.replace("port = 33061", "port = 33061\nprot = 1");
        assert!(matches!(NodeConfig::parse(&text), Err(ConfigError::Parse { .. })));
    }

    #[test]
    fn validation_catches_what_serde_cannot() {
        let dup = GOOD.replace("id = 2", "id = 1");
        assert!(matches!(NodeConfig::parse(&dup), Err(ConfigError::Invalid(m)) if m.contains("twice")));
        let renew = GOOD.replace("[listen]", "[timing]\nrenew_interval_ms = 1000\n[listen]");
        assert!(matches!(NodeConfig::parse(&renew), Err(ConfigError::Invalid(m)) if m.contains("renew_interval_ms")));
        let zero = GOOD.replace("node_id = 1", "node_id = 0");
        assert!(NodeConfig::parse(&zero).is_err());
        let wrong_peer =
            GOOD.replace("peer = \"127.0.0.1:7001\"\n\n[[members]]", "peer = \"127.0.0.1:7999\"\n\n[[members]]");
        assert!(NodeConfig::parse(&wrong_peer).is_err());
        let wan = GOOD.replace("data_dir", "profile = \"wan\"\ndata_dir");
        assert_eq!(NodeConfig::parse(&wan).unwrap().timing().lease_ms, 6000);
    }

    #[test]
    fn a_node_being_added_names_itself_under_peers_and_keeps_the_initial_membership() {
        let joining = GOOD
            .replace("node_id = 1", "node_id = 4")
            .replace("peer = \"127.0.0.1:7001\"\n\n[[members]]", "peer = \"127.0.0.1:7031\"\n\n[[members]]")
            .replace(
                "[mariadb]",
                "[[peers]]\nid = 4\npeer = \"127.0.0.1:7031\"\nmariadb = \"127.0.0.1:33091\"\n\n[mariadb]",
            );
        let cfg = NodeConfig::parse(&joining).unwrap();
        // Instance 1's quorum is the initial membership whoever reads it; node 4 votes only once the log says so.
        assert_eq!(cfg.global_log_config().initial_membership.members.len(), 3);
        assert_eq!(cfg.known_members().map(|m| m.id).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        let twice = joining.replace("id = 4\npeer", "id = 3\npeer");
        assert!(matches!(NodeConfig::parse(&twice), Err(ConfigError::Invalid(m)) if m.contains("listed twice")));
        let wrong_port = joining.replace("peer = \"127.0.0.1:7031\"\nmariadb", "peer = \"127.0.0.1:7041\"\nmariadb");
        assert!(matches!(NodeConfig::parse(&wrong_port), Err(ConfigError::Invalid(m)) if m.contains("differs")));
    }

    #[test]
    fn client_tls_section_parses_and_refuses_unknown_keys() {
        let with =
            format!("{GOOD}\n[client_tls]\ncert = \"/c/client-1.pem\"\nkey = \"/c/client-1.key\"\nrequire = true\n");
        let cfg = NodeConfig::parse(&with).unwrap();
        assert_eq!(cfg.client_tls.as_ref().map(|t| t.require), Some(true));
        let unknown = format!("{GOOD}\n[client_tls]\ncert = \"/c\"\nkey = \"/k\"\nca = \"/c/ca.pem\"\n");
        assert!(NodeConfig::parse(&unknown).is_err());
    }

    #[test]
    fn tls_section_parses_and_refuses_unknown_keys() {
        let with = format!("{GOOD}\n[tls]\ncert = \"/c/node-1.pem\"\nkey = \"/c/node-1.key\"\nca = \"/c/ca.pem\"\n");
        let cfg = NodeConfig::parse(&with).unwrap();
        assert_eq!(cfg.tls.map(|t| t.ca), Some(PathBuf::from("/c/ca.pem")));
        let typo = with.replace("ca = ", "ca_file = ");
        assert!(
            matches!(NodeConfig::parse(&typo), Err(ConfigError::Parse { message, .. }) if message.contains("ca_file"))
        );
    }

    #[test]
    fn served_binlog_section_resolves_under_the_data_dir_and_refuses_unknown_keys() {
        let defaults = NodeConfig::parse(GOOD).unwrap().served_binlog.resolve(Path::new("/d"));
        assert_eq!(defaults.dir, Path::new("/d/served-binlog"));
        assert_eq!((defaults.segment_bytes, defaults.retain_bytes), (16 << 20, 2 << 30));
        let with = format!("{GOOD}\n[served_binlog]\nsegment_bytes = 1048576\ncache_bytes = 4096\nretain_hours = 0\n");
        let c = NodeConfig::parse(&with).unwrap().served_binlog.resolve(Path::new("/d"));
        assert_eq!((c.segment_bytes, c.cache_bytes, c.retain_time), (1 << 20, 4096, None));
        let bad = format!("{GOOD}\n[served_binlog]\nretain_days = 3\n");
        assert!(matches!(NodeConfig::parse(&bad), Err(e) if e.to_string().contains("retain_days")));
    }

    #[test]
    fn secret_never_shows_in_debug() {
        let s = ClusterSecret("super-secret-value-123".into());
        assert!(!format!("{s:?}").contains("super"));
    }
}
