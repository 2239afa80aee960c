package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/internal/stacktest"
)

// Timeouts of the waits the tests make. Every wait polls a condition and fails
// the test, saying what it last saw, when its deadline passes.
const (
	tick           = 100 * time.Millisecond
	commandTimeout = 2 * time.Minute
	startTimeout   = 30 * time.Second
	exitTimeout    = 15 * time.Second
	catchUpTimeout = 3 * time.Minute
	queryTimeout   = 30 * time.Second
)

// maxAttempts is the sync processes' --max-attempts. The relay counts an
// attempt when it claims a row, so a row whose relay dies with it (SIGKILL,
// or a PostgreSQL restart between its Neo4j commit and its mark) has used
// one; by design, a row that keeps killing relays ends in the DLQ. A chaos
// scenario disrupts a relay five times (four SIGKILLs, one PostgreSQL
// restart), so a healthy row may lose up to five attempts through no fault
// of its own: six keeps it out of the DLQ whatever batches the
// disruptions hit.
const maxAttempts = 6

// stack is one test's world: a fresh database, the shared Neo4j, the sync
// processes the test started and the directory their logs go to.
type stack struct {
	t        *testing.T
	dbURL    string
	pool     *pgxpool.Pool
	neo4j    neo4j.DriverWithContext
	neo4jURI string
	// suffix makes this test's slot and publication names unique.
	suffix  string
	logDir  string
	started int
	procs   []*syncProc
	begin   time.Time
	// neo4jDown is set while the test has Neo4j stopped, and pgRestarting
	// while it restarts PostgreSQL, so that a test failing mid-outage brings
	// the service back for the tests after it.
	neo4jDown    bool
	pgRestarting bool
	// writer is the workload writer startWriter started, if any.
	writer *writer
}

func newStack(t *testing.T) *stack {
	t.Helper()
	dbURL, pool := stacktest.FreshDatabase(t)
	driver := stacktest.Neo4j(t)
	var random [4]byte
	_, _ = rand.Read(random[:])
	logDir, err := os.MkdirTemp("", "graphsync-e2e-"+strings.ReplaceAll(t.Name(), "/", "_")+"-")
	if err != nil {
		t.Fatalf("log dir: %v", err)
	}
	s := &stack{t: t, dbURL: dbURL, pool: pool, neo4j: driver, neo4jURI: stacktest.Neo4jURI(t),
		suffix: hex.EncodeToString(random[:]), logDir: logDir, begin: time.Now()}
	// Cleanups run last-in first-out: processes stop first, then PostgreSQL
	// and Neo4j come back if the test left them down, then the graph is
	// cleaned, then the database is dropped (registered by FreshDatabase,
	// before these).
	t.Cleanup(s.cleanGraph)
	t.Cleanup(func() {
		if s.neo4jDown {
			t.Logf("the test ended with Neo4j stopped; starting it again")
			stacktest.StartNeo4j(t)
			s.neo4jDown = false
		}
	})
	t.Cleanup(func() {
		if s.pgRestarting {
			t.Logf("the test ended in a failed PostgreSQL restart; restarting it again")
			stacktest.RestartPostgres(t)
			s.pgRestarting = false
		}
	})
	t.Cleanup(s.stopAll)
	return s
}

// logf logs with the time since the test began, so a log reads as a timeline.
func (s *stack) logf(format string, args ...any) {
	s.t.Helper()
	s.t.Logf("[%6.1fs] "+format, append([]any{time.Since(s.begin).Seconds()}, args...)...)
}

// cleanGraph removes every tenant of this test's database from Neo4j.
func (s *stack) cleanGraph() {
	s.pool.Reset()
	tenants, err := s.tenantIDs()
	if err != nil {
		s.t.Errorf("list tenants to clean from Neo4j: %v", err)
		return
	}
	stacktest.CleanGraph(s.t, s.neo4j, tenants...)
}

// stopAll kills what is still running, fails the test if a process
// panicked or (when built with -race) raced, prints the tail of every
// process's log when the test failed, and removes the logs when it passed.
func (s *stack) stopAll() {
	for _, p := range s.procs {
		if p.running() {
			p.signal(killSignal)
			p.waitExit(exitTimeout)
		}
	}
	for _, p := range s.procs {
		if crash := crashIn(p.logPath); crash != "" {
			s.t.Errorf("%s crashed: %s (log %s)", p.name, crash, p.logPath)
		}
	}
	if !s.t.Failed() {
		os.RemoveAll(s.logDir)
		return
	}
	for _, p := range s.procs {
		s.logf("---- last lines of %s (%s) ----\n%s", p.name, p.logPath, tail(p.logPath, 30))
	}
	s.logf("process logs kept in %s", s.logDir)
}

// childEnv is the environment of a graphsync child process of this test:
// see graphsyncEnv.
func (s *stack) childEnv(extra ...string) []string {
	return graphsyncEnv(s.dbURL, s.neo4jURI, extra...)
}

// graphsyncEnv is this process's environment without any GRAPHSYNC_
// setting except the Neo4j credentials, then pgURL and neo4jURI, then extra.
func graphsyncEnv(pgURL, neo4jURI string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "GRAPHSYNC_") && name != stacktest.EnvNeo4jUser && name != stacktest.EnvNeo4jPassword {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, stacktest.EnvPostgresURL+"="+pgURL, stacktest.EnvNeo4jURI+"="+neo4jURI)
	// Embeddings off unless a test asks for them in extra (a later entry
	// wins): these tests are about the pipeline, and the model's files are
	// found through GRAPHSYNC_ variables this environment leaves out.
	env = append(env, "GRAPHSYNC_EMBEDDER=none")
	return append(env, extra...)
}

