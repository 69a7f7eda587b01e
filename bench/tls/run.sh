#!/usr/bin/env bash
# Client TLS cost: sysbench oltp_point_select and oltp_insert through the master node's RW port of a 3-node paxsql
# cluster, without and with TLS (terminated by the proxy), side by side in one invocation, and the master's mariadbd
# directly as the reference; beside them a standalone MariaDB given the same certificate, without and with its own
# TLS: what TLS costs this client and server at all, whoever ends it; and another node's RW port, whose connections
# reach the master through the master's relay. Modes alternate within each round (RW plain, TLS, other node's RW
# plain, TLS, direct, native plain, native TLS), ROUNDS rounds, medians printed with the ratios. Then where TLS's
# cost lands: CPU per sysbench event of the client (sysbench) and of the server side (the master's node, which ends
# the client's TLS, for the RW ports; the standalone mariadbd for native TLS), from the processes' own CPU times.
# Usage: bench/tls/run.sh [SECONDS=20] [ROUNDS=3] [BASE_PORT=29500]
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_RUN=${1:-20}
ROUNDS=${2:-3}
BASE=${3:-29500}
command -v sysbench >/dev/null || { echo "sysbench missing: run deploy/install-deps.sh" >&2; exit 1; }
cargo build --release -q -p paxsql
PAXSQL=${CARGO_TARGET_DIR:-target}/release/paxsql
DIR=$(mktemp -d /tmp/paxsql-tls-bench-XXXX)
trap '"$PAXSQL" cluster down --dir "$DIR" >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
"$PAXSQL" cluster up --nodes 3 --dir "$DIR" --base-port "$BASE" >/dev/null
PW=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['app_password'])" "$DIR/cluster.json")
M=$("$PAXSQL" cluster status --dir "$DIR" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['master'])")
MARIADB_PORT=$((BASE + 10 * (M - 1)))
RW_PORT=$((MARIADB_PORT + 4))
# Another node's RW port: its connections reach the master's mariadbd through the master's relay (peer port, TLS).
OTHER=$(( M % 3 + 1 ))
OTHER_RW_PORT=$((BASE + 10 * (OTHER - 1) + 4))
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg); master node $M; ${SECONDS_RUN} s per run, $ROUNDS rounds"

# sysbench 1.0.20 with --mysql-ssl=on loads client-key.pem, client-cert.pem and cacert.pem from its working directory
# (fixed names): the cluster CA, and the operator's certificate as a client certificate the proxy does not ask for.
SSLDIR=$DIR/sysbench-ssl
mkdir -p "$SSLDIR"
cp "$DIR/tls/ca.pem" "$SSLDIR/cacert.pem"
cp "$DIR/tls/operator.pem" "$SSLDIR/client-cert.pem"
cp "$DIR/tls/operator.key" "$SSLDIR/client-key.pem"
sb() { # test threads port extra...
  local test=$1 threads=$2 port=$3; shift 3
  (cd "$SSLDIR" && sysbench "$test" --db-driver=mysql --mysql-host=127.0.0.1 --mysql-port="$port" --mysql-user=app \
    --mysql-password="$PW" --mysql-db=app --tables=4 --table-size=10000 --threads="$threads" "$@")
}
sb oltp_insert 4 "$RW_PORT" --mysql-ssl=off prepare >/dev/null

# The standalone MariaDB with native TLS: node 1's client certificate names 127.0.0.1 and localhost.
NATIVE=$DIR/native
NATIVE_PORT=$((BASE + 90))
mkdir -p "$NATIVE/data" "$NATIVE/run" "$NATIVE/log" "$NATIVE/tmp"
printf '%s\n' "[mariadbd]" "user=root" "bind-address=127.0.0.1" "port=$NATIVE_PORT" \
  "socket=$NATIVE/run/mysqld.sock" "datadir=$NATIVE/data" "tmpdir=$NATIVE/tmp" "log-error=$NATIVE/log/mariadbd.err" \
  "pid-file=$NATIVE/data/mariadbd.pid" "skip-name-resolve" "innodb_buffer_pool_size=64M" "performance_schema=OFF" \
  "ssl-ca=$DIR/tls/ca.pem" "ssl-cert=$DIR/tls/node-1-clients.pem" "ssl-key=$DIR/tls/node-1-clients.key" \
  >"$NATIVE/my.cnf"
mariadb-install-db --defaults-file="$NATIVE/my.cnf" --auth-root-authentication-method=socket --skip-test-db \
  >"$NATIVE/log/install.log" 2>&1
mariadbd --defaults-file="$NATIVE/my.cnf" </dev/null >/dev/null 2>&1 &
NATIVE_PID=$!
trap 'kill -9 $NATIVE_PID 2>/dev/null || true; "$PAXSQL" cluster down --dir "$DIR" >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
native_sql() { mariadb --socket="$NATIVE/run/mysqld.sock" -uroot -N -B -e "$1"; }
for _ in $(seq 1 300); do
  native_sql "SELECT 1" >/dev/null 2>&1 && break
  kill -0 $NATIVE_PID 2>/dev/null || { echo "native mariadbd exited; see $NATIVE/log/mariadbd.err" >&2; exit 1; }
  sleep 0.2
