//! Client TLS on a real cluster started with `--require-tls`: every node's RW, RO and admin port verifies against
//! the cluster CA and the address the client dialled, plaintext is refused on each, the client library rides out
//! a kill -9 of the master's node over TLS without any new configuration, and a node whose certificate file is
//! missing refuses to start and names the file.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::Cluster;
use paxsql_client::Client;

#[test]
fn every_client_port_speaks_verified_tls_across_a_failover() {
    let c = Cluster::up_with(3, 26600, &["--require-tls"]);
    let all = [1u64, 2, 3];
    let (m, term) = c.master_term().expect("a master");
    let app_password = c.password();
    let app = ("app", app_password.as_str());
    let (admin_user, admin_password) = c.admin_account();
    let admin = (admin_user.as_str(), admin_password.as_str());

    eprintln!("phase: verified TLS on every node's RW, RO and admin port; plaintext refused on each");
    c.tls_sql(m, "proxy_rw", app, &["app"], "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(64))").expect("create");
    for n in all {
        for (which, account) in [("proxy_rw", app), ("proxy_ro", app), ("admin_sql", admin)] {
            let status = c.tls_sql(n, which, account, &[], "\\s").unwrap_or_else(|e| panic!("node {n} {which}: {e}"));
            assert!(status.contains("Cipher in use is"), "node {n} {which} is not in TLS:\n{status}");
            let plain = c.sql_as(n, which, account, "SELECT 1");
            assert!(
                plain.as_ref().is_err_and(|e| e.contains("3159")),
                "node {n} {which} took a plaintext login: {plain:?}"
            );
        }
        c.tls_sql(n, "proxy_rw", app, &["app"], &format!("INSERT INTO t VALUES ({n}, 'via {n}')"))
            .expect("a write through each node's RW port over TLS");
    }
    // /metrics takes the proxy's counters on the node's next status round.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let sessions = common::sample(&c.metrics(m), "paxsql_proxy_tls_sessions_total").unwrap_or(0.0);
        if sessions >= 2.0 {
            break;
        }
        assert!(Instant::now() < deadline, "the master's proxy counted {sessions} TLS sessions");
        std::thread::sleep(Duration::from_millis(200));
    }

    eprintln!("phase: another node's RW connection reaches the master's mariadbd through the master's relay");
    let others: Vec<u64> = all.iter().copied().filter(|n| *n != m).collect();
    let (_, master_db_port) = c.endpoint(m, "mariadb");
    let held: Vec<_> = others
        .iter()
        .map(|&n| {
            let app_password = app_password.clone();
            let (host, port) = c.endpoint(n, "proxy_rw");
            let ca = c.dir.path().join("tls/ca.pem");
            Command::new("timeout")
                .args(["20", "mariadb", "-N", "-B", "--protocol=tcp", "--ssl-verify-server-cert", "-uapp"])
                .arg(format!("--ssl-ca={}", ca.display()))
                .arg(format!("-h{host}"))
                .arg(format!("-P{port}"))
                .arg("-e")
                .arg("SELECT SLEEP(4)")
                .env("MYSQL_PWD", app_password)
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("a client held in SLEEP")
        })
        .collect();
    let node_pid = |n: u64| common::read_pid(&c.node_dir(n).join("node.pid")).expect("node pid");
    let deadline = Instant::now() + Duration::from_secs(10);
    let owners = loop {
        let out = Command::new("ss")
            .args(["-Htnp", "state", "established", &format!("( dport = :{master_db_port} )")])
            .output()
            .expect("ss");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let owners: Vec<i32> = text
            .split("pid=")
            .skip(1)
            .filter_map(|rest| rest.split(|ch: char| !ch.is_ascii_digit()).next()?.parse().ok())
            .collect();
        if owners.iter().filter(|p| **p == node_pid(m)).count() >= others.len() || Instant::now() > deadline {
            break owners;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for n in &others {
        assert!(
            !owners.contains(&node_pid(*n)),
            "node {n} holds a TCP connection to the master's mariadbd: {owners:?}"
        );
    }
    assert!(
        owners.iter().filter(|p| **p == node_pid(m)).count() >= others.len(),
        "the master's node does not carry the relayed connections to its mariadbd: {owners:?}"
    );
    for mut child in held {
        assert!(child.wait().expect("client").success(), "a relayed client failed");
    }
    let relays = |n: u64, direction: &str| -> f64 {
        let body = c.metrics(n);
        let line = body
            .lines()
            .find(|l| l.starts_with("paxsql_proxy_relays_total{") && l.contains(&format!("direction=\"{direction}\"")));
        line.and_then(|l| l.rsplit(' ').next()?.parse().ok()).unwrap_or(0.0)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let relayed_in = relays(m, "in");
        let relayed_out: f64 = others.iter().map(|n| relays(*n, "out")).sum();
        // Each other node wrote once in the first phase and held one connection in this one.
        if relayed_in >= 4.0 && relayed_out >= 4.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "relays counted: {relayed_in} in on the master, {relayed_out} out elsewhere"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    eprintln!("phase: the client library verifies against the cluster CA; kill -9 of the master's node");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let mut order = vec![m];
    order.extend(all.iter().filter(|n| **n != m));
    let endpoints = c.rw_endpoints(&order);
    let ca = c.dir.path().join("tls/ca.pem");
    let client = Client::builder()
        .endpoints(endpoints.clone())
        .user("app")
        .password(app_password.clone())
        .database("app")
        .tls_ca(&ca)
        .failover_deadline(Duration::from_secs(30))
        .build()
        .expect("client");
    for i in 0..20u64 {
        rt.block_on(client.execute("INSERT INTO t VALUES (?, 'before')", (100 + i,))).expect("write before the kill");
    }
    c.kill9_node(m);
    let killed = Instant::now();
    for i in 0..20u64 {
        rt.block_on(client.execute("INSERT INTO t VALUES (?, 'after')", (200 + i,))).expect("write after the kill");
    }
    eprintln!("20 writes over TLS done {:?} after the kill", killed.elapsed());
    let (m2, _) = c.wait_new_term(term, Duration::from_secs(30));
    assert_ne!(m2, m);
    let count: Vec<u64> = rt.block_on(client.query("SELECT COUNT(*) FROM t", ())).expect("count");
    assert_eq!(count, vec![43], "3 + 20 + 20 rows after the failover");

    eprintln!("phase: a certificate that does not chain to the given CA is refused at once, not retried");
    let wrong = Client::builder()
        .endpoints(endpoints)
        .user("app")
        .password(app_password.clone())
        .tls_ca(c.dir.path().join(format!("tls/node-{m2}-clients.pem")))
        .failover_deadline(Duration::from_secs(30))
        .build()
        .expect("client");
    let started = Instant::now();
    let refused = rt.block_on(wrong.query::<u64>("SELECT 1", ()));
    assert!(refused.is_err(), "a certificate that is not the CA verified");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a TLS failure was retried for {:?}: {refused:?}",
        started.elapsed()
    );
    drop((client, wrong));
    drop(rt);

    eprintln!("phase: a node whose certificate file is missing refuses to start and names the file");
    let cert = c.dir.path().join(format!("tls/node-{m}-clients.pem"));
    let moved = c.dir.path().join("moved-away.pem");
    std::fs::rename(&cert, &moved).expect("move the certificate away");
    let out = Command::new("timeout")
        .args(["30", common::paxsql().to_str().expect("path"), "node", "--config"])
        .arg(c.node_dir(m).join("node.toml"))
        .output()
        .expect("run paxsql node");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "the node did not refuse to start:\n{text}");
    assert!(text.contains(&cert.display().to_string()), "the error does not name {}:\n{text}", cert.display());
    std::fs::rename(&moved, &cert).expect("put the certificate back");
    c.restart_node(m);
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "43", Duration::from_secs(60));
}
