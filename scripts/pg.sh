#!/usr/bin/env bash
# scripts/pg.sh start|stop|restart|status|url
#
# A private PostgreSQL cluster for graphsync's tests and demo, on a free
# loopback port with wal_level=logical. No Docker: it uses the PostgreSQL
# binaries on this machine and installs Debian's `postgresql` package with
# apt-get when there are none.
#
# Layout (.local/ is git-ignored):
#   .local/pg/port           the port, chosen once and reused by restarts
#   .local/pg/data           the cluster (PGDATA)
#   .local/pg/run            the unix socket directory
#   .local/pg/postgres.log   the server log
# When run as root the cluster belongs to the system user `graphsync`
# (created if missing), because PostgreSQL refuses to run as root. If that user
# cannot reach .local/pg (the repo sits under a root-only directory such as
# /root) or the socket path would be too long, data, run and postgres.log live
# in /var/tmp/graphsync-pg-<hash of the repo path>/ instead and .local/pg holds
# symlinks to them. We never loosen permissions of directories above the repo.
#
# The cluster has a superuser login role `graphsync` (trust auth on loopback
# and the socket: local use only) and a database `graphsync`.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

PG_LOCAL="$GRAPHSYNC_LOCAL/pg"
PG_START_SECONDS="${GRAPHSYNC_PG_START_SECONDS:-90}"

find_pg_bin() {
  local dir
  # Newest Debian-packaged major first, then whatever is on PATH.
  for dir in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -t/ -k4 -V -r); do
    if [ -x "$dir/pg_ctl" ] && [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ]; then
      echo "$dir"
      return 0
    fi
  done
  if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
    dirname "$(readlink -f "$(command -v pg_ctl)")"
    return 0
  fi
  return 1
}

install_pg() {
  is_root || die "PostgreSQL is not installed and we are not root: install Debian's 'postgresql' package (sudo apt-get install -y postgresql) and retry"
  command -v apt-get >/dev/null 2>&1 || die "PostgreSQL is not installed and apt-get is missing: install PostgreSQL (pg_ctl, initdb, postgres) and retry"
  log "PostgreSQL not found: installing Debian's postgresql package with apt-get"
  # Debian's package would create and start a 'main' cluster on 5432 that we
  # do not use; skip it when the admin has not configured otherwise.
  if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
    mkdir -p /etc/postgresql-common
    echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.conf
  fi
  local aptlog="$PG_LOCAL/apt-get.log"
  if ! apt-get update >"$aptlog" 2>&1; then
    die "apt-get update failed (see $aptlog): $(tail -n 1 "$aptlog")"
  fi
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold postgresql >>"$aptlog" 2>&1; then
    die "apt-get install postgresql failed (see $aptlog): $(tail -n 1 "$aptlog")"
  fi
}

mkdir -p "$PG_LOCAL"
PG_BIN="$(find_pg_bin || true)"
# Only starting installs PostgreSQL: status, stop and url must not run apt-get.
if [ -z "$PG_BIN" ]; then
  case "${1:-}" in
    start | restart)
      install_pg
      PG_BIN="$(find_pg_bin)" || die "PostgreSQL installed but pg_ctl/initdb not found under /usr/lib/postgresql/*/bin"
      ;;
  esac
fi

# as_pg CMD...: run CMD as the cluster's owner, from / so its cwd is readable.
as_pg() {
  if is_root; then
    (cd / && runuser -u "$GRAPHSYNC_OS_USER" -- "$@")
  else
    "$@"
  fi
}

ensure_os_user() {
  is_root || return 0
  if ! id "$GRAPHSYNC_OS_USER" >/dev/null 2>&1; then
    log "creating system user $GRAPHSYNC_OS_USER to own the PostgreSQL cluster"
    useradd --system --user-group --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin "$GRAPHSYNC_OS_USER" \
      || die "useradd $GRAPHSYNC_OS_USER failed: create it by hand or set GRAPHSYNC_OS_USER to an existing non-root user"
  fi
}

