# shellcheck shell=bash
# Shared helpers for graphsync's service scripts. Sourced, never run.

# shellcheck disable=SC2034 # used by the scripts that source this file
GRAPHSYNC_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
# shellcheck disable=SC2034
GRAPHSYNC_LOCAL="$GRAPHSYNC_ROOT/.local"
# The OS user that owns and runs the PostgreSQL cluster when we are root
# (PostgreSQL refuses to run as root).
GRAPHSYNC_OS_USER="${GRAPHSYNC_OS_USER:-graphsync}"

die() {
  echo "graphsync: error: $*" >&2
  exit 1
}

log() {
  echo "graphsync: $*" >&2
}

is_root() { [ "$(id -u)" = 0 ]; }

# port_in_use PORT: true when something listens on PORT (any address, v4 or
# v6). Reads /proc so it needs neither ss nor netstat on a bare machine.
port_in_use() {
  local hex
  hex="$(printf '%04X' "$1")"
  # Field 2 is local_address ADDR:PORT, field 4 the state; 0A is LISTEN.
  awk -v p="$hex" 'NR > 1 { split($2, a, ":"); if (a[2] == p && $4 == "0A") { found = 1 } } END { exit !found }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# free_port: a loopback port nobody listens on, outside the usual service
# ports and below the kernel's ephemeral range.
free_port() {
  local port tries=0
  while [ $tries -lt 200 ]; do
    port=$(( 20000 + (RANDOM * 32768 + RANDOM) % 12000 ))
    if ! port_in_use "$port"; then
      echo "$port"
      return 0
    fi
    tries=$((tries + 1))
  done
  die "no free TCP port found in 20000-31999"
}

# remembered_port FILE: the port recorded in FILE when it is still free (or
# still ours: pass "ours" as the second argument), else a new free one,
# recorded in FILE.
remembered_port() {
  local file="$1" port=""
  if [ -s "$file" ]; then
    port="$(tr -dc '0-9' <"$file")"
  fi
  if [ -z "$port" ] || port_in_use "$port"; then
    [ -n "$port" ] && log "port $port from $file is taken by another process; picking a new one"
    port="$(free_port)"
    echo "$port" >"$file"
  fi
  echo "$port"
}

# wait_for SECONDS COMMAND...: run COMMAND until it succeeds (true) or the
# deadline passes (false).
wait_for() {
  local seconds="$1"
  shift
  local deadline=$(( $(date +%s) + seconds ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      return 1
    fi
    sleep 0.2
  done
}

repo_hash() {
  printf '%s' "$GRAPHSYNC_ROOT" | sha256sum | cut -c1-10
}
