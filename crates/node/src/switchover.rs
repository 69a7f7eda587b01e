//! An operator's switchover (`paxsql switchover`, `paxsql cluster switchover`): the serving master drains its
//! database and hands its term to another member through the log, so that the master moves without a lease
//! running out and without a write acknowledged, or even sent, being lost.
//!
//! The drain is `FLUSH TABLES WITH READ LOCK` on a session of its own: it waits for running writes and commits in
//! progress, then holds every new write back, whatever the account's privileges — writes pause instead of failing.
//! The capture keeps ACKing meanwhile. Once everything the local binlog holds is in the global log (whether or not
//! the lock waited for commits in their semi-sync wait, this wait covers them), the hand-over is proposed, and the
//! role controller at once kills this mariadbd (a held-back statement never ran: its client's connection is closed,
//! as after any failover) and restarts it as a replica, with nothing to truncate. The successor serves as soon as it
//! has applied the log.
//!
//! Anything that goes wrong before the hand-over is proposed releases the lock: the master goes on serving.

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use paxsql_binlog::GtidSet;
use tokio::sync::oneshot;

use crate::context::RoleContext;
use crate::driver::send_input;
use crate::driver::Input;

/// What an operator asks for.
pub struct SwitchoverRequest {
    /// The successor; `None`: the most caught-up member whose status is fresh.
    pub to: Option<u64>,
    /// How long the drain may wait for running statements and for the log to hold the binlog's end.
    pub drain_timeout: Duration,
    /// A request the role controller reaches only after this (it was busy starting or rebuilding the database) is
    /// refused: the operator has given up waiting, and a switchover must not happen later by surprise.
    pub deadline: Instant,
    pub reply: oneshot::Sender<Result<SwitchoverDone, SwitchoverError>>,
}

/// A hand-over proposed: the successor serves once it is chosen and applied.
#[derive(Clone, Debug)]
pub struct SwitchoverDone {
    pub successor: u64,
    /// The term that ends.
    pub master_version: u64,
    /// The old master's `gtid_binlog_pos` under the lock: the global log holds all of it.
    pub drained_gtid: String,
    /// From the request to the hand-over proposed (the lock taken, the log caught up).
    pub drain: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum SwitchoverError {
    #[error("this node does not serve as master (its view: master is node {master}, term {master_version})")]
    NotMaster { master: u64, master_version: u64 },
    #[error("the drain failed, the master goes on serving: {0}")]
    Drain(String),
    #[error("the global log refused the hand-over, the master goes on serving: {0}")]
    Refused(#[from] paxsql_global_log::GlobalLogError),
    #[error("the global-log driver is gone")]
    DriverGone,
    #[error("the node was busy with its database (starting, rebuilding) and did not get to the request in time")]
    Busy,
}

/// The drain and the hand-over, run by the role controller of a serving master. On success the returned session
/// still holds the lock: the caller demotes (kills) mariadbd, then drops it.
pub(crate) async fn drain_and_hand_over(
    ctx: &RoleContext,
    master_version: u64,
    to: Option<u64>,
    drain_timeout: Duration,
) -> Result<(SwitchoverDone, mysql_async::Conn), SwitchoverError> {
    let started = Instant::now();
    let drain = |what: &str, e: &dyn std::fmt::Display| SwitchoverError::Drain(format!("{what}: {e}"));
    let mut lock = ctx.mariadb.lock().await.conn().await.map_err(|e| drain("connect", &e))?;
    // Whole seconds only (MariaDB's lock_wait_timeout), at least one.
    let secs = drain_timeout.as_secs().max(1);
    lock.query_drop(format!("SET SESSION lock_wait_timeout = {secs}")).await.map_err(|e| drain("session", &e))?;
    let locked =
        tokio::time::timeout(drain_timeout + Duration::from_secs(1), lock.query_drop("FLUSH TABLES WITH READ LOCK"))
            .await;
    match locked {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(drain("FLUSH TABLES WITH READ LOCK (a long statement holds a table?)", &e)),
        // The session is dropped with the error: its lock request goes with it.
        Err(_) => return Err(SwitchoverError::Drain(format!("no read lock within {secs} s"))),
    }
    let position: Option<String> =
        lock.query_first("SELECT @@GLOBAL.gtid_binlog_pos").await.map_err(|e| drain("gtid_binlog_pos", &e))?;
    let position = position.unwrap_or_default();
    let drained: GtidSet = position.parse().map_err(|e| drain("gtid_binlog_pos", &e))?;
    // Every commit that returned was ACKed, so it is in the log; one still in its semi-sync wait is on its way
    // (the capture goes on). Nothing can be added to the binlog now.
    while !ctx.global_binlog.holds(&drained) {
        if started.elapsed() >= drain_timeout {
            unlock(lock).await;
            return Err(SwitchoverError::Drain(format!(
                "the global log does not hold the binlog's end {position} after {} ms",
                started.elapsed().as_millis()
            )));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let (reply, answer) = oneshot::channel();
    if send_input(&ctx.inbox, Input::SwitchOver { to, reply }).await.is_err() {
        unlock(lock).await;
        return Err(SwitchoverError::DriverGone);
    }
    match answer.await {
        Ok(Ok(successor)) => {
            Ok((SwitchoverDone { successor, master_version, drained_gtid: position, drain: started.elapsed() }, lock))
        }
        Ok(Err(e)) => {
            unlock(lock).await;
            Err(SwitchoverError::Refused(e))
        }
        Err(_) => {
            unlock(lock).await;
            Err(SwitchoverError::DriverGone)
        }
    }
}

async fn unlock(mut lock: mysql_async::Conn) {
    if let Err(e) = lock.query_drop("UNLOCK TABLES").await {
        // Closing the session releases it too.
        tracing::warn!(error = %e, "switchover: UNLOCK TABLES failed; closing the session");
    }
    let _ = lock.disconnect().await;
}
