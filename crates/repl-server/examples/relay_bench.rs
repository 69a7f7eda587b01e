//! Relay throughput: our server vs MariaDB's own dump thread on the same binlog.
//!
//! 1. A standalone MariaDB (the source) runs a workload of small committed transactions.
//! 2. Its binlog is loaded into a `MemoryEventSource` served by our `ReplicationServer`.
//! 3. Stream: one minimal replication client (login, setup SETs, COM_BINLOG_DUMP from the empty position) reads
//!    the whole backlog, once from mariadbd and once from us: events/s and MB/s of the dump stream alone.
//! 4. Apply: a replica-profile MariaDB (4 optimistic parallel threads) replicates the backlog, once from the
//!    source directly and once from our server: trx/s until `gtid_slave_pos` reaches the end.
//!
//! Run: `cargo run --release -p paxsql-repl-server --example relay_bench -- [sessions] [trx_per_session]`
//! (defaults 8 × 1500). Figures go to stdout; bench/RESULTS.md records them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use paxsql_binlog::event_type;
use paxsql_mariadb_testkit::mysql_async::prelude::Queryable;
use paxsql_mariadb_testkit::mysql_async::Conn;
use paxsql_mariadb_testkit::{MariaDb, MariaDbOptions, ReplicationSource};
use paxsql_mysql_wire::packet::{decode as decode_packet, write as write_packet};
use paxsql_repl_server::{transactions_from_binlog, MemoryEventSource, ReplicationServer, ReplicationServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A minimal replication client: enough protocol to log in with mysql_native_password and dump.
struct DumpClient {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Start of unread bytes in `buf` (compacted lazily, so reading a packet is not a memmove of the buffer).
    pos: usize,
}

impl DumpClient {
    async fn read(&mut self) -> anyhow::Result<(u8, Vec<u8>)> {
        loop {
            if let Some((seq, payload, used)) = decode_packet(&self.buf[self.pos..], usize::MAX)? {
                self.pos += used;
                return Ok((seq, payload));
            }
            self.buf.drain(..self.pos);
            self.pos = 0;
            self.buf.reserve(1 << 20);
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                bail!("server closed the connection");
            }
        }
    }

    async fn send(&mut self, seq: u8, payload: &[u8]) -> anyhow::Result<()> {
        let mut out = Vec::new();
        let mut seq = seq;
        write_packet(&mut out, &mut seq, &[payload]);
        self.stream.write_all(&out).await?;
        Ok(())
    }

    async fn connect(port: u16, user: &str, password: &str) -> anyhow::Result<DumpClient> {
        let stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.set_nodelay(true)?;
        let mut c = DumpClient { stream, buf: Vec::new(), pos: 0 };
        let (_, greeting) = c.read().await?;
        // v10 greeting: version NUL, conn id, salt[0..8], 0, caps, charset, status, caps, len, 10 reserved, salt[8..].
        let nul = greeting.iter().skip(1).position(|&b| b == 0).context("greeting")? + 1;
        let mut salt = [0u8; 20];
        salt[..8].copy_from_slice(&greeting[nul + 5..nul + 13]);
        let part2 = nul + 13 + 1 + 2 + 1 + 2 + 2 + 1 + 10;
        salt[8..].copy_from_slice(&greeting[part2..part2 + 12]);
        let mut login = Vec::new();
        login.extend_from_slice(&0x000a_a205u32.to_le_bytes()); // PROTOCOL_41 | SECURE_CONNECTION | PLUGIN_AUTH ...
        login.extend_from_slice(&(1u32 << 30).to_le_bytes());
        login.push(8);
        login.extend_from_slice(&[0; 23]);
        login.extend_from_slice(user.as_bytes());
        login.push(0);
        let token = paxsql_mysql_wire::auth::token(password.as_bytes(), &salt);
        login.push(token.len() as u8);
        login.extend_from_slice(&token);
        login.extend_from_slice(b"mysql_native_password\0");
        c.send(1, &login).await?;
        let (_, answer) = c.read().await?;
        if answer.first() != Some(&0) {
            bail!("login failed: {:?}", String::from_utf8_lossy(&answer));
        }
        for sql in [
            "SET @master_binlog_checksum= @@global.binlog_checksum",
            "SET @mariadb_slave_capability=4",
            "SET @slave_connect_state=''",
            "SET @master_heartbeat_period= 1000000000",
        ] {
            let mut p = vec![0x03];
            p.extend_from_slice(sql.as_bytes());
            c.send(0, &p).await?;
            let (_, answer) = c.read().await?;
            if answer.first() != Some(&0) {
                bail!("{sql}: {:?}", String::from_utf8_lossy(&answer));
            }
        }
        Ok(c)
    }

    /// Dumps from the start until `events` transaction events arrived; returns (events, event bytes, seconds).
    async fn dump(&mut self, events: u64) -> anyhow::Result<(u64, u64, f64)> {
        let mut p = vec![0x12];
        p.extend_from_slice(&4u32.to_le_bytes());
        p.extend_from_slice(&2u16.to_le_bytes());
        p.extend_from_slice(&999u32.to_le_bytes());
        self.send(0, &p).await?;
        let start = Instant::now();
        let (mut n, mut bytes) = (0u64, 0u64);
        while n < events {
            let (_, payload) = self.read().await?;
            if payload.first() != Some(&0) || payload.len() < 20 {
                bail!("unexpected packet {:?}", &payload[..payload.len().min(40)]);
            }
            match payload[5] {
                event_type::ROTATE
                | event_type::FORMAT_DESCRIPTION
                | event_type::GTID_LIST
                | event_type::BINLOG_CHECKPOINT
                | event_type::HEARTBEAT => {}
                _ => {
                    n += 1;
                    bytes += (payload.len() - 1) as u64;
                }
            }
        }
        Ok((n, bytes, start.elapsed().as_secs_f64()))
    }
}

