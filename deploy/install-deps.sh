#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build and test paxsql. Idempotent.
set -euo pipefail
echo "install-deps: nothing beyond the Rust toolchain needed yet"
