//! One schedule from start to verdict, and the suite around it: the namespace, the cluster, the namespaced runtime.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use tokio::sync::watch;

use crate::cluster::TestCluster;
use crate::linearizability::{check_register, RegisterEntry, RegisterOp, RegisterOutcome, Verdict};
use crate::monitor::{self, MonitorReport};
use crate::nemesis::{self, Schedule};
use crate::workload::{self, connect, node_endpoint, write_endpoint, ClientContext, Endpoint, OpCounts};
use crate::FaultError;

/// How many clients of each kind run.
#[derive(Clone, Copy, Debug)]
pub struct WorkloadMix {
    pub bank: u64,
    pub register: u64,
    pub append: u64,
}

impl Default for WorkloadMix {
    fn default() -> Self {
        WorkloadMix { bank: 2, register: 3, append: 2 }
    }
}

/// What one schedule did and found.
#[derive(Debug, Default)]
pub struct ScheduleReport {
    pub name: String,
    pub faults: Vec<String>,
    pub counts: OpCounts,
    pub monitor: MonitorReport,
    /// Broken invariants: any entry makes the schedule fail.
    pub problems: Vec<String>,
    /// Measurements and expected anomalies (plain reads on a stale master, restarts the suite had to do).
    pub info: Vec<String>,
    pub elapsed: Duration,
}

impl ScheduleReport {
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for ScheduleReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<24} [{}] ops ok={} fail={} unknown={} | masters {:?}, two-writable {} rounds (max {} ms) | {:.0}s | {}",
            self.name,
            self.faults.join("; "),
            self.counts.ok,
            self.counts.fail,
            self.counts.unknown,
            self.monitor.masters,
            self.monitor.two_writable_rounds,
            self.monitor.longest_two_writable_ms,
            self.elapsed.as_secs_f64(),
            if self.passed() { "PASS".to_string() } else { format!("FAIL ({} problems)", self.problems.len()) }
        )
    }
}

const OP_TIMEOUT: Duration = Duration::from_secs(4);
const CONVERGE: Duration = Duration::from_secs(120);

