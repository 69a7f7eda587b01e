//! `paxsql watch` on a real three-node cluster: bad configurations are refused, a file target names the master,
//! and after kill -9 of the master's node process the file names the new master within one second of the new
//! master appearing in `paxsql cluster status`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{paxsql, Cluster};

/// The watch process; `Drop` kills it if the test did not stop it.
struct WatchProcess(Child);

impl Drop for WatchProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// (master_id, master_version, mariadb) from the file target, if it is complete.
fn read_target(path: &Path) -> Option<(u64, u64, String)> {
    let text = std::fs::read_to_string(path).ok()?;
    let field = |k: &str| text.lines().find_map(|l| l.strip_prefix(&format!("{k}=")).map(str::to_string));
    Some((field("master_id")?.parse().ok()?, field("master_version")?.parse().ok()?, field("mariadb")?))
}

fn watch_config(c: &Cluster, target: &Path, extra: &str) -> PathBuf {
    let peers: Vec<String> = (1..=3)
        .map(|id| {
            let (h, p) = c.endpoint(id, "peer");
            format!("\"{h}:{p}\"")
        })
        .collect();
    let text = format!(
        "{extra}peers = [{}]\ncluster_id = \"{}\"\nsecret_file = \"{}\"\n\n\
         [tls]\ncert = \"{tls}/operator.pem\"\nkey = \"{tls}/operator.key\"\nca = \"{tls}/ca.pem\"\n\n\
         [[file]]\npath = \"{}\"\n\
         template = \"master_id={{master_id}}\\nmaster_version={{master_version}}\\nmariadb={{mariadb_host}}:{{mariadb_port}}\\n\"\n",
        peers.join(", "),
        c.info["cluster_id"].as_str().expect("cluster_id in status"),
        c.dir.path().join("secrets/cluster.secret").display(),
        target.display(),
        tls = c.dir.path().join("tls").display(),
    );
    let path = c.dir.path().join(format!("watch-{}.toml", extra.len()));
    std::fs::write(&path, text).expect("write watch config");
    path
}

fn run_watch(args: &[&str], config: &Path) -> (bool, String) {
    let out = Command::new(paxsql()).arg("watch").args(args).arg("--config").arg(config).output().expect("run watch");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr))
}

#[test]
fn watch_follows_the_master_into_a_file() {
    let c = Cluster::up(3, 32100);
    let (m1, term1) = c.master_term().expect("a master after cluster up");
    let target = c.dir.path().join("master.txt");

    eprintln!("phase: --check-config accepts a good config, refuses an unknown key and an unreadable secret");
    let good = watch_config(&c, &target, "");
    let (ok, text) = run_watch(&["--check-config"], &good);
    assert!(ok && text.contains("ok"), "{text}");
    let (ok, text) = run_watch(&["--check-config"], &watch_config(&c, &target, "poll_every_ms = 5\n"));
    assert!(!ok && text.contains("poll_every_ms"), "unknown key accepted: {text}");
    let no_secret = c.dir.path().join("watch-no-secret.toml");
    let good_text = std::fs::read_to_string(&good).unwrap();
    std::fs::write(&no_secret, good_text.replace("secrets/cluster.secret", "secrets/missing.secret")).unwrap();
    let (ok, text) = run_watch(&[], &no_secret);
    assert!(!ok && text.contains("cannot read the cluster secret"), "missing secret accepted: {text}");

    eprintln!("phase: the watch names master {m1} (term {term1})");
    let log = std::fs::File::create(c.dir.path().join("watch.log")).expect("watch log");
    let mut watch = WatchProcess(
        Command::new(paxsql())
            .args(["watch", "--config"])
            .arg(&good)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn watch"),
    );
    let watch_log = || std::fs::read_to_string(c.dir.path().join("watch.log")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(15);
    while read_target(&target).map(|(id, v, _)| (id, v)) != Some((m1, term1)) {
        assert!(Instant::now() < deadline, "file never named master {m1}: {:?}\n{}", read_target(&target), watch_log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let (host, port) = c.endpoint(m1, "mariadb");
    assert_eq!(read_target(&target).unwrap().2, format!("{host}:{port}"));

    eprintln!("phase: kill -9 node {m1}'s process; time the file against `paxsql cluster status`");
    // A thread watches the file closely, so that the file's time does not depend on the status calls.
    let file_seen: Arc<Mutex<Option<(Instant, u64, u64)>>> = Arc::new(Mutex::new(None));
    let stop_watching = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (seen, stop, target) = (file_seen.clone(), stop_watching.clone(), target.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some((id, v, _)) = read_target(&target) {
                    if v > term1 {
                        *seen.lock().unwrap() = Some((Instant::now(), id, v));
                        return;
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    c.kill9_node(m1);
    let deadline = Instant::now() + Duration::from_secs(60);
    // The new master appeared in status between the start of the last call that did not show it and the end of
    // the first call that did.
    let mut last_miss_start = Instant::now();
    let (m2, term2, seen_by) = loop {
        let call = Instant::now();
        if let Some((m, v)) = c.master_term() {
            if v > term1 {
                break (m, v, Instant::now());
            }
        }
        last_miss_start = call;
        assert!(Instant::now() < deadline, "no new master within 60 s\n{}", c.logs());
    };
    let wait_file = Instant::now() + Duration::from_secs(5);
    while file_seen.lock().unwrap().is_none() && Instant::now() < wait_file {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop_watching.store(true, std::sync::atomic::Ordering::Relaxed);
    watcher.join().unwrap();
    let (file_at, file_id, file_v) =
        file_seen.lock().unwrap().unwrap_or_else(|| panic!("file never named the new master\n{}", watch_log()));
    assert_eq!((file_id, file_v), (m2, term2), "file and status disagree on the new master");
    let most = file_at.saturating_duration_since(last_miss_start);
    let least = file_at.saturating_duration_since(seen_by);
    eprintln!(
        "new master {m2} (term {term2}): file updated at most {} ms (at least {} ms) after it appeared in cluster status{}",
        most.as_millis(),
        least.as_millis(),
        if file_at < seen_by { " (the file was first)" } else { "" }
    );
    assert!(most < Duration::from_secs(1), "file lagged {} ms behind status\n{}", most.as_millis(), watch_log());
    let (host, port) = c.endpoint(m2, "mariadb");
    assert_eq!(read_target(&target).unwrap().2, format!("{host}:{port}"));

    eprintln!("phase: SIGTERM stops the watch");
    let _ = Command::new("kill").arg("-TERM").arg(watch.0.id().to_string()).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = watch.0.try_wait().expect("wait watch") {
            break s;
        }
        assert!(Instant::now() < deadline, "watch did not stop on SIGTERM\n{}", watch_log());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "watch exited with {status}\n{}", watch_log());
    let log = watch_log();
    assert!(log.contains("master changed") && log.contains("target updated"), "changes are logged:\n{log}");
}
