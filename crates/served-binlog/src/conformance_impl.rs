//! The repl-server conformance suite's view of [`ServedBinlog`].

use bytes::Bytes;
use paxsql_binlog::{Gtid, GtidSet};
use paxsql_repl_server::conformance::AppendableSource;

use crate::store::ServedBinlog;

fn log_error(e: crate::Error) -> paxsql_repl_server::Error {
    match e {
        crate::Error::Log(e) => e,
        other => paxsql_repl_server::Error::SourceUnavailable { reason: other.to_string() },
    }
}

impl AppendableSource for ServedBinlog {
    fn append_instance(&self, instance: u64, events: &[u8]) -> paxsql_repl_server::Result<usize> {
        ServedBinlog::append_instance(self, instance, Bytes::copy_from_slice(events)).map_err(log_error)
    }

    fn restore_base(&self, instance: u64, gtid: Gtid) -> paxsql_repl_server::Result<()> {
        ServedBinlog::restore_base(self, instance, Some(gtid)).map_err(log_error)
    }

    fn holds(&self, state: &GtidSet) -> bool {
        ServedBinlog::holds(self, state)
    }

    fn gtid_pos(&self) -> GtidSet {
        ServedBinlog::gtid_pos(self)
    }
}
