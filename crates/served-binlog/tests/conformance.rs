//! The repl-server `EventSource` conformance suite, run against the on-disk served binlog: with default sizes, and
//! with segments so small that every check crosses sealed segments, their indexes and the tail cache's edge.

use paxsql_repl_server::conformance;
use paxsql_served_binlog::{ServedBinlog, ServedBinlogConfig};

#[test]
fn served_binlog_conforms_with_default_sizes() {
    let dir = tempfile::tempdir().unwrap();
    conformance::run_all(|key| ServedBinlog::open(ServedBinlogConfig::new(dir.path().join(key))).unwrap());
}

#[test]
fn served_binlog_conforms_across_small_segments_and_a_small_cache() {
    let dir = tempfile::tempdir().unwrap();
    conformance::run_all(|key| {
        let mut cfg = ServedBinlogConfig::new(dir.path().join(key));
        cfg.segment_bytes = 4096;
        cfg.cache_bytes = 700;
        ServedBinlog::open(cfg).unwrap()
    });
}