/// Runs SQL statements on the current write endpoint, retrying until `timeout`.
async fn on_master(cluster: &TestCluster, statements: &[String], timeout: Duration) -> Result<(), FaultError> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no master");
    while Instant::now() < deadline {
        if let Some(ep) = write_endpoint(&cluster.nodes, &cluster.view()) {
            match connect(&cluster.app, &ep, Duration::from_secs(2)).await {
                Ok(mut c) => {
                    let mut ok = true;
                    for s in statements {
                        match tokio::time::timeout(Duration::from_secs(10), c.query_drop(s.as_str())).await {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => {
                                last = e.to_string();
                                ok = false;
                                break;
                            }
                            Err(_) => {
                                last = format!("`{s}` timed out");
                                ok = false;
                                break;
                            }
                        }
                    }
                    if ok {
                        return Ok(());
                    }
                }
                Err(e) => last = e,
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Err(FaultError::NotConverged { secs: timeout.as_secs(), reason: last })
}

/// A query on one node's own mariadbd.
async fn on_node<T: mysql_async::prelude::FromRow + Send + 'static>(
    cluster: &TestCluster,
    id: u64,
    sql: &str,
) -> Result<Vec<T>, FaultError> {
    let sql_err = |reason: String| FaultError::Sql { node: id, reason };
    let mut c =
        connect(&cluster.app, &node_endpoint(cluster.node(id)), Duration::from_secs(2)).await.map_err(sql_err)?;
    match tokio::time::timeout(Duration::from_secs(10), c.query::<T, _>(sql)).await {
        Ok(Ok(rows)) => Ok(rows),
        Ok(Err(e)) => Err(sql_err(e.to_string())),
        Err(_) => Err(sql_err(format!("`{sql}` timed out"))),
    }
}

/// Heals, restarts, and waits until a barrier write made through the master is on every node and the tables'
/// checksums agree.
async fn converge(cluster: &TestCluster, tables: &[String], report: &mut ScheduleReport) -> Result<(), FaultError> {
    let notes = nemesis::heal(cluster, &[]).await?;
    report.info.extend(notes);
    let start = Instant::now();
    cluster.wait_master(Duration::from_secs(60)).await?;
    let token = start.elapsed().as_nanos() as i64 ^ (std::process::id() as i64) << 32;
    let stmts = [
        "CREATE TABLE IF NOT EXISTS barrier (id INT PRIMARY KEY, v BIGINT NOT NULL) ENGINE=InnoDB".to_string(),
        format!("REPLACE INTO barrier VALUES (1, {token})"),
    ];
    on_master(cluster, &stmts, Duration::from_secs(60)).await?;
    let deadline = start + CONVERGE;
    let mut last = String::new();
    loop {
        let mut done = true;
        for id in cluster.ids() {
            match on_node::<i64>(cluster, id, "SELECT v FROM barrier WHERE id = 1").await {
                Ok(v) if v.first() == Some(&token) => {}
                other => {
                    last = format!("n{id}: barrier {other:?}");
                    done = false;
                }
            }
        }
        if done {
            let mut sums: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
            for id in cluster.ids() {
                for t in tables {
                    let row = on_node::<(String, Option<i64>)>(cluster, id, &format!("CHECKSUM TABLE {t}")).await;
                    let sum = row.map(|r| format!("{:?}", r.first().map(|x| x.1))).unwrap_or_else(|e| e.to_string());
                    sums.entry(t.clone()).or_default().push((id, sum));
                }
            }
            let differing: Vec<String> = sums
                .iter()
                .filter(|(_, v)| v.iter().any(|(_, s)| *s != v[0].1))
                .map(|(t, v)| format!("{t}: {v:?}"))
                .collect();
            if differing.is_empty() {
                report.info.push(format!("converged in {:.1}s", start.elapsed().as_secs_f64()));
                return Ok(());
            }
            last = format!("checksums differ: {}", differing.join("; "));
        }
        if Instant::now() >= deadline {
            return Err(FaultError::NotConverged { secs: CONVERGE.as_secs(), reason: last });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Runs one schedule on a running cluster; its tables carry `suffix`.
pub async fn run_schedule(
    cluster: Arc<TestCluster>,
    schedule: &Schedule,
    suffix: &str,
    mix: WorkloadMix,
    seed: u64,
) -> ScheduleReport {
    let started = Instant::now();
    let mut report = ScheduleReport { name: schedule.name.clone(), ..Default::default() };
    if let Err(e) = run_schedule_inner(&cluster, schedule, suffix, mix, seed, &mut report).await {
        report.problems.push(format!("suite could not complete the schedule: {e}"));
    }
    report.elapsed = started.elapsed();
    report
}

async fn run_schedule_inner(
    cluster: &Arc<TestCluster>,
    schedule: &Schedule,
    suffix: &str,
    mix: WorkloadMix,
    seed: u64,
    report: &mut ScheduleReport,
) -> Result<(), FaultError> {
    cluster.wait_master(Duration::from_secs(60)).await?;
    let mut setup = workload::bank_setup(suffix);
    setup.extend(workload::register_setup(suffix));
    setup.extend(workload::append_setup(suffix));
    on_master(cluster, &setup, Duration::from_secs(60)).await?;
    let tables = vec![format!("bank_{suffix}"), format!("reg_{suffix}"), format!("app_{suffix}")];

    let (ep_tx, ep_rx) = watch::channel::<Option<Endpoint>>(write_endpoint(&cluster.nodes, &cluster.view()));
    let stop = Arc::new(AtomicBool::new(false));
    let stop_monitor = Arc::new(AtomicBool::new(false));
    let ctx = ClientContext {
        app: cluster.app.clone(),
        endpoint: ep_rx,
        epoch: Instant::now(),
        stop: stop.clone(),
        op_timeout: OP_TIMEOUT,
        suffix: suffix.to_string(),
    };
    let monitor = tokio::spawn(monitor::run(cluster.clone(), ep_tx, stop_monitor.clone()));
    let mut banks = Vec::new();
    // Every other transfer client goes through the client library (all proxies' RW ports), the others through
    // the master node's proxy directly.
    let proxies: Vec<String> = cluster.nodes.iter().map(|n| format!("{}:{}", n.host, n.proxy_rw_port)).collect();
    for i in 0..mix.bank {
        if i % 2 == 1 {
            banks.push(tokio::spawn(workload::bank_library_client(ctx.clone(), seed ^ (100 + i), proxies.clone())));
        } else {
            banks.push(tokio::spawn(workload::bank_client(ctx.clone(), seed ^ (100 + i))));
        }
    }
    banks.push(tokio::spawn(workload::bank_reader(ctx.clone(), cluster.nodes.clone())));
    let registers: Vec<_> =
        (0..mix.register).map(|i| tokio::spawn(workload::register_client(ctx.clone(), i, seed ^ (200 + i)))).collect();
    let appends: Vec<_> = (0..mix.append).map(|i| tokio::spawn(workload::append_client(ctx.clone(), i))).collect();
    let probe = tokio::spawn(workload::rw_probe(cluster.app.clone(), cluster.nodes.clone(), stop.clone()));

    // The nemesis.
    tokio::time::sleep(schedule.warmup).await;
    let mut nemesis_error = None;
    for s in &schedule.steps {
        match nemesis::apply(cluster, s.fault) {
            Ok(applied) => {
                report.faults.push(applied.description.clone());
                tokio::time::sleep(s.hold).await;
                match nemesis::heal(cluster, &[applied]).await {
                    Ok(notes) => report.info.extend(notes),
                    Err(e) => nemesis_error = Some(e),
                }
            }
            Err(e) => nemesis_error = Some(e),
        }
        if nemesis_error.is_some() {
            break;
        }
        tokio::time::sleep(s.settle).await;
    }
    stop.store(true, Ordering::Relaxed);

    let mut bank_violations = Vec::new();
    let mut bank_reads = 0;
    for h in banks {
        if let Ok(r) = h.await {
            report.counts.merge(r.counts);
            bank_reads += r.reads;
            bank_violations.extend(r.violations);
        }
    }
    let mut reg_history = Vec::new();
    for h in registers {
        if let Ok(r) = h.await {
            report.counts.merge(r.counts);
            reg_history.extend(r.history);
        }
    }
    let mut app_history = Vec::new();
    for h in appends {
        if let Ok(r) = h.await {
            report.counts.merge(r.counts);
            app_history.extend(r.history);
        }
    }
    if let Ok(p) = probe.await {
        report.info.push(format!(
            "RW-port probe: {} answers from a master, {} held or refused, {} from a read-only server",
            p.answers,
            p.refused,
            p.violations.len()
        ));
        report.problems.extend(p.violations.into_iter().take(10));
    }
    if let Some(e) = nemesis_error {
        return Err(e);
    }
    let converged = converge(cluster, &tables, report).await;
    stop_monitor.store(true, Ordering::Relaxed);
    if let Ok(m) = monitor.await {
        report.monitor = m;
    }
    report.problems.extend(report.monitor.violations.iter().cloned());
    report.problems.extend(bank_violations.iter().take(10).cloned());
    converged?;

    // Final state on every node.
    for id in cluster.ids() {
        let row = on_node::<workload::BankRow>(cluster, id, &workload::bank_check_sql(suffix)).await?;
        if let Some(v) = row.first().and_then(|r| workload::bank_violation(id, *r)) {
            report.problems.push(format!("final bank: {v}"));
        }
    }
    report.info.push(format!("bank reads {bank_reads}"));
    let mut first_log: Option<Vec<(u64, i64)>> = None;
    for id in cluster.ids() {
        let log = on_node::<(u64, i64)>(cluster, id, &workload::append_read_sql(suffix)).await?;
        report
            .problems
            .extend(workload::check_appends(&app_history, &log).into_iter().take(10).map(|p| format!("n{id}: {p}")));
        match &first_log {
            None => first_log = Some(log),
            Some(f) if *f != log => report.problems.push(format!("n{id}: append log differs from n1's")),
            _ => {}
        }
    }
    if let Some(log) = &first_log {
        let present: std::collections::BTreeSet<&(u64, i64)> = log.iter().collect();
        let unknown_in = app_history
            .iter()
            .filter(|r| r.outcome == workload::Outcome::Unknown && present.contains(&(r.client, r.value)))
            .count();
        let unknown = app_history.iter().filter(|r| r.outcome == workload::Outcome::Unknown).count();
        report.info.push(format!("appends {} in log, unknown {unknown} of which {unknown_in} took effect", log.len()));
    }

    // Registers: the final value of each key, read after everything, closes each history.
    let now = Instant::now().duration_since(ctx.epoch).as_nanos() as u64;
    let master = cluster.view().master().unwrap_or(1);
    let finals = on_node::<(i64, i64)>(cluster, master, &format!("SELECT k, v FROM reg_{suffix}")).await?;
    for (key, v) in finals {
        let entry = RegisterEntry {
            op: RegisterOp::Read,
            outcome: RegisterOutcome::ReadOk(v),
            invoke_ns: now,
            complete_ns: now,
        };
        reg_history.push(workload::RegisterRecord { client: u64::MAX, key, entry, plain_read: false, node: master });
    }
    for key in 0..workload::REGISTER_KEYS {
        let fenced: Vec<RegisterEntry> =
            reg_history.iter().filter(|r| r.key == key && !r.plain_read).map(|r| r.entry).collect();
        match check_register(&fenced, 0, 2_000_000) {
            Verdict::Linearizable => {}
            Verdict::NotLinearizable { stuck_at, linearized } => report.problems.push(format!(
                "register {key}: not linearizable ({} ops; stuck at {:?} after {linearized})",
                fenced.len(),
                fenced[stuck_at]
            )),
            Verdict::Undecided { configurations } => {
                report.info.push(format!("register {key}: checker gave up after {configurations} configurations"))
            }
        }
        let all: Vec<&workload::RegisterRecord> = reg_history.iter().filter(|r| r.key == key).collect();
        let with_plain: Vec<RegisterEntry> = all.iter().map(|r| r.entry).collect();
        if all.iter().any(|r| r.plain_read) {
            if let Verdict::NotLinearizable { stuck_at, .. } = check_register(&with_plain, 0, 2_000_000) {
                let r = all[stuck_at];
                report.info.push(format!(
                    "register {key}: plain (unfenced) reads not linearizable: {:?} on n{} (stale read from the \
                     write endpoint)",
                    r.entry, r.node
                ));
            }
        }
    }
    Ok(())
}

/// Where the suite runs: its namespace, cluster directory, ports.
#[derive(Clone, Debug)]
pub struct SuiteConfig {
    pub netns: String,
    pub work_dir: PathBuf,
    pub base_port: u16,
    pub mix: WorkloadMix,
}

/// Runs `schedules` (name → schedule, table suffix) on one cluster, in a dedicated thread that joined the
/// namespace (the runtime's threads inherit it). `on_report` sees each report as it comes. A schedule that
/// leaves the cluster unable to converge gets the cluster rebuilt for the next one. Returns the reports.
pub fn run_suite(
    cfg: SuiteConfig,
    schedules: Vec<(Schedule, String, u64)>,
    mut on_report: impl FnMut(&ScheduleReport) + Send + 'static,
) -> Result<Vec<ScheduleReport>, FaultError> {
    let handle = std::thread::Builder::new()
        .name("fault-suite".into())
        .spawn(move || -> Result<Vec<ScheduleReport>, FaultError> {
            std::fs::create_dir_all(&cfg.work_dir)
                .map_err(|source| FaultError::Spawn { what: cfg.work_dir.display().to_string(), source })?;
            let mut cluster = Arc::new(TestCluster::up(&cfg.netns, &cfg.work_dir, cfg.base_port)?);
            cluster.netns.enter_current_thread()?;
            let build_runtime = || {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(4)
                    .enable_all()
                    .build()
                    .map_err(|source| FaultError::Spawn { what: "tokio runtime".into(), source })
            };
            let mut rt = build_runtime()?;
            let mut reports = Vec::new();
            for (schedule, suffix, seed) in schedules {
                let c = cluster.clone();
                let mix = cfg.mix;
                let r = rt.block_on(async move {
                    // Spawned, not run on this thread: every socket is opened by a runtime thread.
                    tokio::spawn(async move { run_schedule(c, &schedule, &suffix, mix, seed).await }).await
                });
                let report = match r {
                    Ok(r) => r,
                    Err(e) => {
                        ScheduleReport { problems: vec![format!("schedule task panicked: {e}")], ..Default::default() }
                    }
                };
                on_report(&report);
                let broken = report.problems.iter().any(|p| p.contains("suite could not complete"));
                if !report.passed() {
                    cluster.keep_dir.store(true, Ordering::Relaxed);
                    eprintln!("cluster directory kept for inspection: {}", cluster.dir.display());
                }
                reports.push(report);
                if broken {
                    // A fresh cluster (and namespace) for the rest; the failed one's directory stays.
                    let old_dir = cluster.dir.clone();
                    cluster.shutdown();
                    drop(cluster);
                    let kept = cfg.work_dir.join(format!("{}-failed-{}", cfg.netns, reports.len()));
                    let _ = std::fs::rename(&old_dir, &kept);
                    eprintln!("rebuilding the cluster; the failed one is in {}", kept.display());
                    cluster = Arc::new(TestCluster::up(&cfg.netns, &cfg.work_dir, cfg.base_port)?);
                    // The runtime's threads sit in the deleted namespace: new ones, from the new one.
                    cluster.netns.enter_current_thread()?;
                    rt = build_runtime()?;
                }
            }
            drop(rt);
            Ok(reports)
        })
        .map_err(|source| FaultError::Spawn { what: "suite thread".into(), source })?;
    match handle.join() {
        Ok(r) => r,
        Err(_) => Err(FaultError::Command { command: "fault suite".into(), output: "panicked".into() }),
    }
}
