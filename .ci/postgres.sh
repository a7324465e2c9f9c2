# Sourced by .ci/run: a throw-away PostgreSQL on loopback from Debian's packages.
# pg_install: install PostgreSQL (apt-get) if it is not there (.ci/run does it in the background early).
# pg_start: install if needed, initdb in a temp dir as the postgres user, start on
# 127.0.0.1 at a free port, create user and database dse; exports DSE_TEST_PG_URL. The server keeps
# PostgreSQL's default max_connections = 100 (PG_MAX_CONNECTIONS to change it): the shared-study
# tests, 64 workers among them, must pass where users' servers are, not on a roomier one.
# pg_stop: stop the server and delete its directory (call it from an EXIT trap).
pg_install() {
    if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    fi
}

pg_start() {
    pg_install
    PG_BIN=$(dirname "$(ls -d /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)")
    PG_DIR=$(mktemp -d /tmp/dse-ci-pg-XXXXXX)
    chown postgres "$PG_DIR"
    PG_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    PG_PASS=$(python3 -c 'import secrets; print(secrets.token_hex(12))')
    printf '%s\n' "$PG_PASS" > "$PG_DIR/pw"
    chown postgres "$PG_DIR/pw"
    chmod 600 "$PG_DIR/pw"
    su postgres -s /bin/sh -c "$PG_BIN/initdb -D $PG_DIR/data -A scram-sha-256 -U postgres --pwfile=$PG_DIR/pw" >/dev/null
    rm -f "$PG_DIR/pw"
    su postgres -s /bin/sh -c "$PG_BIN/pg_ctl -D $PG_DIR/data -l $PG_DIR/log -w -o \"-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_DIR -c max_connections=${PG_MAX_CONNECTIONS:-100} -c fsync=off\" start" >/dev/null
    PGPASSWORD=$PG_PASS "$PG_BIN/psql" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres \
        -c "CREATE USER dse PASSWORD '$PG_PASS'" -c "CREATE DATABASE dse OWNER dse" >/dev/null
    export DSE_TEST_PG_URL="postgresql+psycopg://dse:$PG_PASS@127.0.0.1:$PG_PORT/dse"
    export PG_BIN PG_DIR
}

pg_stop() {
    if [ -n "${PG_DIR:-}" ] && [ -d "$PG_DIR" ]; then
        su postgres -s /bin/sh -c "$PG_BIN/pg_ctl -D $PG_DIR/data -m immediate -w stop" >/dev/null 2>&1 || true
        rm -rf "$PG_DIR"
    fi
}
