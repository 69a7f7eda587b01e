# Helpers for the benchmarks that run a local cluster: sourced by bench/*/run.sh after they set PAXSQL_BIN (the
# paxsql binary) and DIR (the cluster's directory, made by `cluster up`).

# The application account's password, from the cluster's own record.
app_password() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['app_password'])" "$DIR/cluster.json"; }
status() { "$PAXSQL_BIN" cluster status --dir "$DIR" --json; }
master() { status | python3 -c "import json,sys; print(json.load(sys.stdin)['master'])"; }
# The port of node $1's endpoint $2 (proxy_rw, proxy_ro, mariadb, ...).
endpoint() { status | python3 -c "
import json, sys
d = json.load(sys.stdin)
print([n for n in d['nodes'] if n['id'] == int(sys.argv[1])][0]['endpoints'][sys.argv[2]].split(':')[-1])" "$1" "$2"; }
