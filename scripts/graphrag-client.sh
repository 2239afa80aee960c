#!/usr/bin/env bash
# scripts/graphrag-client.sh: neo4j-graphrag-python against the graph sync
# builds (make test-graphrag, part of make test).
#
# Installs neo4j-graphrag, onnxruntime and tokenizers from PyPI into a private
# venv (.local/graphrag-venv, rebuilt when e2e/graphrag/requirements.txt
# changes), runs `graphsync demo` (sync with the local model, so products
# carry vectors) against the running services, then
# e2e/graphrag/test_graphrag_client.py on the demo's first tenant. Every
# failure (no python3, pip, the demo, an assertion) fails the target.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

VENV="$GRAPHSYNC_LOCAL/graphrag-venv"
REQUIREMENTS="$GRAPHSYNC_ROOT/e2e/graphrag/requirements.txt"
BIN="$GRAPHSYNC_ROOT/bin/graphsync"

"$GRAPHSYNC_ROOT/scripts/venv.sh" "$VENV" "$REQUIREMENTS"

# shellcheck source=/dev/null
. "$GRAPHSYNC_LOCAL/services.env"
"$BIN" migrate >/dev/null
out=$("$BIN" demo --wake poll --http-addr= --question "" --log-format console --log-level warn)
tenant=$(sed -n 's/^demo: graphsync context --tenant \([0-9]*\) --retrieval hybrid .*/\1/p' <<<"$out")
if [ -z "$tenant" ]; then
  echo "graphrag client: the demo named no tenant; its output:" >&2
  echo "$out" >&2
  exit 1
fi
cd "$GRAPHSYNC_ROOT/e2e/graphrag"
"$VENV/bin/python" test_graphrag_client.py --tenant "$tenant"