// commandResult is how a one-shot graphsync command ended.
type commandResult struct {
	exitCode int
	stdout   string
	stderr   string
	elapsed  time.Duration
}

// runCommand runs graphsync with args to completion (bounded by
// commandTimeout) in the given environment.
func (s *stack) runCommand(env []string, args ...string) commandResult {
	s.t.Helper()
	return runGraphsync(s.t, env, args...)
}

func runGraphsync(t testing.TB, env []string, args ...string) commandResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, graphsyncBin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	started := time.Now()
	err := cmd.Run()
	result := commandResult{stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(started)}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		result.exitCode = exitErr.ExitCode()
	default:
		t.Fatalf("graphsync %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("graphsync %v did not finish within %s\nstderr:\n%s", args, commandTimeout, result.stderr)
	}
	return result
}

// migrate runs `graphsync migrate` against the test database and Neo4j.
func (s *stack) migrate() {
	s.t.Helper()
	result := s.runCommand(s.childEnv(), "migrate")
	if result.exitCode != 0 {
		s.t.Fatalf("graphsync migrate exited %d\nstdout:\n%s\nstderr:\n%s", result.exitCode, result.stdout, result.stderr)
	}
}

// syncArgs are the fast settings every sync process of the tests runs with.
// A rejected event waits 0.5s, 1s, ... 2.5s between its attempts, 7.5s in
// all, much longer than the 2s lease: an event that needs a node whose own
// event is stuck in a dead relay's batch (an OrderPlaced naming a product)
// must not be dead-lettered before that batch's lease runs out and it is
// delivered again. The production defaults keep the same order (retry step
// 30s, lease 15s).
func (s *stack) syncArgs(wake string) []string {
	return []string{
		"--wake", wake,
		"--lease", "2s",
		"--retry-step", "500ms",
		"--max-attempts", strconv.Itoa(maxAttempts),
		"--poll-interval", "100ms",
		"--fallback-poll-interval", "1s",
		"--batch-size", "100",
		// Catch up within a few seconds of an outage's end, not 30.
		"--sink-backoff-max", "2s",
		"--stream-stall-timeout", "3s",
		"--slot", "gs_e2e_" + s.suffix,
		"--publication", "gs_e2e_" + s.suffix,
	}
}

// waitUntil polls cond every tick until it reports true, failing the test
// with cond's last description when timeout passes.
func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	pollUntil(t, timeout, func() time.Duration { return tick }, what, cond)
}

// pollUntil is waitUntil with the wait before each next look from next.
func pollUntil(t testing.TB, timeout time.Duration, next func() time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		done, detail := cond()
		if done {
			return
		}
		wait := time.NewTimer(next())
		select {
		case <-deadline.C:
			wait.Stop()
			t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, detail)
		case <-wait.C:
		}
	}
}

// queryCtx bounds one test query.
func queryCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), queryTimeout)
}

// tenantIDs lists the tenants of the test database.
func (s *stack) tenantIDs() ([]int64, error) {
	ctx, cancel := queryCtx()
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT id FROM tenants ORDER BY id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// outboxCounts is where the test database's events are.
type outboxCounts struct {
	processed, pending, dlq int64
}

func (c outboxCounts) String() string {
	return fmt.Sprintf("%d processed, %d pending, %d in the DLQ", c.processed, c.pending, c.dlq)
}

func (s *stack) counts() (outboxCounts, error) {
	ctx, cancel := queryCtx()
	defer cancel()
	var c outboxCounts
	err := s.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE processed_at IS NOT NULL),
		       count(*) FILTER (WHERE processed_at IS NULL),
		       (SELECT count(*) FROM outbox_messages_dlq)
		FROM outbox_messages`).Scan(&c.processed, &c.pending, &c.dlq)
	return c, err
}

func (s *stack) mustCounts() outboxCounts {
	s.t.Helper()
	c, err := s.counts()
	if err != nil {
		s.t.Fatalf("count outbox rows: %v", err)
	}
	return c
}

// waitProcessedBeyond waits until more than n rows are processed.
func (s *stack) waitProcessedBeyond(n int64, timeout time.Duration, what string) outboxCounts {
	s.t.Helper()
	var last outboxCounts
	waitUntil(s.t, timeout, what, func() (bool, string) {
		c, err := s.counts()
		if err != nil {
			return false, err.Error()
		}
		last = c
		return c.processed > n, c.String() + s.writerState()
	})
	return last
}

// writerState says, for a wait that times out, whether the workload writer
// stopped on an error (then no new events arrive for the relays).
func (s *stack) writerState() string {
	if s.writer == nil {
		return ""
	}
	if err := s.writer.err(); err != nil {
		return "; the workload writer stopped: " + err.Error()
	}
	select {
	case <-s.writer.done:
		return "; the workload writer has finished"
	default:
		return "; the workload writer is running"
	}
}

// waitCaughtUp waits until no row is pending: each is processed or in the
// DLQ, and nothing will change any more.
func (s *stack) waitCaughtUp() {
	s.t.Helper()
	var last outboxCounts
	waitUntil(s.t, catchUpTimeout, "every event processed or dead-lettered", func() (bool, string) {
		c, err := s.counts()
		if err != nil {
			return false, err.Error()
		}
		last = c
		return c.pending == 0, c.String()
	})
	s.logf("caught up: %s", last)
}

// crashIn returns the first line of path that shows a Go panic, a fatal
// runtime error or a data race, or "".
func crashIn(path string) string {
	body, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") || strings.Contains(line, "WARNING: DATA RACE") {
			return line
		}
	}
	return ""
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	body, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(body), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logPath names the log of the next process called name.
func (s *stack) logPath(name string) string {
	s.started++
	return filepath.Join(s.logDir, fmt.Sprintf("%02d-%s.log", s.started, name))
}
