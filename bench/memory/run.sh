#!/usr/bin/env bash
# Memory and disk of a 3-node cluster under a steady write load, and a replica's restart time afterwards.
# sysbench oltp_insert through the master node's RW port for SECONDS; every 10 s, per node: RSS of the paxsql node
# process, bytes of its served binlog and of its global-log store. Then kill -9 one replica node and time its restart
# until its RO port serves again. Prints a table per sample and a summary; writes the samples as CSV to OUT.
# Usage: bench/memory/run.sh [SECONDS=240] [THREADS=32] [BASE_PORT=27000] [OUT=bench/memory/samples.csv]
# PAXSQL_BIN runs another build (e.g. an older one, for comparison); PAXSQL_UP_ARGS adds `cluster up` arguments.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_=${1:-240}
THREADS=${2:-32}
BASE=${3:-27000}
OUT=${4:-bench/memory/samples.csv}
if [ -z "${PAXSQL_BIN:-}" ]; then
  cargo build --release -q -p paxsql
  PAXSQL_BIN=${CARGO_TARGET_DIR:-target}/release/paxsql
fi
DIR=$(mktemp -d /tmp/paxsql-memory-XXXX)
trap '"$PAXSQL_BIN" cluster down --dir "$DIR" >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
unset MYSQL_PWD
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# shellcheck disable=SC2086 # PAXSQL_UP_ARGS is a list of arguments
"$PAXSQL_BIN" cluster up --nodes 3 --dir "$DIR" --base-port "$BASE" ${PAXSQL_UP_ARGS:-} >/dev/null
PW=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['app_password'])" "$DIR/cluster.json")
status() { "$PAXSQL_BIN" cluster status --dir "$DIR" --json; }
M=$(status | python3 -c "import json,sys; print(json.load(sys.stdin)['master'])")
endpoint() { status | python3 -c "
import json, sys
d = json.load(sys.stdin)
print([n for n in d['nodes'] if n['id'] == int(sys.argv[1])][0]['endpoints'][sys.argv[2]].split(':')[-1])" "$1" "$2"; }
RW=$(endpoint "$M" proxy_rw)
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$(cat "$DIR/n$1/node.pid")/status" 2>/dev/null || echo 0; }
bytes() { du -sb "$1" 2>/dev/null | cut -f1 || echo 0; }
sample() {
  local t=$1 line="$1"
  for n in 1 2 3; do
    line="$line,$(rss_kb "$n"),$(bytes "$DIR/n$n/node/served-binlog"),$(bytes "$DIR/n$n/node/global-log")"
  done
  echo "$line" >> "$OUT"
  python3 - "$line" <<'PY'
import sys
v = sys.argv[1].split(",")
t = v[0]
cells = []
for n in range(3):
    rss, served, paxos = (int(x) for x in v[1 + 3 * n: 4 + 3 * n])
    cells.append(f"n{n + 1} rss {rss / 1024:6.1f} MB served {served / 2**20:7.1f} MiB log {paxos / 2**20:7.1f} MiB")
print(f"t={t:>4}s  " + "  |  ".join(cells))
PY
}
echo "t,n1_rss_kb,n1_served_bytes,n1_log_bytes,n2_rss_kb,n2_served_bytes,n2_log_bytes,n3_rss_kb,n3_served_bytes,n3_log_bytes" > "$OUT"
SB=(sysbench oltp_insert --tables=4 --table-size=1000 --mysql-host=127.0.0.1 --mysql-port="$RW" --mysql-user=app
    --mysql-password="$PW" --mysql-db=app --db-ps-mode=disable)
"${SB[@]}" prepare >/dev/null
sample 0
"${SB[@]}" --threads="$THREADS" --time="$SECONDS_" run > "$DIR/sysbench.out" &
LOAD=$!
start=$(date +%s)
while kill -0 "$LOAD" 2>/dev/null; do
  sleep 10
  sample $(( $(date +%s) - start ))
done
wait "$LOAD"
grep -E "transactions:" "$DIR/sysbench.out"
sample $(( $(date +%s) - start ))

# A replica's restart: kill -9 its node, start it again, time until its RO port serves.
R=$(( M % 3 + 1 ))
RO=$(endpoint "$R" proxy_ro)
kill -9 "$(cat "$DIR/n$R/node.pid")"
sleep 0.5
t0=$(date +%s%N)
"$PAXSQL_BIN" node --config "$DIR/n$R/node.toml" >> "$DIR/n$R/log/node.log" 2>&1 &
echo $! > "$DIR/n$R/node.pid"
served=""
for _ in $(seq 1 600); do
  if MYSQL_PWD=$PW timeout 2 mariadb -h127.0.0.1 -P"$RO" -uapp -N -B app -e "SELECT 1" >/dev/null 2>&1; then
    served=yes; break
  fi
  sleep 0.1
done
t1=$(date +%s%N)
if [ -n "$served" ]; then
  echo "replica node $R: kill -9, restart to its RO port serving: $(( (t1 - t0) / 1000000 )) ms"
else
  echo "replica node $R: RO port not serving 60 s after the restart"
fi
echo "RSS of node $R after its restart: $(( $(rss_kb "$R") / 1024 )) MB"
echo "samples: $OUT"
