#!/usr/bin/env bash
# Write pause of a switchover, against a kill -9 of the master's mariadbd and the floor with no fault, in one
# invocation on a local three-node cluster with a writer on every node's RW port (bench/switchover/src/main.rs).
# Usage: bench/switchover/run.sh [ROUNDS=10] [BASE_PORT=27000]. Run on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-10}
BASE=${2:-27000}
cargo build --release -q --locked -p paxsql -p paxsql-bench-switchover
TARGET=${CARGO_TARGET_DIR:-target}/release
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
"$TARGET/switchover-bench" --paxsql "$TARGET/paxsql" --base-port "$BASE" --rounds "$ROUNDS"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
