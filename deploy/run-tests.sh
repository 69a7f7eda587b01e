#!/usr/bin/env bash
# The project's test command (README "Run the tests"): installs what the tests need, then runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
# Release build: the simulator sweeps thousands of seeds and the cluster tests run real MariaDB servers.
cargo test --workspace --release --locked -- --test-threads=2
# Other people's test suites through every node's RW port against a standalone MariaDB (README "Other people's
# test suites"): fails on any test that passes directly and not through paxsql.
bash bench/compat/run.sh short "$(mktemp -d)/compat-short.txt"
