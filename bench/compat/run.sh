#!/usr/bin/env bash
# Other people's test suites through paxsql: MariaDB's mysql-test-run (`main` suite, --extern mode) and PyMySQL's
# own tests, run directly against a standalone MariaDB 10.11 started from node 1's my.cnf (minus the replica-only
# lines), and then through the RW port of every node of a fresh 3-node cluster. Writes the outcome of every test
# on every target and the list of tests that pass directly and fail through paxsql; exits 1 if there is one.
#
# Usage: bench/compat/run.sh [SELECTION=short|standard|FILE] [OUT=bench/compat/results/<date>-<selection>.txt]
#   short     the CI selection (bench/compat/short.txt: 48 quick mtr tests) and all PyMySQL tests
#   standard  the first 250 tests of `main` that need no server options of their own (no .opt/.cnf/.combinations)
#             and never stop, restart or bootstrap the server (in --extern mode that server is the one under test),
#             nor write the privilege tables directly (one that fails half-way leaves a standalone server without a
#             single account, failing every test after it; through paxsql such writes are refused by design)
#   FILE      one mtr test name per line
# Each target starts from the same schemas: between runs the harness drops what the previous run left behind
# (databases and accounts that were not there at the start), so one run's leftovers never fail the next.
# COMPAT_KEEP=1 keeps the run directory (every log) instead of removing it; COMPAT_SUITES="mtr" (or "pymysql") runs
# one suite only.
# The accounts the suites need (`compat`, ALL PRIVILEGES WITH GRANT OPTION, a random password kept in files of
# mode 0600 under the run directory) exist only on these throwaway servers.
# Needs: mariadb-test (Debian), python3 -m venv, PyPI for pytest and PyMySQL 0.10.1 (the last sdist that ships
# its tests). deploy/install-deps.sh installs the Debian packages.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
SELECTION=${1:-short}
SUITES=${COMPAT_SUITES:-pymysql mtr}
BASE=${COMPAT_BASE_PORT:-25500}
MTR_DIR=/usr/share/mysql/mysql-test
[ -x "$MTR_DIR/mariadb-test-run" ] || { echo "mysql-test-run missing: run deploy/install-deps.sh" >&2; exit 2; }
case "$SELECTION" in
  short) TESTS=$(grep -v '^#' bench/compat/short.txt) ;;
  standard)
    TESTS=$(cd "$MTR_DIR/main" && for t in *.test; do
      b=${t%.test}; skip=0
      for e in .opt -master.opt .cnf .combinations -slave.opt; do [ -e "$b$e" ] && skip=1; done
      grep -q -E 'restart_mysqld|shutdown_mysqld|kill_mysqld|start_mysqld|shutdown_server|restart_abort|MYSQLD_BOOTSTRAP|MYSQLD_CMD|kill_and_restart|expect_crash|crash_mysqld|send_shutdown|\bshutdown\b' "$t" && skip=1
      grep -q -i -E '(truncate|delete from|drop table|update)( table)? +mysql\.(global_priv|user)\b' "$t" && skip=1
      # One statement of more than 16 MiB on a MyISAM table (count_distinct3: ~50 MB INSERT … SELECT; alter_table:
      # a 16 MiB row): larger than one log entry, so through paxsql it costs a hand-over (README, tests/t45_guarantees.rs);
      # with replicas minutes behind (row events on tables without a primary key, e.g. main.delete_use_source) the new
      # master serves only once caught up, and every test meanwhile fails on the hold timeout, which would say
      # nothing about those tests.
      case $b in count_distinct3|alter_table) skip=1 ;; esac
      # Deletes 128,000 rows of a MyISAM table keyed on a non-unique column: each replica then scans the table once
      # per row event, minutes of lag that only lengthen the run (README, "Replicas apply row events").
      [ "$b" = delete_use_source ] && skip=1
      [ $skip = 1 ] || echo "$b"
    done | awk "NR <= 250") ;;
  *) TESTS=$(grep -v '^#' "$SELECTION") ;;
esac
STAMP=$(date -u +%Y%m%d-%H%M)
OUT=${2:-bench/compat/results/$STAMP-$(basename "$SELECTION" .txt).txt}
mkdir -p "$(dirname "$OUT")"

