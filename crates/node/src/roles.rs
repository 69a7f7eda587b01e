//! Master and replica roles of the local mariadbd (docs/ARCHITECTURE.md §3–§5), reconciled with what the global log says:
//! promote when this node holds the lease, demote (SIGKILL and a recovery restart that drops any un-ACKed tail)
//! when it no longer does, and keep a replica replicating from this node's own binlog server.
//!
//! On the master, the capture ([`crate::capture`]) reads the local binlog as a semi-sync replica, proposes each
//! transaction to the global log and ACKs it only once it is applied for this master's term, i.e. chosen on a
//! majority.

use std::sync::Arc;
use std::time::{Duration, Instant};

use paxsql_binlog::GtidSet;
use paxsql_repl_server::EventSource;
use tokio::sync::{mpsc, watch};

use crate::context::{LocalRole, RoleContext};
use crate::driver::{offer, Input, NodeStatus};
use crate::mariadb::{LocalMariaDb, MariaDbError};
use crate::rebuild::{self, RebuildProgress};
use crate::switchover::{self, SwitchoverError, SwitchoverRequest};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Current {
    /// mariadbd is not running.
    Down,
    /// Running; role not configured yet (the alignment check comes first).
    Unknown,
    /// Its data must be replaced by a copy of a healthy member's.
    NeedsRebuild,
    Replica,
    Master(u64),
}

/// Published for the proxy and status: which term (if any) the local mariadbd serves as master.
pub type ServingTerm = watch::Receiver<Option<u64>>;

/// A promotion that keeps failing this long while the lease is held gives the lease up, so that a member whose
/// database can serve takes over instead of the cluster staying without a master.
const PROMOTION_PATIENCE: Duration = Duration::from_secs(3);