# pg_home: where data, run and postgres.log physically live (see the header).
pg_home() {
  local sock="$PG_LOCAL/run/.s.PGSQL.65535"
  if ! is_root; then
    echo "$PG_LOCAL"
    return
  fi
  chown "$GRAPHSYNC_OS_USER:" "$PG_LOCAL"
  if [ ${#sock} -lt 100 ] && runuser -u "$GRAPHSYNC_OS_USER" -- test -x "$PG_LOCAL" -a -w "$PG_LOCAL" 2>/dev/null \
      && [ ! -L "$PG_LOCAL/data" ]; then
    echo "$PG_LOCAL"
  else
    echo "/var/tmp/graphsync-pg-$(repo_hash)"
  fi
}

ensure_os_user
PG_HOME="$(pg_home)"
PGDATA="$PG_HOME/data"
PG_RUN="$PG_HOME/run"
PG_LOG="$PG_HOME/postgres.log"
mkdir -p "$PG_HOME" "$PG_RUN"
if [ "$PG_HOME" != "$PG_LOCAL" ]; then
  chmod 0700 "$PG_HOME"
  for name in data run postgres.log; do ln -sfn "$PG_HOME/$name" "$PG_LOCAL/$name"; done
fi
if is_root; then
  chown "$GRAPHSYNC_OS_USER:" "$PG_HOME" "$PG_RUN"
  [ -e "$PG_LOG" ] || install -o "$GRAPHSYNC_OS_USER" -m 0600 /dev/null "$PG_LOG"
fi

pg_running() {
  [ -f "$PGDATA/PG_VERSION" ] && as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1
}

current_port() {
  tr -dc '0-9' <"$PG_LOCAL/port"
}

pg_url() {
  echo "postgres://graphsync@127.0.0.1:$(current_port)/graphsync?sslmode=disable"
}

init_cluster() {
  [ -f "$PGDATA/PG_VERSION" ] && return 0
  log "initialising a PostgreSQL cluster in $PGDATA"
  local initlog="$PG_HOME/initdb.log"
  if ! as_pg "$PG_BIN/initdb" -D "$PGDATA" -U graphsync --auth=trust -E UTF8 --no-locale >"$initlog" 2>&1; then
    die "initdb failed (see $initlog): $(tail -n 1 "$initlog")"
  fi
  # Settings we own live in graphsync.conf, rewritten at every start.
  echo "include_if_exists = 'graphsync.conf'" >>"$PGDATA/postgresql.conf"
}

write_config() {
  local port="$1" conf="$PGDATA/graphsync.conf"
  cat >"$conf" <<CONF
# Written by scripts/pg.sh at every start; edits are lost.
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$PG_RUN'
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
# A slot nobody reads (a test or demo that stopped) keeps WAL at most this
# long; past it the slot is invalidated, which graphsync survives (ADR 0004).
max_slot_wal_keep_size = 8GB
max_connections = 200
fsync = on
synchronous_commit = on
CONF
  is_root && chown "$GRAPHSYNC_OS_USER:" "$conf"
  return 0
}

ensure_database() {
  local port
  port="$(current_port)"
  local exists
  exists="$(as_pg "$PG_BIN/psql" -h "$PG_RUN" -p "$port" -U graphsync -d postgres -XtAc \
    "SELECT 1 FROM pg_database WHERE datname = 'graphsync'")" \
    || die "cannot query PostgreSQL on 127.0.0.1:$port (log: $PG_LOCAL/postgres.log)"
  if [ "$exists" != 1 ]; then
    as_pg "$PG_BIN/psql" -h "$PG_RUN" -p "$port" -U graphsync -d postgres -XqAc "CREATE DATABASE graphsync" \
      || die "CREATE DATABASE graphsync failed on 127.0.0.1:$port"
  fi
}

wait_ready() {
  local port
  port="$(current_port)"
  if ! wait_for "$PG_START_SECONDS" "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$port" -d postgres -U graphsync; then
    die "PostgreSQL did not accept connections on 127.0.0.1:$port within ${PG_START_SECONDS}s (log: $PG_LOCAL/postgres.log)"
  fi
}

start() {
  if pg_running; then
    wait_ready
    ensure_database
    log "PostgreSQL already running: $(pg_url)"
    return 0
  fi
  init_cluster
  local port
  port="$(remembered_port "$PG_LOCAL/port")"
  write_config "$port"
  if ! as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$PG_LOG" -w -t "$PG_START_SECONDS" start >/dev/null; then
    die "PostgreSQL failed to start on 127.0.0.1:$port (log: $PG_LOCAL/postgres.log): $(tail -n 3 "$PG_LOG" | tr '\n' ' ')"
  fi
  wait_ready
  ensure_database
  log "PostgreSQL started: $(pg_url)"
}

stop() {
  if ! pg_running; then
    log "PostgreSQL not running"
    return 0
  fi
  as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m fast -w -t "$PG_START_SECONDS" stop >/dev/null \
    || die "PostgreSQL did not stop within ${PG_START_SECONDS}s (log: $PG_LOCAL/postgres.log)"
  log "PostgreSQL stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status)
    if pg_running; then
      echo "PostgreSQL running: $(pg_url) (data $PGDATA)"
    else
      echo "PostgreSQL not running (data $PGDATA)"
      exit 3
    fi
    ;;
  url)
    [ -s "$PG_LOCAL/port" ] || die "PostgreSQL was never started: run scripts/pg.sh start"
    pg_url
    ;;
  *)
    echo "usage: $0 start|stop|restart|status|url" >&2
    exit 2
    ;;
esac
