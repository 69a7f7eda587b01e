//! Peer security on a real cluster (README "What paxsql guarantees"): `cluster up` runs the peer ports with mutual
//! TLS by default; a plaintext peer gets nothing through; a holder of one member's certificate cannot speak for
//! another member; operators' tools reach the admin service with their own certificate.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::Cluster;
use paxsql_global_log::PeerMessage;
use paxsql_paxos::{Ballot, Message, MessageBody};
use paxsql_peer_transport::{ClusterSecret, PeerClient, TlsConfig, TransportConfig};

fn forged_on(c: &Cluster, id: u64) -> f64 {
    let body = c.metrics(id);
    body.lines()
        .filter(|l| l.starts_with("paxsql_peer_messages_dropped") && l.contains("reason=\"forged\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn status(c: &Cluster, tls: bool) -> std::process::Output {
    let d = c.dir.path();
    let peers: Vec<String> =
        (1..=3).map(|id| format!("{}:{}", c.endpoint(id, "peer").0, c.endpoint(id, "peer").1)).collect();
    let mut cmd = Command::new(common::paxsql());
    cmd.args(["status", "--json", "--peers", &peers.join(",")])
        .args(["--cluster-id", c.info["cluster_id"].as_str().expect("cluster id")])
        .arg("--secret-file")
        .arg(d.join("secrets/cluster.secret"));
    if tls {
        cmd.arg("--tls-ca").arg(d.join("tls/ca.pem"));
        cmd.arg("--tls-cert").arg(d.join("tls/operator.pem"));
        cmd.arg("--tls-key").arg(d.join("tls/operator.key"));
    }
    cmd.output().expect("paxsql status")
}

#[test]
fn peers_run_mutual_tls_and_no_member_speaks_for_another() {
    let c = Cluster::up(3, 27500);
    let t = Duration::from_secs(20);
    let m = c.wait_master(None, Duration::from_secs(30));
    c.sql_via(m, "proxy_rw", "CREATE TABLE tls_t (id INT PRIMARY KEY)", t).expect("create");
    c.sql_via(m, "proxy_rw", "INSERT INTO tls_t VALUES (1)", t).expect("insert");
    c.wait_all(&[1, 2, 3], "SELECT COUNT(*) FROM tls_t", "1", Duration::from_secs(30));

    // Operators' tools: with the operator certificate every node answers; without TLS none does.
    let with = status(&c, true);
    let doc: serde_json::Value = serde_json::from_slice(&with.stdout).expect("status --json");
    let answered = doc["nodes"].as_array().expect("nodes").iter().filter(|n| n["error"].is_null()).count();
    assert_eq!(answered, 3, "status with the operator certificate: {doc}");
    let without = status(&c, false);
    let doc: serde_json::Value = serde_json::from_slice(&without.stdout).expect("status --json");
    let answered = doc["nodes"].as_array().expect("nodes").iter().filter(|n| n["error"].is_null()).count();
    assert_eq!(answered, 0, "a plaintext status call must get no answer: {doc}");

    // A rogue process holding node 2's certificate and the cluster secret sends node 1 Prepares with a ballot
    // above any in use, claiming to be node 3; and a plaintext peer (secret, no certificate) does the same as
    // itself. Were either let through, node 1 would promise the ballot and refuse the master's accepts.
    let target = (1..=3).find(|id| *id != m).expect("a replica");
    let holder = (1..=3).find(|id| *id != target).expect("another member");
    let forged_from = (1..=3).find(|id| *id != target && *id != holder).expect("a third member");
    let (m_before, version_before) = c.master_term().expect("term");
    let secret = std::fs::read_to_string(c.dir.path().join("secrets/cluster.secret")).expect("secret");
    let cluster_id = c.info["cluster_id"].as_str().expect("cluster id").to_string();
    let rogue = |node: u64, tls: Option<TlsConfig>| {
        let mut cfg = TransportConfig::new(node, cluster_id.clone(), ClusterSecret::new(secret.trim()));
        cfg.tls = tls;
        cfg
    };
    let pem = |name: String| c.dir.path().join("tls").join(name);
    let stolen = TlsConfig {
        cert: pem(format!("node-{holder}.pem")),
        key: pem(format!("node-{holder}.key")),
        ca: pem("ca.pem".into()),
    };
    let forged_before = forged_on(&c, target);
    let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let (host, port) = c.endpoint(target, "peer");
        let mut with_cert = PeerClient::new(&rogue(holder, Some(stolen))).expect("client with a member's certificate");
        let mut plaintext = PeerClient::new(&rogue(forged_from, None)).expect("plaintext client");
        with_cert.set_peer(target, &format!("{host}:{port}")).expect("peer");
        plaintext.set_peer(target, &format!("{host}:{port}")).expect("peer");
        let prepare = |from: u64| {
            PeerMessage::Paxos(Message {
                from,
                to: target,
                body: MessageBody::Prepare { ballot: Ballot::new(1 << 40, from), from_instance: 1 },
            })
        };
        for _ in 0..20 {
            with_cert.send(prepare(forged_from));
            plaintext.send(prepare(forged_from));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (plain, stolen) = (plaintext.sender(target).expect("sender"), with_cert.sender(target).expect("sender"));
        eprintln!(
            "plaintext link: {} connects, {} failures; link with node {holder}'s certificate: {} connects, {} sent",
            load(&plain.stats().connects),
            load(&plain.stats().connect_failures),
            load(&stolen.stats().connects),
            load(&stolen.stats().sent)
        );
        assert!(!plain.is_connected(), "a plaintext peer holds a stream to a TLS peer port");
        assert!(load(&stolen.stats().sent) > 0, "the stolen certificate connects and sends");
    });
    // A database copy goes only to the member whose certificate asks for itself: neither the operator's
    // certificate nor one member's asking as another gets one from an aligned replica.
    let secret_auth =
        paxsql_peer_transport::ClusterAuth::new(&cluster_id, &ClusterSecret::new(secret.trim())).expect("auth");
    let operator =
        TlsConfig { cert: pem("operator.pem".into()), key: pem("operator.key".into()), ca: pem("ca.pem".into()) };
    let member = TlsConfig {
        cert: pem(format!("node-{holder}.pem")),
        key: pem(format!("node-{holder}.key")),
        ca: pem("ca.pem".into()),
    };
    rt.block_on(async {
        let (host, port) = c.endpoint(target, "peer");
        for (who, tls, requester) in [("operator", &operator, holder), ("member", &member, forged_from)] {
            let ep = paxsql_peer_transport::peer_endpoint(Some(tls), Some(target), &format!("{host}:{port}"))
                .expect("endpoint");
            let mut admin =
                paxsql_peer_transport::pb::admin_client::AdminClient::new(ep.connect().await.expect("connect"));
            let mut req =
                tonic::Request::new(paxsql_peer_transport::pb::BackupRequest { requester, from_master: false });
            secret_auth.attach(&mut req);
            let status =
                admin.backup(req).await.err().unwrap_or_else(|| panic!("{who} certificate got a database copy"));
            assert_eq!(status.code(), tonic::Code::PermissionDenied, "{who}: {status:?}");
        }
    });

    let deadline = Instant::now() + Duration::from_secs(10);
    while forged_on(&c, target) < forged_before + 20.0 {
        assert!(Instant::now() < deadline, "node {target} did not drop the messages forged as node {forged_from}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Nothing moved: same master and term, writes still go through and reach every node.
    c.sql_via(m, "proxy_rw", "INSERT INTO tls_t VALUES (2)", t).expect("insert after the forgeries");
    c.wait_all(&[1, 2, 3], "SELECT COUNT(*) FROM tls_t", "2", Duration::from_secs(30));
    assert_eq!(c.master_term(), Some((m_before, version_before)), "a forged Prepare moved the master");
    eprintln!(
        "forged messages dropped by node {target}: {}; calls rejected: {}",
        forged_on(&c, target),
        common::sample(&c.metrics(target), "paxsql_peer_calls_rejected").unwrap_or(0.0)
    );
}
