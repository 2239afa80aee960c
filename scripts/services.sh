#!/usr/bin/env bash
# scripts/services.sh up|down|status
#
# Starts (or reuses) the private PostgreSQL cluster and the embedded Neo4j and
# writes .local/services.env, which tests (internal/stacktest) and the demo
# read:
#   export GRAPHSYNC_PG_URL=postgres://graphsync@127.0.0.1:PORT/graphsync?sslmode=disable
#   export GRAPHSYNC_NEO4J_URI=bolt://127.0.0.1:PORT
#   export GRAPHSYNC_NEO4J_USER=          (empty: auth is off)
#   export GRAPHSYNC_NEO4J_PASSWORD=
#   export GRAPHSYNC_REPO_ROOT=/path/to/repo
#   export GRAPHSYNC_EMBED_MODEL_DIR=... GRAPHSYNC_ONNXRUNTIME_LIB=...
#                                         (from .local/models.env: make model)
# Use it from a shell with: . .local/services.env
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

ENV_FILE="$GRAPHSYNC_LOCAL/services.env"
SCRIPTS="$GRAPHSYNC_ROOT/scripts"

write_env() {
  local tmp="$ENV_FILE.tmp"
  {
    echo "# Written by scripts/services.sh up; source it: . .local/services.env"
    echo "export GRAPHSYNC_PG_URL='$("$SCRIPTS/pg.sh" url)'"
    echo "export GRAPHSYNC_NEO4J_URI='$("$SCRIPTS/neo4j.sh" url)'"
    echo "export GRAPHSYNC_NEO4J_USER="
    echo "export GRAPHSYNC_NEO4J_PASSWORD="
    echo "export GRAPHSYNC_REPO_ROOT='$GRAPHSYNC_ROOT'"
    # The embedding model's paths, when make model has written them.
    if [ -f "$GRAPHSYNC_LOCAL/models.env" ]; then grep '^export ' "$GRAPHSYNC_LOCAL/models.env"; fi
  } >"$tmp"
  mv "$tmp" "$ENV_FILE"
}

case "${1:-}" in
  up)
    mkdir -p "$GRAPHSYNC_LOCAL"
    # PostgreSQL starts in about a second; Neo4j takes longer, so start it
    # second and let PostgreSQL's failure (if any) surface first.
    "$SCRIPTS/pg.sh" start
    "$SCRIPTS/neo4j.sh" start
    write_env
    log "services up; environment in $ENV_FILE"
    ;;
  down)
    status=0
    "$SCRIPTS/neo4j.sh" stop || status=1
    "$SCRIPTS/pg.sh" stop || status=1
    exit $status
    ;;
  status)
    status=0
    "$SCRIPTS/pg.sh" status || status=$?
    "$SCRIPTS/neo4j.sh" status || status=$?
    exit $status
    ;;
  *)
    echo "usage: $0 up|down|status" >&2
    exit 2
    ;;
esac
