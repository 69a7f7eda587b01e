//! The admin SQL port and the metrics endpoint against real clients: the `mariadb` CLI (batch and interactive)
//! and mysql_async for SQL, a raw HTTP/1.1 request for `/metrics`. Every server listens on a loopback port the
//! kernel picks and is shut down by its test.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use mysql_async::prelude::*;
use paxsql_admin_sql::{
    AdminAuth, AdminSqlServer, ClusterView, MasterView, MemberView, Metrics, MetricsServer, PaxosView,
};
use paxsql_mysql_wire::handshake::{FirstPacket, LoginRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinHandle;

const USER: &str = "admin";
const PASSWORD: &str = "s3cret-admin";

fn init_tracing() {
    let _ = tracing_subscriber::fmt().with_env_filter("paxsql_admin_sql=debug").with_test_writer().try_init();
}

fn view_v1() -> ClusterView {
    ClusterView {
        node_id: 1,
        role: "master".into(),
        master_id: Some(1),
        master_version: 3,
        holds_lease: true,
        lease_remaining_ms: Some(1200),
        applied_instance: 57,
        applied_gtid: Some("0-3000000001-20".into()),
        global_last_gtid: "0-3000000001-20".into(),
        lag_transactions: Some(0),
        paxos: PaxosView { chosen_up_to: 57, proposals_in_flight: 1, promised_ballot: "(4, 1)".into() },
        members: vec![
            MemberView {
                node_id: 1,
                peer: "127.0.0.1:33701".into(),
                mariadb: Some("127.0.0.1:33711".into()),
                proxy_rw: Some("127.0.0.1:33721".into()),
                proxy_ro: Some("127.0.0.1:33731".into()),
                admin: Some("127.0.0.1:33741".into()),
                role: Some("master".into()),
                reachable: true,
            },
            MemberView {
                node_id: 2,
                peer: "127.0.0.1:33702".into(),
                mariadb: Some("127.0.0.1:33712".into()),
                role: None,
                reachable: false,
                ..Default::default()
            },
        ],
        master: Some(MasterView {
            node_id: 1,
            master_version: 3,
            mariadb: Some("127.0.0.1:33711".into()),
            proxy_rw: Some("127.0.0.1:33721".into()),
        }),
    }
}

/// A running admin port; `stop` ends it and checks it ended cleanly.
struct Running {
    addr: SocketAddr,
    view: watch::Sender<ClusterView>,
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<(), paxsql_admin_sql::AdminError>>,
}

impl Running {
    /// On a port the kernel picks: a fixed port in the ephemeral range (32768–60999) can be taken by another
    /// test's outgoing connection (seen in CI: "Address already in use" on 33104).
    async fn start() -> Result<Running> {
        init_tracing();
        let (view, view_rx) = watch::channel(view_v1());
        let auth = AdminAuth { user: USER.into(), password: PASSWORD.into() };
        let server = AdminSqlServer::bind(SocketAddr::from(([127, 0, 0, 1], 0)), auth, view_rx).await?;
        let addr = server.local_addr();
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(server.run(stop_rx));
        Ok(Running { addr, view, stop, task })
    }

    fn opts(&self, password: &str) -> mysql_async::Opts {
        mysql_async::OptsBuilder::default()
            .ip_or_hostname(self.addr.ip().to_string())
            .tcp_port(self.addr.port())
            .user(Some(USER))
            .pass(Some(password))
            .prefer_socket(false)
            .into()
    }

    async fn stop(self) -> Result<()> {
        self.stop.send_replace(true);
        tokio::time::timeout(Duration::from_secs(10), self.task).await.context("server did not stop")???;
        Ok(())
    }
}

/// Runs the `mariadb` CLI (bounded in time) and returns (success, stdout, stderr).
async fn mariadb_cli(addr: SocketAddr, password: &str, args: &[&str]) -> Result<(bool, String, String)> {
    let mut cmd = tokio::process::Command::new("mariadb");
    cmd.arg("-h127.0.0.1")
        .arg(format!("-P{}", addr.port()))
        .arg(format!("-u{USER}"))
        .arg(format!("-p{password}"))
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(20), cmd.output())
        .await
        .context("mariadb CLI did not finish in 20 s")?
        .context("cannot run the mariadb CLI: run deploy/install-deps.sh")?;
    Ok((out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into()))
}

