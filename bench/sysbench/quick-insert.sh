#!/usr/bin/env bash
# One quick figure: sysbench oltp_insert, 64 threads, 15 s, against the master's mariadbd of a fresh 3-node paxsql
# cluster started with the given `paxsql` binary. Used to compare two builds of the write path side by side:
#   bench/sysbench/quick-insert.sh OLD/paxsql 29500; bench/sysbench/quick-insert.sh NEW/paxsql 29600
# PAXSQL_UP_ARGS adds arguments to `cluster up` (e.g. --no-tls, to price the peer links' TLS).
# Ports stay below 32768 (the ephemeral range).
set -euo pipefail
BIN=${1:?usage: quick-insert.sh PAXSQL_BINARY [BASE_PORT]}
PORT=${2:-29500}
DIR=$(mktemp -d /tmp/paxsql-quick-XXXX)
trap '"$BIN" cluster down --dir "$DIR/c" >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
unset MYSQL_PWD
# shellcheck disable=SC2086 # PAXSQL_UP_ARGS is a list of arguments
"$BIN" cluster up --nodes 3 --dir "$DIR/c" --base-port "$PORT" ${PAXSQL_UP_ARGS:-} >/dev/null
PW=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['app_password'])" "$DIR/c/cluster.json")
MPORT=$("$BIN" cluster status --dir "$DIR/c" --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
print([n for n in d['nodes'] if n['id'] == d['master']][0]['endpoints']['mariadb'].split(':')[1])")
SB=(sysbench oltp_insert --tables=4 --table-size=1000 --mysql-host=127.0.0.1 --mysql-port="$MPORT" --mysql-user=app
    --mysql-password="$PW" --mysql-db=app --db-ps-mode=disable)
"${SB[@]}" prepare >/dev/null
"${SB[@]}" --threads=64 --time=15 run | grep -E "transactions:|95th"
