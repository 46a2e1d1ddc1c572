# Sourced by .ci/run (and usable by developers): start a throw-away Redis and PostgreSQL on
# loopback, export their URLs for the tests, and stop them again with `ci_services_stop`.
# Redis comes from Debian's package (installed when missing); PostgreSQL is the server that is
# on the machine, run as a non-root user from a temp dir. `ci_chromium` installs Debian's
# chromium when missing: the HUD's browser tests drive it through Playwright's executable_path,
# so nothing is downloaded at test time.

ci_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

ci_apt_install() {
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ci_chromium() {
  if ! command -v chromium >/dev/null 2>&1; then
    echo "== installing chromium (Debian package)"
    ci_apt_install chromium fonts-liberation
  fi
  export HUD_CHROMIUM; HUD_CHROMIUM=$(command -v chromium)
  echo "== browser: $("$HUD_CHROMIUM" --version 2>/dev/null | head -n 1)"
}

ci_services_start() {
  CI_SERVICES_DIR=$(mktemp -d /tmp/relay-ci.XXXXXX)
  chmod 755 "$CI_SERVICES_DIR"
  export CI_SERVICES_DIR

  if ! command -v redis-server >/dev/null 2>&1; then
    echo "== installing redis-server (Debian package)"
    ci_apt_install redis-server
  fi
  local rport; rport=$(ci_free_port)
  redis-server --bind 127.0.0.1 --port "$rport" --save '' --appendonly no \
    --dir "$CI_SERVICES_DIR" --daemonize yes --pidfile "$CI_SERVICES_DIR/redis.pid" \
    --logfile "$CI_SERVICES_DIR/redis.log"
  export RELAY_TEST_REDIS_URL="redis://127.0.0.1:$rport/0"

  local pgbin; pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$pgbin" ]; then
    echo "no PostgreSQL server binaries under /usr/lib/postgresql" >&2
    return 1
  fi
  local pguser; pguser=$(id -un)
  local run=()
  if [ "$(id -u)" = 0 ]; then
    # initdb and postgres refuse to run as root: use the packaged postgres user, else make one.
    pguser=postgres
    id -u "$pguser" >/dev/null 2>&1 || useradd --system --no-create-home "$pguser"
    run=(runuser -u "$pguser" --)
  fi
  mkdir -p "$CI_SERVICES_DIR/pg"
  chown "$pguser" "$CI_SERVICES_DIR/pg"
  local pport; pport=$(ci_free_port)
  "${run[@]}" "$pgbin/initdb" -D "$CI_SERVICES_DIR/pg/data" -U relay -A trust --no-sync -E UTF8 >/dev/null
  "${run[@]}" "$pgbin/pg_ctl" -D "$CI_SERVICES_DIR/pg/data" -l "$CI_SERVICES_DIR/pg/log" -w start \
    -o "-c listen_addresses=127.0.0.1 -p $pport -k $CI_SERVICES_DIR/pg -c fsync=off -c max_connections=200" >/dev/null
  export CI_PG_RUN="${run[*]}" CI_PG_BIN="$pgbin"
  export RELAY_TEST_POSTGRES_URL="postgresql+psycopg://relay@127.0.0.1:$pport/postgres"
  echo "== services: redis $RELAY_TEST_REDIS_URL, postgres $RELAY_TEST_POSTGRES_URL"
}

ci_services_stop() {
  [ -n "${CI_SERVICES_DIR:-}" ] || return 0
  if [ -f "$CI_SERVICES_DIR/redis.pid" ]; then
    kill "$(cat "$CI_SERVICES_DIR/redis.pid")" 2>/dev/null || true
  fi
  if [ -d "$CI_SERVICES_DIR/pg/data" ]; then
    # shellcheck disable=SC2086
    $CI_PG_RUN "$CI_PG_BIN/pg_ctl" -D "$CI_SERVICES_DIR/pg/data" -m immediate stop >/dev/null 2>&1 || true
  fi
  rm -rf "$CI_SERVICES_DIR"
  CI_SERVICES_DIR=""
}
