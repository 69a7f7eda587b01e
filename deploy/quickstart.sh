#!/usr/bin/env bash
# Starts a working local paxsql cluster on a fresh Debian machine: installs MariaDB and friends, builds paxsql,
# initialises three real MariaDB servers and three nodes, waits for a master and prints how to connect.
# Usage: bash deploy/quickstart.sh [DIR=./paxsql-local] [NODES=3]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-./paxsql-local}
NODES=${2:-3}
bash deploy/install-deps.sh
cargo build --release -q -p paxsql
exec "${CARGO_TARGET_DIR:-target}/release/paxsql" cluster up --nodes "$NODES" --dir "$DIR"
