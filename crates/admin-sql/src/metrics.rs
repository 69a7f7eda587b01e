//! Prometheus metrics of one node, and the HTTP endpoint that serves them.
//!
//! Gauges mirror the [`ClusterView`] ([`Metrics::update_from`]; the endpoint also refreshes them from the view at
//! every scrape, so they are never staler than the view). The capture counters and the ACK-latency histogram are
//! driven by the capture as it ACKs ([`Metrics::record_capture_ack`]); the proxy series follow the proxy's own
//! counters, which the node copies in ([`Metrics::update_proxy`]). Every series carries a constant
//! `node` label. No metric or label holds a secret.
//!
//! Library: `prometheus-client`, the Prometheus organisation's Rust client. The `prometheus` crate (0.13) is
//! already in the tree through raft-engine, but it centres on a process-global default registry and a
//! protobuf-era API, while `prometheus-client` has typed metrics, an explicit registry per owner, and encodes
//! OpenMetrics text, which Prometheus scrapes natively.

use std::borrow::Cow;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{debug, info};

use crate::error::AdminError;
use crate::view::ClusterView;
use paxsql_listener::AcceptLoop;
use paxsql_proxy::ProxyStatsSnapshot;

type ReasonLabels = [(&'static str, &'static str); 1];

/// One hop of a master's transaction between its capture and its semi-sync ACK (`paxsql_write_hop_seconds`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteHop {
    /// Captured from the local binlog → taken by the global-log driver's inbox (back-pressure shows here).
    Inbox,
    /// In the inbox → proposed to Paxos by the driver thread.
    Propose,
    /// Proposed → chosen, applied and seen by the ACK task: the Paxos round, the fsyncs, the hand-offs between.
    Choose,
    /// Seen by the ACK task → ACK handed to the writer that sends it to mariadbd.
    Ack,
}

/// A part of one Paxos round as the global-log driver sees it (`paxsql_paxos_round_seconds`), to tell the wire and
/// the peers' disks apart inside `WriteHop::Choose`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PaxosRoundPart {
    /// Leader: an Accept handed to the peer links → the first peer's Accepted taken from the driver's inbox (both
    /// directions on the wire, the peer's own service, the wait in each inbox).
    PeerRoundTrip,
    /// Any member: an Accept taken from the inbox → its Accepted handed back to the links (the accepted record
    /// written and synced, and the inputs drained with it).
    AcceptService,
    /// A batch written to the global-log store with an fsync.
    StoreWriteSynced,
    /// A batch written without one (chosen entries alone).
    StoreWriteUnsynced,
}

impl PaxosRoundPart {
    fn label(self) -> &'static str {
        match self {
            PaxosRoundPart::PeerRoundTrip => "peer_round_trip",
            PaxosRoundPart::AcceptService => "accept_service",
            PaxosRoundPart::StoreWriteSynced => "store_write_synced",
            PaxosRoundPart::StoreWriteUnsynced => "store_write_unsynced",
        }
    }
}

impl WriteHop {
    fn label(self) -> &'static str {
        match self {
            WriteHop::Inbox => "inbox",
            WriteHop::Propose => "propose",
            WriteHop::Choose => "choose",
            WriteHop::Ack => "ack",
        }
    }
}

fn hop_histogram() -> Histogram {
    // 5 µs .. ~2.6 s: in-process hand-offs take microseconds, a Paxos round on a LAN a fraction of a millisecond.
    Histogram::new(exponential_buckets(0.000_005, 2.0, 20))
}

