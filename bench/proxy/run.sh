#!/usr/bin/env bash
# Proxy overhead: sysbench oltp_point_select (4 tables x 10000 rows) against one real mariadbd, directly and
# through crates/proxy's standalone example (splice forwarding, then copy_bidirectional), and the TPS ratios.
# Usage: bench/proxy/run.sh [SECONDS=30] [THREADS=8] [BASE_PORT=31950]   (env PROXY_THREADS: proxy runtime threads, default 1)
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_RUN=${1:-30}
THREADS=${2:-8}
BASE=${3:-31950}
DB_PORT=$BASE
SPLICE_PORT=$((BASE + 1))
COPY_PORT=$((BASE + 2))
SOCAT_PORT=$((BASE + 3))
PROXY_THREADS=${PROXY_THREADS:-1}
TARGET=${CARGO_TARGET_DIR:-target}
for tool in mariadbd mariadb-install-db mariadb-admin sysbench; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || { echo "missing $tool: run deploy/install-deps.sh" >&2; exit 1; }
done
export PATH="$PATH:/usr/sbin"
cargo build --release -q -p paxsql-proxy --example standalone_proxy
PROXY_BIN=$TARGET/release/examples/standalone_proxy

DIR=$(mktemp -d /tmp/paxsql-proxy-bench-XXXX)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT

USER_OPT=()
[ "$(id -u)" = 0 ] && USER_OPT=(--user=root)
cat > "$DIR/my.cnf" <<CNF
[mariadbd]
datadir=$DIR/data
socket=$DIR/mysqld.sock
port=$DB_PORT
bind-address=127.0.0.1
log-error=$DIR/error.log
pid-file=$DIR/mysqld.pid
skip-name-resolve
innodb_buffer_pool_size=256M
innodb_use_native_aio=OFF
performance_schema=OFF
max_connections=200
CNF
mariadb-install-db --defaults-file="$DIR/my.cnf" "${USER_OPT[@]}" --auth-root-authentication-method=normal \
  --skip-test-db >"$DIR/install.log" 2>&1
mariadbd --defaults-file="$DIR/my.cnf" "${USER_OPT[@]}" >"$DIR/stdout.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 300); do
  mariadb-admin --no-defaults -S "$DIR/mysqld.sock" -uroot ping >/dev/null 2>&1 && break
  sleep 0.2
done
mariadb --no-defaults -S "$DIR/mysqld.sock" -uroot -e "CREATE DATABASE sbtest;
  CREATE USER sb@'127.0.0.1' IDENTIFIED BY 'sb'; GRANT ALL ON sbtest.* TO sb@'127.0.0.1'"

"$PROXY_BIN" --backend "127.0.0.1:$DB_PORT" --rw "127.0.0.1:$SPLICE_PORT" --mode splice --threads "$PROXY_THREADS" >"$DIR/splice.log" 2>&1 &
PIDS+=($!)
"$PROXY_BIN" --backend "127.0.0.1:$DB_PORT" --rw "127.0.0.1:$COPY_PORT" --mode copy --threads "$PROXY_THREADS" >"$DIR/copy.log" 2>&1 &
PIDS+=($!)

# Reference hop: socat (a process per connection, read/write loop) shows what any user-space L4 proxy costs here.
HAVE_SOCAT=0
if command -v socat >/dev/null; then
  socat TCP-LISTEN:"$SOCAT_PORT",bind=127.0.0.1,fork,reuseaddr,nodelay TCP:127.0.0.1:"$DB_PORT",nodelay &
  PIDS+=($!)
  HAVE_SOCAT=1
fi

sb() {
  sysbench oltp_point_select --db-driver=mysql --mysql-host=127.0.0.1 --mysql-port="$1" --mysql-user=sb \
    --mysql-password=sb --mysql-db=sbtest --tables=4 --table-size=10000 --threads="$THREADS" \
    --time="$SECONDS_RUN" --report-interval=0 "$2"
}
tps() { sed -n 's/.*transactions: *[0-9]* *(\([0-9.]*\) per sec.).*/\1/p'; }

sb "$DB_PORT" prepare >"$DIR/prepare.log"
sleep 0.5
echo "oltp_point_select, $THREADS threads, proxy with $PROXY_THREADS runtime thread(s), $SECONDS_RUN s each, 4 tables x 10000 rows; machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
DIRECT=$(sb "$DB_PORT" run | tps)
echo "direct:                  $DIRECT tps"
SPLICE=$(sb "$SPLICE_PORT" run | tps)
echo "proxy (splice):          $SPLICE tps"
COPY=$(sb "$COPY_PORT" run | tps)
echo "proxy (copy_bidirectional): $COPY tps"
SOCAT=0
if [ "$HAVE_SOCAT" = 1 ]; then
  SOCAT=$(sb "$SOCAT_PORT" run | tps)
  echo "socat (reference hop):   $SOCAT tps"
fi
DIRECT2=$(sb "$DB_PORT" run | tps)
echo "direct (again):          $DIRECT2 tps"
python3 - "$DIRECT" "$DIRECT2" "$SPLICE" "$COPY" "$SOCAT" <<'PY'
import sys
d1, d2, s, c, so = map(float, sys.argv[1:])
d = (d1 + d2) / 2
print(f"ratio splice/direct = {s / d:.3f}, copy/direct = {c / d:.3f}, socat/direct = {so / d:.3f}"
      " (direct = mean of both direct runs; target >= 0.97)")
PY