fn server_error_code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(s) => Some(s.code),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_async_reads_the_view_and_sees_it_change() -> Result<()> {
    let server = Running::start().await?;
    let mut conn = mysql_async::Conn::new(server.opts(PASSWORD)).await?;

    eprintln!("phase: SELECT * FROM paxsql.members returns one row per member, NULL where unknown");
    let members: Vec<mysql_async::Row> = conn.query("SELECT * FROM paxsql.members").await?;
    assert_eq!(members.len(), 2);
    let columns: Vec<String> = members[0].columns_ref().iter().map(|c| c.name_str().into_owned()).collect();
    assert_eq!(columns, ["node_id", "peer", "mariadb", "proxy_rw", "proxy_ro", "admin", "role", "reachable"]);
    type MemberRow = (u64, String, Option<String>, Option<String>, Option<String>, Option<String>, Option<String>, u8);
    let first: MemberRow = mysql_async::from_row(members[0].clone());
    assert_eq!(
        first,
        (
            1,
            "127.0.0.1:33701".into(),
            Some("127.0.0.1:33711".into()),
            Some("127.0.0.1:33721".into()),
            Some("127.0.0.1:33731".into()),
            Some("127.0.0.1:33741".into()),
            Some("master".into()),
            1
        )
    );
    // Column lists and WHERE are not supported: an error, not rows that could be mistaken for an answer.
    let err =
        conn.query_drop("select node_id, role from paxsql.members").await.err().context("column list accepted")?;
    assert_eq!(server_error_code(&err), Some(1064), "{err}");
    let row: (u64, Option<String>, u8) = {
        let r = &members[1];
        (r.get(0).context("node_id")?, r.get(6).context("role")?, r.get(7).context("reachable")?)
    };
    assert_eq!(row, (2, None, 0));

    eprintln!("phase: SELECT * FROM paxsql.master and SHOW STATUS LIKE");
    let master: Option<(u64, u64, String, String)> = conn.query_first("select * from PAXSQL.MASTER").await?;
    assert_eq!(master, Some((1, 3, "127.0.0.1:33711".into(), "127.0.0.1:33721".into())));
    let status: Vec<(String, Option<String>)> = conn.query("SHOW STATUS LIKE '%gtid'").await?;
    assert_eq!(
        status,
        vec![
            ("applied_gtid".into(), Some("0-3000000001-20".into())),
            ("global_last_gtid".into(), Some("0-3000000001-20".into()))
        ]
    );
    let all: Vec<(String, Option<String>)> = conn.query("show status").await?;
    let get = |name: &str| all.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.clone());
    assert_eq!(get("lag_transactions").as_deref(), Some("0"));
    assert_eq!(get("holds_lease").as_deref(), Some("ON"));
    assert_eq!(get("lease_remaining_ms").as_deref(), Some("1200"));
    assert_eq!(get("paxos_chosen_up_to").as_deref(), Some("57"));
    assert_eq!(get("paxos_proposals_in_flight").as_deref(), Some("1"));

    eprintln!("phase: the node publishes a new view (failover to node 2); the next query shows it");
    let mut v2 = view_v1();
    v2.role = "replica".into();
    v2.master_id = Some(2);
    v2.master_version = 4;
    v2.holds_lease = false;
    v2.lease_remaining_ms = None;
    v2.lag_transactions = Some(5);
    v2.master =
        Some(MasterView { node_id: 2, master_version: 4, mariadb: Some("127.0.0.1:33712".into()), proxy_rw: None });
    server.view.send_replace(v2);
    let master: Option<(u64, u64, String, Option<String>)> = conn.query_first("SELECT * FROM paxsql.master").await?;
    assert_eq!(master, Some((2, 4, "127.0.0.1:33712".into(), None)));
    let lag: Option<(String, String)> = conn.query_first("SHOW STATUS LIKE 'lag_transactions'").await?;
    assert_eq!(lag, Some(("lag_transactions".into(), "5".into())));
    let lease: Option<(String, Option<String>)> = conn.query_first("SHOW STATUS LIKE 'lease_remaining_ms'").await?;
    assert_eq!(lease, Some(("lease_remaining_ms".into(), None)));

    eprintln!("phase: unsupported statements are errors (1064), never a silent OK");
    for sql in ["DELETE FROM paxsql.members", "SELECT * FROM mysql.user", "SHOW PROCESSLIST", "KILL 1"] {
        let err = conn.query_drop(sql).await.err().with_context(|| format!("{sql} was accepted"))?;
        assert_eq!(server_error_code(&err), Some(1064), "{sql}: {err}");
        assert!(err.to_string().contains("unsupported query, try"), "{err}");
    }
    // The session survives its errors.
    let one: Option<u64> = conn.query_first("SELECT 1").await?;
    assert_eq!(one, Some(1));
    let err = conn
        .exec_drop("SELECT * FROM paxsql.members WHERE node_id = ?", (1,))
        .await
        .err()
        .context("prepare accepted")?;
    assert!(server_error_code(&err).is_some(), "{err}");
    let db: Option<Option<String>> = conn.query_first("SELECT DATABASE()").await?;
    assert_eq!(db, Some(None));
    conn.query_drop("USE paxsql").await?;
    let tables: Vec<String> = conn.query("SHOW TABLES").await?;
    assert_eq!(tables, ["master", "members"]);
    let err = conn.query_drop("USE mysql").await.err().context("USE mysql accepted")?;
    assert_eq!(server_error_code(&err), Some(1049));

    conn.disconnect().await?;
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_or_user_gets_1045() -> Result<()> {
    let server = Running::start().await?;
    let err = mysql_async::Conn::new(server.opts("wrong")).await.err().context("wrong password accepted")?;
    assert_eq!(server_error_code(&err), Some(1045), "{err}");
    assert!(err.to_string().contains("Access denied for user 'admin'@'127.0.0.1' (using password: YES)"), "{err}");

    let other_user: mysql_async::Opts =
        mysql_async::OptsBuilder::from_opts(server.opts(PASSWORD)).user(Some("root")).into();
    let err = mysql_async::Conn::new(other_user).await.err().context("other user accepted")?;
    assert_eq!(server_error_code(&err), Some(1045), "{err}");

    let (ok, _, stderr) = mariadb_cli(server.addr, "wrong", &["-e", "SELECT 1"]).await?;
    assert!(!ok);
    assert!(stderr.contains("ERROR 1045 (28000)"), "{stderr}");

    // A client asking for a database that does not exist is refused like MariaDB does (1049).
    let (ok, _, stderr) = mariadb_cli(server.addr, PASSWORD, &["-D", "mysql", "-e", "SELECT 1"]).await?;
    assert!(!ok);
    assert!(stderr.contains("ERROR 1049"), "{stderr}");
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_cli_batch_and_interactive() -> Result<()> {
    let server = Running::start().await?;

    eprintln!("phase: mariadb -e (batch, tab-separated)");
    let (ok, out, err) = mariadb_cli(server.addr, PASSWORD, &["-N", "-e", "SELECT * FROM paxsql.members"]).await?;
    assert!(ok, "{err}");
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(
        lines[0],
        [
            "1",
            "127.0.0.1:33701",
            "127.0.0.1:33711",
            "127.0.0.1:33721",
            "127.0.0.1:33731",
            "127.0.0.1:33741",
            "master",
            "1"
        ]
    );
    assert_eq!(lines[1], ["2", "127.0.0.1:33702", "127.0.0.1:33712", "NULL", "NULL", "NULL", "NULL", "0"]);

    let (ok, out, err) = mariadb_cli(
        server.addr,
        PASSWORD,
        &["-N", "-D", "paxsql", "-e", "show status like 'role'; select * from master"],
    )
    .await?;
    assert!(ok, "{err}");
    assert_eq!(out, "role\tmaster\n1\t3\t127.0.0.1:33711\t127.0.0.1:33721\n");

    let (ok, _, err) = mariadb_cli(server.addr, PASSWORD, &["-e", "DROP DATABASE paxsql"]).await?;
    assert!(!ok);
    assert!(err.contains("ERROR 1064") && err.contains("unsupported query, try"), "{err}");

    eprintln!("phase: interactive mariadb under a pseudo-terminal (connect probes, banner, \\s, queries, quit)");
    let command = format!("mariadb -h127.0.0.1 -P{} -u{USER} -p{PASSWORD} -D paxsql --skip-pager", server.addr.port());
    let mut child = tokio::process::Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("script (util-linux) is needed for the interactive test")?;
    let mut stdin = child.stdin.take().context("stdin")?;
    stdin.write_all(b"SELECT * FROM master;\nstatus\nSHOW STATUS LIKE 'members%';\nquit\n").await?;
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .context("interactive mariadb did not finish in 20 s")??;
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("interactive session:\n{text}");
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    // The banner shows the answer to the CLI's `select @@version_comment limit 1`.
    assert!(text.contains("Server version: 10.11.0-paxsql-admin"), "{text}");
    assert!(text.contains("paxsql admin port of node 1"), "{text}");
    assert!(text.contains("| 127.0.0.1:33711 |"), "{text}");
    assert!(text.contains("members_reachable"), "{text}");
    assert!(!text.contains("ERROR"), "{text}");
    drop(stdin);
    server.stop().await
}

/// Reads the greeting and returns its salt (auth-plugin-data parts 1 and 2).
async fn read_greeting_salt(s: &mut TcpStream) -> Result<[u8; 20]> {
    let mut header = [0u8; 4];
    s.read_exact(&mut header).await?;
    let len = usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).await?;
    let version_end = 1 + p[1..].iter().position(|&b| b == 0).context("version")?;
    let part1 = &p[version_end + 5..version_end + 13];
    let part2_start = version_end + 13 + 1 + 2 + 1 + 2 + 2 + 1 + 10;
    let part2 = &p[part2_start..part2_start + 12];
    let mut salt = [0u8; 20];
    salt[..8].copy_from_slice(part1);
    salt[8..].copy_from_slice(part2);
    Ok(salt)
}