struct Inner {
    registry: Registry,
    master_version: Gauge<u64, AtomicU64>,
    is_master: Gauge,
    database_serving: Gauge,
    holds_lease: Gauge,
    applied_instance: Gauge<u64, AtomicU64>,
    lag_transactions: Gauge<i64, AtomicI64>,
    members: Gauge,
    members_reachable: Gauge,
    proposals_in_flight: Gauge<u64, AtomicU64>,
    paxos_chosen: Counter,
    /// The highest `chosen_up_to` already counted into `paxos_chosen`.
    chosen_counted: AtomicU64,
    capture_acked_transactions: Counter,
    capture_ack_latency: Histogram,
    write_hops: Family<ReasonLabels, Histogram, fn() -> Histogram>,
    paxos_round: Family<ReasonLabels, Histogram, fn() -> Histogram>,
    served_disk_bytes: Gauge<u64, AtomicU64>,
    served_segments: Gauge<u64, AtomicU64>,
    mariadb_binlog_bytes: Gauge<u64, AtomicU64>,
    mariadb_binlog_files: Gauge<u64, AtomicU64>,
    mariadb_binlog_purged_files: Counter,
    served_transactions: Gauge<u64, AtomicU64>,
    served_cache_bytes: Gauge<u64, AtomicU64>,
    served_lookup_latency: Histogram,
    served_lookup_lock_wait: Histogram,
    served_lookup_cpu: Histogram,
    proxy_active: Gauge<u64, AtomicU64>,
    proxy_total: Counter,
    proxy_refused: Family<ReasonLabels, Counter>,
    proxy_cut: Counter,
    proxy_kills_softened: Counter,
    proxy_commands_refused: Counter,
    proxy_tls_sessions: Counter,
    proxy_relays: Family<ReasonLabels, Counter>,
    /// The proxy figures already counted into the counters above.
    proxy_counted: std::sync::Mutex<ProxyStatsSnapshot>,
    peer_calls_rejected: Counter,
    peer_messages_dropped: Family<ReasonLabels, Counter>,
    peer_counted: std::sync::Mutex<PeerServerCounts>,
}

/// The peer server's refusal counters since it started, as the node reads them from the transport.
#[derive(Clone, Copy, Debug, Default)]
pub struct PeerServerCounts {
    /// Calls refused: wrong cluster id or secret, or a certificate naming no single member.
    pub calls_rejected: u64,
    /// Messages whose sender is not the member its certificate names.
    pub forged: u64,
    pub malformed: u64,
    pub misaddressed: u64,
    pub inbox_full: u64,
}

/// The served binlog's size, as the node reads it from the store.
#[derive(Clone, Debug, Default)]
pub struct ServedBinlogFigures {
    pub disk_bytes: u64,
    pub segments: u64,
    /// Transactions held (between the oldest kept after retention and the newest).
    pub transactions: u64,
    pub cache_bytes: u64,
    /// GTID lookups since the last update: their wall times, the parts spent waiting for the store's lock, and
    /// the CPU time their threads spent (one entry per lookup in each).
    pub lookups: Vec<Duration>,
    pub lookup_lock_waits: Vec<Duration>,
    pub lookup_cpu: Vec<Duration>,
}

