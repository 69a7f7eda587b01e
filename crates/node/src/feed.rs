//! The replica feed (docs/ARCHITECTURE.md §4): every effect the driver applies, in log order, into the served
//! binlog — the copy of the global log this node's replication server serves its local mariadbd from.

use std::sync::Arc;

use paxsql_binlog::Gtid;
use paxsql_global_log::Applied;
use paxsql_served_binlog::ServedBinlog;

use crate::driver::AppliedSink;

/// Feeds the served binlog (the copy of the global log replicas are served from) with every applied effect.
pub struct ServedBinlogFeed(pub Arc<ServedBinlog>);

impl AppliedSink for ServedBinlogFeed {
    fn apply(&mut self, effect: &Applied) {
        match effect {
            Applied::Restored { last_gtid, instance } => {
                // Restarted from a snapshot: the transactions it covers are gone from the Paxos log. The served binlog
                // normally holds them still; if it lost them too, it restarts after the snapshot's last transaction.
                let base = last_gtid.map(|g| Gtid::new(g.domain_id, g.server_id, g.seq_no));
                if let Err(e) = self.0.restore_base(*instance, base) {
                    tracing::error!(?base, instance, error = %e, "cannot start the served binlog after the snapshot");
                }
            }
            Applied::BinlogAppended { instance, events, gtid_first, .. } => {
                if let Err(e) = self.0.append_instance(*instance, events.clone()) {
                    // Replicas stop at this point rather than skip it: the next transaction is out of order for them.
                    tracing::error!(instance, seq = gtid_first.seq_no, error = %e, "cannot add to the served binlog");
                }
            }
            Applied::BinlogPartAppended { instance, gtid, offset, last, bytes, .. } => {
                let g = Gtid::new(gtid.domain_id, gtid.server_id, gtid.seq_no);
                if let Err(e) = self.0.append_part(*instance, g, *offset, *last, bytes) {
                    // As for a whole transaction: replicas stop here rather than skip it.
                    tracing::error!(instance, %g, offset, error = %e, "cannot add a part to the served binlog");
                }
            }
            Applied::PartsDropped { gtid, .. } => {
                if let Err(e) = self.0.drop_parts() {
                    tracing::error!(seq = gtid.seq_no, error = %e, "cannot drop the parts of an unfinished transaction");
                }
            }
            _ => {}
        }
    }

    fn persist(&mut self) -> Result<(), String> {
        self.0.sync().map_err(|e| e.to_string())
    }
}
