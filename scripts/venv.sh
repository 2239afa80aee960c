#!/usr/bin/env bash
# scripts/venv.sh DIR REQUIREMENTS: a private Python venv at DIR with the
# packages of REQUIREMENTS from PyPI, (re)built when REQUIREMENTS changes.
# The test clients (MCP, neo4j-graphrag) each have their own. A fresh Debian
# lacks python3-venv; as root it is installed, as the other services' tools
# are. Any failure fails the caller (make test), never skips.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

venv="${1:?usage: venv.sh DIR REQUIREMENTS}"
requirements="${2:?usage: venv.sh DIR REQUIREMENTS}"

if [ -x "$venv/bin/python" ] && cmp -s "$requirements" "$venv/requirements.txt"; then
  exit 0
fi
command -v python3 >/dev/null 2>&1 || die "python3 not found: the test clients need it (apt-get install python3 python3-venv)"
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  if is_root && command -v apt-get >/dev/null 2>&1; then
    mkdir -p "$GRAPHSYNC_LOCAL"
    aptlog="$GRAPHSYNC_LOCAL/venv-apt-get.log"
    log "installing python3-venv with apt-get (the test clients' venvs need it)"
    apt-get update >"$aptlog" 2>&1 || die "apt-get update failed (see $aptlog)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv >>"$aptlog" 2>&1 \
      || die "apt-get install python3-venv failed (see $aptlog)"
  fi
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || die "python3 cannot make a venv: apt-get install python3-venv"
fi
log "installing $(basename "$requirements")'s Python packages into $venv"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
cp "$requirements" "$venv/requirements.txt"