/// Runs the role controller until `shutdown` flips. Switchovers an operator asks for arrive on `switchovers`.
pub async fn run(
    ctx: Arc<RoleContext>,
    mut status: watch::Receiver<NodeStatus>,
    serving: watch::Sender<Option<u64>>,
    mut switchovers: mpsc::Receiver<SwitchoverRequest>,
) {
    let mut current = Current::Down;
    let mut capture: Option<(tokio::task::JoinHandle<()>, watch::Receiver<bool>)> = None;
    let mut eligible = None;
    let mut promotion_failing_since: Option<Instant> = None;
    // When the master's guarantees were last read back; `None`: at the next round (just promoted).
    let mut last_guarantee_check: Option<Instant> = None;
    // `Rpl_semi_sync_master_no_tx` as first read in this term: any later change means a commit got out unACKed.
    let mut no_tx_at_promotion: Option<u64> = None;
    // When a replica's position and applier were last read back, and when its applier was found stopped lately.
    let mut last_replica_check: Option<Instant> = None;
    let mut applier_stops: Vec<Instant> = Vec::new();
    // After its applier stopped and replication was restarted, a replica serves (RO port, candidacy) again only
    // once its checks have passed until this moment: a restart that fails again must not look healthy meanwhile.
    let mut probation_until: Option<Instant> = None;
    // The last term this process served as master. A term is served at most once: proposals of it may still be
    // chosen after a demotion, at seq_nos that a second promotion in the same term (the lease lapsed and came back)
    // would read other transactions at. Ending the term instead puts a change of master in the log after all of them.
    let mut served_term: Option<u64> = None;
    loop {
        let can_serve = matches!(current, Current::Replica | Current::Master(_)) && probation_until.is_none();
        if eligible != Some(can_serve) {
            eligible = Some(can_serve);
            offer(&ctx.inbox, Input::SetEligible(can_serve));
        }
        let st = status.borrow_and_update().clone();
        let capture_failed = capture.as_ref().is_some_and(|(_, failed)| *failed.borrow());
        let want_master = st.holds_lease && st.master_id == ctx.node_id && !capture_failed;
        match (current, want_master) {
            (Current::Down, _) => current = start_database(&ctx).await,
            (Current::NeedsRebuild, _) => current = rebuild_database(&ctx).await,
            (Current::Master(v), true) if v == st.master_version => {
                if last_guarantee_check.is_none_or(|t| t.elapsed() >= GUARANTEE_CHECK_EVERY) {
                    last_guarantee_check = Some(Instant::now());
                    let checked = check_guarantees(&*ctx.mariadb.lock().await, no_tx_at_promotion).await;
                    match checked {
                        Ok(no_tx) => no_tx_at_promotion = Some(no_tx),
                        Err(why) => {
                            // Stop serving at once (SIGKILL: no waiting commit may return now), then let the lease go.
                            tracing::error!(%why, "the master's guarantees do not hold: handing the master role over");
                            demote(&ctx, &mut capture, &serving).await;
                            offer(&ctx.inbox, Input::HandOver);
                            current = Current::Down;
                        }
                    }
                }
            }
            (Current::Master(_), _) => {
                // Killed first: a successor may serve as soon as the hand-over is chosen.
                demote(&ctx, &mut capture, &serving).await;
                if capture_failed {
                    tracing::error!("capture stopped on the master: handing the master role over");
                    offer(&ctx.inbox, Input::HandOver);
                } else if st.master_id == ctx.node_id {
                    tracing::warn!("the master lease lapsed: handing the term over rather than serving it again");
                    offer(&ctx.inbox, Input::HandOver);
                }
                current = Current::Down;
            }
            (Current::Replica, true) if served_term == Some(st.master_version) => {
                // Still ours in the log after this process served in it: end it (again; the earlier hand-over
                // may have been lost) instead of serving it twice.
                offer(&ctx.inbox, Input::HandOver);
            }
            (Current::Replica, true) => match promote(&ctx, &st).await {
                Ok(handle) => {
                    promotion_failing_since = None;
                    served_term = Some(st.master_version);
                    capture = Some(handle);
                    no_tx_at_promotion = None;
                    last_guarantee_check = None;
                    current = Current::Master(st.master_version);
                    ctx.local.send_replace(LocalRole::Master(st.master_version));
                    serving.send_replace(Some(st.master_version));
                    tracing::info!(master_version = st.master_version, "serving as master");
                }
                Err(e) => {
                    let since = *promotion_failing_since.get_or_insert_with(Instant::now);
                    tracing::warn!(error = %e, "promotion not possible yet");
                    if since.elapsed() >= PROMOTION_PATIENCE {
                        tracing::error!("cannot promote the local database: handing the master role over");
                        offer(&ctx.inbox, Input::HandOver);
                        promotion_failing_since = None;
                    }
                }
            },
            // Alignment comes before any role, also before a promotion right after a restart.
            (Current::Unknown, _) => match become_replica(&ctx).await {
                Ok(()) => {
                    current = Current::Replica;
                    if probation_until.is_none() {
                        ctx.local.send_replace(LocalRole::Replica);
                    }
                }
                Err(MariaDbError::NotAligned { local, reason, diverged: true }) => {
                    tracing::error!(local = %local, reason = %reason, "the local database diverged from the global log");
                    current = Current::NeedsRebuild;
                }
                Err(e) => {
                    let what = e.to_string();
                    if ctx.local.send_if_modified(|r| replace(r, LocalRole::NotAligned(what.clone()))) {
                        tracing::warn!(error = %what, "the local database cannot serve yet");
                    }
                    if !matches!(e, MariaDbError::NotAligned { .. }) && !ctx.mariadb.lock().await.is_running() {
                        current = Current::Down;
                    }
                }
            },
            (Current::Replica, false) => {
                if !ctx.mariadb.lock().await.is_running() {
                    tracing::error!("mariadbd is gone; restarting it in recovery mode");
                    ctx.local.send_replace(LocalRole::Down("mariadbd is gone; restarting it in recovery mode".into()));
                    current = Current::Down;
                } else if last_replica_check.is_none_or(|t| t.elapsed() >= GUARANTEE_CHECK_EVERY) {
                    last_replica_check = Some(Instant::now());
                    match check_replica(&ctx).await {
                        Ok(()) => {
                            if probation_until.is_some_and(|t| Instant::now() >= t) {
                                probation_until = None;
                                ctx.local.send_replace(LocalRole::Replica);
                                tracing::info!("the restarted applier keeps running: serving as a replica again");
                            }
                        }
                        Err(ReplicaFault::Diverged(why)) => {
                            tracing::error!(%why, "the replica holds what the global log does not: rebuilding it");
                            ctx.local.send_replace(LocalRole::NotAligned(why));
                            probation_until = None;
                            current = Current::NeedsRebuild;
                        }
                        Err(ReplicaFault::ApplierStopped(why)) => {
                            applier_stops.retain(|t| t.elapsed() < APPLIER_STOPS_WINDOW);
                            applier_stops.push(Instant::now());
                            ctx.local.send_replace(LocalRole::NotAligned(why.clone()));
                            if applier_stops.len() >= APPLIER_STOPS_BEFORE_REBUILD {
                                tracing::error!(%why, stops = applier_stops.len(), "the applier keeps stopping: rebuilding the replica");
                                applier_stops.clear();
                                probation_until = None;
                                current = Current::NeedsRebuild;
                            } else {
                                tracing::warn!(%why, "the applier stopped: realigning and restarting replication");
                                probation_until = Some(Instant::now() + APPLIER_PROBATION);
                                current = Current::Unknown;
                            }
                        }
                    }
                }
            }
        }
        if matches!(current, Current::Down | Current::NeedsRebuild | Current::Unknown) {
            promotion_failing_since = None;
        }
        // A capture that stops (the master's mariadbd died) wakes the loop at once: the hand-over waits on it.
        let mut capture_failed_rx = capture.as_ref().map(|(_, failed)| failed.clone());
        let capture_stopped = async {
            match capture_failed_rx.as_mut() {
                Some(failed) => {
                    let _ = failed.changed().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let asked = tokio::select! {
            r = status.changed() => if r.is_err() { return } else { None },
            _ = capture_stopped => None,
            request = switchovers.recv() => request,
            _ = tokio::time::sleep(Duration::from_millis(200)) => None,
        };
        if let Some(request) = asked {
            let st = status.borrow().clone();
            let result = match current {
                _ if Instant::now() > request.deadline => Err(SwitchoverError::Busy),
                Current::Master(v) if v == st.master_version && st.holds_lease && !capture_failed => {
                    match switchover::drain_and_hand_over(&ctx, v, request.to, request.drain_timeout).await {
                        Ok((done, lock)) => {
                            // The term is over: stop routing and kill the server at once (the lock goes with it;
                            // the statements it held back never ran) and let it restart as a replica of the
                            // successor. Not a moment later: once the successor serves, a read answered here would
                            // miss its writes. An OK still crossing a proxy is cut with its connection (the client
                            // sees an unknown outcome, as after any failover).
                            demote(&ctx, &mut capture, &serving).await;
                            drop(lock);
                            current = Current::Down;
                            tracing::info!(
                                successor = done.successor,
                                drained = %done.drained_gtid,
                                drain_ms = done.drain.as_millis() as u64,
                                "switchover: the master role is handed over"
                            );
                            Ok(done)
                        }
                        Err(e) => Err(e),
                    }
                }
                _ => Err(SwitchoverError::NotMaster { master: st.master_id, master_version: st.master_version }),
            };
            let _ = request.reply.send(result);
        }
    }
}

fn replace(slot: &mut LocalRole, next: LocalRole) -> bool {
    let changed = *slot != next;
    *slot = next;
    changed
}

/// Starts mariadbd (always in recovery mode, which truncates an un-ACKed binlog tail). MariaDB refuses to truncate
/// a tail holding a DDL (docs/ARCHITECTURE.md §5): that data must be rebuilt.
async fn start_database(ctx: &Arc<RoleContext>) -> Current {
    // Whatever the server held before, a restarted one serves nothing (RO port included) until the alignment
    // check has passed again.
    ctx.local.send_if_modified(|r| {
        let starting = !matches!(r, LocalRole::Down(_) | LocalRole::NotAligned(_) | LocalRole::Rebuilding(_));
        if starting {
            *r = LocalRole::Down("starting mariadbd in recovery mode".into());
        }
        starting
    });
    // A data directory without MariaDB's system schema holds no database at all: a node being added (or one whose
    // directory was wiped) is provisioned with a copy of a member's, never initialised empty (an empty server
    // would hold none of the accounts and data the log's first transactions were written over).
    if !ctx.mariadb_config.datadir.join("mysql").is_dir() {
        tracing::warn!(datadir = %ctx.mariadb_config.datadir.display(), "no database in the data directory: provisioning it from a member");
        return Current::NeedsRebuild;
    }
    let mut db = ctx.mariadb.lock().await;
    match db.start(Duration::from_secs(120)).await {
        Ok(()) => Current::Unknown,
        Err(MariaDbError::Exited { status, log }) if log.contains("Cannot truncate the binary log") => {
            tracing::error!(%status, "mariadbd cannot truncate its binlog tail (a DDL never reached the global log)");
            Current::NeedsRebuild
        }
        Err(e) => {
            tracing::error!(error = %e, "mariadbd did not start; retrying");
            ctx.local.send_replace(LocalRole::Down(e.to_string()));
            drop(db);
            tokio::time::sleep(Duration::from_secs(2)).await;
            Current::Down
        }
    }
}

async fn rebuild_database(ctx: &Arc<RoleContext>) -> Current {
    if !ctx.mariadb_config.auto_rebuild {
        let why = "its data is not a prefix of the global log and must be rebuilt (auto_rebuild = false)";
        if ctx.local.send_if_modified(|r| replace(r, LocalRole::Down(why.into()))) {
            tracing::error!("the local database {why}: waiting for an operator");
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        return Current::NeedsRebuild;
    }
    let local = ctx.local.clone();
    let report = move |p: RebuildProgress| {
        local.send_replace(LocalRole::Rebuilding(p));
    };
    let result = {
        let mut db = ctx.mariadb.lock().await;
        rebuild::rebuild(&ctx.mariadb_config, &ctx.donors, &mut db, &report).await
    };
    match result {
        Ok(()) => Current::Unknown,
        Err(e) => {
            tracing::error!(error = %e, "rebuild failed; retrying");
            ctx.local.send_replace(LocalRole::Down(format!("rebuild failed: {e}")));
            tokio::time::sleep(Duration::from_secs(5)).await;
            Current::NeedsRebuild
        }
    }
}

async fn promote(
    ctx: &Arc<RoleContext>,
    st: &NodeStatus,
) -> Result<(tokio::task::JoinHandle<()>, watch::Receiver<bool>), MariaDbError> {
    let db = ctx.mariadb.lock().await;
    // Catch up to the end of the global log before accepting writes (docs/ARCHITECTURE.md §5).
    if !st.last_gtid.is_empty() && !db.wait_applied(&st.last_gtid, Duration::from_millis(500)).await? {
        return Err(MariaDbError::NotReady {
            secs: 0,
            last: format!("local server has not applied {} yet", st.last_gtid),
        });
    }
    // A fresh server_id per term: MariaDB skips events carrying its own server_id, so reusing one would make this
    // node silently skip its own earlier transactions when they come back to it.
    let server_id = term_server_id(ctx.node_id, st.master_version);
    // The guarantee rests on these settings, whatever my.cnf or an operator left: re-assert them at each promotion
    // (and `check_guarantees` keeps watching them).
    db.exec(&[
        "STOP SLAVE",
        &format!("SET GLOBAL server_id = {server_id}"),
        "SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC",
        "SET GLOBAL rpl_semi_sync_master_timeout = 18446744073709551615",
        "SET GLOBAL rpl_semi_sync_master_wait_no_slave = ON",
        "SET GLOBAL rpl_semi_sync_master_enabled = ON",
    ])
    .await?;
    let start: GtidSet = st.last_gtid.parse().unwrap_or_default();
    let (failed_tx, failed_rx) = watch::channel(false);
    let handle = tokio::spawn(crate::capture::capture(ctx.clone(), st.master_version, start, failed_tx));
    // Only now may TCP logins reach this server: a replica refuses them, so that no account however privileged
    // (read_only does not bind READ ONLY ADMIN) writes into it outside the log. Lifted before read_only, so the
    // proxies' master check (which waits for `serving`) never sends a client to a server that refuses it.
    db.exec(&["SET GLOBAL require_secure_transport = OFF", "SET GLOBAL read_only = OFF"]).await?;
    Ok((handle, failed_rx))
}

/// How often the master's semi-sync settings and counters are read back.
const GUARANTEE_CHECK_EVERY: Duration = Duration::from_millis(500);

/// What the master's mariadbd must show while it serves: semi-sync on with AFTER_SYNC, no timeout fallback, waiting
/// also with no replica connected, writable, semi-sync status ON, and `Rpl_semi_sync_master_no_tx` — commits that
/// returned without an ACK (a hard KILL of a waiting session sent straight to mariadbd, a timeout) — unchanged
/// since the promotion. `Ok(no_tx)` when all hold; `Err(why)` names the first that does not.
async fn check_guarantees(db: &LocalMariaDb, no_tx_at_promotion: Option<u64>) -> Result<u64, String> {
    let row = db
        .query_string(
            "SELECT CONCAT_WS(',', @@GLOBAL.rpl_semi_sync_master_enabled, @@GLOBAL.rpl_semi_sync_master_wait_point, \
             @@GLOBAL.rpl_semi_sync_master_timeout, @@GLOBAL.rpl_semi_sync_master_wait_no_slave, @@GLOBAL.read_only, \
             (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
              WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_STATUS'), \
             (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
              WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_NO_TX'))",
        )
        .await
        .map_err(|e| format!("cannot read the semi-sync settings: {e}"))?;
    let f: Vec<&str> = row.split(',').collect();
    let [enabled, wait_point, timeout, no_slave, read_only, status, no_tx] = f.as_slice() else {
        return Err(format!("unexpected semi-sync settings row {row:?}"));
    };
    let no_tx: u64 = no_tx.parse().map_err(|_| format!("Rpl_semi_sync_master_no_tx = {no_tx:?}"))?;
    let checks = [
        (*enabled == "ON", "rpl_semi_sync_master_enabled is OFF"),
        (*wait_point == "AFTER_SYNC", "rpl_semi_sync_master_wait_point is not AFTER_SYNC"),
        (*timeout == "18446744073709551615", "rpl_semi_sync_master_timeout is not infinite"),
        (*no_slave == "ON", "rpl_semi_sync_master_wait_no_slave is OFF"),
        (*read_only == "OFF", "read_only is ON"),
        (*status == "ON", "semi-sync status is OFF (it switched to asynchronous replication)"),
        (
            no_tx_at_promotion.is_none_or(|at| no_tx == at),
            "a commit returned without a semi-sync ACK (Rpl_semi_sync_master_no_tx moved): a session waiting for \
             its ACK was killed outside the proxy",
        ),
    ];
    match checks.iter().find(|(ok, _)| !ok) {
        Some((_, why)) => Err(format!("{why} ({row})")),
        None => Ok(no_tx),
    }
}

/// A replica applier found stopped this many times within [`APPLIER_STOPS_WINDOW`] is not restarted again: the
/// replica is rebuilt from a healthy member (the error is in its data or in a statement it cannot apply).
const APPLIER_STOPS_BEFORE_REBUILD: usize = 3;
const APPLIER_STOPS_WINDOW: Duration = Duration::from_secs(300);
/// How long a restarted applier must keep running before its replica serves again.
const APPLIER_PROBATION: Duration = Duration::from_secs(3);

/// Why a running replica may not serve.
#[derive(Debug)]
enum ReplicaFault {
    /// It holds a transaction the global log does not have: written on it outside the log (a privileged account,
    /// directly or through the RO port). Only a rebuild removes it.
    Diverged(String),
    /// Its applier stopped: it falls behind for good and cannot take over as master.
    ApplierStopped(String),
}

/// A running replica's position must be in the global log (every transaction it holds came through this node's
/// replication server, which serves only the log) and its replication threads must run. A read that fails is no
/// verdict: the next round tries again, and a dead mariadbd is caught by the process check.
async fn check_replica(ctx: &Arc<RoleContext>) -> Result<(), ReplicaFault> {
    let state = match ctx.mariadb.lock().await.replica_state().await {
        Ok(state) => state,
        Err(e) => {
            tracing::debug!(error = %e, "cannot read the replica's state");
            return Ok(());
        }
    };
    if state.tcp_logins {
        // Someone on this machine (the socket is the only way in) lifted the fence; put it back. A session that
        // logged in over TCP meanwhile and writes is caught below as a divergence.
        tracing::warn!("require_secure_transport was OFF on a replica: TCP logins refused again");
        if let Err(e) = ctx.mariadb.lock().await.exec(&["SET GLOBAL require_secure_transport = ON"]).await {
            tracing::warn!(error = %e, "cannot refuse TCP logins on the replica");
        }
    }
    let Ok(position) = state.position.parse::<GtidSet>() else { return Ok(()) };
    if !ctx.global_binlog.holds(&position) {
        if let Err(paxsql_repl_server::Error::GtidPurged { gtid }) = ctx.global_binlog.locate(&position) {
            // The served binlog restarted past this replica (a snapshot installed after this node fell behind
            // the compacted log, or retention): only a copy of a member's data brings it back.
            return Err(ReplicaFault::Diverged(format!(
                "it stands at {gtid}, before the start of the served binlog (gtid_binlog_pos {}): rebuilt from a \
                 member",
                state.position
            )));
        }
        return Err(ReplicaFault::Diverged(format!(
            "its binlog holds a transaction the global log does not have (gtid_binlog_pos {}): written on this \
             replica outside the cluster",
            state.position
        )));
    }
    if !state.configured {
        return Err(ReplicaFault::ApplierStopped("replication is not configured (RESET SLAVE ALL?)".into()));
    }
    match (state.sql_stopped, state.io_stopped) {
        (Some(why), _) => Err(ReplicaFault::ApplierStopped(format!("the replication applier stopped: {why}"))),
        (None, Some(why)) => Err(ReplicaFault::ApplierStopped(format!("the replication IO thread stopped: {why}"))),
        (None, None) => Ok(()),
    }
}

/// Server ids of master terms never collide with a node's base id (its config) or another node's terms.
fn term_server_id(node_id: u64, master_version: u64) -> u32 {
    (1_000_000 + (node_id % 1000) * 100_000 + master_version % 100_000) as u32
}

async fn demote(
    ctx: &Arc<RoleContext>,
    capture: &mut Option<(tokio::task::JoinHandle<()>, watch::Receiver<bool>)>,
    serving: &watch::Sender<Option<u64>>,
) {
    // Stop routing first, then the capture, then SIGKILL: a clean shutdown would commit waiting transactions
    // without their ACK, and so would killing their sessions (docs/ARCHITECTURE.md §3). The restart (next round of the role
    // controller) rolls back and truncates whatever never reached the global log (init-rpl-role=SLAVE).
    serving.send_replace(None);
    if let Some((handle, _)) = capture.take() {
        handle.abort();
    }
    ctx.mariadb.lock().await.kill9();
    ctx.local.send_replace(LocalRole::Down("demoted: restarting in recovery mode".into()));
    tracing::warn!("demoted: mariadbd killed; it restarts in recovery mode");
}

async fn become_replica(ctx: &Arc<RoleContext>) -> Result<(), MariaDbError> {
    let db = ctx.mariadb.lock().await;
    // Alignment (docs/ARCHITECTURE.md §5): the local server must hold a prefix of the global log before it serves in any role.
    // A position ahead of our copy of the log may only mean the copy is still catching up: retry later. A
    // diverged one (a transaction the global log does not have) needs a rebuild from a healthy member.
    let local = db.query_string("SELECT @@GLOBAL.gtid_binlog_pos").await?;
    let position: GtidSet = local.parse().unwrap_or_default();
    if let Err(e) = ctx.global_binlog.locate(&position) {
        // Diverged, or behind the start of a compacted log: either way only a copy of a member's data helps.
        let diverged = matches!(
            e,
            paxsql_repl_server::Error::ReplicaDiverged { .. } | paxsql_repl_server::Error::GtidPurged { .. }
        );
        return Err(MariaDbError::NotAligned { local, reason: e.to_string(), diverged });
    }
    let applied = db.query_string("SELECT @@GLOBAL.gtid_slave_pos").await?;
    if applied != local {
        // Normal after a term as master (nothing applied as a replica). After a kill -9 it can also be a DDL
        // that reached the binlog while its gtid_slave_pos update did not (MariaDB does not make the two atomic).
        tracing::info!(gtid_slave_pos = %applied, gtid_binlog_pos = %local, "replication continues from the binlog position");
    }
    let pw = ctx.replication_password.replace('\'', "''");
    db.exec(&[
        "STOP SLAVE",
        "SET GLOBAL read_only = ON",
        // my.cnf has it; re-asserted for a server an operator changed (see `promote`).
        "SET GLOBAL require_secure_transport = ON",
        "SET GLOBAL rpl_semi_sync_master_enabled = OFF",
        // Continue from what this server holds, whether it was applied as a replica or written as a master.
        "SET GLOBAL gtid_slave_pos = @@GLOBAL.gtid_binlog_pos",
        &format!(
            "CHANGE MASTER TO MASTER_HOST='{}', MASTER_PORT={}, MASTER_USER='{}', MASTER_PASSWORD='{}', \
             MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
            ctx.replication_host, ctx.replication_port, ctx.replication_user, pw
        ),
        "START SLAVE",
    ])
    .await?;
    tracing::info!(port = ctx.replication_port, "local mariadbd replicates from this node's binlog server");
    Ok(())
}
