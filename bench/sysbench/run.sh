#!/usr/bin/env bash
# sysbench: paxsql (3 nodes) vs MariaDB lossless semi-sync (master + 2 replicas) vs a standalone MariaDB, same
# MariaDB settings and same data, one system at a time on this machine (each is started, measured and stopped
# before the next starts, so no idle server holds CPU, memory or page cache while another is measured).
# Then replica apply lag under sustained oltp_insert load for semi-sync and paxsql, a table and an SVG plot.
#
# Usage: bench/sysbench/run.sh [--short] [--systems "standalone semisync paxsql"]
#   --short        ~8 s per run, 4 test/thread combos, small tables: under 5 minutes in all
#   --combos "oltp_insert:1 oltp_insert:64"   only these test:threads runs (default: every one of the mode)
#   --no-lag       skip the replica lag runs
# Environment:
#   BASE_PORT=28000          standalone: BASE; semi-sync: BASE+10, +20, +30; paxsql: `cluster up --base-port BASE+100`
#   PAXSQL_ENDPOINT=mariadb  where sysbench connects on paxsql: `mariadb` = the master's mariadbd, `proxy` = the
#                            master node's proxy RW port (+4), or a port number
#   LAG_RATE=500             the second lag run offers this many TPS to every system (same load, comparable lag)
#   RESULTS=bench/sysbench/results/<UTC time>   output directory; its summary.md is the section for bench/RESULTS.md
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
HERE=$ROOT/bench/sysbench

MODE=full
ONLY_COMBOS=""
NO_LAG=""
SYSTEMS="standalone semisync paxsql"
while [ $# -gt 0 ]; do
  case $1 in
    --short) MODE=short ;;
    --systems) SYSTEMS=$2; shift ;;
    --combos) ONLY_COMBOS=$2; shift ;;
    --no-lag) NO_LAG=1 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
# Below 32768, the ephemeral range (paxsql's nodes use BASE+100 .. BASE+126).
BASE=${BASE_PORT:-28000}
PAXSQL_ENDPOINT=${PAXSQL_ENDPOINT:-mariadb}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS=${RESULTS:-$HERE/results/$STAMP-$MODE}

if [ "$MODE" = short ]; then
  SECONDS_PER_RUN=8; WARMUP=4; LAG_SECONDS=10; TABLES=4; TABLE_SIZE=10000
  COMBOS="oltp_insert:1 oltp_insert:64 oltp_read_write:16 oltp_point_select:16"
else
  SECONDS_PER_RUN=60; WARMUP=20; LAG_SECONDS=60; TABLES=4; TABLE_SIZE=25000
  COMBOS=""
  for t in oltp_insert oltp_read_write oltp_point_select; do for n in 1 16 64; do COMBOS+="$t:$n "; done; done
fi
[ -z "$ONLY_COMBOS" ] || COMBOS=$ONLY_COMBOS
LAG_THREADS=16
LAG_RATE=${LAG_RATE:-500}   # second lag run: the same offered load (TPS) on every system

command -v sysbench >/dev/null || { echo "sysbench missing: run deploy/install-deps.sh" >&2; exit 1; }
cargo build --release -q -p paxsql
PAXSQL=$(realpath "${CARGO_TARGET_DIR:-target}/release/paxsql")
mkdir -p "$RESULTS"
WORK=$(mktemp -d /tmp/paxsql-sysbench-XXXX)   # data directories: on the same disk as a real deployment's
TOOLS="python3 $HERE/tools.py"

