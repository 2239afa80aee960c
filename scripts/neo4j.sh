#!/usr/bin/env bash
# scripts/neo4j.sh start|stop|restart|status|url|build
#
# Neo4j 5.26 Community, embedded, from Maven Central: e2e/neo4j is a small
# Maven project whose Neo4jLauncher starts a DBMS with only the Bolt
# connector, on 127.0.0.1:<free port>, without TLS or authentication. No
# Docker and no Neo4j distribution: the jars come from Maven Central into
# ~/.m2 on the first run; later runs build offline.
#
# Layout (.local/ is git-ignored):
#   .local/neo4j/port          Bolt port, chosen once and reused
#   .local/neo4j/pid           the launcher JVM's pid
#   .local/neo4j/ready         written by the launcher when Bolt is up
#   .local/neo4j/data, logs    the DBMS's data and logs (logs/debug.log; the
#                              JVM's garbage-collection pauses in logs/gc.log,
#                              older ones, of earlier starts or past 16 MB,
#                              in gc.log.0 to .3)
#   .local/neo4j/launcher.log  the JVM's stdout and stderr
#   .local/neo4j/build.log     the last Maven build's output
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

NEO4J_LOCAL="$GRAPHSYNC_LOCAL/neo4j"
NEO4J_PROJECT="$GRAPHSYNC_ROOT/e2e/neo4j"
NEO4J_START_SECONDS="${GRAPHSYNC_NEO4J_START_SECONDS:-180}"
NEO4J_STOP_SECONDS="${GRAPHSYNC_NEO4J_STOP_SECONDS:-90}"
NEO4J_HEAP="${GRAPHSYNC_NEO4J_HEAP:-2g}"
NEO4J_PAGECACHE="${GRAPHSYNC_NEO4J_PAGECACHE:-2g}"
PID_FILE="$NEO4J_LOCAL/pid"
READY_FILE="$NEO4J_LOCAL/ready"
LAUNCHER_LOG="$NEO4J_LOCAL/launcher.log"
BUILD_LOG="$NEO4J_LOCAL/build.log"
READY_BIN="$GRAPHSYNC_LOCAL/bin/neo4jready"

mkdir -p "$NEO4J_LOCAL"

# install_debian PACKAGES...: apt-get install, with one-line errors.
install_debian() {
  local aptlog="$NEO4J_LOCAL/apt-get.log"
  apt-get update >"$aptlog" 2>&1 || die "apt-get update failed (see $aptlog): $(tail -n 1 "$aptlog")"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >>"$aptlog" 2>&1 \
    || die "apt-get install $* failed (see $aptlog): $(tail -n 1 "$aptlog")"
}

