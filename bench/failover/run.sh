#!/usr/bin/env bash
# Failover time: kill -9 the master's mariadbd N times and measure, for each kill, the time from the kill to the
# first write acknowledged by the new master (any node may serve the new term). LAN profile, 3 nodes, loopback.
# Usage: bench/failover/run.sh [KILLS=10] [BASE_PORT=27000]
set -euo pipefail
cd "$(dirname "$0")/../.."
KILLS=${1:-10}
BASE=${2:-27000}
cargo build --release -q -p paxsql
PAXSQL=${CARGO_TARGET_DIR:-target}/release/paxsql
DIR=$(mktemp -d /tmp/paxsql-failover-XXXX)
trap '"$PAXSQL" cluster down --dir "$DIR" >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
"$PAXSQL" cluster up --nodes 3 --dir "$DIR" --base-port "$BASE" >/dev/null
PW=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['app_password'])" "$DIR/cluster.json")
export MYSQL_PWD=$PW
master() { "$PAXSQL" cluster status --dir "$DIR" --json | python3 -c "import json,sys; m=json.load(sys.stdin)['master']; print(m if m else '')"; }
port() { echo $((BASE + 10 * ($1 - 1))); }
sql() { timeout "$2" mariadb -h127.0.0.1 -P"$(port "$1")" -uapp -N -B app -e "$3" >/dev/null 2>&1; }
M=$(master)
sql "$M" 10 "CREATE TABLE f (id BIGINT PRIMARY KEY AUTO_INCREMENT, at BIGINT)"
times=()
for k in $(seq 1 "$KILLS"); do
  M=$(master)
  while [ -z "$M" ]; do sleep 0.2; M=$(master); done
  sql "$M" 10 "INSERT INTO f (at) VALUES (0)"        # the cluster is healthy before each kill
  sleep 1
  start=$(date +%s%N)
  kill -9 "$(cat "$DIR/n$M/data/mariadbd.pid")"
  done_=0
  while [ $done_ = 0 ]; do
    for n in 1 2 3; do
      if sql "$n" 0.3 "INSERT INTO f (at) VALUES ($k)"; then done_=1; new=$n; break; fi
    done
  done
  end=$(date +%s%N)
  ms=$(( (end - start) / 1000000 ))
  times+=("$ms")
  echo "kill $k: master node $M -> node $new acknowledged a write after $ms ms"
  sleep 3   # let the old master finish its recovery restart
done
python3 - "${times[@]}" <<'PY'
import statistics, sys
t = sorted(int(x) for x in sys.argv[1:])
print(f"failover over {len(t)} kills: median {statistics.median(t):.0f} ms, min {t[0]} ms, max {t[-1]} ms")
PY
