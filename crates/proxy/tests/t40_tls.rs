//! TLS terminated by the proxy, against a real MariaDB 10.11 behind it: verifying clients (the `mariadb` CLI and
//! mysql_async over rustls) through both ports, a plugin login that switches methods inside TLS, KILL still made
//! soft inside TLS, a change of user, plaintext refused where TLS is required, and a certificate from another CA
//! refused by the client.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{ensure, Context};
use common::{cli, init_tracing, opts_at, phase, Ports, RunningProxy};
use paxsql_mariadb_testkit::mysql_async::prelude::Queryable as _;
use paxsql_mariadb_testkit::mysql_async::{self, Conn, OptsBuilder, SslOpts};
use paxsql_mariadb_testkit::{MariaDb, MariaDbOptions};
use paxsql_proxy::{Backend, ProxyConfig, Route, ServerTls};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

static PORTS: Ports = Ports::new(31300);

const APP_USER: &str = "app";
const APP_PASSWORD: &str = "app-pw-1";

/// A CA and a server certificate for 127.0.0.1 and localhost, in `dir`: (ca.pem, server.pem, server.key).
fn make_pki(dir: &Path, tag: &str) -> anyhow::Result<(PathBuf, PathBuf, PathBuf)> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    // Distinct subjects: OpenSSL takes a leaf whose subject equals its issuer's for a self-signed certificate.
    ca_params.distinguished_name.push(DnType::CommonName, format!("{tag} test CA"));
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
    params.distinguished_name.push(DnType::CommonName, format!("{tag} test server"));
    let cert = params.signed_by(&key, &ca)?;
    let paths = (dir.join(format!("{tag}-ca.pem")), dir.join(format!("{tag}.pem")), dir.join(format!("{tag}.key")));
    std::fs::write(&paths.0, ca.pem())?;
    std::fs::write(&paths.1, cert.pem())?;
    std::fs::write(&paths.2, key.serialize_pem())?;
    Ok(paths)
}