ensure_java_maven() {
  local missing=()
  command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
  command -v mvn >/dev/null 2>&1 || missing+=(maven)
  if [ ${#missing[@]} -gt 0 ]; then
    if is_root && command -v apt-get >/dev/null 2>&1; then
      log "installing ${missing[*]} with apt-get (Neo4j needs Java 17+ and Maven)"
      install_debian "${missing[@]}"
    fi
    command -v java >/dev/null 2>&1 || die "Java not found: Neo4j needs Java 17+ (apt-get install openjdk-17-jdk-headless)"
    command -v mvn >/dev/null 2>&1 || die "Maven not found: needed to fetch Neo4j from Maven Central (apt-get install maven)"
  fi
  local version
  version="$(java -version 2>&1 | awk -F'"' '/version/ { print $2; exit }')"
  case "$version" in
    1.*|9*|10*|11*|12*|13*|14*|15*|16*) die "Java $version found: Neo4j 5 needs Java 17+ (apt-get install openjdk-17-jdk-headless)" ;;
  esac
}

# build: compile the launcher and copy its dependency jars to target/lib,
# offline when ~/.m2 already has them.
build() {
  local class="$NEO4J_PROJECT/target/classes/graphsync/e2e/Neo4jLauncher.class"
  local stamp="$NEO4J_PROJECT/target/lib/.complete"
  if [ -f "$stamp" ] && [ -f "$class" ] && [ "$stamp" -nt "$NEO4J_PROJECT/pom.xml" ] \
      && [ -z "$(find "$NEO4J_PROJECT/src" -newer "$stamp" -type f 2>/dev/null)" ]; then
    return 0
  fi
  ensure_java_maven
  rm -rf "$NEO4J_PROJECT/target/lib"
  if ! (cd "$NEO4J_PROJECT" && mvn -o -q -B package) >"$BUILD_LOG" 2>&1; then
    log "downloading Neo4j and its dependencies from Maven Central into ~/.m2 (first run only)"
    if ! (cd "$NEO4J_PROJECT" && mvn -q -B package) >"$BUILD_LOG" 2>&1; then
      die "Maven build of e2e/neo4j failed (see $BUILD_LOG): $(grep -m1 'ERROR' "$BUILD_LOG" || tail -n 1 "$BUILD_LOG")"
    fi
  fi
  touch "$stamp"
}

build_ready_checker() {
  if [ -x "$READY_BIN" ] && [ -z "$(find "$GRAPHSYNC_ROOT/internal/stacktest/cmd/neo4jready" "$GRAPHSYNC_ROOT/go.sum" -newer "$READY_BIN" -type f 2>/dev/null)" ]; then
    return 0
  fi
  command -v go >/dev/null 2>&1 || die "go not found: needed to build the Bolt readiness checker"
  mkdir -p "$(dirname "$READY_BIN")"
  (cd "$GRAPHSYNC_ROOT" && go build -o "$READY_BIN" ./internal/stacktest/cmd/neo4jready) \
    || die "go build ./internal/stacktest/cmd/neo4jready failed"
}

launcher_pid() {
  local pid
  [ -s "$PID_FILE" ] || return 1
  pid="$(tr -dc '0-9' <"$PID_FILE")"
  [ -n "$pid" ] || return 1
  # A recycled pid that is not our launcher does not count.
  # (grep reads the file itself: `tr | grep -q` fails under pipefail when
  # grep exits early and tr gets SIGPIPE.)
  kill -0 "$pid" 2>/dev/null && grep -qa 'graphsync.e2e.Neo4jLauncher' "/proc/$pid/cmdline" 2>/dev/null \
    || return 1
  echo "$pid"
}

# adopt_orphan: a launcher for this repo's .local/neo4j that runs without
# (or with a wrong) pid file, e.g. after the file was deleted, is ours: record
# its pid instead of starting a second DBMS on the same store.
adopt_orphan() {
  local cmdline pid
  for cmdline in /proc/[0-9]*/cmdline; do
    if grep -qa 'graphsync.e2e.Neo4jLauncher' "$cmdline" 2>/dev/null \
        && grep -qaF -- "$NEO4J_LOCAL" "$cmdline" 2>/dev/null; then
      pid="${cmdline#/proc/}"
      pid="${pid%/cmdline}"
      echo "$pid" >"$PID_FILE"
      log "found Neo4j launcher pid $pid without a pid file; adopting it"
      return 0
    fi
  done
  return 1
}

current_port() { tr -dc '0-9' <"$NEO4J_LOCAL/port"; }
bolt_uri() { echo "bolt://127.0.0.1:$(current_port)"; }

wait_bolt() {
  local seconds="$1"
  "$READY_BIN" -uri "$(bolt_uri)" -timeout "${seconds}s" >>"$LAUNCHER_LOG" 2>&1
}

start() {
  build_ready_checker
  if launcher_pid >/dev/null || adopt_orphan; then
    wait_bolt "$NEO4J_START_SECONDS" \
      || die "Neo4j (pid $(launcher_pid)) runs but Bolt $(bolt_uri) does not answer (log: $LAUNCHER_LOG, $NEO4J_LOCAL/logs/debug.log)"
    log "Neo4j already running: $(bolt_uri)"
    return 0
  fi
  build
  ensure_java_maven
  local port
  port="$(remembered_port "$NEO4J_LOCAL/port")"
  rm -f "$READY_FILE"
  mkdir -p "$NEO4J_LOCAL/logs"
  local jvm_opts=(
    # The heap is fixed at its largest, as Neo4j's operations manual advises.
    # Started at 256m it stayed near 300 MiB under the benchmark's load: a
    # young collection every 2 to 3 s and a concurrent cycle every 8 to 15 s,
    # whose Remark pause (median 28 ms, up to 125 ms in gc.log) stops every
    # transaction, the latency probes' too (docs/adr/0013, stop 37).
    "-Xms$NEO4J_HEAP" "-Xmx$NEO4J_HEAP"
    -XX:+UseG1GC -XX:-OmitStackTraceInFastThrow -XX:+DisableExplicitGC
    # Each pause with its length, on the clock debug.log uses, so a slow
    # moment of a test or benchmark can be lined up with one.
    "-Xlog:gc:file=\"$NEO4J_LOCAL/logs/gc.log\":utctime,uptime:filecount=4,filesize=16m"
    -XX:+UnlockExperimentalVMOptions -XX:+TrustFinalNonStaticFields
    -Djdk.nio.maxCachedBufferSize=1024
    -Dio.netty.tryReflectionSetAccessible=true
    -Dlog4j2.disable.jmx=true
    -Dfile.encoding=UTF-8
    --add-opens=java.base/java.nio=ALL-UNNAMED
    --add-opens=java.base/java.io=ALL-UNNAMED
    --add-opens=java.base/java.lang=ALL-UNNAMED
    --add-opens=java.base/java.lang.invoke=ALL-UNNAMED
    --add-opens=java.base/java.util=ALL-UNNAMED
    --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
    --add-opens=java.base/java.net=ALL-UNNAMED
    --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
    --add-opens=java.base/jdk.internal.misc=ALL-UNNAMED
    --add-exports=java.base/jdk.internal.misc=ALL-UNNAMED
    --add-exports=java.base/sun.nio.ch=ALL-UNNAMED
  )
  local classpath="$NEO4J_PROJECT/target/classes:$NEO4J_PROJECT/target/lib/*"
  echo "--- $(date -u +%FT%TZ) starting Neo4j on 127.0.0.1:$port" >>"$LAUNCHER_LOG"
  # setsid and closed stdio: the JVM must outlive the shell (and any go test
  # that ran this script) and must not hold its caller's pipes open.
  setsid java "${jvm_opts[@]}" -cp "$classpath" graphsync.e2e.Neo4jLauncher \
    "$NEO4J_LOCAL" "$port" "$NEO4J_PAGECACHE" </dev/null >>"$LAUNCHER_LOG" 2>&1 &
  local pid=$!
  echo "$pid" >"$PID_FILE"
  local deadline=$(( $(date +%s) + NEO4J_START_SECONDS ))
  until [ -f "$READY_FILE" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PID_FILE"
      die "Neo4j exited while starting on 127.0.0.1:$port (log: $LAUNCHER_LOG, $NEO4J_LOCAL/logs/debug.log): $(grep -m1 -E 'Exception|Error' "$LAUNCHER_LOG" || tail -n 1 "$LAUNCHER_LOG")"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      die "Neo4j Bolt port 127.0.0.1:$port did not open within ${NEO4J_START_SECONDS}s (pid $pid still running; log: $LAUNCHER_LOG, $NEO4J_LOCAL/logs/debug.log)"
    fi
    sleep 0.3
  done
  wait_bolt 60 || die "Neo4j is up but Bolt $(bolt_uri) does not answer RETURN 1 (log: $LAUNCHER_LOG, $NEO4J_LOCAL/logs/debug.log)"
  log "Neo4j started: $(bolt_uri) (pid $pid)"
}

stop() {
  local pid
  if ! pid="$(launcher_pid)" && ! { adopt_orphan && pid="$(launcher_pid)"; }; then
    rm -f "$PID_FILE" "$READY_FILE"
    log "Neo4j not running"
    return 0
  fi
  kill -TERM "$pid"
  local deadline=$(( $(date +%s) + NEO4J_STOP_SECONDS ))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      kill -KILL "$pid" 2>/dev/null || true
      rm -f "$PID_FILE" "$READY_FILE"
      die "Neo4j (pid $pid) did not stop within ${NEO4J_STOP_SECONDS}s of SIGTERM; killed it (log: $LAUNCHER_LOG)"
    fi
    sleep 0.2
  done
  rm -f "$PID_FILE" "$READY_FILE"
  log "Neo4j stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  build) build ;;
  status)
    if pid="$(launcher_pid)" || { adopt_orphan && pid="$(launcher_pid)"; }; then
      echo "Neo4j running: $(bolt_uri) (pid $pid)"
    else
      echo "Neo4j not running"
      exit 3
    fi
    ;;
  url)
    [ -s "$NEO4J_LOCAL/port" ] || die "Neo4j was never started: run scripts/neo4j.sh start"
    bolt_uri
    ;;
  *)
    echo "usage: $0 start|stop|restart|status|url|build" >&2
    exit 2
    ;;
esac
