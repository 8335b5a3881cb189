#!/usr/bin/env bash
# A throw-away PostgreSQL cluster for tests, on 127.0.0.1 only, in a temporary directory.
#
#   eval "$(.ci/postgres.sh start)"      # exports TOCSIN_TEST_POSTGRES_URL and TOCSIN_PG_DIR
#   .ci/postgres.sh stop "$TOCSIN_PG_DIR"
#
# start [DIR] [PORT]: DIR defaults to a new temporary directory (or $TOCSIN_PG_DIR), PORT to a
#   free port (or $TOCSIN_PG_PORT). Prints shell `export` lines on stdout (progress on stderr)
#   and writes the same to DIR/env; DIR/postmaster.pid-style details are in DIR/data.
#   The cluster has trust authentication on loopback, superuser `postgres`, a database `tocsin`,
#   max_connections=200 and otherwise PostgreSQL's defaults (fsync stays on: durability tests
#   run against it); $TOCSIN_PG_SETTINGS, when set, is added to the server's options (e.g.
#   "-c shared_preload_libraries=pg_stat_statements", as bench/run lateness does). When
#   running as root the server runs as the `postgres` system user.
# stop DIR: fast shutdown of the server started in DIR (by the PID in its postmaster.pid), then
#   remove DIR.
# crash DIR: `pg_ctl stop -m immediate` (no checkpoint: the next start runs crash recovery);
#   DIR stays, and `start DIR PORT` brings the same cluster back.
# Binaries: /usr/lib/postgresql/15/bin, else the newest /usr/lib/postgresql/*/bin, else PATH;
#   when none is found, `apt-get install postgresql` (root or sudo).
set -euo pipefail

log() { echo "postgres.sh: $*" >&2; }

find_bindir() {
    local dir
    for dir in /usr/lib/postgresql/15/bin $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
        if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
            echo "$dir"
            return 0
        fi
    done
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(readlink -f "$(command -v initdb)")"
        return 0
    fi
    return 1
}

install_postgres() {
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    log "PostgreSQL binaries not found: apt-get install postgresql"
    $sudo apt-get update -qq
    # Do not let the package start its own cluster: this script starts the one it needs.
    printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
    $sudo chmod +x /usr/sbin/policy-rc.d
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends postgresql >/dev/null
    $sudo rm -f /usr/sbin/policy-rc.d
}

free_port() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
    else
        echo $((20000 + RANDOM % 20000))
    fi
}

# Run a command as the cluster's owner: `postgres` when we are root, else ourselves.
as_owner() {
    if [ "$(id -u)" = 0 ]; then
        if command -v runuser >/dev/null 2>&1; then
            runuser -u postgres -- "$@"
        else
            su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
        fi
    else
        "$@"
    fi
}

start() {
    local dir="${1:-${TOCSIN_PG_DIR:-}}" port="${2:-${TOCSIN_PG_PORT:-}}" bindir
    bindir="$(find_bindir)" || { install_postgres; bindir="$(find_bindir)"; } \
        || { log "no initdb/pg_ctl after installing postgresql"; exit 1; }
    [ -n "$dir" ] || dir="$(mktemp -d "${TMPDIR:-/tmp}/tocsin-pg.XXXXXX")"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    if [ "$(id -u)" = 0 ]; then
        if ! id postgres >/dev/null 2>&1; then
            log "creating the postgres system user"
            useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
        fi
        chown postgres: "$dir"
    fi
    chmod 700 "$dir"

    if [ ! -s "$dir/data/PG_VERSION" ]; then
        log "initdb $dir/data ($bindir)"
        as_owner "$bindir/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-locale \
            >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
    fi

    local tries=0 auto_port=0
    [ -n "$port" ] || auto_port=1
    if as_owner "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        port="$(sed -n 4p "$dir/data/postmaster.pid")"  # already running: reuse it
        log "already running in $dir on port $port"
        auto_port=2
    fi
    while [ "$auto_port" != 2 ]; do
        [ "$auto_port" = 0 ] || port="$(free_port)"
        # Loopback only; the socket directory is ours, not /var/run/postgresql.
        if as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
            -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$dir -c max_connections=200 ${TOCSIN_PG_SETTINGS:-}" \
            start >"$dir/pg_ctl.log" 2>&1; then
            break
        fi
        tries=$((tries + 1))
        if [ "$auto_port" = 0 ] || [ "$tries" -ge 5 ]; then
            cat "$dir/pg_ctl.log" "$dir/server.log" >&2 2>/dev/null || true
            log "could not start PostgreSQL in $dir"
            exit 1
        fi
        log "port $port taken? trying another"
    done

    local pid
    pid="$(head -n 1 "$dir/data/postmaster.pid")"
    if ! as_owner "$bindir/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qAt \
        -c "SELECT 1 FROM pg_database WHERE datname = 'tocsin'" | grep -q 1; then
        as_owner "$bindir/createdb" -h 127.0.0.1 -p "$port" -U postgres tocsin
    fi
    local url="postgresql://postgres@127.0.0.1:$port/tocsin"
    {
        echo "export TOCSIN_TEST_POSTGRES_URL=$url"
        echo "export TOCSIN_PG_DIR=$dir"
        echo "export TOCSIN_PG_PID=$pid"
    } | tee "$dir/env"
    log "PostgreSQL (pid $pid) at $url; stop with: $0 stop $dir"
}

stop() {
    local dir="${1:-${TOCSIN_PG_DIR:-}}" bindir pid
    [ -n "$dir" ] || { log "usage: $0 stop DIR"; exit 2; }
    if [ -s "$dir/data/postmaster.pid" ]; then
        pid="$(head -n 1 "$dir/data/postmaster.pid")"
        if bindir="$(find_bindir)"; then
            as_owner "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >&2 || true
        fi
        # Still there (no pg_ctl, or it timed out)? Signal the postmaster we started, by PID.
        if kill -0 "$pid" 2>/dev/null && grep -qa -- "$dir/data" "/proc/$pid/cmdline" 2>/dev/null; then
            kill -INT "$pid" 2>/dev/null || true
            for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        fi
    fi
    case "$dir" in
        */tocsin-pg.*) rm -rf "$dir" ;;
        *) log "leaving $dir in place (not created by this script)" ;;
    esac
}

crash() {
    local dir="${1:?usage: $0 crash DIR}" bindir
    bindir="$(find_bindir)" || { log "no pg_ctl"; exit 1; }
    as_owner "$bindir/pg_ctl" -D "$dir/data" -m immediate -w -t 60 stop >&2
}

case "${1:-}" in
    start) shift; start "$@" ;;
    stop) shift; stop "$@" ;;
    crash) shift; crash "$@" ;;
    *) echo "usage: $0 start [DIR] [PORT] | stop DIR | crash DIR" >&2; exit 2 ;;
esac
