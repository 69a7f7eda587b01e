#!/usr/bin/env bash
# One transaction of SIZE_MIB of binlog (an INSERT ... SELECT of ~1 KB rows) through the master node's RW port of a
# fresh 3-node cluster. Samples every node process's RSS twice a second from before the statement until every node
# holds the rows; prints the commit time, each node's RSS before and its peak growth, the time until every node
# holds the transaction, and the row count and checksum on every node (they must be equal).
# Usage: bench/large-transaction/run.sh [SIZE_MIB=1024] [BASE_PORT=27000]
# PAXSQL_BIN runs another build. Disk: about 8 × SIZE_MIB per node (InnoDB, binlogs, relay log, both logs of paxsql).
set -euo pipefail
cd "$(dirname "$0")/../.."
SIZE_MIB=${1:-1024}
BASE=${2:-27000}
if [ -z "${PAXSQL_BIN:-}" ]; then
  cargo build --release -q -p paxsql
  PAXSQL_BIN=${CARGO_TARGET_DIR:-target}/release/paxsql
fi
DIR=$(mktemp -d /tmp/paxsql-large-XXXX)
SAMPLER=""
trap '[ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null; "$PAXSQL_BIN" cluster down --dir "$DIR" >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
unset MYSQL_PWD
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PAXSQL_BIN" cluster up --nodes 3 --dir "$DIR" --base-port "$BASE" >/dev/null
. bench/cluster.sh
PW=$(app_password)
M=$(master)
sql() { MYSQL_PWD=$PW mariadb -h127.0.0.1 -P"$1" -uapp -N -B app -e "$2"; }
RW=$(endpoint "$M" proxy_rw)
ROWS=$(( SIZE_MIB * 1024 * 1024 / 1040 ))
sql "$RW" "CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR(1000)) ENGINE=InnoDB"
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$(cat "$DIR/n$1/node.pid")/status" 2>/dev/null || echo 0; }
sleep 2
for n in 1 2 3; do echo "node $n RSS before: $(( $(rss_kb "$n") / 1024 )) MB"; done
( while true; do echo "$(rss_kb 1) $(rss_kb 2) $(rss_kb 3)"; sleep 0.5; done ) > "$DIR/rss" &
SAMPLER=$!
echo "master node $M: INSERT ... SELECT of $ROWS rows (~$SIZE_MIB MiB of binlog) through its RW port"
t0=$(date +%s%N)
sql "$RW" "INSERT INTO big SELECT seq, REPEAT(CHAR(65 + seq % 26), 997) FROM seq_1_to_$ROWS"
t1=$(date +%s%N)
echo "commit acknowledged after $(( (t1 - t0) / 1000000 )) ms"
want="$ROWS"
for n in 1 2 3; do
  RO=$(endpoint "$n" proxy_ro)
  for _ in $(seq 1 1200); do
    [ "$(sql "$RO" "SELECT COUNT(*) FROM big" 2>/dev/null || true)" = "$want" ] && break
    sleep 0.5
  done
done
t2=$(date +%s%N)
echo "every node holds it $(( (t2 - t0) / 1000000 )) ms after the statement was sent"
kill "$SAMPLER"; SAMPLER=""
python3 - "$DIR/rss" <<'PY'
import sys
rows = [list(map(int, l.split())) for l in open(sys.argv[1]) if len(l.split()) == 3]
for n in range(3):
    first, peak = rows[0][n], max(r[n] for r in rows)
    print(f"node {n + 1}: RSS {first / 1024:.0f} MB before, peak {peak / 1024:.0f} MB (+{(peak - first) / 1024:.0f} MB)")
PY
for n in 1 2 3; do
  RO=$(endpoint "$n" proxy_ro)
  echo "node $n: $(sql "$RO" "SELECT COUNT(*), SUM(CRC32(v)) FROM big")"
done
