//! The RO port, the PROXY protocol header and a backend's TLS kept out of the proxy, against a real MariaDB 10.11 replica-profile
//! server (read_only=ON) that trusts PROXY headers from 127.0.0.1.

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context};
use common::{cli, init_tracing, opts_at, phase, source_relay, Ports, RunningProxy};
use paxsql_mariadb_testkit::mysql_async::prelude::Queryable as _;
use paxsql_mariadb_testkit::mysql_async::{self, Conn};
use paxsql_mariadb_testkit::{MariaDb, MariaDbOptions, ROOT_PASSWORD};
use paxsql_proxy::{Backend, ProxyConfig, Route};

static PORTS: Ports = Ports::new(31100);

const APP_USER: &str = "app";
const APP_PASSWORD: &str = "apppw";
/// The client address the tests connect from, through the relay: an account exists only for this host.
const CLIENT_IP: [u8; 4] = [127, 0, 0, 2];

/// A self-signed certificate and key in `dir`, made with the openssl CLI.
fn make_cert(dir: &std::path::Path) -> anyhow::Result<(String, String)> {
    let cert = dir.join("server-cert.pem");
    let key = dir.join("server-key.pem");
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=paxsql-proxy-test"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .context("run openssl")?;
    ensure!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    Ok((cert.display().to_string(), key.display().to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ro_port_proxy_protocol_and_tls_refusal() -> anyhow::Result<()> {
    init_tracing();
    let certs = tempfile::tempdir()?;
    let (cert, key) = make_cert(certs.path())?;
    let db = tokio::task::spawn_blocking(move || {
        MariaDb::start(
            MariaDbOptions::replica(5)
                .with_config_line("proxy_protocol_networks=127.0.0.1/32,localhost")
                .with_config_line(format!("ssl_cert={cert}"))
                .with_config_line(format!("ssl_key={key}")),
        )
    })
    .await??;
    let backend: SocketAddr = ([127, 0, 0, 1], db.port()).into();

    phase("finding: with 127.0.0.1 in proxy_protocol_networks, connections WITHOUT a header are still accepted");
    // MariaDb::start itself logged in as root over TCP from 127.0.0.1 without a header; do it again explicitly.
    let mut direct = db.conn().await?;
    let host: String = direct.query_first("SELECT USER()").await?.context("no row")?;
    ensure!(host == "root@localhost" || host == "root@127.0.0.1", "USER() = {host}");
    let socket = db.socket_path().display().to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("timeout")
            .args(["30", "mariadb", "--no-defaults", "-uroot", &format!("-p{ROOT_PASSWORD}"), "-S", &socket])
            .args(["--batch", "--skip-column-names", "-e", "SELECT USER()"])
            .output()
    })
    .await??;
    ensure!(out.status.success(), "unix socket login failed: {}", String::from_utf8_lossy(&out.stderr));

    direct
        .query_drop(format!(
            "CREATE USER '{APP_USER}'@'127.0.0.2' IDENTIFIED BY '{APP_PASSWORD}'; \
             GRANT SELECT, INSERT ON test.* TO '{APP_USER}'@'127.0.0.2'; \
             CREATE DATABASE test; CREATE TABLE test.t (id INT PRIMARY KEY); INSERT INTO test.t VALUES (1)"
        ))
        .await?;

    let cfg = ProxyConfig {
        rw_listen: Some(PORTS.next()),
        ro_listen: Some(PORTS.next()),
        local_backend: Backend::Tcp(backend),
        proxy_protocol: true,
        ..ProxyConfig::default()
    };
    let route = Route::Master { node_id: 5, master_version: 1, backend: Backend::Tcp(backend) };
    let proxy = RunningProxy::start(cfg, route.clone()).await?;
    let (rw, ro) = (proxy.rw.context("rw")?, proxy.ro.context("ro")?);
    // Clients reach the proxy from 127.0.0.2 through these relays.
    let ro_from_client = PORTS.next();
    source_relay(ro_from_client, CLIENT_IP, ro).await?;
    let rw_from_client = PORTS.next();
    source_relay(rw_from_client, CLIENT_IP, rw).await?;

    phase("grants see the real client: app@127.0.0.2 exists only for that host, and logs in through the proxy");
    let denied = Conn::new(opts_at(backend, APP_USER, APP_PASSWORD)).await;
    ensure!(
        matches!(&denied, Err(mysql_async::Error::Server(e)) if e.code == 1045),
        "app logged in directly from 127.0.0.1: {denied:?}"
    );
    let mut app = Conn::new(opts_at(ro_from_client, APP_USER, APP_PASSWORD)).await?;
    let user: String = app.query_first("SELECT USER()").await?.context("no row")?;
    ensure!(user == "app@127.0.0.2", "USER() = {user}");

    phase("SHOW PROCESSLIST on the server shows the client's address, not the proxy's");
    let app_id: u64 = app.query_first("SELECT CONNECTION_ID()").await?.context("no row")?;
    let host: String = direct
        .query_first(format!("SELECT host FROM information_schema.processlist WHERE id = {app_id}"))
        .await?
        .context("no processlist row")?;
    ensure!(host.starts_with("127.0.0.2:"), "processlist host {host}");
    // While MariaDB's own socket peer is the proxy: the client never talks to it directly.
    let peers = std::fs::read_to_string("/proc/net/tcp")?;
    let client_hex = "0200007F"; // 127.0.0.2 in /proc/net/tcp's byte order
    let backend_port_hex = format!("{:04X}", db.port());
    let to_backend_from_client = peers.lines().skip(1).any(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        cols.len() > 2 && cols[1].starts_with(client_hex) && cols[2].ends_with(&format!(":{backend_port_hex}"))
    });
    ensure!(!to_backend_from_client, "a socket from 127.0.0.2 to mariadbd exists");

    phase("RO port: reads served by the local server, writes get its read_only error");
    let n: u64 = app.query_first("SELECT COUNT(*) FROM test.t").await?.context("no row")?;
    ensure!(n == 1);
    let write = app.query_drop("INSERT INTO test.t VALUES (2)").await;
    ensure!(
        matches!(&write, Err(mysql_async::Error::Server(e)) if e.code == 1290 && e.message.contains("read-only")),
        "write on the read-only replica: {write:?}"
    );

    phase("RW port sends the header too; the mariadb CLI through it");
    let run = cli(rw_from_client, APP_USER, APP_PASSWORD, &["--skip-ssl"], "SELECT USER()").await?;
    ensure!(run.success && run.stdout == "app@127.0.0.2", "{run:?}");

    phase("mariadbd's own TLS is not offered through a proxy without a certificate: a verifying client refuses");
    // The proxy terminates TLS itself (t40_tls); without a certificate of its own it announces none, whatever the
    // backend offers, so a client that requires TLS stops in its own library instead of talking to mariadbd unread.
    let run = cli(rw_from_client, APP_USER, APP_PASSWORD, &["--ssl-verify-server-cert"], "SELECT USER()").await?;
    ensure!(!run.success && run.stderr.contains("ERROR 2026"), "{run:?}");
    // And a client that does not ask for TLS stays in clear text.
    let run =
        cli(ro_from_client, APP_USER, APP_PASSWORD, &["--skip-ssl"], "SHOW SESSION STATUS LIKE 'Ssl_version'").await?;
    ensure!(run.success && run.stdout == "Ssl_version", "{run:?}");

    phase("RO port to the local server over its unix socket (a paxsql replica takes no TCP login): same client");
    let unix_cfg = ProxyConfig {
        rw_listen: None,
        ro_listen: Some(PORTS.next()),
        local_backend: Backend::Unix(db.socket_path().to_path_buf()),
        proxy_protocol: true,
        ..ProxyConfig::default()
    };
    let unix_proxy = RunningProxy::start(unix_cfg, route).await?;
    let ro_unix_from_client = PORTS.next();
    source_relay(ro_unix_from_client, CLIENT_IP, unix_proxy.ro.context("ro over unix")?).await?;
    let mut via_socket = Conn::new(opts_at(ro_unix_from_client, APP_USER, APP_PASSWORD)).await?;
    let user: String = via_socket.query_first("SELECT USER()").await?.context("no row")?;
    ensure!(user == "app@127.0.0.2", "USER() through the unix-socket backend = {user}");
    let n: u64 = via_socket.query_first("SELECT COUNT(*) FROM test.t").await?.context("no row")?;
    ensure!(n == 1);
    drop(via_socket);
    unix_proxy.shutdown().await?;

    phase("local server down: RO clients get ERR 1053 naming it");
    drop(app);
    drop(direct);
    let mut db = db;
    tokio::task::spawn_blocking(move || {
        db.kill9()?;
        Ok::<_, anyhow::Error>(db)
    })
    .await??;
    let err = Conn::new(opts_at(ro, APP_USER, APP_PASSWORD)).await;
    ensure!(
        matches!(&err, Err(mysql_async::Error::Server(e)) if e.code == 1053
            && e.message.contains("paxsql: local server unreachable")),
        "{err:?}"
    );
    ensure!(proxy.stats.snapshot().refused_backend_unreachable == 1);
    proxy.shutdown().await?;
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(())
}