done
native_sql "CREATE DATABASE app; CREATE USER 'app'@'%' IDENTIFIED BY '$PW'; GRANT ALL PRIVILEGES ON app.* TO 'app'@'%';"
[ "$(native_sql "SELECT @@have_ssl")" = YES ] || { echo "the native mariadbd has no TLS" >&2; exit 1; }
sb oltp_insert 4 "$NATIVE_PORT" --mysql-ssl=off prepare >/dev/null
# Every sysbench connection through the RW port with --mysql-ssl=on must really be in TLS: the proxy counts them.
tls_sessions() { curl -s "http://127.0.0.1:$((MARIADB_PORT + 6))/metrics" | awk '/^paxsql_proxy_tls_sessions_total/ {print $2}'; }

# CPU time in clock ticks of a process (user + system).
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
NODE_PID=$(cat "$DIR/n$M/node.pid")
TICK_US=$((1000000 / $(getconf CLK_TCK)))
OUT=$DIR/runs.txt
: > "$OUT"
for round in $(seq 1 "$ROUNDS"); do
  for combo in oltp_point_select:1 oltp_point_select:16 oltp_insert:16; do
    test=${combo%%:*}; threads=${combo##*:}
    for mode in plain tls relay_plain relay_tls direct native_plain native_tls; do
      case $mode in
        plain) port=$RW_PORT; ssl=off ;;
        tls) port=$RW_PORT; ssl=on ;;
        relay_plain) port=$OTHER_RW_PORT; ssl=off ;;
        relay_tls) port=$OTHER_RW_PORT; ssl=on ;;
        direct) port=$MARIADB_PORT; ssl=off ;;
        native_plain) port=$NATIVE_PORT; ssl=off ;;
        native_tls) port=$NATIVE_PORT; ssl=on ;;
      esac
      case $mode in native_*) server=$NATIVE_PID ;; direct) server="" ;; *) server=$NODE_PID ;; esac
      before=$(tls_sessions)
      server_before=$([ -z "$server" ] || ticks "$server")
      # `times` in a subshell of its own (not in a pipe, which would fork it afresh): the CPU of the children that
      # subshell waited for, i.e. sysbench.
      if ! (sb "$test" "$threads" "$port" --mysql-ssl=$ssl --time="$SECONDS_RUN" --report-interval=0 run >"$DIR/sb.out"
        times >"$DIR/times.out"); then
        echo "sysbench $test $threads threads ($mode) failed:" >&2
        tail -20 "$DIR/sb.out" >&2
        exit 1
      fi
      tps=$(awk '/transactions:/ {gsub(/\(/, "", $3); print $3}' "$DIR/sb.out")
      client_s=$(tail -1 "$DIR/times.out" | awk '{split($1 " " $2, t, /[ms ]+/); print t[1] * 60 + t[2] + t[3] * 60 + t[4]}')
      events=$(python3 -c "print(max(1.0, float('$tps') * $SECONDS_RUN))")
      client_us=$(python3 -c "print(round($client_s * 1e6 / $events, 1))")
      server_us=-
      [ -z "$server" ] || server_us=$(python3 -c "print(round(($(ticks "$server") - $server_before) * $TICK_US / $events, 1))")
      after=$(tls_sessions)
      if [ "$mode" = tls ] && [ "$((${after%.*} - ${before%.*}))" -lt "$threads" ]; then
        echo "sysbench --mysql-ssl=on opened $((${after%.*} - ${before%.*})) TLS sessions for $threads threads" >&2
        exit 1
      fi
      echo "$test $threads $mode $tps $client_us $server_us" | tee -a "$OUT"
    done
  done
done
python3 - "$OUT" <<'PY'
import statistics, sys
runs, cpu = {}, {}
for line in open(sys.argv[1]):
    test, threads, mode, tps, client_us, server_us = line.split()
    runs.setdefault((test, int(threads)), {}).setdefault(mode, []).append(float(tps))
    cpu.setdefault((test, int(threads)), {}).setdefault(mode, []).append((float(client_us), server_us))
print()
print("| test | threads | direct TPS | RW plain TPS | RW TLS TPS | TLS / plain | plain / direct "
      "| native plain TPS | native TLS TPS | native TLS / plain "
      "| other node's RW plain TPS | its TLS TPS | relay plain / RW plain | relay TLS / RW TLS |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for (test, threads), m in runs.items():
    d, p, t, n_p, n_t, r_p, r_t = (statistics.median(m[k]) for k in
        ("direct", "plain", "tls", "native_plain", "native_tls", "relay_plain", "relay_tls"))
    print(f"| {test} | {threads} | {d:,.0f} | {p:,.0f} | {t:,.0f} | {t / p:.3f} | {p / d:.3f} "
          f"| {n_p:,.0f} | {n_t:,.0f} | {n_t / n_p:.3f} | {r_p:,.0f} | {r_t:,.0f} | {r_p / p:.3f} | {r_t / t:.3f} |")
print()
print("CPU per sysbench event (median of the rounds, µs): client = sysbench; server = the master's node (RW ports),")
print("the standalone mariadbd (native). TLS adds to each side what the difference shows.")
print()
print("| test | threads | RW plain: client / node | RW TLS: client / node | native plain: client / mariadbd "
      "| native TLS: client / mariadbd |")
print("|---|---:|---|---|---|---|")
def med(xs, i):
    v = [float(x[i]) for x in xs if x[i] != "-"]
    return f"{statistics.median(v):.1f}" if v else "-"
for (test, threads), m in cpu.items():
    cells = [f"{med(m[k], 0)} / {med(m[k], 1)}" for k in ("plain", "tls", "native_plain", "native_tls")]
    print(f"| {test} | {threads} | " + " | ".join(cells) + " |")
PY
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
