//! Peer transport on 127.0.0.1: message exchange, authentication, binding, overflow, reconnects, mutual TLS.
//! Every wait is bounded; a test that hangs fails after its deadline instead.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use paxsql_global_log::PeerMessage;
use paxsql_paxos::{Ballot, Message, MessageBody, Value};
use paxsql_peer_transport::pb;
use paxsql_peer_transport::{
    seal_envelope, ClusterAuth, ClusterSecret, PeerClient, PeerPortServices, PeerServer, RelayDialer, RelayError,
    RelayRequest, TransportConfig,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tonic::Code;

const SECRET: &str = "loopback-test-secret-0123456789";
const DEADLINE: Duration = Duration::from_secs(10);

fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
}

fn cfg(node: u64) -> TransportConfig {
    let mut c = TransportConfig::new(node, "loopback", ClusterSecret::new(SECRET));
    c.reconnect_backoff_min_ms = 20;
    c.reconnect_backoff_max_ms = 200;
    c
}

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn accept(from: u64, to: u64, instance: u64) -> PeerMessage {
    PeerMessage::Paxos(Message {
        from,
        to,
        body: MessageBody::Accept {
            ballot: Ballot::new(3, from),
            instance,
            value: Value::Batch(vec![instance.to_le_bytes().to_vec().into()]),
            chosen_up_to: instance.saturating_sub(1),
        },
    })
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = tokio::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn recv_n(rx: &mut mpsc::Receiver<PeerMessage>, n: usize) -> Vec<PeerMessage> {
    let mut out = Vec::new();
    while out.len() < n {
        match tokio::time::timeout(DEADLINE, rx.recv()).await {
            Ok(Some(m)) => out.push(m),
            Ok(None) => panic!("inbox closed after {} messages", out.len()),
            Err(_) => panic!("timed out after {} of {n} messages", out.len()),
        }
    }
    out
}

fn load(counter: &std::sync::atomic::AtomicU64) -> u64 {
    counter.load(std::sync::atomic::Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_exchange_every_kind_in_order() {
    init_logs();
    tracing::info!("two servers and two clients on 127.0.0.1 exchange messages both ways, in order");
    let (s1, mut in1) = PeerServer::bind(localhost(), &cfg(1)).await.unwrap();
    let (s2, mut in2) = PeerServer::bind(localhost(), &cfg(2)).await.unwrap();
    let mut c1 = PeerClient::new(&cfg(1)).unwrap();
    c1.set_peer(2, &s2.local_addr().to_string()).unwrap();
    let mut c2 = PeerClient::new(&cfg(2)).unwrap();
    c2.set_peer(1, &format!("http://{}", s1.local_addr())).unwrap();

    let b = Ballot::new(7, 1);
    let bodies = vec![
        MessageBody::Prepare { ballot: b, from_instance: 5 },
        MessageBody::Promise {
            ballot: b,
            from_instance: 5,
            entries: vec![
                (5, Ballot::CHOSEN, Value::Noop),
                (6, Ballot::new(6, 2), Value::Batch(vec![vec![1; 10].into()])),
            ],
            more: true,
        },
        MessageBody::Nack { rejected: b, promised: Ballot::new(8, 3) },
        MessageBody::Accept { ballot: b, instance: 7, value: Value::Batch(vec![]), chosen_up_to: 6 },
        MessageBody::Accepted { ballot: b, instance: 7 },
        MessageBody::Commit { ballot: b, chosen_up_to: 7 },
        MessageBody::CatchUpRequest { from_instance: 1 },
        MessageBody::CatchUp {
            entries: vec![(1, Value::Reconfigure(paxsql_paxos::Membership::new([1, 2, 3]))), (2, Value::Noop)],
            chosen_up_to: 2,
        },
        MessageBody::CatchUpGone { first_held: 100 },
    ];
    let mut to2: Vec<PeerMessage> =
        bodies.iter().map(|body| PeerMessage::Paxos(Message { from: 1, to: 2, body: body.clone() })).collect();
    to2.push(PeerMessage::Status { from: 1, to: 2, progress: 9, chosen_up_to: 7 });
    to2.extend((1..=500).map(|i| accept(1, 2, i)));
    let to1: Vec<PeerMessage> = (1..=300).map(|i| accept(2, 1, i)).collect();

    for m in &to2 {
        c1.send(m.clone());
    }
    for m in &to1 {
        c2.send(m.clone());
    }
    assert_eq!(recv_n(&mut in2, to2.len()).await, to2);
    assert_eq!(recv_n(&mut in1, to1.len()).await, to1);

    eventually("both senders report connected", || {
        c1.sender(2).unwrap().is_connected() && c2.sender(1).unwrap().is_connected()
    })
    .await;
    assert_eq!(load(&s2.stats().dropped_inbox_full), 0);
    assert_eq!(load(&s2.stats().malformed), 0);
    assert_eq!(load(&c1.sender(2).unwrap().stats().dropped_queue_full), 0);

    // Unknown destination: dropped and counted, nothing sent.
    c1.send(accept(1, 9, 1));
    assert_eq!(c1.unroutable(), 1);
    s1.shutdown().await;
    s2.shutdown().await;
}

#[tokio::test]
async fn server_listens_only_on_the_configured_address() {
    init_logs();
    tracing::info!("bind 127.0.0.1:0: the bound address is 127.0.0.1, and 127.0.0.2 on the same port refuses");
    let (server, _inbox) = PeerServer::bind(localhost(), &cfg(1)).await.unwrap();
    let addr = server.local_addr();
    assert_eq!(addr.ip().to_string(), "127.0.0.1");
    assert_ne!(addr.port(), 0);
    tokio::net::TcpStream::connect(addr).await.expect("configured address accepts");
    let other: SocketAddr = format!("127.0.0.2:{}", addr.port()).parse().unwrap();
    let err = tokio::net::TcpStream::connect(other).await.expect_err("must not listen on 127.0.0.2");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");

    // A second server cannot take the same address.
    assert!(PeerServer::bind(addr, &cfg(1)).await.is_err());
    server.shutdown().await;
}

/// Collects log output of the current thread (the test uses a current-thread runtime so the server's tasks log
/// here too).
#[derive(Clone, Default)]
struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn rejected_case(server_cfg: TransportConfig, client_cfg: TransportConfig, expected_check: &str) {
    let logs = LogBuf::default();
    let writer = logs.clone();
    let subscriber =
        tracing_subscriber::fmt().with_env_filter("info").with_ansi(false).with_writer(move || writer.clone()).finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let (server, mut inbox) = PeerServer::bind(localhost(), &server_cfg).await.unwrap();
    let mut client = PeerClient::new(&client_cfg).unwrap();
    client.set_peer(1, &server.local_addr().to_string()).unwrap();
    for i in 1..=10 {
        client.send(accept(2, 1, i));
    }
    eventually("the server rejects a call", || load(&server.stats().calls_rejected) >= 1).await;
    eventually("the sender sees the rejection", || load(&client.sender(1).unwrap().stats().rejected) >= 1).await;
    assert!(inbox.try_recv().is_err(), "the receiver must see nothing");
    assert_eq!(load(&server.stats().streams_accepted), 0);
    assert_eq!(load(&server.stats().received), 0);

    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let line =
        text.lines().find(|l| l.contains("rejected peer link")).unwrap_or_else(|| panic!("no log line:\n{text}"));
    assert!(line.contains(expected_check), "{line}");
    assert!(line.contains("peer=127.0.0.1:"), "log line must name the peer address: {line}");
    assert!(!text.contains(SECRET) && !text.contains("wrong-secret-"), "a secret leaked into the logs:\n{text}");
    drop(client);
    server.shutdown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn wrong_secret_is_rejected_and_nothing_is_delivered() {
    tracing::info!("a client with another secret is refused; the log names the peer and the check, not the secret");
    let mut bad = cfg(2);
    bad.cluster_secret = ClusterSecret::new("wrong-secret-0123456789abcdef");
    rejected_case(cfg(1), bad, "cluster secret wrong").await;
}

#[tokio::test(flavor = "current_thread")]
async fn wrong_cluster_id_is_rejected_and_nothing_is_delivered() {
    tracing::info!("a client of another cluster is refused even with the same secret");
    let mut other = cfg(2);
    other.cluster_id = "other-cluster".into();
    rejected_case(cfg(1), other, "cluster id mismatch").await;
}

/// A frame as links carry it: a u32 big-endian length, the body.
fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// Opens a link by hand on a plaintext port (the magic, a `LinkOpen` announcing no keepalive); returns the
/// connection and the answer.
async fn raw_link(addr: SocketAddr, cluster_id: &str, secret: &str, from: u64) -> (TcpStream, pb::OpenReply) {
    raw_link_with(
        addr,
        pb::LinkOpen { cluster_id: cluster_id.into(), cluster_secret: secret.into(), from, keepalive_ms: 0 },
    )
    .await
}

async fn raw_link_with(addr: SocketAddr, open: pb::LinkOpen) -> (TcpStream, pb::OpenReply) {
    use prost::Message as _;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let mut first = b"PXPAXOS1".to_vec();
    first.extend(frame(&open.encode_to_vec()));
    tcp.write_all(&first).await.unwrap();
    let len = tokio::time::timeout(DEADLINE, tcp.read_u32()).await.unwrap().unwrap();
    let mut body = vec![0u8; len as usize];
    tcp.read_exact(&mut body).await.unwrap();
    (tcp, pb::OpenReply::decode(body.as_slice()).unwrap())
}

/// Whether the server closed `tcp` (EOF or reset) within the deadline.
async fn closed_by_server(tcp: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(tokio::time::timeout(DEADLINE, tcp.read(&mut buf)).await, Ok(Ok(0)) | Ok(Err(_)))
}

#[tokio::test]
async fn raw_links_need_the_credentials_and_bad_frames_are_dropped() {
    init_logs();
    tracing::info!("a link opened by hand: wrong credentials refused with the check named; then bad frames dropped");
    let (server, mut inbox) = PeerServer::bind(localhost(), &cfg(1)).await.unwrap();
    let addr = server.local_addr();
    for (cluster, secret, check) in [
        ("loopback", "another-secret-0123456789", "cluster secret wrong"),
        ("elsewhere", SECRET, "cluster id mismatch"),
    ] {
        let (mut tcp, reply) = raw_link(addr, cluster, secret, 2).await;
        assert!(!reply.accepted);
        assert!(reply.detail.starts_with(check), "{}", reply.detail);
        assert!(closed_by_server(&mut tcp).await, "a refused link is closed");
    }
    assert_eq!(load(&server.stats().calls_rejected), 2);

    // With the right credentials: a good envelope, one of another cluster, bytes that are no envelope, a
    // keepalive, a message for another node, a good envelope: two arrive, three are counted.
    let (mut tcp, reply) = raw_link(addr, "loopback", SECRET, 2).await;
    assert!(reply.accepted, "{reply:?}");
    use prost::Message as _;
    let good = seal_envelope("loopback", &accept(2, 1, 1)).encode_to_vec();
    let foreign = seal_envelope("elsewhere", &accept(2, 1, 2)).encode_to_vec();
    let elsewhere = seal_envelope("loopback", &accept(2, 3, 3)).encode_to_vec();
    let mut bytes = frame(&good);
    bytes.extend(frame(&foreign));
    bytes.extend(frame(&[0xff, 0xff, 0xff]));
    bytes.extend(frame(&[]));
    bytes.extend(frame(&elsewhere));
    bytes.extend(frame(&good));
    tcp.write_all(&bytes).await.unwrap();
    assert_eq!(recv_n(&mut inbox, 2).await, vec![accept(2, 1, 1), accept(2, 1, 1)]);
    eventually("bad envelopes counted", || load(&server.stats().malformed) == 2).await;
    assert_eq!((load(&server.stats().received), load(&server.stats().misaddressed)), (5, 1));

    // A frame longer than max_message_bytes ends the link: its length cannot be trusted to find the next one.
    tcp.write_all(&(65u32 << 20).to_be_bytes()).await.unwrap();
    assert!(closed_by_server(&mut tcp).await, "an oversized frame ends the link");
    assert_eq!(load(&server.stats().streams_accepted), 1);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_link_is_dropped_and_an_idle_sender_keeps_its_link() {
    init_logs();
    tracing::info!("keepalive 200 ms: a link that sends nothing is closed; an idle sender's link stays up");
    let mut quick = cfg(1);
    quick.keepalive_ms = 200;
    let (server, mut inbox) = PeerServer::bind(localhost(), &quick).await.unwrap();
    let (mut tcp, reply) = raw_link(server.local_addr(), "loopback", SECRET, 2).await;
    assert!(reply.accepted);
    let opened = std::time::Instant::now();
    assert!(closed_by_server(&mut tcp).await);
    let after = opened.elapsed();
    assert!(after >= Duration::from_millis(500) && after < Duration::from_secs(3), "closed after {after:?}");

    // A sender that announces a longer keepalive (configured apart) is given three of its own intervals.
    let open =
        pb::LinkOpen { cluster_id: "loopback".into(), cluster_secret: SECRET.into(), from: 2, keepalive_ms: 700 };
    let (mut tcp, reply) = raw_link_with(server.local_addr(), open).await;
    assert!(reply.accepted);
    let opened = std::time::Instant::now();
    assert!(closed_by_server(&mut tcp).await);
    let after = opened.elapsed();
    assert!(after >= Duration::from_millis(2000) && after < Duration::from_secs(4), "closed after {after:?}");

    let mut sender_cfg = cfg(2);
    sender_cfg.keepalive_ms = 200;
    let mut client = PeerClient::new(&sender_cfg).unwrap();
    client.set_peer(1, &server.local_addr().to_string()).unwrap();
    client.send(accept(2, 1, 1));
    assert_eq!(recv_n(&mut inbox, 1).await, vec![accept(2, 1, 1)]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    client.send(accept(2, 1, 2));
    assert_eq!(recv_n(&mut inbox, 1).await, vec![accept(2, 1, 2)]);
    assert_eq!(load(&client.sender(1).unwrap().stats().connects), 1, "the idle link was kept, not reopened");
    drop(client);
    server.shutdown().await;
}

/// An admin service that answers `Status` as node 1.
struct StatusOnly;
#[tonic::async_trait]
impl pb::admin_server::Admin for StatusOnly {
    async fn status(
        &self,
        _: tonic::Request<pb::StatusRequest>,
    ) -> Result<tonic::Response<pb::StatusReply>, tonic::Status> {
        Ok(tonic::Response::new(pb::StatusReply { node_id: 1, role: "replica".into(), ..Default::default() }))
    }
    async fn serving(
        &self,
        _: tonic::Request<pb::ServingRequest>,
    ) -> Result<tonic::Response<pb::ServingReply>, tonic::Status> {
        Ok(tonic::Response::new(pb::ServingReply { serving: false }))
    }
    type BackupStream = futures_util::stream::Empty<Result<pb::BackupChunk, tonic::Status>>;
    async fn backup(
        &self,
        _: tonic::Request<pb::BackupRequest>,
    ) -> Result<tonic::Response<Self::BackupStream>, tonic::Status> {
        Err(tonic::Status::failed_precondition("no copy here"))
    }
    async fn switchover(
        &self,
        _: tonic::Request<pb::SwitchoverRequest>,
    ) -> Result<tonic::Response<pb::SwitchoverReply>, tonic::Status> {
        Err(tonic::Status::failed_precondition("not the master"))
    }
    async fn record_member(
        &self,
        _: tonic::Request<pb::RecordMemberRequest>,
    ) -> Result<tonic::Response<pb::MembershipReply>, tonic::Status> {
        Err(tonic::Status::failed_precondition("not the master"))
    }
    async fn change_membership(
        &self,
        _: tonic::Request<pb::ChangeMembershipRequest>,
    ) -> Result<tonic::Response<pb::MembershipReply>, tonic::Status> {
        Err(tonic::Status::failed_precondition("not the master"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_inbox_drops_and_counts_instead_of_blocking() {
    init_logs();
    tracing::info!("an inbox of 4 that nobody reads: the rest is dropped and counted, the sender never blocks");
    let mut small = cfg(1);
    small.inbox_capacity = 4;
    let (server, mut inbox) = PeerServer::bind(localhost(), &small).await.unwrap();
    let mut client = PeerClient::new(&cfg(2)).unwrap();
    client.set_peer(1, &server.local_addr().to_string()).unwrap();
    for i in 1..=100 {
        client.send(accept(2, 1, i));
    }
    eventually("server read all 100", || load(&server.stats().received) == 100).await;
    assert_eq!(load(&server.stats().delivered), 4);
    assert_eq!(load(&server.stats().dropped_inbox_full), 96);
    assert_eq!(recv_n(&mut inbox, 4).await, (1..=4).map(|i| accept(2, 1, i)).collect::<Vec<_>>());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_send_queue_drops_oldest() {
    init_logs();
    tracing::info!("a peer that is down: the send queue keeps the newest messages and delivers them once it is up");
    // Reserve a port, then free it so that nothing listens there yet.
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut c = cfg(2);
    c.send_queue_capacity = 8;
    let mut client = PeerClient::new(&c).unwrap();
    client.set_peer(1, &addr.to_string()).unwrap();
    for i in 1..=50 {
        client.send(accept(2, 1, i));
    }
    let sender = client.sender(1).unwrap();
    assert_eq!(load(&sender.stats().dropped_queue_full), 42);
    eventually("a failed connection attempt", || load(&sender.stats().connect_failures) >= 1).await;

    let (server, mut inbox) = PeerServer::bind(addr, &cfg(1)).await.unwrap();
    let got = recv_n(&mut inbox, 8).await;
    assert_eq!(got, (43..=50).map(|i| accept(2, 1, i)).collect::<Vec<_>>());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sender_reconnects_after_the_server_restarts() {
    init_logs();
    tracing::info!("server goes away and comes back on the same address; the sender's stream resumes");
    let (server, mut inbox) = PeerServer::bind(localhost(), &cfg(1)).await.unwrap();
    let addr = server.local_addr();
    let mut client = PeerClient::new(&cfg(2)).unwrap();
    client.set_peer(1, &addr.to_string()).unwrap();
    client.send(accept(2, 1, 1));
    assert_eq!(recv_n(&mut inbox, 1).await, vec![accept(2, 1, 1)]);
    server.shutdown().await;
    drop(inbox);
    let sender = client.sender(1).unwrap();
    eventually("sender notices the loss", || !sender.is_connected()).await;

    let (server, mut inbox) = PeerServer::bind(addr, &cfg(1)).await.unwrap();
    // Messages sent while the link was down or reconnecting may be lost (Paxos retransmits); keep sending until
    // one arrives, like a Paxos timer would.
    let mut i = 2;
    let got = loop {
        client.send(accept(2, 1, i));
        match tokio::time::timeout(Duration::from_millis(100), inbox.recv()).await {
            Ok(Some(m)) => break m,
            _ => {
                i += 1;
                assert!(i < 100, "no message arrived after the restart");
            }
        }
    };
    assert!(matches!(got, PeerMessage::Paxos(Message { from: 2, to: 1, .. })));
    assert!(load(&sender.stats().connects) >= 2);
    server.shutdown().await;
}

struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// A cluster CA with certificates for members 1, 2 and 3 and an operator tool (each also for 127.0.0.1), and
    /// a stranger CA with its own member-2 certificate.
    fn new() -> Pki {
        use paxsql_peer_transport::identity::{member_name, OPERATOR_NAME};
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let dir = tempfile::tempdir().unwrap();
        for (prefix, holders) in [("", &["node1", "node2", "node3", "operator"][..]), ("stranger-", &["node2"][..])] {
            let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
            ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
            std::fs::write(dir.path().join(format!("{prefix}ca.pem")), ca.pem()).unwrap();
            for holder in holders {
                let name = match holder.strip_prefix("node") {
                    Some(id) => member_name(id.parse().unwrap()),
                    None => OPERATOR_NAME.to_string(),
                };
                let key = KeyPair::generate().unwrap();
                let leaf =
                    CertificateParams::new(vec![name, "127.0.0.1".to_string()]).unwrap().signed_by(&key, &ca).unwrap();
                std::fs::write(dir.path().join(format!("{prefix}{holder}.pem")), leaf.pem()).unwrap();
                std::fs::write(dir.path().join(format!("{prefix}{holder}.key")), key.serialize_pem()).unwrap();
            }
        }
        Pki { dir }
    }

    /// `holder`'s certificate and key (`node1`, `operator`, ...), trusting the CA of `ca_prefix`.
    fn tls(&self, prefix: &str, holder: &str, ca_prefix: &str) -> paxsql_peer_transport::TlsConfig {
        let p = |name: String| self.dir.path().join(name);
        paxsql_peer_transport::TlsConfig {
            cert: p(format!("{prefix}{holder}.pem")),
            key: p(format!("{prefix}{holder}.key")),
            ca: p(format!("{ca_prefix}ca.pem")),
        }
    }

    fn member(&self, node: u64) -> TransportConfig {
        let mut c = cfg(node);
        c.tls = Some(self.tls("", &format!("node{node}"), ""));
        c
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_carries_messages_and_refuses_strangers() {
    init_logs();
    tracing::info!("mutual TLS: members exchange messages; plaintext and foreign-CA clients get nothing through");
    let pki = Pki::new();
    let (server, mut inbox) = PeerServer::bind(localhost(), &pki.member(1)).await.unwrap();
    let mut client = PeerClient::new(&pki.member(2)).unwrap();
    client.set_peer(1, &server.local_addr().to_string()).unwrap();
    let msgs: Vec<PeerMessage> = (1..=20).map(|i| accept(2, 1, i)).collect();
    for m in &msgs {
        client.send(m.clone());
    }
    assert_eq!(recv_n(&mut inbox, msgs.len()).await, msgs);

    // Plaintext client against the TLS server.
    let mut plain = PeerClient::new(&cfg(3)).unwrap();
    plain.set_peer(1, &server.local_addr().to_string()).unwrap();
    // Client whose certificate chains to another CA (it trusts our server's CA so the failure is the server's).
    let mut stranger_cfg = cfg(2);
    stranger_cfg.tls = Some(pki.tls("stranger-", "node2", ""));
    let mut stranger = PeerClient::new(&stranger_cfg).unwrap();
    stranger.set_peer(1, &server.local_addr().to_string()).unwrap();
    for i in 1..=5 {
        plain.send(accept(3, 1, i));
        stranger.send(accept(2, 1, 100 + i));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(inbox.try_recv().is_err(), "nothing from non-members may arrive");
    assert_eq!(load(&server.stats().streams_accepted), 1);
    assert_eq!(load(&server.stats().received), msgs.len() as u64);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cannot_speak_for_another() {
    init_logs();
    tracing::info!("node 2's certificate: its own messages arrive, messages it forges as node 3 are dropped");
    let pki = Pki::new();
    let (server, mut inbox) = PeerServer::bind(localhost(), &pki.member(1)).await.unwrap();
    let mut client = PeerClient::new(&pki.member(2)).unwrap();
    client.set_peer(1, &server.local_addr().to_string()).unwrap();
    for i in 1..=10 {
        client.send(accept(3, 1, i));
        client.send(accept(2, 1, i));
    }
    let got = recv_n(&mut inbox, 10).await;
    assert!(got.iter().all(|m| m.from() == 2), "{got:?}");
    eventually("forged messages counted", || load(&server.stats().forged) == 10).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(inbox.try_recv().is_err(), "no message from node 3 may arrive");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reaches_only_the_member_it_dialled() {
    init_logs();
    tracing::info!("node 2 dials node 1 at an address where node 3 answers: the TLS handshake fails");
    let pki = Pki::new();
    let (impostor, mut inbox) = PeerServer::bind(localhost(), &pki.member(3)).await.unwrap();
    let mut client = PeerClient::new(&pki.member(2)).unwrap();
    client.set_peer(1, &impostor.local_addr().to_string()).unwrap();
    let sender_stats = |client: &PeerClient| load(&client.sender(1).unwrap().stats().connect_failures);
    for i in 1..=5 {
        client.send(accept(2, 1, i));
    }
    eventually("connection to the impostor refused", || sender_stats(&client) >= 2).await;
    assert!(inbox.try_recv().is_err());
    assert_eq!(load(&impostor.stats().streams_accepted), 0);
    impostor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_certificate_reaches_the_admin_service_but_sends_no_paxos_message() {
    init_logs();
    let pki = Pki::new();
    let auth = ClusterAuth::new("loopback", &ClusterSecret::new(SECRET)).unwrap();
    let routes =
        tonic::service::Routes::new(pb::admin_server::AdminServer::with_interceptor(StatusOnly, auth.interceptor()));
    let (server, mut inbox) =
        PeerServer::bind_serving(localhost(), &pki.member(1), PeerPortServices { routes: Some(routes), relays: false })
            .await
            .unwrap();
    let operator = pki.tls("", "operator", "");
    // The server is verified by the address dialled (127.0.0.1 is in its certificate), not by member name.
    let ep = paxsql_peer_transport::peer_endpoint(Some(&operator), None, &server.local_addr().to_string()).unwrap();
    let mut admin = pb::admin_client::AdminClient::new(ep.connect().await.unwrap());
    let mut req = tonic::Request::new(pb::StatusRequest {});
    auth.attach(&mut req);
    assert_eq!(admin.status(req).await.unwrap().into_inner().node_id, 1);

    // A link opened with the operator certificate, credentials right: refused before any message counts. (A node
    // cannot be configured with a certificate that does not name it, so the link is dialled by hand.)
    let (mut tls, reply) = operator_link(&operator, server.local_addr()).await;
    assert!(!reply.accepted);
    assert_eq!(reply.detail, "the client certificate names no single member");
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(DEADLINE, tls.read_to_end(&mut rest)).await;
    assert!(rest.is_empty(), "a refused link is closed");
    assert!(load(&server.stats().calls_rejected) >= 1);
    assert_eq!(load(&server.stats().streams_accepted), 0);
    assert!(inbox.try_recv().is_err());
    server.shutdown().await;
}

/// A link dialled with `operator`'s certificate and the right credentials; returns the connection and the answer.
async fn operator_link(
    operator: &paxsql_peer_transport::TlsConfig,
    addr: SocketAddr,
) -> (tokio_rustls::client::TlsStream<TcpStream>, pb::OpenReply) {
    use prost::Message as _;
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(&operator.ca).unwrap() {
        roots.add(ca.unwrap()).unwrap();
    }
    let chain = CertificateDer::pem_file_iter(&operator.cert).unwrap().map(Result::unwrap).collect();
    let key = PrivateKeyDer::from_pem_file(&operator.key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![paxsql_peer_transport::link::LINK_ALPN.to_vec()];
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("node-1.paxsql").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap();
    let open = pb::LinkOpen { cluster_id: "loopback".into(), cluster_secret: SECRET.into(), from: 2, keepalive_ms: 0 };
    tls.write_all(&frame(&open.encode_to_vec())).await.unwrap();
    let len = tokio::time::timeout(DEADLINE, tls.read_u32()).await.unwrap().unwrap();
    let mut body = vec![0u8; len as usize];
    tls.read_exact(&mut body).await.unwrap();
    (tls, pb::OpenReply::decode(body.as_slice()).unwrap())
}

#[tokio::test]
async fn tls_config_errors_are_reported_at_config_time() {
    init_logs();
    let pki = Pki::new();
    let mut c = pki.member(1);
    c.tls.as_mut().unwrap().key = pki.dir.path().join("missing.key");
    let err = PeerServer::bind(localhost(), &c).await.err().expect("missing key file must fail");
    assert!(err.to_string().contains("private key"), "{err}");
    assert!(PeerClient::new(&c).is_err());

    // Node 1 configured with node 2's certificate: refused at start, naming what the certificate must carry.
    let mut c = cfg(1);
    c.tls = Some(pki.tls("", "node2", ""));
    let err = PeerServer::bind(localhost(), &c).await.err().expect("another member's certificate must fail");
    assert!(err.to_string().contains("node-1.paxsql"), "{err}");
}

#[tokio::test]
async fn admin_service_shares_the_port_and_the_authentication() {
    init_logs();
    tracing::info!("Admin served next to links, behind the same cluster check");
    let auth = ClusterAuth::new("loopback", &ClusterSecret::new(SECRET)).unwrap();
    let routes =
        tonic::service::Routes::new(pb::admin_server::AdminServer::with_interceptor(StatusOnly, auth.interceptor()));
    let (server, _inbox) =
        PeerServer::bind_serving(localhost(), &cfg(1), PeerPortServices { routes: Some(routes), relays: false })
            .await
            .unwrap();
    let mut admin = pb::admin_client::AdminClient::connect(format!("http://{}", server.local_addr())).await.unwrap();
    let status = admin.status(pb::StatusRequest {}).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    let mut req = tonic::Request::new(pb::StatusRequest {});
    auth.attach(&mut req);
    let reply = admin.status(req).await.unwrap().into_inner();
    assert_eq!((reply.node_id, reply.role.as_str()), (1, "replica"));
    server.shutdown().await;
}

/// Answers every relay the server hands out by echoing what the dialler sends, after checking who asked.
fn echo_relays(server: &mut PeerServer, expect_member: Option<u64>) -> tokio::task::JoinHandle<u64> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut relays = server.take_relays().expect("relays asked for");
    tokio::spawn(async move {
        let mut served = 0;
        while let Some(relay) = relays.recv().await {
            assert_eq!(relay.member, expect_member);
            assert_eq!(relay.request.master_version, 7);
            assert_eq!(relay.request.client, "10.1.2.3:40000".parse().unwrap());
            let mut stream = relay.accept().await.unwrap();
            let mut buf = [0u8; 5];
            stream.read_exact(&mut buf).await.unwrap();
            stream.write_all(&buf).await.unwrap();
            stream.shutdown().await.unwrap();
            served += 1;
        }
        served
    })
}

fn relay_request() -> RelayRequest {
    RelayRequest {
        master_version: 7,
        client: "10.1.2.3:40000".parse().unwrap(),
        proxy: "127.0.0.1:3306".parse().unwrap(),
    }
}

/// What came back through a relay for `hello`, and whether it was encrypted.
async fn relay_echo(dialer: &RelayDialer, node: u64, addr: SocketAddr) -> Result<(Vec<u8>, bool), RelayError> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = dialer.dial(node, addr, &relay_request(), DEADLINE).await?;
    stream.write_all(b"hello").await.unwrap();
    let mut back = Vec::new();
    tokio::time::timeout(DEADLINE, stream.read_to_end(&mut back)).await.unwrap().unwrap();
    Ok((back, stream.is_tls()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_share_the_tls_port_with_links_and_only_members_get_through() {
    init_logs();
    let pki = Pki::new();
    let also = PeerPortServices { routes: None, relays: true };
    let (mut server, mut inbox) = PeerServer::bind_serving(localhost(), &pki.member(1), also).await.unwrap();
    let addr = server.local_addr();
    let echo = echo_relays(&mut server, Some(2));

    // A member relays, over TLS, on the port that carries its Paxos messages.
    let dialer = RelayDialer::new(&pki.member(2)).unwrap();
    assert_eq!(relay_echo(&dialer, 1, addr).await.unwrap(), (b"hello".to_vec(), true));
    let mut client = PeerClient::new(&pki.member(2)).unwrap();
    client.set_peer(1, &addr.to_string()).unwrap();
    client.send(accept(2, 1, 1));
    assert_eq!(recv_n(&mut inbox, 1).await, vec![accept(2, 1, 1)]);

    // The dialler checks the server is the member it dials: node 1's certificate does not name node 3.
    let err = dialer.dial(3, addr, &relay_request(), DEADLINE).await.unwrap_err();
    assert!(matches!(err, RelayError::Io { .. }), "{err}");
    // A certificate of another CA gets no TLS session.
    let mut stranger = cfg(2);
    stranger.tls = Some(pki.tls("stranger-", "node2", ""));
    let err = relay_echo(&RelayDialer::new(&stranger).unwrap(), 1, addr).await.unwrap_err();
    assert!(matches!(err, RelayError::Io { .. }), "{err}");
    // The right certificate with the wrong cluster secret is refused with the failed check named.
    let mut wrong = pki.member(2);
    wrong.cluster_secret = ClusterSecret::new("another-secret-0123456789");
    match relay_echo(&RelayDialer::new(&wrong).unwrap(), 1, addr).await {
        Err(RelayError::Refused { node: 1, detail }) => assert_eq!(detail, "cluster secret wrong"),
        other => panic!("{other:?}"),
    }
    drop(client);
    server.shutdown().await;
    assert_eq!(echo.await.unwrap(), 1, "exactly the member's relay reached the node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_on_a_plaintext_port_need_the_secret_and_a_node_that_takes_them() {
    init_logs();
    let also = PeerPortServices { routes: None, relays: true };
    let (mut server, mut inbox) = PeerServer::bind_serving(localhost(), &cfg(1), also).await.unwrap();
    let addr = server.local_addr();
    let echo = echo_relays(&mut server, None);
    let dialer = RelayDialer::new(&cfg(2)).unwrap();
    assert_eq!(relay_echo(&dialer, 1, addr).await.unwrap(), (b"hello".to_vec(), false));
    // A link on the same plaintext port.
    let mut client = PeerClient::new(&cfg(2)).unwrap();
    client.set_peer(1, &addr.to_string()).unwrap();
    client.send(accept(2, 1, 1));
    assert_eq!(recv_n(&mut inbox, 1).await, vec![accept(2, 1, 1)]);
    let mut other = cfg(2);
    other.cluster_id = "another-cluster".into();
    match relay_echo(&RelayDialer::new(&other).unwrap(), 1, addr).await {
        Err(RelayError::Refused { detail, .. }) => assert!(detail.starts_with("cluster id mismatch"), "{detail}"),
        other => panic!("{other:?}"),
    }
    drop(client);
    server.shutdown().await;
    assert_eq!(echo.await.unwrap(), 1);

    // A port that does not relay says so at once.
    let (server, _inbox) = PeerServer::bind(localhost(), &cfg(1)).await.unwrap();
    match relay_echo(&dialer, 1, server.local_addr()).await {
        Err(RelayError::Refused { detail, .. }) => assert_eq!(detail, "this node relays no connections"),
        other => panic!("{other:?}"),
    }
    server.shutdown().await;
}
