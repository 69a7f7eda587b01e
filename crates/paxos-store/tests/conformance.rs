//! The `Storage` conformance suite shared with `MemStorage`, run against raft-engine on a real directory.

mod common;

use paxsql_paxos::storage::conformance;
use paxsql_paxos_store::RaftEngineStorage;

#[test]
fn raft_engine_storage_conforms_with_clean_drop_as_crash() {
    let root = tempfile::tempdir().unwrap();
    let open = |key: &str| RaftEngineStorage::open(&root.path().join(key)).unwrap();
    conformance::run_all(open, drop);
}

#[test]
fn raft_engine_storage_conforms_with_files_taken_mid_flight_as_crash() {
    let root = tempfile::tempdir().unwrap();
    let open = |key: &str| RaftEngineStorage::open(&root.path().join(key)).unwrap();
    conformance::run_all(open, common::crash);
}