fn verifying(addr: SocketAddr, user: &str, password: &str, ca: &Path) -> mysql_async::Opts {
    OptsBuilder::from_opts(opts_at(addr, user, password))
        .ssl_opts(SslOpts::default().with_root_certs(vec![ca.to_path_buf().into()]))
        .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_ends_at_the_proxy_and_the_proxy_still_reads_every_command() -> anyhow::Result<()> {
    init_tracing();
    let dir = tempfile::tempdir()?;
    let (ca, cert, key) = make_pki(dir.path(), "cluster")?;
    let (other_ca, _, _) = make_pki(dir.path(), "other")?;
    let db = tokio::task::spawn_blocking(|| MariaDb::start(MariaDbOptions::standalone(7))).await??;
    let backend: SocketAddr = ([127, 0, 0, 1], db.port()).into();
    let mut root = db.conn().await?;
    root.query_drop(format!(
        "CREATE USER '{APP_USER}'@'%' IDENTIFIED BY '{APP_PASSWORD}'; GRANT ALL ON test.* TO '{APP_USER}'@'%'; \
         CREATE DATABASE test; CREATE TABLE test.t (id INT PRIMARY KEY, v LONGTEXT); \
         INSTALL SONAME 'auth_ed25519'; \
         CREATE USER 'ed'@'%' IDENTIFIED VIA ed25519 USING PASSWORD('ed-pw-1'); GRANT SELECT ON test.* TO 'ed'@'%'; \
         CREATE USER 'auditor'@'%' IDENTIFIED BY 'aud-pw-1'"
    ))
    .await?;

    let tls = ServerTls::load(&cert, &key)?;
    let cfg = ProxyConfig {
        rw_listen: Some(PORTS.next()),
        ro_listen: Some(PORTS.next()),
        local_backend: Backend::Tcp(backend),
        tls: Some(tls.clone()),
        ..ProxyConfig::default()
    };
    let proxy =
        RunningProxy::start(cfg, Route::Master { node_id: 7, master_version: 1, backend: Backend::Tcp(backend) })
            .await?;
    let (rw, ro) = (proxy.rw.context("rw")?, proxy.ro.context("ro")?);
    let ca_arg = format!("--ssl-ca={}", ca.display());

    phase("the mariadb CLI verifies the proxy's certificate on both ports and runs in TLS");
    for port in [rw, ro] {
        let run = cli(port, APP_USER, APP_PASSWORD, &["--ssl-verify-server-cert", &ca_arg], "\\s").await?;
        ensure!(run.success && run.stdout.contains("Cipher in use is"), "{port}: {run:?}");
    }
    ensure!(proxy.stats.snapshot().tls_sessions == 2);

    phase("a login whose method switches (ed25519) completes inside TLS");
    let run = cli(rw, "ed", "ed-pw-1", &["--ssl-verify-server-cert", &ca_arg], "SELECT CURRENT_USER()").await?;
    ensure!(run.success && run.stdout == "ed@%", "{run:?}");
    let run = cli(rw, "ed", "wrong-pw", &["--ssl-verify-server-cert", &ca_arg], "SELECT 1").await?;
    ensure!(!run.success && run.stderr.contains("1045"), "a wrong password over TLS: {run:?}");

    phase("mysql_async over rustls: text and binary protocol, a large result, a change of user");
    let mut app = Conn::new(verifying(rw, APP_USER, APP_PASSWORD, &ca)).await?;
    let big = "x".repeat(3 << 20);
    app.exec_drop("INSERT INTO test.t VALUES (?, ?)", (1, big.as_str())).await?;
    let back: String = app.query_first("SELECT v FROM test.t WHERE id = 1").await?.context("no row")?;
    ensure!(back == big, "a 3 MiB value came back different through TLS");
    let rows: Vec<u64> = app.query("SELECT seq FROM test.seq_1_to_20000").await?;
    ensure!(rows.len() == 20_000 && rows[19_999] == 20_000);
    app.change_user(
        mysql_async::ChangeUserOpts::default().with_user(Some("auditor".into())).with_pass(Some("aud-pw-1".into())),
    )
    .await?;
    let who: String = app.query_first("SELECT CURRENT_USER()").await?.context("no row")?;
    ensure!(who == "auditor@%", "after a change of user over TLS: {who}");
    drop(app);

    phase("KILL inside TLS is still read and made soft");
    let mut victim = Conn::new(verifying(rw, APP_USER, APP_PASSWORD, &ca)).await?;
    let victim_id: u64 = victim.query_first("SELECT CONNECTION_ID()").await?.context("no id")?;
    let mut killer = Conn::new(verifying(rw, APP_USER, APP_PASSWORD, &ca)).await?;
    let softened = proxy.stats.snapshot().kills_softened;
    let _ = killer.query_drop(format!("KILL QUERY {victim_id}")).await;
    ensure!(proxy.stats.snapshot().kills_softened == softened + 1, "KILL over TLS was not seen by the proxy");
    drop((victim, killer));

    phase("a certificate from another CA is refused by a verifying client");
    let other = format!("--ssl-ca={}", other_ca.display());
    let run = cli(rw, APP_USER, APP_PASSWORD, &["--ssl-verify-server-cert", &other], "SELECT 1").await?;
    ensure!(!run.success && run.stderr.contains("2026"), "{run:?}");

    phase("plaintext still works where TLS is not required");
    let run = cli(rw, APP_USER, APP_PASSWORD, &["--skip-ssl"], "SELECT 1").await?;
    ensure!(run.success && run.stdout == "1", "{run:?}");
    proxy.shutdown().await?;

    phase("TLS required: a plaintext login gets ERR 3159 and is counted; a TLS one passes");
    let cfg = ProxyConfig {
        rw_listen: Some(PORTS.next()),
        local_backend: Backend::Tcp(backend),
        tls: Some(tls),
        tls_required: true,
        ..ProxyConfig::default()
    };
    let strict =
        RunningProxy::start(cfg, Route::Master { node_id: 7, master_version: 1, backend: Backend::Tcp(backend) })
            .await?;
    let rw = strict.rw.context("rw")?;
    let run = cli(rw, APP_USER, APP_PASSWORD, &["--skip-ssl"], "SELECT 1").await?;
    ensure!(!run.success && run.stderr.contains("3159"), "{run:?}");
    let plain = Conn::new(opts_at(rw, APP_USER, APP_PASSWORD)).await;
    ensure!(matches!(&plain, Err(mysql_async::Error::Server(e)) if e.code == 3159), "{plain:?}");
    ensure!(strict.stats.snapshot().refused_plaintext == 2);
    let run = cli(rw, APP_USER, APP_PASSWORD, &["--ssl-verify-server-cert", &ca_arg], "SELECT 1").await?;
    ensure!(run.success && run.stdout == "1", "{run:?}");
    strict.shutdown().await?;

    phase("no certificate: TLS is not announced, and a client that insists is told so by its own library");
    let cfg =
        ProxyConfig { rw_listen: Some(PORTS.next()), local_backend: Backend::Tcp(backend), ..ProxyConfig::default() };
    let bare =
        RunningProxy::start(cfg, Route::Master { node_id: 7, master_version: 1, backend: Backend::Tcp(backend) })
            .await?;
    let run =
        cli(bare.rw.context("rw")?, APP_USER, APP_PASSWORD, &["--ssl-verify-server-cert", &ca_arg], "SELECT 1").await?;
    ensure!(!run.success && run.stderr.contains("2026"), "{run:?}");
    bare.shutdown().await?;
    drop(root);
    Ok(())
}
