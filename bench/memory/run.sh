#!/usr/bin/env bash
# Memory and disk of a 3-node cluster under a steady write load, and a replica's restart time afterwards.
# sysbench oltp_insert through the master node's RW port for SECONDS; every SAMPLE_EVERY (10) s, per node: RSS of the
# paxsql node process, bytes of its served binlog, of its global-log store and of its mariadbd's own binlog files,
# the transactions acknowledged so far (all masters' captures), and the GTID lookups the node's served binlog did in
# the interval with their p99 (from /metrics: bucket upper bound), and the p99s of their two parts: the wait for the
# store's lock, the thread's CPU time (the rest of a slow lookup is waiting for a core). Then kill -9 one replica node and time its restart
# until its RO port serves again. Prints a table per sample and a summary; writes the samples as CSV to OUT.
# Usage: bench/memory/run.sh [SECONDS=240] [THREADS=32] [BASE_PORT=27000] [OUT=bench/memory/samples.csv]
# TRANSACTIONS=N runs until N transactions instead (SECONDS is then the limit); RATE=N offers N transactions per
# second (sysbench --rate) instead of as many as the threads get through, for a load the replicas can follow. The
# soak of issue 12 item 4 is (~1 h 52 min; nothing else may run beside it: a build starves the cluster and
# sysbench's rate queue overflows)
#   TRANSACTIONS=10000000 RATE=1500 SAMPLE_EVERY=60 bench/memory/run.sh 8000 32 27000 bench/memory/soak.csv
# PAXSQL_BIN runs another build (e.g. an older one, for comparison); PAXSQL_UP_ARGS adds `cluster up` arguments.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_=${1:-240}
THREADS=${2:-32}
BASE=${3:-27000}
OUT=${4:-bench/memory/samples.csv}
EVERY=${SAMPLE_EVERY:-10}
if [ -z "${PAXSQL_BIN:-}" ]; then
  cargo build --release -q -p paxsql
  PAXSQL_BIN=${CARGO_TARGET_DIR:-target}/release/paxsql
fi
DIR=$(mktemp -d /tmp/paxsql-memory-XXXX)
# A failed run keeps its directory (node and mariadbd logs, sysbench's output) for the post-mortem.
trap 'rc=$?; "$PAXSQL_BIN" cluster down --dir "$DIR" >/dev/null 2>&1 || true
      if [ "$rc" = 0 ]; then rm -rf "$DIR"; else echo "run failed (exit $rc): kept $DIR"; fi' EXIT
