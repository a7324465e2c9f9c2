# Sourced by .ci/run: a throw-away MariaDB on loopback from Debian's packages (~50 s to install).
# my_install: install MariaDB (apt-get) if it is not there (.ci/run does it in the background early).
# my_start: install if needed, mariadb-install-db in a temp dir, start mariadbd as the
# mysql user on 127.0.0.1 at a free port, create user and database dse; exports DSE_TEST_MYSQL_URL.
# my_stop: stop the server and delete its directory (call it from an EXIT trap).
my_install() {
    if ! command -v mariadbd >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >/dev/null 2>&1 || {
            apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >/dev/null
        }
    fi
}

my_start() {
    my_install
    MY_DIR=$(mktemp -d /tmp/dse-ci-my-XXXXXX)
    chown mysql "$MY_DIR"
    MY_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    MY_PASS=$(python3 -c 'import secrets; print(secrets.token_hex(12))')
    mariadb-install-db --no-defaults --datadir="$MY_DIR/data" --user=mysql --skip-test-db \
        --auth-root-authentication-method=socket >/dev/null 2>&1
    mariadbd --no-defaults --datadir="$MY_DIR/data" --user=mysql --bind-address=127.0.0.1 --port="$MY_PORT" \
        --socket="$MY_DIR/sock" --pid-file="$MY_DIR/pid" --log-error="$MY_DIR/log" --skip-name-resolve \
        --max-connections=300 --innodb-flush-log-at-trx-commit=0 >/dev/null 2>&1 &
    for _ in $(seq 100); do
        mariadb-admin --no-defaults -S "$MY_DIR/sock" -u root ping >/dev/null 2>&1 && break
        sleep 0.2
    done
    mariadb --no-defaults -S "$MY_DIR/sock" -u root -e "CREATE DATABASE dse; \
        CREATE USER 'dse'@'127.0.0.1' IDENTIFIED BY '$MY_PASS'; GRANT ALL ON dse.* TO 'dse'@'127.0.0.1';"
    export DSE_TEST_MYSQL_URL="mysql+pymysql://dse:$MY_PASS@127.0.0.1:$MY_PORT/dse"
    export MY_DIR
}

my_stop() {
    if [ -n "${MY_DIR:-}" ] && [ -d "$MY_DIR" ]; then
        mariadb-admin --no-defaults -S "$MY_DIR/sock" -u root shutdown >/dev/null 2>&1 \
            || kill "$(cat "$MY_DIR/pid" 2>/dev/null)" 2>/dev/null || true
        rm -rf "$MY_DIR"
    fi
}
