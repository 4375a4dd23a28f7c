#!/usr/bin/env bash
# A throw-away PostgreSQL server for the PostgresJournal tests.
#
#   scripts/postgres.sh run CMD ARGS...   start a server, run CMD with
#                                         TAUT_TEST_POSTGRES_DSN set, stop it
#                                         (whatever CMD does), exit with CMD's code
#   eval "$(scripts/postgres.sh start)"   start one for a shell session; prints
#                                         the exports (DSN and TAUT_PG_DIR)
#   scripts/postgres.sh stop "$TAUT_PG_DIR"
#
# The server lives in a new temporary directory: its data directory, and a Unix
# socket in the same directory (no TCP port, so parallel runs never collide and
# nothing listens on the network). It runs as an unprivileged user: `nobody`
# when started by root (PostgreSQL refuses to run as root), else the caller.
# Debian's `postgresql` package provides the binaries; when they are missing
# and we are root with apt-get, it is installed here (CI machines are new).
set -euo pipefail

log() { echo "postgres.sh: $*" >&2; }

find_bin() {
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
            echo "$dir"
            return 0
        fi
    done
    if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
        dirname "$(command -v initdb)"
        return 0
    fi
    return 1
}

ensure_bin() {
    if find_bin >/dev/null; then
        find_bin
        return 0
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        log "installing Debian's postgresql package"
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
        find_bin && return 0
    fi
    log "no PostgreSQL server binaries (initdb, pg_ctl) found; install Debian's 'postgresql' package"
    return 1
}

as_server_user() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u nobody -- "$@"
    else
        "$@"
    fi
}

start() {
    local bin dir
    bin=$(ensure_bin)
    dir=$(mktemp -d /tmp/taut-pg.XXXXXX)
    if [ "$(id -u)" = 0 ]; then
        chown nobody "$dir"
    fi
    as_server_user "$bin/initdb" -D "$dir/data" -U taut --auth=trust -E UTF8 \
        --no-instructions >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; rm -rf "$dir"; return 1; }
    # fsync off by default: a throw-away test server (TAUT_PG_FSYNC=on for
    # benchmarks that should pay for durability like a real server).
    as_server_user "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-c listen_addresses='' -c unix_socket_directories=$dir -c fsync=${TAUT_PG_FSYNC:-off} -c max_connections=200" \
        start >/dev/null \
        || { cat "$dir/server.log" >&2; rm -rf "$dir"; return 1; }
    echo "export TAUT_TEST_POSTGRES_DSN='host=$dir user=taut dbname=postgres'"
    echo "export TAUT_PG_DIR='$dir'"
}

stop() {
    local dir=$1 bin
    [ -d "$dir/data" ] || { log "no server in '$dir'"; return 1; }
    bin=$(find_bin)
    as_server_user "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 \
        || as_server_user "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 \
        || true
    rm -rf "$dir"
}

case "${1:-}" in
    start)
        start
        ;;
    stop)
        stop "${2:?usage: postgres.sh stop DIR}"
        ;;
    run)
        shift
        [ $# -gt 0 ] || { log "usage: postgres.sh run CMD ARGS..."; exit 2; }
        exports=$(start)
        eval "$exports"
        trap 'stop "$TAUT_PG_DIR"' EXIT
        log "PostgreSQL running: TAUT_TEST_POSTGRES_DSN='$TAUT_TEST_POSTGRES_DSN'"
        set +e
        "$@"
        code=$?
        set -e
        exit "$code"
        ;;
    *)
        echo "usage: $0 run CMD ARGS... | start | stop DIR" >&2
        exit 2
        ;;
esac
