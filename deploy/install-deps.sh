#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test paxsql. Idempotent: when everything is present it
# only checks (no apt call) and exits in well under a second. Must run as root (or with sudo rights for apt-get).
#
# What the tests need:
#   mariadb-server   mariadbd + mariadb-install-db (crates/mariadb-testkit starts its own servers)
#   mariadb-client   the `mariadb` / `mariadb-admin` / `mariadb-binlog` CLIs (debugging, some tests)
#   mariadb-backup   mariabackup, to rebuild a node from a healthy member (docs/ARCHITECTURE.md §5)
#   mariadb-test     MariaDB's mysql-test-run and mysqltest, for the compatibility suite (bench/compat/run.sh)
#   sysbench         benchmarks (bench/)
#   iproute2         `ip netns` for network-namespace partition tests; `tc` for the fault suite's slow network
#                    (netem where the kernel has sch_netem, else a tbf token bucket)
#   iptables         packet drops between namespaces
#   procps           pgrep/pkill/ps, used by tests to check that no stray mariadbd is left
#   build-essential, pkg-config  C toolchain for -sys crates
#
# The Debian mariadb-server package starts and enables its own `mariadb` service on install. Our tests run their
# own mariadbd processes on free loopback ports with their own data dirs, so the packaged service must not run:
# we forbid service starts during our install (policy-rc.d) and afterwards stop and disable it in any case.
set -euo pipefail

log() { echo "install-deps: $*"; }

# Packages whose presence we check with dpkg, and a command each must provide.
declare -A PKG_CMD=(
    [mariadb-server]=mariadbd
    [mariadb-client]=mariadb
    [mariadb-backup]=mariadb-backup
    [mariadb-test]=mariadb-test
    [sysbench]=sysbench
    [iproute2]=ip
    [iptables]=iptables
    [procps]=pgrep
    [build-essential]=cc
    [pkg-config]=pkg-config
)

have_cmd() {
    # mariadbd and mariadb-install-db live in /usr/sbin and /usr/bin; sbin may be missing from a user's PATH.
    command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/bin/$1" ]
}

missing=()
for pkg in "${!PKG_CMD[@]}"; do
    if ! dpkg -s "$pkg" >/dev/null 2>&1 || ! have_cmd "${PKG_CMD[$pkg]}"; then
        missing+=("$pkg")
    fi
done
# mariadb-install-db ships with mariadb-server; check it separately because the testkit calls it directly.
if ! have_cmd mariadb-install-db; then
    missing+=(mariadb-server)
fi

if ! command -v cargo >/dev/null 2>&1; then
    # The Rust toolchain comes with the machine (rustup); it cannot be fetched by this script.
    log "WARNING: cargo not found on PATH; the Rust toolchain must be installed separately (rustup)"
fi

stop_packaged_mariadb() {
    # Stop the service the package may have started, and keep it from starting at boot. Nothing here may touch
    # mariadbd processes that tests started: those run with --defaults-file from a temp dir, the packaged one
    # is started by mysqld_safe / systemd with /etc/mysql and the pid file /run/mysqld/mysqld.pid.
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        systemctl stop mariadb.service >/dev/null 2>&1 || true
        systemctl disable mariadb.service >/dev/null 2>&1 || true
    else
        if [ -x /etc/init.d/mariadb ]; then
            service mariadb stop >/dev/null 2>&1 || /etc/init.d/mariadb stop >/dev/null 2>&1 || true
        fi
        if command -v update-rc.d >/dev/null 2>&1 && [ -x /etc/init.d/mariadb ]; then
            update-rc.d mariadb disable >/dev/null 2>&1 || true
        fi
    fi
    # Belt and braces: a packaged server that survived the stop (pid file of the Debian layout).
    local pidfile=/run/mysqld/mysqld.pid
    if [ -s "$pidfile" ]; then
        local pid
        pid=$(cat "$pidfile" 2>/dev/null || true)
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            log "stopping packaged mariadbd (pid $pid)"
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 1 60); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.5
            done
        fi
    fi
}

if [ ${#missing[@]} -eq 0 ]; then
    log "all present (${!PKG_CMD[*]})"
    stop_packaged_mariadb
    exit 0
fi

# Deduplicate (mariadb-server may be listed twice).
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
log "installing: ${missing[*]}"

if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi

# Forbid service starts during the install unless the machine already does (Docker images ship a policy-rc.d
# that exits 101). We remove only the file we created.
created_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\n# temporary, created by paxsql deploy/install-deps.sh\nexit 101\n' |
        $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
    created_policy=1
fi
cleanup() {
    if [ "$created_policy" -eq 1 ]; then
        $SUDO rm -f /usr/sbin/policy-rc.d
    fi
}
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
start=$(date +%s)
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    "${missing[@]}"

stop_packaged_mariadb

for pkg in "${!PKG_CMD[@]}"; do
    if ! have_cmd "${PKG_CMD[$pkg]}"; then
        log "ERROR: $pkg installed but command ${PKG_CMD[$pkg]} not found"
        exit 1
    fi
done
have_cmd mariadb-install-db || { log "ERROR: mariadb-install-db not found after install"; exit 1; }
log "done in $(($(date +%s) - start)) s"