cargo build --release -q -p paxsql
PAXSQL=${CARGO_TARGET_DIR:-target}/release/paxsql
DIR=$(mktemp -d /tmp/paxsql-compat-XXXX)
STANDALONE_PID=
cleanup() {
  "$PAXSQL" cluster down --dir "$DIR/cluster" >/dev/null 2>&1 || true
  [ -n "$STANDALONE_PID" ] && kill "$STANDALONE_PID" 2>/dev/null && wait "$STANDALONE_PID" 2>/dev/null
  if [ -n "${COMPAT_KEEP:-}" ]; then echo "# kept $DIR"; else rm -rf "$DIR"; fi
}
trap cleanup EXIT
echo "# $(date -u +%FT%TZ) selection $SELECTION ($(echo "$TESTS" | wc -w) mtr tests), load $(cut -d' ' -f1-3 /proc/loadavg)"

# --- the cluster, and a standalone server from node 1's option file ---------------------------------------------
"$PAXSQL" cluster up --nodes 3 --dir "$DIR/cluster" --base-port "$BASE" >/dev/null
S=$DIR/standalone
mkdir -p "$S/data" "$S/tmp" "$S/run"
grep -v -E '^(read_only|require_secure_transport|init-rpl-role|skip-slave-start|rpl_semi_sync|proxy_protocol)' \
  "$DIR/cluster/n1/my.cnf" |
  sed -e "s|^port=.*|port=$((BASE + 90))|" -e "s|^socket=.*|socket=$S/run/mysqld.sock|" \
      -e "s|^datadir=.*|datadir=$S/data|" -e "s|^tmpdir=.*|tmpdir=$S/tmp|" -e "s|^log-error=.*|log-error=$S/err.log|" \
  > "$S/my.cnf"
mariadb-install-db --defaults-file="$S/my.cnf" --auth-root-authentication-method=socket >/dev/null
/usr/sbin/mariadbd --defaults-file="$S/my.cnf" &
STANDALONE_PID=$!
for _ in $(seq 60); do mariadb -S "$S/run/mysqld.sock" -uroot -e 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.5; done

# The suites' account, on the standalone server and on the cluster's master (the log carries it to every node).
PW=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
umask 077
printf '[client]\nuser=root\npassword=%s\n' "$(cat "$DIR/cluster/secrets/admin.password")" > "$DIR/root.cnf"
M=$("$PAXSQL" cluster status --dir "$DIR/cluster" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['master'])")
master_sql() { mariadb --defaults-extra-file="$DIR/root.cnf" -S "$DIR/cluster/n$M/run/mysqld.sock" -N -B -e "$1"; }
standalone_sql() { mariadb -S "$S/run/mysqld.sock" -uroot -N -B -e "$1"; }
# The server defaults mtr gives the servers it starts (include/default_mysqld.cnf) that results depend on, set on the
# standalone server and on every node alike (a replica applies a CREATE TABLE without ENGINE with its own default):
# the expected results were recorded with them. (log_bin_trust_function_creators=1, also among them, is how every
# node runs already.)
MTR_DEFAULTS="SET GLOBAL default_storage_engine = MyISAM, GLOBAL character_set_server = latin1,
       GLOBAL collation_server = latin1_swedish_ci,
       GLOBAL max_heap_table_size = 1048576, GLOBAL sort_buffer_size = 262144, GLOBAL key_buffer_size = 1048576;"
for n in 1 2 3; do
  mariadb --defaults-extra-file="$DIR/root.cnf" -S "$DIR/cluster/n$n/run/mysqld.sock" -e "$MTR_DEFAULTS"
done
standalone_sql "$MTR_DEFAULTS SET GLOBAL log_bin_trust_function_creators = 1;"
SETUP="CREATE USER compat@'%' IDENTIFIED BY '$PW'; GRANT ALL ON *.* TO compat@'%' WITH GRANT OPTION;
       DROP DATABASE IF EXISTS test; CREATE DATABASE test; CREATE DATABASE IF NOT EXISTS test1;
       CREATE DATABASE IF NOT EXISTS test2;"
