#!/usr/bin/env bash
# Where a write's time goes (issue 13): sysbench oltp_insert through the master node's RW port of a fresh 3-node
# cluster at 1 and 64 threads, and for each run the master's `paxsql_write_hop_seconds` histograms (scraped from
# /metrics before and after) as a table: per hop, transactions, mean, p50 and p99 (bucket upper bounds), beside
# sysbench's own latency. Hops: inbox (captured -> driver inbox), propose (-> proposed to Paxos), choose
# (-> chosen, applied, seen by the ACK task), ack (-> ACK handed to its writer; per ACKed batch). Then the parts of
# the Paxos rounds inside `choose` (`paxsql_paxos_round_seconds`), on the master and on one replica:
# peer_round_trip (leader: Accept sent -> first peer's Accepted taken), accept_service (Accept taken -> Accepted
# sent, the record synced), store_write_synced / store_write_unsynced (one batch written to the store).
# Usage: bench/write-path/run.sh [SECONDS=20] [BASE_PORT=29700]. Run on a quiet machine. PAXSQL_BIN runs another
# build (e.g. an older one, for a before/after comparison in one sitting).
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-20}
BASE=${2:-29700}
if [ -z "${PAXSQL_BIN:-}" ]; then
  cargo build --release -q --locked -p paxsql
fi
BIN=${PAXSQL_BIN:-${CARGO_TARGET_DIR:-target}/release/paxsql}
DIR=$(mktemp -d /tmp/paxsql-hops-XXXX)
trap '"$BIN" cluster down --dir "$DIR/c" >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); tree $(git rev-parse --short HEAD 2>/dev/null || echo '?'), binary $BIN"
"$BIN" cluster up --nodes 3 --dir "$DIR/c" --base-port "$BASE" >/dev/null 2>&1
PW=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['app_password'])" "$DIR/c/cluster.json")
M=$("$BIN" cluster status --dir "$DIR/c" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['master'])")
RW=$((BASE + 10 * (M - 1) + 4))
METRICS="http://127.0.0.1:$((BASE + 10 * (M - 1) + 6))/metrics"
R=$(( M % 3 + 1 ))
REPLICA_METRICS="http://127.0.0.1:$((BASE + 10 * (R - 1) + 6))/metrics"
SB=(sysbench oltp_insert --tables=4 --table-size=1000 --mysql-host=127.0.0.1 --mysql-port="$RW" --mysql-user=app
    --mysql-password="$PW" --mysql-db=app --db-ps-mode=disable)
"${SB[@]}" prepare >/dev/null
for threads in 1 64; do
  curl -s "$METRICS" > "$DIR/before"
  curl -s "$REPLICA_METRICS" > "$DIR/replica-before"
  "${SB[@]}" --threads="$threads" --time="$SECS" --percentile=50 run > "$DIR/sb"
  curl -s "$METRICS" > "$DIR/after"
  curl -s "$REPLICA_METRICS" > "$DIR/replica-after"
  tps=$(grep -oP 'transactions:\s+\d+\s+\(\K[0-9.]+' "$DIR/sb")
  p50=$(grep -oP '50th percentile:\s+\K[0-9.]+' "$DIR/sb")
  avg=$(grep -oP 'avg:\s+\K[0-9.]+' "$DIR/sb")
  echo
  echo "oltp_insert, $threads thread(s), ${SECS} s through node $M's RW port: $tps TPS, client latency avg $avg ms, p50 $p50 ms"
  python3 - "$DIR" "$M" "$R" <<'PY'
import re, sys
d, master, replica = sys.argv[1], sys.argv[2], sys.argv[3]
def parse(path, family, key):
    h = {}
    for line in open(path):
        m = re.match(family + r'_(bucket|sum|count)\{([^}]*)\} (\S+)', line)
        if not m:
            continue
        kind, labels, v = m.group(1), dict(re.findall(r'(\w+)="([^"]*)"', m.group(2))), float(m.group(3))
        e = h.setdefault(labels[key], {'buckets': {}, 'sum': 0.0, 'count': 0.0})
        if kind == 'bucket':
            e['buckets'][float('inf') if labels['le'] == '+Inf' else float(labels['le'])] = v
        else:
            e[kind] = v
    return h
def q(buckets, count, p):
    for le in sorted(buckets):
        if buckets[le] >= p * count:
            return le
    return float('inf')
def table(before, after, family, key, names, unit):
    a, b = parse(before, family, key), parse(after, family, key)
    print(f"  {key:<21} {'count':>9} {'mean ms':>9} {'p50 ms':>8} {'p99 ms':>8}")
    total = 0.0
    for name in names:
        if name not in b:
            continue
        e0 = a.get(name, {'buckets': {}, 'sum': 0.0, 'count': 0.0})
        count = b[name]['count'] - e0['count']
        if count <= 0:
            continue
        mean = (b[name]['sum'] - e0['sum']) / count * 1000
        bk = {le: v - e0['buckets'].get(le, 0.0) for le, v in b[name]['buckets'].items()}
        total += mean
        print(f"  {name:<21} {count:>9.0f} {mean:>9.3f} {q(bk, count, 0.5)*1000:>8.3f} {q(bk, count, 0.99)*1000:>8.3f}")
    return total
total = table(f"{d}/before", f"{d}/after", 'paxsql_write_hop_seconds', 'hop', ['inbox', 'propose', 'choose', 'ack'], 'ms')
print(f"  sum of the hop means: {total:.3f} ms (capture to ACK inside the node)")
parts = ['peer_round_trip', 'accept_service', 'store_write_synced', 'store_write_unsynced']
print(f"  Paxos rounds on the master (node {master}):")
table(f"{d}/before", f"{d}/after", 'paxsql_paxos_round_seconds', 'part', parts, 'ms')
print(f"  Paxos rounds on a replica (node {replica}):")
table(f"{d}/replica-before", f"{d}/replica-after", 'paxsql_paxos_round_seconds', 'part', parts, 'ms')
PY
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
