# Sourced by .ci/run: a throwaway PostgreSQL cluster for the store's PostgreSQL tests.
# Debian's server packages (installed if missing), initdb as an unprivileged user
# into a temporary folder, loopback only, trust auth, fsync off; stopped and removed
# when the run ends.  Exports CROW_TEST_PG_URL (a maintenance database; each test
# makes a database of its own) and CROW_REQUIRE_PG=1 (a missing server fails tests).

_pg_bin() {
    ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1
}

_as_pg_user() {  # root may not run the server: the package's postgres user does
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start_postgres() {
    local bin port
    bin=$(_pg_bin)
    if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
        local sudo=""
        [ "$(id -u)" = 0 ] || sudo="sudo -n"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
        bin=$(_pg_bin)
    fi
    CROW_CI_PGDIR=$(mktemp -d /tmp/crow-ci-pg.XXXXXX)
    [ "$(id -u)" = 0 ] && chown postgres "$CROW_CI_PGDIR"
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    _as_pg_user "$bin/initdb" -D "$CROW_CI_PGDIR/data" -A trust -U crow -E UTF8 --no-sync >/dev/null
    _as_pg_user "$bin/pg_ctl" -D "$CROW_CI_PGDIR/data" -l "$CROW_CI_PGDIR/log" -w \
        -o "-k $CROW_CI_PGDIR -p $port -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
    export CROW_TEST_PG_URL="postgresql://crow@127.0.0.1:$port/postgres" CROW_REQUIRE_PG=1
    CROW_CI_PGBIN=$bin
    trap stop_postgres EXIT
}

stop_postgres() {
    _as_pg_user "$CROW_CI_PGBIN/pg_ctl" -D "$CROW_CI_PGDIR/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$CROW_CI_PGDIR"
}