fn wait_pos(replica: &MariaDb, want: &str, timeout: Duration) -> anyhow::Result<f64> {
    let start = Instant::now();
    loop {
        if replica.gtid_slave_pos()? == want {
            return Ok(start.elapsed().as_secs_f64());
        }
        if start.elapsed() > timeout {
            bail!("replica did not reach {want} in {timeout:?}: {:?}", replica.slave_status()?);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sessions = args.first().copied().unwrap_or(8);
    let per_session = args.get(1).copied().unwrap_or(1500);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;

    let source = MariaDb::start(MariaDbOptions::standalone(1))?;
    source.create_replication_user("repl", "replpw")?;
    let load_start = Instant::now();
    rt.block_on(async {
        let mut c = source.conn().await?;
        c.query_drop("CREATE DATABASE b").await?;
        for k in 0..sessions {
            c.query_drop(format!("CREATE TABLE b.t{k} (id INT PRIMARY KEY, v VARCHAR(200)) ENGINE=InnoDB")).await?;
        }
        let mut tasks = Vec::new();
        for k in 0..sessions {
            let opts = source.opts();
            tasks.push(tokio::spawn(async move {
                let mut c = Conn::new(opts).await?;
                for j in 0..per_session {
                    c.query_drop(format!("INSERT INTO b.t{k} VALUES ({j}, REPEAT('v', 150))")).await?;
                }
                Ok::<_, anyhow::Error>(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        Ok::<_, anyhow::Error>(())
    })?;
    let load_s = load_start.elapsed().as_secs_f64();

    let mem = Arc::new(MemoryEventSource::new());
    let mut files: Vec<_> = std::fs::read_dir(source.data_dir())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("mariadb-bin.") && name[12..].bytes().all(|b| b.is_ascii_digit())
        })
        .collect();
    files.sort();
    for f in files {
        let bytes = std::fs::read(&f)?;
        for trx in transactions_from_binlog(&bytes[4..])? {
            mem.append(trx)?;
        }
    }
    let trx_count = mem.len() as u64;
    let events: u64 = {
        let batch = paxsql_repl_server::EventSource::read(
            &*mem,
            &paxsql_repl_server::Cursor { index: 0, skip: Default::default() },
            usize::MAX,
        )?;
        batch.transactions.iter().map(|t| t.events.len() as u64).sum()
    };
    let want = source.gtid_binlog_pos()?;
    println!(
        "workload: {sessions} sessions x {per_session} autocommit INSERTs ({trx_count} trx, {events} events) in \
         {load_s:.1} s"
    );

    let config = ReplicationServerConfig {
        replica_user: "repl".into(),
        replica_password: "replpw".into(),
        server_id: 100,
        ..ReplicationServerConfig::default()
    };
    let server = rt.block_on(ReplicationServer::bind("127.0.0.1:0".parse()?, config, Arc::clone(&mem)))?;
    let port = server.local_addr().port();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let task = rt.spawn(server.run(stopped));

    for (name, p) in [("mariadbd dump thread", source.port()), ("paxsql repl-server", port)] {
        let mut best = (0u64, 0u64, f64::MAX);
        for _ in 0..3 {
            let r = rt.block_on(async {
                let mut c = DumpClient::connect(p, "repl", "replpw").await?;
                c.dump(events).await
            })?;
            if r.2 < best.2 {
                best = r;
            }
        }
        let (n, bytes, s) = best;
        println!(
            "stream  {name:22}: {n} events, {:.1} MB in {s:.3} s = {:.0} events/s, {:.1} MB/s (best of 3)",
            bytes as f64 / 1e6,
            n as f64 / s,
            bytes as f64 / 1e6 / s
        );
    }

    for (name, p, id) in [("from mariadbd", source.port(), 2u32), ("from paxsql repl-server", port, 3u32)] {
        let replica = MariaDb::start(MariaDbOptions::replica(id))?;
        replica.change_master(&ReplicationSource::loopback(p, "repl", "replpw"))?;
        replica.start_slave()?;
        let s = wait_pos(&replica, &want, Duration::from_secs(600))?;
        println!(
            "apply   {name:22}: {trx_count} trx in {s:.2} s = {:.0} trx/s (4 optimistic threads)",
            trx_count as f64 / s
        );
    }
    stop.send_replace(true);
    rt.block_on(task)??;
    Ok(())
}