master_sql "$SETUP"
# mariadb-install-db's anonymous accounts (''@localhost shadows compat@'%' for local clients); a cluster has none.
standalone_sql "DROP USER IF EXISTS ''@localhost; DROP USER IF EXISTS ''@'$(hostname)';"
standalone_sql "$SETUP CREATE DATABASE IF NOT EXISTS app;"  # the cluster's application database
# mtr's own schema (mtr.add_suppression, the check procedures), as mtr installs it on the servers it starts; without
# it every test calling add_suppression fails half-way and leaves its tables to fail the tests after it.
MTR_SCHEMA=$(printf 'CREATE DATABASE mtr;\n'; for f in mtr_warnings mtr_check; do
  sed -e 's/^delimiter ||;/delimiter ||/' -e '/^[[:space:]]*--/d' "$MTR_DIR/include/$f.sql"; printf '\ndelimiter ;\n'; done)
MTR_SCHEMA="$MTR_SCHEMA
delimiter ||
$(grep -v '^--' bench/compat/reset.sql)||
delimiter ;"
# The snapshots compat_reset puts back. Left out of the globals: what changes by itself (GTID positions) and what
# the node owns on its master (replication, semi-sync, read_only, server_id, the binlog) — none of which a test
# through the proxy can change, and which the harness must not set behind the node's back either.
MTR_SCHEMA="$MTR_SCHEMA
CREATE TABLE mtr.compat_accounts AS SELECT user, host FROM mysql.user;
CREATE TABLE mtr.compat_globals AS SELECT variable_name, variable_value FROM information_schema.global_variables
 WHERE variable_name NOT REGEXP '^(GTID|RPL|SLAVE|BINLOG|LOG_BIN|SQL_LOG_BIN|READ_ONLY|REQUIRE_SECURE_TRANSPORT|SERVER_ID|INIT_SLAVE|MASTER|REPLICATE|RELAY|SYNC_|INNODB_FLUSH_LOG)';"
mariadb --defaults-extra-file="$DIR/root.cnf" -S "$DIR/cluster/n$M/run/mysqld.sock" <<<"$MTR_SCHEMA"
mariadb -S "$S/run/mysqld.sock" -uroot <<<"$MTR_SCHEMA"