unset MYSQL_PWD
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# shellcheck disable=SC2086 # PAXSQL_UP_ARGS is a list of arguments
"$PAXSQL_BIN" cluster up --nodes 3 --dir "$DIR" --base-port "$BASE" ${PAXSQL_UP_ARGS:-} >/dev/null
. bench/cluster.sh
PW=$(app_password)
M=$(master)
RW=$(endpoint "$M" proxy_rw)
metrics() { curl -s --max-time 5 "http://127.0.0.1:$((BASE + 10 * ($1 - 1) + 6))/metrics" || true; }
own_binlog() { find "$DIR/n$1/data" -maxdepth 1 -name "n$1-bin.[0-9]*" -printf '%s\n' 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$(cat "$DIR/n$1/node.pid")/status" 2>/dev/null || echo 0; }
bytes() { du -sb "$1" 2>/dev/null | cut -f1 || echo 0; }
# Per node: "acked lookups lookup_p99_us" over the interval since the last sample (bucket counts kept in $DIR).
LOOKUPS_PY=$(cat <<'PY'
import sys
prev_file = sys.argv[1]
acked, buckets = 0, {}
# The lookup's wall time, its wait for the store's lock, its thread's CPU time.
SERIES = ("paxsql_served_binlog_lookup_seconds", "paxsql_served_binlog_lookup_lock_wait_seconds",
          "paxsql_served_binlog_lookup_cpu_seconds")
for line in sys.stdin:
    if line.startswith("paxsql_capture_acked_transactions"):
        acked = int(float(line.split()[-1]))
    for name in SERIES:
        if line.startswith(name + "_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets[f"{name}:{le}"] = float(line.split()[-1])
try:
    prev = dict((k, float(v)) for k, v in (l.split() for l in open(prev_file)))
except (OSError, ValueError):
    prev = {}
open(prev_file, "w").write("".join(f"{k} {v}\n" for k, v in buckets.items()))
out = [acked]
for name in SERIES:
    mine = [(k.split(":")[1], v) for k, v in buckets.items() if k.startswith(name + ":")]
    delta = sorted(((float("inf") if le == "+Inf" else float(le)), v - prev.get(f"{name}:{le}", 0.0)) for le, v in mine)
    count = delta[-1][1] if delta else 0
    p99 = 0.0
    if count > 0:
        p99 = next(le for le, c in delta if c >= 0.99 * count)
    if name == SERIES[0]:
        out.append(int(count))
    out.append(-1 if p99 == float("inf") else int(p99 * 1e6))
print(*out)
PY
)
lookups() { metrics "$1" | python3 -c "$LOOKUPS_PY" "$DIR/lookups.n$1"; }
sample() {
  local t=$1 line="$1" acked=0
  for n in 1 2 3; do
    read -r a count p99 wait_p99 cpu_p99 < <(lookups "$n")
    acked=$(( acked + a ))
    line="$line,$(rss_kb "$n"),$(bytes "$DIR/n$n/node/served-binlog"),$(bytes "$DIR/n$n/node/global-log")"
    line="$line,$(own_binlog "$n"),$count,$p99,$wait_p99,$cpu_p99"
  done
  line="$line,$acked,$(status | python3 -c "import json,sys; print(','.join(str(n.get('lag_transactions') or 0) for n in sorted(json.load(sys.stdin)['nodes'], key=lambda n: n['id'])))" 2>/dev/null || echo 0,0,0)"
  echo "$line" >> "$OUT"
  python3 - "$line" <<'PY'
import sys
v = sys.argv[1].split(",")
t = v[0]
cells = []
for n in range(3):
    rss, served, paxos, own, count, p99, wait_p99, cpu_p99 = (int(x) for x in v[1 + 8 * n: 9 + 8 * n])
    cells.append(f"n{n + 1} rss {rss / 1024:6.1f} MB served {served / 2**20:7.1f} MiB log {paxos / 2**20:7.1f} MiB "
                 f"binlog {own / 2**20:7.1f} MiB lookups {count} p99 {p99} us (lock {wait_p99} cpu {cpu_p99})")
print(f"t={t:>5}s acked {int(v[25]):>9} behind {'/'.join(v[26:29])}  " + "  |  ".join(cells), flush=True)
PY
}
header=t
for n in 1 2 3; do
  header="$header,n${n}_rss_kb,n${n}_served_bytes,n${n}_log_bytes,n${n}_binlog_bytes,n${n}_lookups,n${n}_lookup_p99_us,n${n}_lookup_wait_p99_us,n${n}_lookup_cpu_p99_us"
done
echo "$header,acked,n1_lag,n2_lag,n3_lag" > "$OUT"
SB=(sysbench oltp_insert --tables=4 --table-size=1000 --mysql-host=127.0.0.1 --mysql-port="$RW" --mysql-user=app
    --mysql-password="$PW" --mysql-db=app --db-ps-mode=disable)
"${SB[@]}" prepare >/dev/null
sample 0
if [ -n "${TRANSACTIONS:-}" ]; then
  LIMIT=(--events="$TRANSACTIONS" --time="$SECONDS_")
else
  LIMIT=(--time="$SECONDS_")
fi
if [ -n "${RATE:-}" ]; then
  LIMIT+=(--rate="$RATE")
fi
"${SB[@]}" --threads="$THREADS" "${LIMIT[@]}" run > "$DIR/sysbench.out" &
LOAD=$!
start=$(date +%s)
while kill -0 "$LOAD" 2>/dev/null; do
  sleep "$EVERY"
  sample $(( $(date +%s) - start ))
done
if ! wait "$LOAD"; then
  echo "sysbench failed:"; tail -20 "$DIR/sysbench.out"
  "$PAXSQL_BIN" cluster status --dir "$DIR" || true
  exit 1
fi
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