/// The node's metrics. Cheap to clone; clones share the same series.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl Metrics {
    /// Registers every series with the constant label `node="<node_id>"`.
    pub fn new(node_id: u64) -> Metrics {
        let labels = [(Cow::Borrowed("node"), Cow::Owned(node_id.to_string()))];
        let mut inner = Inner {
            registry: Registry::with_labels(labels.into_iter()),
            master_version: Gauge::default(),
            is_master: Gauge::default(),
            database_serving: Gauge::default(),
            holds_lease: Gauge::default(),
            applied_instance: Gauge::default(),
            lag_transactions: Gauge::default(),
            members: Gauge::default(),
            members_reachable: Gauge::default(),
            proposals_in_flight: Gauge::default(),
            paxos_chosen: Counter::default(),
            chosen_counted: AtomicU64::new(0),
            capture_acked_transactions: Counter::default(),
            // 250 µs .. ~4 s: loopback ACKs take well under a millisecond, a WAN round trip tens of ms, and a
            // stalled majority shows up in the top buckets.
            capture_ack_latency: Histogram::new(exponential_buckets(0.000_25, 2.0, 15)),
            write_hops: Family::new_with_constructor(hop_histogram),
            paxos_round: Family::new_with_constructor(hop_histogram),
            served_disk_bytes: Gauge::default(),
            served_segments: Gauge::default(),
            mariadb_binlog_bytes: Gauge::default(),
            mariadb_binlog_files: Gauge::default(),
            mariadb_binlog_purged_files: Counter::default(),
            served_transactions: Gauge::default(),
            served_cache_bytes: Gauge::default(),
            // 10 µs .. ~160 ms: a lookup in the cached tail takes microseconds, one that loads a sealed segment's
            // index from disk a millisecond or more.
            served_lookup_latency: Histogram::new(exponential_buckets(0.000_01, 2.0, 15)),
            // 1 µs .. ~130 ms: the parts of a lookup are finer than the whole.
            served_lookup_lock_wait: Histogram::new(exponential_buckets(0.000_001, 2.0, 18)),
            served_lookup_cpu: Histogram::new(exponential_buckets(0.000_001, 2.0, 18)),
            proxy_active: Gauge::default(),
            proxy_total: Counter::default(),
            proxy_refused: Family::default(),
            proxy_cut: Counter::default(),
            proxy_kills_softened: Counter::default(),
            proxy_commands_refused: Counter::default(),
            proxy_tls_sessions: Counter::default(),
            proxy_relays: Family::default(),
            proxy_counted: std::sync::Mutex::new(ProxyStatsSnapshot::default()),
            peer_calls_rejected: Counter::default(),
            peer_messages_dropped: Family::default(),
            peer_counted: std::sync::Mutex::new(PeerServerCounts::default()),
        };
        let r = &mut inner.registry;
        r.register("paxsql_master_version", "master_version of the global log", inner.master_version.clone());
        r.register("paxsql_is_master", "1 while this node serves as master", inner.is_master.clone());
        r.register(
            "paxsql_database_serving",
            "1 while the local mariadbd serves (aligned replica or master); 0 while it is down, not aligned (a \
             stopped applier, a transaction the global log lacks) or being rebuilt: the admin role says which",
            inner.database_serving.clone(),
        );
        r.register("paxsql_holds_lease", "1 while this node holds the master lease", inner.holds_lease.clone());
        r.register(
            "paxsql_applied_instance",
            "Last global log instance applied to the state machine",
            inner.applied_instance.clone(),
        );
        r.register(
            "paxsql_lag_transactions",
            "Transactions of the global log the local mariadbd has not applied; -1 when unknown",
            inner.lag_transactions.clone(),
        );
        r.register("paxsql_members", "Configured cluster members", inner.members.clone());
        r.register(
            "paxsql_members_reachable",
            "Members this node currently reaches, itself included",
            inner.members_reachable.clone(),
        );
        r.register(
            "paxsql_paxos_proposals_in_flight",
            "Instances this node proposed that are not chosen yet",
            inner.proposals_in_flight.clone(),
        );
        r.register(
            "paxsql_paxos_chosen",
            "Global log instances chosen (as learnt by this node since it started)",
            inner.paxos_chosen.clone(),
        );
        r.register(
            "paxsql_capture_acked_transactions",
            "Transactions captured from the local master and acknowledged to it after Paxos chose them",
            inner.capture_acked_transactions.clone(),
        );
        r.register(
            "paxsql_capture_ack_latency_seconds",
            "Time from capturing a batch from the local master to sending its semi-sync ACK",
            inner.capture_ack_latency.clone(),
        );
        r.register(
            "paxsql_write_hop_seconds",
            "Where a master's transaction spends its time between capture and semi-sync ACK, by hop: inbox (captured \
             -> in the global-log driver's inbox), propose (-> proposed to Paxos), choose (-> chosen, applied and seen \
             by the ACK task), ack (-> ACK handed to its writer)",
            inner.write_hops.clone(),
        );
        r.register(
            "paxsql_paxos_round_seconds",
            "Parts of a Paxos round as the global-log driver sees them, by part: peer_round_trip (leader: Accept sent \
             -> first peer's Accepted taken), accept_service (Accept taken -> Accepted sent: its record written and \
             synced), store_write_synced and store_write_unsynced (one batch written to the store)",
            inner.paxos_round.clone(),
        );
        r.register(
            "paxsql_served_binlog_disk_bytes",
            "Bytes of the served binlog's segment files (bounded by its retention)",
            inner.served_disk_bytes.clone(),
        );
        r.register(
            "paxsql_mariadb_binlog_bytes",
            "Bytes of the local mariadbd's own binlog files (SHOW BINARY LOGS; bounded by [mariadb] binlog_retain_bytes)",
            inner.mariadb_binlog_bytes.clone(),
        );
        r.register(
            "paxsql_mariadb_binlog_files",
            "The local mariadbd's own binlog files",
            inner.mariadb_binlog_files.clone(),
        );
        r.register(
            "paxsql_mariadb_binlog_purged_files",
            "The local mariadbd's binlog files this node purged (only files whose transactions the global log holds)",
            inner.mariadb_binlog_purged_files.clone(),
        );
        r.register(
            "paxsql_served_binlog_segments",
            "Segment files of the served binlog",
            inner.served_segments.clone(),
        );
        r.register(
            "paxsql_served_binlog_transactions",
            "Transactions the served binlog holds after retention",
            inner.served_transactions.clone(),
        );
        r.register(
            "paxsql_served_binlog_cache_bytes",
            "Bytes of the newest transactions the served binlog keeps in memory",
            inner.served_cache_bytes.clone(),
        );
        r.register(
            "paxsql_served_binlog_lookup_seconds",
            "Time to find a replica's GTID position in the served binlog (a dump's start, the alignment checks)",
            inner.served_lookup_latency.clone(),
        );
        r.register(
            "paxsql_served_binlog_lookup_lock_wait_seconds",
            "Part of a served-binlog GTID lookup spent waiting for the store's lock (held by appends and dumps' reads)",
            inner.served_lookup_lock_wait.clone(),
        );
        r.register(
            "paxsql_served_binlog_lookup_cpu_seconds",
            "CPU time a served-binlog GTID lookup's thread spent on it: the lookup's own work (wall time minus lock \
             wait minus this is time waiting for a core)",
            inner.served_lookup_cpu.clone(),
        );
        r.register("paxsql_proxy_connections_active", "Open proxy client connections", inner.proxy_active.clone());
        r.register("paxsql_proxy_connections", "Proxy client connections accepted", inner.proxy_total.clone());
        r.register(
            "paxsql_proxy_connections_refused",
            "Proxy client connections answered with an error, by reason (no_master, backend_unreachable, limit, not_aligned)",
            inner.proxy_refused.clone(),
        );
        r.register(
            "paxsql_proxy_connections_cut",
            "Forwarded read-write connections cut because the master changed",
            inner.proxy_cut.clone(),
        );
        r.register(
            "paxsql_proxy_kills_softened",
            "KILL statements and COM_PROCESS_KILL commands the proxy sent on as KILL SOFT (a soft kill cannot end a \
             commit that waits for its majority)",
            inner.proxy_kills_softened.clone(),
        );
        r.register(
            "paxsql_proxy_commands_refused",
            "Client commands the proxy answered with an error instead of sending them (KILL inside another statement, \
             dynamic SQL it cannot read, compression asked for)",
            inner.proxy_commands_refused.clone(),
        );
        r.register(
            "paxsql_proxy_tls_sessions",
            "Client connections to the RW and RO ports that completed a TLS handshake with the proxy",
            inner.proxy_tls_sessions.clone(),
        );
        r.register(
            "paxsql_proxy_relays",
            "RW connections carried between nodes through the master's peer port: direction=\"out\" sent by this \
             node's RW port to another node's master, direction=\"in\" taken by this node as master",
            inner.proxy_relays.clone(),
        );
        r.register(
            "paxsql_peer_calls_rejected",
            "Calls to the peer port refused: wrong cluster id or secret, or (TLS) a certificate naming no member",
            inner.peer_calls_rejected.clone(),
        );
        r.register(
            "paxsql_peer_messages_dropped",
            "Peer messages dropped on arrival, by reason (forged: its sender is not the member the certificate \
             names; malformed; misaddressed; inbox_full)",
            inner.peer_messages_dropped.clone(),
        );
        Metrics { inner: Arc::new(inner) }
    }

    /// Brings the peer-server series up to `now` (counters advance by what is new since the last call).
    pub fn update_peer_server(&self, now: PeerServerCounts) {
        let m = &self.inner;
        let mut counted = m.peer_counted.lock().unwrap_or_else(|p| p.into_inner());
        let new = |now: u64, before: u64| now.saturating_sub(before);
        m.peer_calls_rejected.inc_by(new(now.calls_rejected, counted.calls_rejected));
        for (reason, now, before) in [
            ("forged", now.forged, counted.forged),
            ("malformed", now.malformed, counted.malformed),
            ("misaddressed", now.misaddressed, counted.misaddressed),
            ("inbox_full", now.inbox_full, counted.inbox_full),
        ] {
            m.peer_messages_dropped.get_or_create(&[("reason", reason)]).inc_by(new(now, before));
        }
        *counted = now;
    }

    /// Sets the gauges from `view`, and advances the chosen-instances counter to `view.paxos.chosen_up_to`.
    pub fn update_from(&self, view: &ClusterView) {
        let m = &self.inner;
        m.master_version.set(view.master_version);
        m.is_master.set(i64::from(view.role == "master"));
        m.database_serving.set(i64::from(view.role == "master" || view.role == "replica"));
        m.holds_lease.set(i64::from(view.holds_lease));
        m.applied_instance.set(view.applied_instance);
        m.lag_transactions.set(view.lag_transactions.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX)));
        m.members.set(view.members.len() as i64);
        m.members_reachable.set(view.members.iter().filter(|x| x.reachable).count() as i64);
        m.proposals_in_flight.set(view.paxos.proposals_in_flight);
        let chosen = view.paxos.chosen_up_to;
        let counted = m.chosen_counted.fetch_max(chosen, Ordering::Relaxed);
        if chosen > counted {
            m.paxos_chosen.inc_by(chosen - counted);
        }
    }

    /// The capture path sent one semi-sync ACK covering `transactions` transactions, `latency` after it
    /// captured the batch.
    pub fn record_capture_ack(&self, transactions: u64, latency: Duration) {
        self.inner.capture_acked_transactions.inc_by(transactions);
        self.inner.capture_ack_latency.observe(latency.as_secs_f64());
    }

    /// One transaction (or, for [`WriteHop::Ack`], one ACKed batch) took `took` on `hop`.
    pub fn record_write_hop(&self, hop: WriteHop, took: Duration) {
        self.inner.write_hops.get_or_create(&[("hop", hop.label())]).observe(took.as_secs_f64());
    }

    /// One Paxos round's `part` took `took`.
    pub fn record_paxos_round(&self, part: PaxosRoundPart, took: Duration) {
        self.inner.paxos_round.get_or_create(&[("part", part.label())]).observe(took.as_secs_f64());
    }

    /// Brings the proxy series up to `now` (counters advance by what is new since the last call).
    pub fn update_proxy(&self, now: ProxyStatsSnapshot) {
        let m = &self.inner;
        m.proxy_active.set(now.active);
        let mut counted = m.proxy_counted.lock().unwrap_or_else(|p| p.into_inner());
        let new = |now: u64, before: u64| now.saturating_sub(before);
        m.proxy_total.inc_by(new(now.accepted, counted.accepted));
        m.proxy_cut.inc_by(new(now.cut_on_master_change, counted.cut_on_master_change));
        m.proxy_kills_softened.inc_by(new(now.kills_softened, counted.kills_softened));
        m.proxy_commands_refused.inc_by(new(now.commands_refused, counted.commands_refused));
        m.proxy_tls_sessions.inc_by(new(now.tls_sessions, counted.tls_sessions));
        m.proxy_relays.get_or_create(&[("direction", "out")]).inc_by(new(now.relayed_out, counted.relayed_out));
        m.proxy_relays.get_or_create(&[("direction", "in")]).inc_by(new(now.relayed_in, counted.relayed_in));
        for (reason, now, before) in [
            ("no_master", now.refused_no_master, counted.refused_no_master),
            ("backend_unreachable", now.refused_backend_unreachable, counted.refused_backend_unreachable),
            ("limit", now.refused_max_connections, counted.refused_max_connections),
            ("plaintext", now.refused_plaintext, counted.refused_plaintext),
            ("not_aligned", now.refused_not_aligned, counted.refused_not_aligned),
        ] {
            m.proxy_refused.get_or_create(&[("reason", reason)]).inc_by(new(now, before));
        }
        *counted = now;
    }

    /// Sets the served binlog's gauges.
    pub fn update_served_binlog(&self, now: ServedBinlogFigures) {
        let m = &self.inner;
        m.served_disk_bytes.set(now.disk_bytes);
        m.served_segments.set(now.segments);
        m.served_transactions.set(now.transactions);
        m.served_cache_bytes.set(now.cache_bytes);
        for (series, times) in [
            (&m.served_lookup_latency, now.lookups),
            (&m.served_lookup_lock_wait, now.lookup_lock_waits),
            (&m.served_lookup_cpu, now.lookup_cpu),
        ] {
            for t in times {
                series.observe(t.as_secs_f64());
            }
        }
    }

    /// Sets the local mariadbd's binlog gauges (from `SHOW BINARY LOGS`).
    pub fn update_mariadb_binlog(&self, bytes: u64, files: u64) {
        self.inner.mariadb_binlog_bytes.set(bytes);
        self.inner.mariadb_binlog_files.set(files);
    }

    /// Counts binlog files the node purged from its mariadbd.
    pub fn count_mariadb_binlog_purge(&self, files: u64) {
        self.inner.mariadb_binlog_purged_files.inc_by(files);
    }

    /// The OpenMetrics text exposition of every series.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.inner.registry);
        out
    }
}