# --- cleanup: every process this script starts is recorded here and stopped on exit, failure or Ctrl-C ---------
PIDS=()          # mariadbd, sysbench and sampler processes
CLUSTER_DIR=""   # a running paxsql cluster
cleanup() {
  trap - EXIT INT TERM
  save_logs
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
  if [ -n "$CLUSTER_DIR" ]; then "$PAXSQL" cluster down --dir "$CLUSTER_DIR" >/dev/null 2>&1 || true; CLUSTER_DIR=""; fi
  kill_leftovers
  rm -rf "$WORK"
}
# Safety net: a process started with a file of our private $WORK directory on its command line is ours (e.g. a
# mariadbd a failed `cluster up` left running during its initialisation, whose pid file `cluster down` never sees).
kill_leftovers() {
  local c p
  for c in /proc/[0-9]*/cmdline; do
    p=${c#/proc/}; p=${p%/cmdline}
    [ "$p" != $$ ] && { tr '\0' ' ' <"$c"; } 2>/dev/null | grep -qF -- "$WORK/" && kill -9 "$p" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM
forget() { local keep=() p; for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done; PIDS=("${keep[@]}"); }

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# --- MariaDB settings shared by every system: the paxsql recipe (crates/cli/src/cluster.rs `my_cnf`) ------------
# Checked against the cluster's generated my.cnf when paxsql runs (see check_settings).
SHARED_SETTINGS="gtid_domain_id=0
gtid_strict_mode=ON
log_slave_updates=ON
binlog_format=ROW
sync_binlog=1
innodb_flush_log_at_trx_commit=1
skip-name-resolve
slave_parallel_threads=16
slave_parallel_mode=optimistic
max_allowed_packet=64M
slave_max_allowed_packet=1G
innodb_buffer_pool_size=64M
innodb_log_file_size=32M
performance_schema=OFF"

# my_cnf NAME ID PORT EXTRA-LINES
my_cnf() {
  local d=$WORK/$1
  mkdir -p "$d/data" "$d/run" "$d/log" "$d/tmp"
  cat >"$d/my.cnf" <<EOF
[mariadbd]
user=root
bind-address=127.0.0.1
port=$3
socket=$d/run/mysqld.sock
datadir=$d/data
tmpdir=$d/tmp
log-error=$d/log/mariadbd.err
pid-file=$d/data/mariadbd.pid
log-bin=$1-bin
log-bin-index=$1-bin.index
relay-log=$1-relay-bin
relay-log-index=$1-relay-bin.index
server-id=$2
$SHARED_SETTINGS
$4
EOF
}

root_sql() { mariadb --socket="$WORK/$1/run/mysqld.sock" -uroot -N -B -e "$2"; }

# start_mariadb NAME: initialise the data directory, start mariadbd, create the app account with the binlog off.
start_mariadb() {
  local d=$WORK/$1
  mariadb-install-db --defaults-file="$d/my.cnf" --auth-root-authentication-method=socket --skip-test-db \
    >"$d/log/install.log" 2>&1
  mariadbd --defaults-file="$d/my.cnf" </dev/null >/dev/null 2>&1 &
  PIDS+=($!)
  local i
  for i in $(seq 1 300); do
    root_sql "$1" "SELECT 1" >/dev/null 2>&1 && break
    kill -0 "${PIDS[-1]}" 2>/dev/null || { echo "mariadbd $1 exited; see $d/log/mariadbd.err" >&2; exit 1; }
    sleep 0.2
  done
  root_sql "$1" "SET sql_log_bin=0; CREATE DATABASE app; CREATE USER 'app'@'%' IDENTIFIED BY '$APP_PW';
    GRANT ALL PRIVILEGES ON app.* TO 'app'@'%';
    CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY '$APP_PW'; GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1';"
}

# --- one system at a time ----------------------------------------------------------------------------------------
# Each `up_*` sets: PORT (where sysbench connects), MASTER_SQL (host:port of the master's mariadbd for GTID sampling),
# REPLICAS ("name=host:port ..." or "name=/socket/path ..."), PROCS ("name=pid ..." for the CPU split), export MYSQL_PWD.
APP_PW=bench-$RANDOM$RANDOM

up_standalone() {
  my_cnf standalone 1 "$BASE" ""
  start_mariadb standalone
  PORT=$BASE; MASTER_SQL=127.0.0.1:$BASE; REPLICAS=""; PROCS="mariadbd=$(cat "$WORK/standalone/data/mariadbd.pid")"
  export MYSQL_PWD=$APP_PW
}

up_semisync() {
  local mport=$((BASE + 10)) r
  # Lossless semi-sync: ACK after the binlog fsync, before the engine commit; never fall back to async; MariaDB
  # waits for one replica's ACK (it has no setting for more).
  my_cnf semi-m 1 "$mport" "rpl_semi_sync_master_enabled=ON
rpl_semi_sync_master_wait_point=AFTER_SYNC
rpl_semi_sync_master_timeout=18446744073709551615
rpl_semi_sync_master_wait_no_slave=ON"
  for r in 1 2; do
    my_cnf "semi-r$r" $((1 + r)) $((mport + 10 * r)) "rpl_semi_sync_slave_enabled=ON
read_only=ON
skip-slave-start"
  done
  start_mariadb semi-m
  for r in 1 2; do
    start_mariadb "semi-r$r"
    root_sql "semi-r$r" "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=$mport, MASTER_USER='repl',
      MASTER_PASSWORD='$APP_PW', MASTER_USE_GTID=slave_pos; START SLAVE;"
  done
  local i clients=0
  for i in $(seq 1 150); do
    clients=$(root_sql semi-m "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'" | cut -f2)
    [ "$clients" = 2 ] && break
    sleep 0.2
  done
  [ "$clients" = 2 ] || { echo "semi-sync: only $clients replicas connected" >&2; exit 1; }
  PORT=$mport; MASTER_SQL=127.0.0.1:$mport
  REPLICAS="semi-r1=127.0.0.1:$((mport + 10)) semi-r2=127.0.0.1:$((mport + 20))"
  PROCS=""
  for n in semi-m semi-r1 semi-r2; do PROCS+="$n=$(cat "$WORK/$n/data/mariadbd.pid") "; done
  export MYSQL_PWD=$APP_PW
}

# Where the paxsql master is now: PORT, MASTER_SQL, MASTER_NODE, REPLICAS, PROCS (it may move after a failover).
paxsql_endpoints() {
  local m n i
  for i in $(seq 1 150); do
    m=$("$PAXSQL" cluster status --dir "$CLUSTER_DIR" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['master'] or '')")
    [ -n "$m" ] && break
    sleep 0.2
  done
  [ -n "$m" ] || { echo "paxsql: no master" >&2; exit 1; }
  local mport=$((BASE + 100 + 10 * (m - 1)))
  case $PAXSQL_ENDPOINT in
    mariadb) PORT=$mport ;;
    proxy) PORT=$((mport + 4)) ;;
    *) PORT=$PAXSQL_ENDPOINT ;;
  esac
  MASTER_SQL=127.0.0.1:$mport; MASTER_NODE=$m
  REPLICAS=""; PROCS=""
  for n in 1 2 3; do
    [ "$n" = "$m" ] || REPLICAS+="paxsql-n$n=$CLUSTER_DIR/n$n/run/mysqld.sock "
    PROCS+="n$n-mariadbd=$(cat "$CLUSTER_DIR/n$n/data/mariadbd.pid") n$n-node=$(cat "$CLUSTER_DIR/n$n/node.pid") "
  done
}

