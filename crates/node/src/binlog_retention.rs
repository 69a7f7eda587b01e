//! Keeps the local mariadbd's own binlog bounded: once its files exceed `[mariadb] binlog_retain_bytes`, the oldest
//! are purged (`PURGE BINARY LOGS TO`) — only files whose every transaction the global log already holds.
//!
//! Why the node does it, not MariaDB's `binlog_expire_logs_seconds`: the global log is the durable history, and
//! mariadbd's files matter only where they are newer than it — a master's capture reads from its binlog, and
//! alignment truncates an un-ACKed tail in the newest file at restart. An age limit knows neither; this purge
//! checks, per file, the `Gtid_list` that opens the next one (the GTID state before it) against the global log's
//! position, keeps the newest files whatever their size, and runs only while the local database is aligned.
//! A file a dump thread still reads is refused by MariaDB itself; the next round tries again.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use paxsql_binlog::GtidSet;

use crate::context::{LocalRole, RoleContext};

/// How often the binlog's size is read (a `SHOW BINARY LOGS`: it stats each file, cheap).
const CHECK_EVERY: Duration = Duration::from_secs(10);

/// Newest files never purged, whatever their size: the active file and the one before it hold the tail a master's
/// capture may still read and alignment may truncate.
const KEEP_NEWEST_FILES: usize = 2;

/// Runs until the task is aborted (the node stopping).
pub async fn run(ctx: std::sync::Arc<RoleContext>, retain_bytes: u64) {
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !matches!(*ctx.local.borrow(), LocalRole::Replica | LocalRole::Master(_)) {
            // Down, rebuilding or not aligned: its binlog may hold what the global log does not.
            continue;
        }
        if let Err(e) = check_once(&ctx, retain_bytes).await {
            tracing::warn!(error = %e, "binlog retention: could not check or purge the local binlog; next round in 10 s");
        }
    }
}

async fn check_once(ctx: &RoleContext, retain_bytes: u64) -> Result<(), mysql_async::Error> {
    let mut conn = {
        let db = ctx.mariadb.lock().await;
        db.conn().await?
    };
    let result = purge_round(ctx, &mut conn, retain_bytes).await;
    let _ = conn.disconnect().await;
    result
}

async fn purge_round(
    ctx: &RoleContext,
    conn: &mut mysql_async::Conn,
    retain_bytes: u64,
) -> Result<(), mysql_async::Error> {
    // SHOW BINARY LOGS has two columns in 10.11 (Log_name, File_size).
    let files: Vec<(String, u64)> = conn.query("SHOW BINARY LOGS").await?;
    let total: u64 = files.iter().map(|(_, size)| size).sum();
    ctx.metrics.update_mariadb_binlog(total, files.len() as u64);
    let Some(wanted) = purge_target(&files, retain_bytes) else { return Ok(()) };
    let held = ctx.global_binlog.gtid_pos();
    // The newest file to keep whose opening state the global log holds: purging before it removes nothing else.
    for keep in (1..=wanted).rev() {
        let name = &files[keep].0;
        let before = match gtid_state_before(conn, name).await? {
            Ok(state) => state,
            Err(seen) => {
                tracing::warn!(file = %name, %seen, "binlog file without a readable Gtid_list event: not purging before it");
                return Ok(());
            }
        };
        if !held.includes(&before) {
            continue;
        }
        let freed: u64 = files[..keep].iter().map(|(_, size)| size).sum();
        conn.query_drop(format!("PURGE BINARY LOGS TO {}", quoted(name))).await?;
        let left: Vec<(String, u64)> = conn.query("SHOW BINARY LOGS").await?;
        let purged = files.len().saturating_sub(left.len());
        ctx.metrics.update_mariadb_binlog(left.iter().map(|(_, size)| size).sum(), left.len() as u64);
        ctx.metrics.count_mariadb_binlog_purge(purged as u64);
        tracing::info!(files = purged, bytes = freed, kept_from = %name, "purged the local mariadbd's binlog files the global log holds");
        return Ok(());
    }
    Ok(())
}