/// Content type of the OpenMetrics text format.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// A scrape connection that stays open longer than this is closed (keeps slow or idle clients from holding
/// tasks forever).
const CONNECTION_MAX: Duration = Duration::from_secs(60);
/// Concurrent scrapes; more wait in the listen backlog.
const METRICS_CONNECTIONS_MAX: usize = 32;

/// `GET /metrics` over HTTP/1.1; every other path is 404.
pub struct MetricsServer {
    listener: TcpListener,
    local_addr: SocketAddr,
    metrics: Metrics,
    view: watch::Receiver<ClusterView>,
}

impl MetricsServer {
    /// Binds `addr`. Each scrape first refreshes the gauges from the latest `view`.
    pub async fn bind(
        addr: SocketAddr,
        metrics: Metrics,
        view: watch::Receiver<ClusterView>,
    ) -> Result<MetricsServer, AdminError> {
        let listener = TcpListener::bind(addr).await.map_err(|source| AdminError::Bind { addr, source })?;
        let local_addr = listener.local_addr()?;
        info!(%local_addr, "metrics endpoint listening");
        Ok(MetricsServer { listener, local_addr, metrics, view })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` turns true (or its sender is dropped); open connections end with it.
    pub async fn run(self, shutdown: watch::Receiver<bool>) -> Result<(), AdminError> {
        // Scrapes are short: at shutdown one in flight is cut rather than waited for.
        let acceptor = AcceptLoop { drain: Duration::ZERO, ..AcceptLoop::new("metrics", METRICS_CONNECTIONS_MAX) };
        let serve = |stream, peer: SocketAddr, permit| {
            let metrics = self.metrics.clone();
            let view = self.view.clone();
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let response = respond(&req, &metrics, &view);
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            async move {
                let _permit = permit;
                match tokio::time::timeout(CONNECTION_MAX, connection).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => debug!(%peer, error = %e, "metrics connection failed"),
                    Err(_) => debug!(%peer, "metrics connection closed after the time limit"),
                }
            }
        };
        acceptor.run(self.listener, shutdown, serve, |_, _| {}).await;
        Ok(())
    }
}

fn respond(req: &Request<Incoming>, metrics: &Metrics, view: &watch::Receiver<ClusterView>) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &str, body: String| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(v) = content_type.parse() {
            response.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        response
    };
    if req.uri().path() != "/metrics" {
        return reply(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "not found; try /metrics\n".into());
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", "use GET\n".into());
    }
    metrics.update_from(&view.borrow());
    reply(StatusCode::OK, CONTENT_TYPE, metrics.encode())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{MemberView, PaxosView};

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
    }

    #[test]
    fn gauges_follow_the_view_and_counters_only_grow() {
        let m = Metrics::new(3);
        let mut view = ClusterView {
            node_id: 3,
            role: "master".into(),
            master_version: 5,
            holds_lease: true,
            applied_instance: 10,
            lag_transactions: Some(0),
            paxos: PaxosView { chosen_up_to: 10, proposals_in_flight: 2, ..Default::default() },
            members: vec![
                MemberView { node_id: 1, reachable: true, ..Default::default() },
                MemberView { node_id: 3, reachable: true, ..Default::default() },
                MemberView { node_id: 2, reachable: false, ..Default::default() },
            ],
            ..Default::default()
        };
        m.update_from(&view);
        let text = m.encode();
        assert_eq!(value(&text, r#"paxsql_master_version{node="3"}"#), Some(5.0), "{text}");
        assert_eq!(value(&text, r#"paxsql_is_master{node="3"}"#), Some(1.0));
        assert_eq!(value(&text, r#"paxsql_holds_lease{node="3"}"#), Some(1.0));
        assert_eq!(value(&text, r#"paxsql_members_reachable{node="3"}"#), Some(2.0));
        assert_eq!(value(&text, r#"paxsql_paxos_chosen_total{node="3"}"#), Some(10.0));
        assert!(text.trim_end().ends_with("# EOF"));

        view.role = "replica".into();
        view.lag_transactions = None;
        view.paxos.chosen_up_to = 14;
        m.update_from(&view);
        // A view from before (lower chosen_up_to) must not move the counter back or count twice.
        m.update_from(&ClusterView { paxos: PaxosView { chosen_up_to: 12, ..Default::default() }, ..view.clone() });
        let text = m.encode();
        assert_eq!(value(&text, r#"paxsql_is_master{node="3"}"#), Some(0.0));
        assert_eq!(value(&text, r#"paxsql_lag_transactions{node="3"}"#), Some(-1.0));
        assert_eq!(value(&text, r#"paxsql_paxos_chosen_total{node="3"}"#), Some(14.0));
    }

    #[test]
    fn event_counters_and_histogram() {
        let m = Metrics::new(1);
        m.record_capture_ack(3, Duration::from_micros(800));
        m.record_capture_ack(2, Duration::from_millis(30));
        let figures = ProxyStatsSnapshot { accepted: 4, active: 2, refused_no_master: 1, ..Default::default() };
        m.update_proxy(figures);
        // The same figures again count nothing twice; new ones count only what is new.
        m.update_proxy(figures);
        m.update_proxy(ProxyStatsSnapshot { accepted: 6, active: 1, cut_on_master_change: 3, ..figures });
        let text = m.encode();
        assert_eq!(value(&text, r#"paxsql_capture_acked_transactions_total{node="1"}"#), Some(5.0), "{text}");
        assert_eq!(value(&text, r#"paxsql_capture_ack_latency_seconds_count{node="1"}"#), Some(2.0));
        assert_eq!(value(&text, r#"paxsql_capture_ack_latency_seconds_bucket{node="1",le="0.001"}"#), Some(1.0));
        m.record_write_hop(WriteHop::Choose, Duration::from_micros(300));
        m.record_write_hop(WriteHop::Choose, Duration::from_millis(2));
        m.record_write_hop(WriteHop::Inbox, Duration::from_micros(7));
        let text = m.encode();
        assert_eq!(value(&text, r#"paxsql_write_hop_seconds_count{node="1",hop="choose"}"#), Some(2.0), "{text}");
        assert_eq!(value(&text, r#"paxsql_write_hop_seconds_bucket{node="1",le="0.00064",hop="choose"}"#), Some(1.0));
        assert_eq!(value(&text, r#"paxsql_write_hop_seconds_count{node="1",hop="inbox"}"#), Some(1.0));
        let lookups = vec![Duration::from_micros(15), Duration::from_millis(3)];
        let lookup_cpu = vec![Duration::from_micros(3), Duration::from_micros(12)];
        m.update_served_binlog(ServedBinlogFigures { segments: 2, lookups, lookup_cpu, ..Default::default() });
        let text = m.encode();
        assert_eq!(value(&text, r#"paxsql_served_binlog_segments{node="1"}"#), Some(2.0), "{text}");
        assert_eq!(value(&text, r#"paxsql_served_binlog_lookup_seconds_count{node="1"}"#), Some(2.0));
        assert_eq!(value(&text, r#"paxsql_served_binlog_lookup_seconds_bucket{node="1",le="0.00002"}"#), Some(1.0));
        assert_eq!(
            value(&text, r#"paxsql_served_binlog_lookup_cpu_seconds_bucket{node="1",le="0.000004"}"#),
            Some(1.0)
        );
        assert_eq!(value(&text, r#"paxsql_served_binlog_lookup_lock_wait_seconds_count{node="1"}"#), Some(0.0));
        assert_eq!(value(&text, r#"paxsql_proxy_connections_total{node="1"}"#), Some(6.0));
        assert_eq!(value(&text, r#"paxsql_proxy_connections_active{node="1"}"#), Some(1.0));
        assert_eq!(value(&text, r#"paxsql_proxy_connections_cut_total{node="1"}"#), Some(3.0));
        assert_eq!(value(&text, r#"paxsql_proxy_connections_refused_total{node="1",reason="no_master"}"#), Some(1.0));
        assert_eq!(value(&text, r#"paxsql_proxy_connections_refused_total{node="1",reason="limit"}"#), Some(0.0));
    }
}