up_paxsql() {
  CLUSTER_DIR=$WORK/paxsql
  # `cluster up` talks to its fresh servers without a password: a MYSQL_PWD of ours would break that.
  env -u MYSQL_PWD "$PAXSQL" cluster up --nodes 3 --dir "$CLUSTER_DIR" --base-port $((BASE + 100)) >"$RESULTS/paxsql-cluster-up.log" 2>&1
  paxsql_endpoints
  MYSQL_PWD=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['app_password'])" "$CLUSTER_DIR/cluster.json")
  export MYSQL_PWD
  check_settings "$CLUSTER_DIR/n$MASTER_NODE/my.cnf"
}

# The comparison is only fair if the settings really are the same: compare ours with what `cluster up` wrote.
check_settings() {
  local line key ours theirs bad=0
  while IFS= read -r line; do
    key=${line%%=*}
    ours=${line#*=}
    theirs=$(grep -E "^$key(=|$)" "$1" | tail -1)
    theirs=${theirs#*=}
    if [ "$theirs" != "$ours" ] && ! [ "$line" = "$key" ] ; then
      echo "settings differ: $key = $ours here, '${theirs}' in paxsql's my.cnf" | tee -a "$RESULTS/settings-check.txt" >&2
      bad=1
    fi
  done <<<"$SHARED_SETTINGS"
  [ $bad = 1 ] || echo "all shared settings equal to paxsql's $(basename "$1")" >"$RESULTS/settings-check.txt"
}

# Keep the servers' logs (a failed or surprising run is explained there) in the current system's results.
save_logs() {
  local n p
  [ -n "${SYS_RESULTS:-}" ] || return 0
  for n in "$WORK"/*/log/mariadbd.err "$WORK"/paxsql/n*/log/*.log "$WORK"/paxsql/n*/log/mariadbd.err; do
    [ -f "$n" ] || continue
    p=${n#"$WORK"/}
    mkdir -p "$SYS_RESULTS/logs"
    sed 's/\x1b\[[0-9;]*m//g' "$n" | gzip >"$SYS_RESULTS/logs/${p//\//_}.gz"
  done
}

down_system() {
  local p n
  save_logs
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  PIDS=()
  if [ -n "$CLUSTER_DIR" ]; then "$PAXSQL" cluster down --dir "$CLUSTER_DIR" >/dev/null 2>&1 || true; CLUSTER_DIR=""; fi
  kill_leftovers
  rm -rf "${WORK:?}"/*
}

# --- sysbench ----------------------------------------------------------------------------------------------------
sb() { # sb TEST THREADS SECONDS OUT COMMAND (prepare|run)
  local test=$1 threads=$2 secs=$3 out=$4
  shift 4
  sysbench "$test" --db-driver=mysql --mysql-host=127.0.0.1 --mysql-port="$PORT" --mysql-user=app \
    --mysql-password="$MYSQL_PWD" --mysql-db=app --tables=$TABLES --table-size=$TABLE_SIZE \
    --threads="$threads" --time="$secs" --percentile=95 --report-interval=1 "$@" >"$out" 2>&1 &
  local p=$!
  PIDS+=($p)
  if wait $p; then forget $p; return 0; fi
  forget $p
  # paxsql only: a master that drops its mariadbd (seen on a CPU-starved machine: the lease lapses and the node
  # demotes itself with SIGKILL) fails the run; keep the failed output, wait for a master, run once more.
  if [ -n "$CLUSTER_DIR" ] && [ "${SB_RETRY:-0}" = 0 ]; then
    mv "$out" "$out.failed"
    echo "sysbench $test failed on paxsql (kept as $(basename "$out").failed); retrying once" >&2
    echo "$(date -u +%H:%M:%S) $test $threads threads: failed, retried (first attempt: $(basename "$out").failed)" \
      >>"$(dirname "$out")/retries.txt"
    sleep 2
    paxsql_endpoints
    SB_RETRY=1 sb "$test" "$threads" "$secs" "$out" "$@"
    return
  fi
  echo "sysbench $test failed; see $out" >&2; tail -5 "$out" >&2
  [ "${1:-}" = prepare ] && exit 1   # (after the shift, $1 is the sysbench command)
  echo "$(date -u +%H:%M:%S) $test $threads threads: failed (after any retry), no result" >>"$(dirname "$out")/retries.txt"
  return 1   # a measurement that failed twice: recorded, the suite goes on
}

# Snapshot for the profile: CPU of each process, the whole machine's CPU, disk writes and flushes, MariaDB counters.
snapshot() {
  $TOOLS snap --procs "$PROCS" >"$1.proc"
  mariadb -h127.0.0.1 -P"${MASTER_SQL#*:}" -uapp -N -B -e "SHOW GLOBAL STATUS WHERE Variable_name IN
    ('Binlog_commits','Binlog_group_commits','Rpl_semi_sync_master_tx_avg_wait_time','Rpl_semi_sync_master_tx_waits',
     'Rpl_semi_sync_master_net_avg_wait_time','Rpl_semi_sync_master_yes_tx','Rpl_semi_sync_master_no_tx',
     'Innodb_data_fsyncs','Com_insert','Com_commit')" >"$1.status"
  # Replicas: how many transactions each commits per binlog group (the fsyncs apply costs on the shared disk).
  local r where
  for r in $REPLICAS; do
    where=${r#*=}
    case $where in /*) where="--socket=$where" ;; *) where="-h${where%:*} -P${where##*:}" ;; esac
    # shellcheck disable=SC2086 # $where is two words for a TCP replica
    mariadb $where -uapp -N -B -e "SHOW GLOBAL STATUS WHERE Variable_name IN
      ('Binlog_commits','Binlog_group_commits','Innodb_data_fsyncs')" | sed "s/^/${r%%=*}./" >>"$1.status" || true
  done
  # paxsql: Paxos instances applied on the master's node (transactions per instance = batching)
  if [ -n "$CLUSTER_DIR" ]; then
    python3 -c "import json,sys; print('Paxos_applied_instance\t%d' % json.load(open(sys.argv[1]))['applied_instance'])" \
      "$CLUSTER_DIR/n$MASTER_NODE/node/status.json" >>"$1.status"
  fi
}

# lag_run PREFIX SYSBENCH-ARGS: GTID sampling on master and replicas around one oltp_insert run.
lag_run() {
  # Replicas still behind from the earlier runs would count that backlog as lag: start from caught-up replicas
  # (the sampler with a stop file that already exists returns once they are; how long that took is kept).
  log "$sys: waiting for the replicas to catch up before the lag run"
  touch "$1.pre.stop"
  $TOOLS lag --master "$MASTER_SQL" --replicas "$REPLICAS" --out "$1.pre.csv" --max-seconds 900 \
    --stop-file "$1.pre.stop" >"$1.pre.log" 2>&1 &
  local sampler=$!
  PIDS+=($sampler)
  wait $sampler || true
  forget $sampler
  log "$sys: replica lag under oltp_insert $LAG_THREADS threads ${2:-(unthrottled)}, ${LAG_SECONDS}s"
  $TOOLS lag --master "$MASTER_SQL" --replicas "$REPLICAS" --out "$1.csv" --max-seconds $((LAG_SECONDS + 300)) \
    --stop-file "$1.stop" >"$1.log" 2>&1 &
  sampler=$!
  PIDS+=($sampler)
  sleep 1
  sb oltp_insert "$LAG_THREADS" "$LAG_SECONDS" "$1-load.txt" run $2 || true
  touch "$1.stop"   # the sampler goes on until every replica has caught up, then exits
  wait $sampler || true
  forget $sampler
}

# perf_start / perf_stop: count fsync/fdatasync/write calls of every server process during one run (if perf works).
PERF_PIDS=()
perf_start() {
  PERF_PIDS=()
  command -v perf >/dev/null || return 0
  local item
  for item in $PROCS; do
    perf stat -x, -e syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync,syscalls:sys_enter_pwrite64,syscalls:sys_enter_write \
      -p "${item#*=}" -o "$1-${item%%=*}.perf" >/dev/null 2>&1 &
    PIDS+=($!); PERF_PIDS+=($!)
  done
}
perf_stop() {
  local p
  for p in "${PERF_PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; forget "$p"; done
  PERF_PIDS=()
}

run_system() {
  local sys=$1 d=$RESULTS/$1
  mkdir -p "$d"
  SYS_RESULTS=$d
  cat /proc/loadavg >"$d/loadavg-before"
  log "$sys: starting"
  "up_$sys"
  echo "$PORT" >"$d/port"
  log "$sys: prepare ($TABLES x $TABLE_SIZE rows) and warm-up ${WARMUP}s"
  sb oltp_read_write 4 0 "$d/prepare.txt" prepare
  sb oltp_read_write 16 "$WARMUP" "$d/warmup.txt" run || true
  local c
  for c in $COMBOS; do
    local test=${c%%:*} threads=${c#*:}
    log "$sys: $test $threads threads ${SECONDS_PER_RUN}s"
    if [ "$test:$threads" = oltp_insert:64 ]; then snapshot "$d/profile-before"; perf_start "$d/profile"; fi
    sb "$test" "$threads" "$SECONDS_PER_RUN" "$d/$test-$threads.txt" run || true
    if [ "$test:$threads" = oltp_insert:64 ]; then perf_stop; snapshot "$d/profile-after"; fi
  done
  if [ -n "$REPLICAS" ] && [ -z "$NO_LAG" ]; then
    lag_run "$d/lag" ""
    lag_run "$d/lag-rate$LAG_RATE" "--rate=$LAG_RATE"
  fi
  cat /proc/loadavg >"$d/loadavg-after"
  log "$sys: stopping"
  down_system
}

{
  echo "mode: $MODE"
  echo "command: bench/sysbench/run.sh $([ $MODE = short ] && echo --short) (BASE_PORT=$BASE PAXSQL_ENDPOINT=$PAXSQL_ENDPOINT)"
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $(uname -sr), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "mariadb: $(mariadbd --version | sed 's/.*Ver //')"
  echo "sysbench: $(sysbench --version)"
  echo "paxsql: $(git rev-parse --short HEAD)"
  echo "runs: $SECONDS_PER_RUN s each after prepare ($TABLES tables x $TABLE_SIZE rows) and ${WARMUP} s oltp_read_write warm-up; lag: oltp_insert $LAG_THREADS threads ${LAG_SECONDS} s unthrottled, then at --rate=$LAG_RATE"
  echo "paxsql endpoint: $PAXSQL_ENDPOINT"
} >"$RESULTS/meta.txt"

for s in $SYSTEMS; do run_system "$s"; done
$TOOLS report --results "$RESULTS"
log "results in $RESULTS"
