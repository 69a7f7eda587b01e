//! Which node is the master, from the nodes' own status replies.

use paxsql_peer_transport::pb::StatusReply;
use serde::Serialize;

/// The master as published to targets (also the webhook's JSON body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MasterInfo {
    pub cluster_id: String,
    pub master_id: u64,
    pub master_version: u64,
    /// The master's mariadbd, host:port.
    pub mariadb: String,
    /// The master's proxy read-write endpoint, host:port; empty while the node does not report one.
    pub proxy_rw: String,
    /// When this watcher first saw this master (RFC 3339, UTC).
    pub changed_at: String,
}

impl MasterInfo {
    pub fn mariadb_host(&self) -> &str {
        self.mariadb.rsplit_once(':').map_or(self.mariadb.as_str(), |(h, _)| h)
    }

    pub fn mariadb_port(&self) -> &str {
        self.mariadb.rsplit_once(':').map_or("", |(_, p)| p)
    }

    /// A template placeholder's value.
    pub fn field(&self, name: &str) -> String {
        match name {
            "cluster_id" => self.cluster_id.clone(),
            "master_id" => self.master_id.to_string(),
            "master_version" => self.master_version.to_string(),
            "mariadb_host" => self.mariadb_host().to_string(),
            "mariadb_port" => self.mariadb_port().to_string(),
            "proxy_rw" => self.proxy_rw.clone(),
            "changed_at" => self.changed_at.clone(),
            _ => String::new(),
        }
    }

    /// The identity of a master term: a change of either is a change to publish.
    pub fn term(&self) -> (u64, u64) {
        (self.master_id, self.master_version)
    }
}

/// The master the replies show, or `None`.
///
/// Only a node's word about itself counts: the reply of the node that names itself master, holds the lease and
/// serves (role "master": promoted, writable). Of several (a deposed master that has not noticed yet), the
/// highest `master_version` wins: versions only grow through the replicated log.
pub fn pick_master(cluster_id: &str, replies: &[StatusReply], changed_at: &str) -> Option<MasterInfo> {
    replies
        .iter()
        .filter(|r| r.holds_lease && r.node_id == r.master_id && r.role == "master")
        .max_by_key(|r| r.master_version)
        .map(|r| MasterInfo {
            cluster_id: cluster_id.to_string(),
            master_id: r.master_id,
            master_version: r.master_version,
            mariadb: r.details.get("mariadb").cloned().unwrap_or_default(),
            proxy_rw: r.details.get("proxy_rw").cloned().unwrap_or_default(),
            changed_at: changed_at.to_string(),
        })
}

/// `SystemTime` as RFC 3339 UTC with milliseconds, without a date-time dependency.
pub fn rfc3339_utc(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant, "chrono-Compatible Low-Level Date Algorithms").
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn reply(node: u64, master: u64, version: u64, lease: bool, role: &str) -> StatusReply {
        let mut r = StatusReply {
            node_id: node,
            master_id: master,
            master_version: version,
            holds_lease: lease,
            role: role.into(),
            ..Default::default()
        };
        r.details.insert("mariadb".into(), format!("127.0.0.{node}:3306"));
        r
    }

    #[test]
    fn the_serving_lease_holder_with_the_highest_version_wins() {
        let replies = vec![
            reply(1, 1, 3, true, "master"), // deposed, has not noticed yet
            reply(2, 2, 4, true, "master"),
            reply(3, 2, 4, false, "replica"),
        ];
        let m = pick_master("c", &replies, "t").unwrap();
        assert_eq!((m.master_id, m.master_version, m.mariadb.as_str()), (2, 4, "127.0.0.2:3306"));
        assert_eq!((m.mariadb_host(), m.mariadb_port()), ("127.0.0.2", "3306"));
    }

    #[test]
    fn hearsay_unleased_and_promoting_masters_do_not_count() {
        assert_eq!(pick_master("c", &[reply(3, 2, 4, false, "replica")], "t"), None);
        assert_eq!(pick_master("c", &[reply(2, 2, 4, false, "master")], "t"), None);
        assert_eq!(pick_master("c", &[reply(2, 2, 4, true, "candidate")], "t"), None);
        assert_eq!(pick_master("c", &[], "t"), None);
    }

    #[test]
    fn rfc3339() {
        assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // 2024-02-29T12:34:56.789Z (a leap day) = 1709210096.789
        assert_eq!(rfc3339_utc(UNIX_EPOCH + Duration::from_millis(1_709_210_096_789)), "2024-02-29T12:34:56.789Z");
    }
}