/// The index of the oldest file to keep so that the files from it on fit in `retain_bytes` — at most the index of
/// the newest [`KEEP_NEWEST_FILES`]; `None` when nothing needs purging.
fn purge_target(files: &[(String, u64)], retain_bytes: u64) -> Option<usize> {
    let last_purgeable = files.len().checked_sub(KEEP_NEWEST_FILES)?;
    let mut kept = 0u64;
    let mut keep_from = files.len();
    while keep_from > 0 && kept.saturating_add(files[keep_from - 1].1) <= retain_bytes {
        keep_from -= 1;
        kept += files[keep_from].1;
    }
    let keep_from = keep_from.min(last_purgeable);
    (keep_from > 0).then_some(keep_from)
}

/// The GTID state before `file`: its `Gtid_list` event, the second event of every binlog file. `Err` with the
/// events seen instead, when there is none or it does not parse.
async fn gtid_state_before(
    conn: &mut mysql_async::Conn,
    file: &str,
) -> Result<Result<GtidSet, String>, mysql_async::Error> {
    let sql = format!("SHOW BINLOG EVENTS IN {} LIMIT 4", quoted(file));
    let rows: Vec<(String, u64, String, u64, u64, String)> = conn.query(sql).await?;
    let mut seen = Vec::new();
    for (_, _, kind, _, _, info) in rows {
        if kind == "Gtid_list" {
            return Ok(parse_gtid_list(&info).ok_or_else(|| format!("Gtid_list {info:?}")));
        }
        seen.push(kind);
    }
    Ok(Err(format!("events {seen:?}")))
}

/// A binlog file name as an SQL string literal.
fn quoted(file: &str) -> String {
    format!("'{}'", file.replace('\'', "''"))
}

/// `SHOW BINLOG EVENTS` prints a Gtid_list event as `[0-1-5,0-2-9,1-2-3]` (`[]` when empty): the binlog state, one
/// GTID per domain *and server*, so each domain's last seq_no (commit order under gtid_strict_mode) is its position.
fn parse_gtid_list(info: &str) -> Option<GtidSet> {
    let list = info.trim().strip_prefix('[')?.strip_suffix(']')?;
    if list.trim().is_empty() {
        return Some(GtidSet::new());
    }
    let gtids = list.split(',').map(|g| g.trim().parse::<paxsql_binlog::Gtid>().ok()).collect::<Option<Vec<_>>>()?;
    Some(GtidSet::from_state(gtids))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(sizes: &[u64]) -> Vec<(String, u64)> {
        sizes.iter().enumerate().map(|(i, s)| (format!("n1-bin.{:06}", i + 1), *s)).collect()
    }

    #[test]
    fn nothing_is_purged_within_the_retention() {
        assert_eq!(purge_target(&files(&[100, 100, 100]), 300), None);
        assert_eq!(purge_target(&files(&[]), 0), None);
        assert_eq!(purge_target(&files(&[500]), 0), None);
    }

    #[test]
    fn the_oldest_files_beyond_the_retention_go() {
        // 400 bytes, 250 kept: the newest two (100 + 100) fit, the third (100) would pass 250.
        assert_eq!(purge_target(&files(&[100, 100, 100, 100]), 250), Some(2));
        assert_eq!(purge_target(&files(&[100, 100, 100, 100]), 300), Some(1));
    }

    #[test]
    fn the_newest_two_files_stay_whatever_their_size() {
        assert_eq!(purge_target(&files(&[10, 10, 1000, 1000]), 100), Some(2));
        assert_eq!(purge_target(&files(&[1000, 1000]), 100), None);
    }

    #[test]
    fn gtid_lists_parse_as_shown() {
        assert_eq!(parse_gtid_list("[]"), Some(GtidSet::new()));
        assert_eq!(parse_gtid_list("[0-1-5]").map(|s| s.to_string()), Some("0-1-5".into()));
        assert_eq!(parse_gtid_list("[0-1-5,1-2-3]").map(|s| s.to_string()), Some("0-1-5,1-2-3".into()));
        // One entry per server of a domain (each term's master writes with its own server_id): the newest counts.
        assert_eq!(parse_gtid_list("[0-1100001-4,0-1100002-123]").map(|s| s.to_string()), Some("0-1100002-123".into()));
        assert_eq!(parse_gtid_list("0-1-5"), None);
        assert_eq!(parse_gtid_list("[0-1-x]"), None);
    }
}
