//! The suite's error type: what can go wrong driving the cluster (not what the checks find; those are verdicts).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    #[error("the paxsql binary is missing at {0} (build it: cargo build -p paxsql --release, or set PAXSQL_BIN)")]
    BinaryMissing(PathBuf),
    #[error("{tool} is missing: run deploy/install-deps.sh")]
    ToolMissing { tool: String },
    #[error("cannot run {what}: {source}")]
    Spawn { what: String, source: std::io::Error },
    #[error("`{command}` failed: {output}")]
    Command { command: String, output: String },
    #[error("network namespace {name}: {reason}")]
    Netns { name: String, reason: String },
    #[error("cannot read {path}: {reason}")]
    ClusterFile { path: PathBuf, reason: String },
    #[error("no master serving within {secs} s")]
    NoMaster { secs: u64 },
    #[error("the cluster did not converge within {secs} s: {reason}")]
    NotConverged { secs: u64, reason: String },
    #[error("SQL on node {node}: {reason}")]
    Sql { node: u64, reason: String },
}