# The suite, as a copy (hard links; mtr finds its binaries and share files from where it runs, hence the tree of
# links to /usr) in which the tests' connections as root without a password over the local socket become
# connections as the suites' account over TCP, in tests and expected results alike: no target has a passwordless
# root, and the RW ports have no socket. Every target runs this same copy.
MTR_ROOT=$DIR/mtr-suite
mkdir -p "$MTR_ROOT/share/mysql"
for d in /usr/*; do [ "$d" = /usr/share ] || ln -s "$d" "$MTR_ROOT/"; done
for d in /usr/share/*; do [ "$d" = /usr/share/mysql ] || ln -s "$d" "$MTR_ROOT/share/"; done
for d in /usr/share/mysql/*; do [ "$d" = "$MTR_DIR" ] || ln -s "$d" "$MTR_ROOT/share/mysql/"; done
cp -al "$MTR_DIR" "$MTR_ROOT/share/mysql/"
(cd "$MTR_ROOT/share/mysql/mysql-test" &&
  grep -l -E 'connect.*localhost' main/*.test main/*.result include/*.inc 2>/dev/null |
  COMPAT_PW=$PW xargs -r perl -pi -e '
    s/(connect\s*\(?\s*[^,\s]+\s*,\s*)localhost\b/${1}127.0.0.1/g;
    s/(connect\s*\(?\s*[^,\s]+\s*,\s*127\.0\.0\.1\s*,\s*)root\s*,\s*,/${1}compat,$ENV{COMPAT_PW},/g;
    s/(connect\s*\(?\s*[^,\s]+\s*,\s*127\.0\.0\.1\s*,\s*)root\s*(,\s*)?(?=[)\s;]|$)/${1}compat,$ENV{COMPAT_PW}/g')
MTR_DIR=$MTR_ROOT/share/mysql/mysql-test
LIST_DBS="SELECT schema_name FROM information_schema.schemata ORDER BY 1"
LIST_USERS="SELECT CONCAT(QUOTE(user), '@', QUOTE(host)) FROM mysql.user ORDER BY 1"
CLUSTER_DBS=$(master_sql "$LIST_DBS"); CLUSTER_USERS=$(master_sql "$LIST_USERS")
STANDALONE_DBS=$(standalone_sql "$LIST_DBS"); STANDALONE_USERS=$(standalone_sql "$LIST_USERS")

# Puts back the global variables, drops the databases and accounts a run left behind and empties the test databases; $1 = master_sql or
# standalone_sql, $2/$3 the databases and accounts there were at the start.
reset_schemas() {
  local sql=$1 dbs=$2 users=$3 d u
  $sql "CALL mtr.compat_reset()" || true
  if [ "$sql" = master_sql ]; then
    # Each target starts on a cluster whose replicas have caught up (a run can leave them minutes behind).
    local pos n
    pos=$(master_sql "SELECT @@gtid_binlog_pos")
    for n in 1 2 3; do
      [ "$n" = "$M" ] || mariadb --defaults-extra-file="$DIR/root.cnf" -S "$DIR/cluster/n$n/run/mysqld.sock" -N -B \
        -e "SELECT MASTER_GTID_WAIT('$pos', 300)" >/dev/null || true
    done
  fi
  # Files a test wrote into a database's directory (SELECT … INTO OUTFILE 't1.txt') make DROP DATABASE fail with
  # errno 39 on that server only: `test` then kept its tables' absence but lost its db.opt, and the next target's
  # tables took the session's character set (ctype_euckr & co. failed through the second RW port only).
  local data
  if [ "$sql" = master_sql ]; then data="$DIR/cluster/n$M/data"; else data="$DIR/standalone/data"; fi
  for d in $($sql "$LIST_DBS"); do
    case $d in mysql | sys | performance_schema | information_schema | mtr) continue ;; esac
    [ -d "$data/$d" ] && find "$data/$d" -maxdepth 1 -type f ! -name '*.frm' ! -name '*.ibd' ! -name '*.MY[DI]' \
      ! -name '*.MA[DI]' ! -name 'db.opt' ! -name '*.par' ! -name '*.TR[GN]' ! -name '*.CS[VM]' ! -name '*.isl' \
      ! -name '*.AR[ZM]' -delete
  done
  for d in $($sql "$LIST_DBS"); do
    grep -qxF "$d" <<<"$dbs" || $sql "DROP DATABASE \`$d\`" || true
  done
  for d in test test1 test2; do $sql "DROP DATABASE IF EXISTS $d; CREATE DATABASE $d" || true; done
  while read -r u; do
    [ -z "$u" ] || grep -qxF "$u" <<<"$users" || $sql "DROP USER $u" || true
  done < <($sql "$LIST_USERS")
}

# --- PyMySQL's tests -------------------------------------------------------------------------------------------
PY=$DIR/py
if [[ " $SUITES " == *" pymysql "* ]]; then
  python3 -m venv "$PY/venv"
  "$PY/venv/bin/pip" install -q pytest
  "$PY/venv/bin/pip" download -q --no-deps --no-binary :all: PyMySQL==0.10.1 -d "$PY"
  tar xzf "$PY"/PyMySQL-0.10.1.tar.gz -C "$PY"
fi
run_pymysql() { # target port
  local target=$1 port=$2 t=$PY/PyMySQL-0.10.1/pymysql/tests
  printf '[{"host":"127.0.0.1","port":%s,"user":"compat","passwd":"%s","db":"test1","use_unicode":true,"local_infile":true},\n {"host":"127.0.0.1","port":%s,"user":"compat","passwd":"%s","db":"test2"}]\n' \
    "$port" "$PW" "$port" "$PW" > "$t/databases.json"
  local start=$SECONDS
  (cd "$PY/PyMySQL-0.10.1" && timeout 900 "$PY/venv/bin/python" -m pytest -p no:cacheprovider -q -rA pymysql/tests \
      > "$DIR/pymysql-$target.log" 2>&1) || true
  grep -E '^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) ' "$DIR/pymysql-$target.log" |
    awk -v tg="$target" '{s=$1; n=$2; if (s=="SKIPPED") {n=$0; sub(/^SKIPPED \[[0-9]+\] /,"",n); sub(/:.*/,"",n)}
                          print "pymysql " tg " " n " " tolower(s)}' >> "$DIR/outcomes"
  echo "pymysql $target: $(grep -c "^pymysql $target .* passed$" "$DIR/outcomes") passed, $((SECONDS - start)) s"
}