async fn read_one_packet(s: &mut TcpStream) -> Result<Vec<u8>> {
    let mut header = [0u8; 4];
    s.read_exact(&mut header).await?;
    let len = usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).await?;
    Ok(p)
}

fn frame(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let len = payload.len();
    out.extend_from_slice(&[len as u8, (len >> 8) as u8, (len >> 16) as u8, seq]);
    out.extend_from_slice(payload);
    out
}

/// Logs in by hand (the token computed with the shared mysql_native_password helper).
async fn raw_login(addr: SocketAddr) -> Result<TcpStream> {
    let mut s = TcpStream::connect(addr).await?;
    let salt = read_greeting_salt(&mut s).await?;
    let login = LoginRequest {
        capabilities: 0x0000_0200 | 0x0000_8000 | 0x0008_0000 | 0x0100_0000,
        max_packet: 1 << 24,
        charset: 45,
        user: USER.as_bytes().to_vec(),
        auth_response: paxsql_mysql_wire::auth::token(PASSWORD.as_bytes(), &salt),
        database: None,
        plugin: Some(b"mysql_native_password".to_vec()),
    };
    assert!(matches!(LoginRequest::decode(&login.encode())?, FirstPacket::Login(_)));
    s.write_all(&frame(1, &login.encode())).await?;
    let answer = read_one_packet(&mut s).await?;
    if !answer.starts_with(&[0x00]) {
        bail!("login refused: {answer:?}");
    }
    Ok(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_packets_and_abrupt_disconnects_do_not_hurt_the_server() -> Result<()> {
    let server = Running::start().await?;
    let addr = server.addr;

    eprintln!("phase: connect and vanish, before and during the greeting");
    drop(TcpStream::connect(addr).await?);
    let mut s = TcpStream::connect(addr).await?;
    let mut one = [0u8; 1];
    s.read_exact(&mut one).await?;
    drop(s);

    eprintln!("phase: garbage and oversized login packets are refused without reading them");
    for junk in [
        frame(1, b"\xff\xff"),                                 // too short for a login
        frame(1, &[0x00; 3]),                                  // no capability flags
        vec![0xff, 0xff, 0xff, 0x01, 0x00],                    // claims a 16 MiB login
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),         // not MySQL at all
        frame(1, &[0x05, 0xa2, 0x00, 0x00, 0x00, 0x00, 0x00]), // pre-4.1 login
    ] {
        let mut s = TcpStream::connect(addr).await?;
        read_greeting_salt(&mut s).await?;
        s.write_all(&junk).await?;
        // The server answers with an error or just closes; either way the connection ends soon.
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(12), s.read_to_end(&mut rest))
            .await
            .context("server kept a garbage connection open")?
            .ok();
    }

    eprintln!("phase: logged in, then a malformed command, a cut packet, an abrupt close");
    let mut s = raw_login(addr).await?;
    s.write_all(&frame(0, &[0x17, 0x01])).await?; // COM_STMT_EXECUTE, truncated
    s.write_all(&frame(0, &[0x03, 0xff, 0xfe])).await?; // COM_QUERY with invalid UTF-8
    drop(s);
    let mut s = raw_login(addr).await?;
    s.write_all(&[0x40, 0x00, 0x00, 0x00, 0x03, b'S', b'E']).await?; // a query packet cut short
    drop(s);
    let mut s = raw_login(addr).await?;
    s.write_all(&frame(0, &[0x99])).await?; // unknown command byte
    let answer = read_one_packet(&mut s).await?;
    assert!(answer.starts_with(&[0x00]) || answer.starts_with(&[0xff]), "{answer:?}");
    s.write_all(&frame(0, b"\x11root\0")).await?; // COM_CHANGE_USER: refused, not silently OKed
    let answer = read_one_packet(&mut s).await?;
    assert_eq!(&answer[..3], &[0xff, 0x17, 0x04], "ERR 1047: {answer:?}");
    s.write_all(&frame(0, b"\x04members\0")).await?; // COM_FIELD_LIST: an empty list, ended as the client asked
    assert_eq!(read_one_packet(&mut s).await?, [0xfe, 0, 0, 2, 0, 0, 0]);
    s.write_all(&frame(0, b"\x09")).await?; // COM_STATISTICS: a status string
    assert_eq!(read_one_packet(&mut s).await?, b"paxsql admin port: try SHOW STATUS");
    s.write_all(&frame(0, b"\x03SELECT * FROM paxsql.master")).await?;
    let first = read_one_packet(&mut s).await?;
    assert_eq!(first, [4], "column count of paxsql.master");
    drop(s);

    eprintln!("phase: the server still serves");
    let mut conn = mysql_async::Conn::new(server.opts(PASSWORD)).await?;
    let master: Option<(u64, u64, String, String)> = conn.query_first("SELECT * FROM paxsql.master").await?;
    assert_eq!(master.map(|m| m.0), Some(1));

    eprintln!("phase: shutdown ends open connections too");
    server.stop().await?;
    let err = conn.query_drop("SELECT 1").await;
    assert!(err.is_err(), "the connection outlived the server");
    Ok(())
}

async fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw)).await.context("HTTP timeout")??;
    let text = String::from_utf8(raw)?;
    let status: u16 = text.split(' ').nth(1).context("status line")?.parse()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_serves_series_that_follow_the_view() -> Result<()> {
    init_tracing();
    let (view_tx, view) = watch::channel(view_v1());
    let metrics = Metrics::new(1);
    let server = MetricsServer::bind(SocketAddr::from(([127, 0, 0, 1], 0)), metrics.clone(), view).await?;
    let addr = server.local_addr();
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(server.run(stop_rx));

    metrics.record_capture_ack(4, Duration::from_millis(2));
    metrics.update_proxy(paxsql_proxy::ProxyStatsSnapshot {
        accepted: 5,
        active: 1,
        refused_no_master: 2,
        ..Default::default()
    });
    metrics.update_proxy(paxsql_proxy::ProxyStatsSnapshot {
        accepted: 7,
        active: 1,
        refused_no_master: 3,
        ..Default::default()
    });
    let (status, body) = http_get(addr, "/metrics").await?;
    assert_eq!(status, 200);
    assert_eq!(sample(&body, r#"paxsql_master_version{node="1"}"#), Some(3.0), "{body}");
    assert_eq!(sample(&body, r#"paxsql_is_master{node="1"}"#), Some(1.0));
    assert_eq!(sample(&body, r#"paxsql_holds_lease{node="1"}"#), Some(1.0));
    assert_eq!(sample(&body, r#"paxsql_applied_instance{node="1"}"#), Some(57.0));
    assert_eq!(sample(&body, r#"paxsql_lag_transactions{node="1"}"#), Some(0.0));
    assert_eq!(sample(&body, r#"paxsql_paxos_chosen_total{node="1"}"#), Some(57.0));
    assert_eq!(sample(&body, r#"paxsql_capture_acked_transactions_total{node="1"}"#), Some(4.0));
    assert_eq!(sample(&body, r#"paxsql_capture_ack_latency_seconds_count{node="1"}"#), Some(1.0));
    assert_eq!(sample(&body, r#"paxsql_proxy_connections_active{node="1"}"#), Some(1.0));
    assert_eq!(sample(&body, r#"paxsql_proxy_connections_total{node="1"}"#), Some(7.0), "{body}");
    assert_eq!(sample(&body, r#"paxsql_proxy_connections_refused_total{node="1",reason="no_master"}"#), Some(3.0));
    assert!(body.contains("# TYPE paxsql_capture_ack_latency_seconds histogram"), "{body}");
    assert!(!body.contains(PASSWORD));

    eprintln!("phase: a new view shows up at the next scrape");
    let mut v2 = view_v1();
    v2.role = "replica".into();
    v2.master_version = 4;
    v2.holds_lease = false;
    v2.lag_transactions = Some(12);
    v2.paxos.chosen_up_to = 70;
    view_tx.send_replace(v2);
    let (_, body) = http_get(addr, "/metrics").await?;
    assert_eq!(sample(&body, r#"paxsql_master_version{node="1"}"#), Some(4.0), "{body}");
    assert_eq!(sample(&body, r#"paxsql_is_master{node="1"}"#), Some(0.0));
    assert_eq!(sample(&body, r#"paxsql_lag_transactions{node="1"}"#), Some(12.0));
    assert_eq!(sample(&body, r#"paxsql_paxos_chosen_total{node="1"}"#), Some(70.0));

    let (status, _) = http_get(addr, "/").await?;
    assert_eq!(status, 404);
    let (status, _) = http_get(addr, "/metrics/extra").await?;
    assert_eq!(status, 404);

    stop.send_replace(true);
    tokio::time::timeout(Duration::from_secs(10), task).await.context("metrics server did not stop")???;
    Ok(())
}