# --- mysql-test-run --extern ------------------------------------------------------------------------------------
run_mtr() { # target port
  local target=$1 port=$2 start=$SECONDS
  # mtr takes the password only as an --extern option; it reaches mtr through the environment, not the command
  # line, and mtr writes it to its own my.cnf in the 0700 run directory.
  (cd "$MTR_DIR" && COMPAT_PW=$PW timeout 3600 perl -e \
      'push @ARGV, "--extern", "password=$ENV{COMPAT_PW}"; $0 = "./mariadb-test-run"; do $0; die $@ if $@;' -- \
      --extern host=127.0.0.1 --extern port="$port" --extern user=compat --user=compat \
      --extern loose-prologue="$ROOT/bench/compat/prologue.inc" \
      --vardir="$DIR/mtr-$target" --force --max-test-fail=0 --retry=0 --testcase-timeout=3 --suite=main \
      $TESTS > "$DIR/mtr-$target.log" 2>&1) || true
  grep -E '^main\.\S+ +\[ (pass|fail|skipped|disabled) \]' "$DIR/mtr-$target.log" |
    sed -E 's/^(main\.\S+) +\[ ([a-z]+) \].*/\1 \2/' | awk -v tg="$target" '{print "mtr " tg " " $1 " " $2}' \
    >> "$DIR/outcomes"
  echo "mtr $target: $(grep -c "^mtr $target .* pass$" "$DIR/outcomes") passed, $((SECONDS - start)) s"
}

: > "$DIR/outcomes"
for suite in $SUITES; do "run_$suite" direct $((BASE + 90)); done
for n in 1 2 3; do
  for suite in $SUITES; do
    reset_schemas master_sql "$CLUSTER_DBS" "$CLUSTER_USERS"
    "run_$suite" "rw$n" $((BASE + 10 * (n - 1) + 4))
  done
done
"$PAXSQL" cluster status --dir "$DIR/cluster" > "$DIR/status.txt" 2>&1 || true

# --- the report ---------------------------------------------------------------------------------------------------
python3 - "$DIR/outcomes" "$OUT" "$SELECTION" "$M" "$DIR/status.txt" <<'EOF'
import collections, sys
outcomes, out, selection, master, status = sys.argv[1:6]
res = collections.defaultdict(dict)
for line in open(outcomes):
    suite, target, test, outcome = line.split()
    res[(suite, test)][target] = "pass" if outcome in ("pass", "passed", "xfail") else outcome
targets = ["direct", "rw1", "rw2", "rw3"]
worse = [(k, v) for k, v in sorted(res.items()) if v.get("direct") == "pass"
         and any(v.get(t) != "pass" for t in targets[1:])]
with open(out, "w") as f:
    f.write(f"# bench/compat/run.sh {selection}: direct = standalone MariaDB, rwN = node N's RW port "
            f"(master at the start: node {master})\n")
    for suite in ("pymysql", "mtr"):
        for t in targets:
            n = sum(1 for (s, _), v in res.items() if s == suite and v.get(t) == "pass")
            f.write(f"# {suite} {t}: {n} passed of {sum(1 for (s, _) in res if s == suite)}\n")
    f.write(f"# passing directly, not through every RW port: {len(worse)}\n")
    for (suite, test), v in worse:
        f.write(f"WORSE {suite} {test} " + " ".join(f"{t}={v.get(t, '-')}" for t in targets) + "\n")
    f.write("# cluster status after the runs:\n")
    for line in open(status):
        f.write("#   " + line)
    for (suite, test), v in sorted(res.items()):
        f.write(f"{suite} {test} " + " ".join(f"{t}={v.get(t, '-')}" for t in targets) + "\n")
print(open(out).read().split("\n# cluster status")[0])
sys.exit(1 if worse else 0)
EOF
