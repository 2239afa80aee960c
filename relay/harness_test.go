package relay

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"graphsync/internal/stacktest"
	"graphsync/outbox"
)

// The test binary doubles as a relay process for the crash tests: with
// envRelayProcess set, TestMain runs a relay against the given database
// instead of the tests (see runRelayProcess).
const (
	envRelayProcess = "GRAPHSYNC_TEST_RELAY_PROCESS"
	envRelayURL     = "GRAPHSYNC_TEST_RELAY_URL"
	envRelayConfig  = "GRAPHSYNC_TEST_RELAY_CONFIG"
)

func TestMain(m *testing.M) {
	if os.Getenv(envRelayProcess) != "" {
		os.Exit(runRelayProcess())
	}
	os.Exit(m.Run())
}

// inFlight is the ids of the rows in batches whose lease runs (a subquery):
// what a claim's window leaves alone (docs/adr/0018).
const inFlight = `(SELECT unnest(b.ids) FROM outbox_batches b WHERE b.locked_until >= now())`

// harness is one wake mode against one fresh database.
type harness struct {
	t    testing.TB
	mode WakeMode
	url  string
	pool *pgxpool.Pool
	slot string
}

func newHarness(t testing.TB, mode WakeMode) *harness {
	t.Helper()
	url, pool := stacktest.FreshDatabase(t)
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	h := &harness{t: t, mode: mode, url: url, pool: pool, slot: "gs_test_" + hex.EncodeToString(suffix[:])}
	// The relay refuses events of tenants PostgreSQL does not have; the
	// tests' producers write tenants 1 to 100.
	if _, err := pool.Exec(context.Background(), `INSERT INTO tenants (id, name)
		SELECT g, 'tenant ' || g FROM generate_series(1, 100) g ON CONFLICT DO NOTHING`); err != nil {
		t.Fatal(err)
	}
	switch mode {
	case WakeNotify:
		if err := NotifyTriggerEnable(context.Background(), pool, "graphsync_outbox"); err != nil {
			t.Fatal(err)
		}
	case WakeStream:
		// Creating a slot waits for every open transaction to end; tests
		// that hold one open need the slot made before.
		if err := EnsureStream(context.Background(), pool, h.slot, h.slot); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// config is a fast configuration for tests: short intervals, short lease,
// retry steps of milliseconds.
func (h *harness) config(id string) Config {
	return Config{
		ID: id, Wake: h.mode, BatchSize: 50, PollInterval: 50 * time.Millisecond,
		FallbackPollInterval: 300 * time.Millisecond, Lease: time.Second,
		RetryStep: 20 * time.Millisecond, RetryMaxSteps: 3, MaxAttempts: 3,
		SinkBackoff: 20 * time.Millisecond, SinkBackoffMax: 200 * time.Millisecond,
		DrainTimeout: 2 * time.Second, Slot: h.slot, Publication: h.slot,
		StandbyStatusInterval: 200 * time.Millisecond,
	}
}

// start runs a relay in this process until the test ends or stop is called.
func (h *harness) start(sink outbox.Sink, cfg Config) (stop func()) {
	h.t.Helper()
	_, stop = h.startRelay(sink, cfg)
	return stop
}

// startRelay is start, returning the relay too.
func (h *harness) startRelay(sink outbox.Sink, cfg Config) (_ *Relay, stop func()) {
	h.t.Helper()
	return h.startRelayLogging(sink, cfg, zaptest.NewLogger(h.t, zaptest.Level(zap.WarnLevel)))
}

// startRelayLogging is startRelay with the relay logging to log.
func (h *harness) startRelayLogging(sink outbox.Sink, cfg Config, log *zap.Logger) (_ *Relay, stop func()) {
	h.t.Helper()
	pool, err := pgxpool.New(context.Background(), h.url)
	if err != nil {
		h.t.Fatal(err)
	}
	r, err := New(pool, sink, cfg, log, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("relay %s: %v", cfg.ID, err)
			}
			pool.Close()
		})
	}
	h.t.Cleanup(stop)
	return r, stop
}

// event is what a test producer writes; aggregates are (tenant, type, id).
type event struct {
	tenant    int64
	aggType   string
	aggID     int64
	eventType string
	payload   string
}

// insert writes one outbox row the seed's way (the columns it names only).
func insert(ctx context.Context, tx pgx.Tx, e event) (int64, error) {
	var id int64
	err := tx.QueryRow(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload, trace_id)
		VALUES ($1, $2, $3, $4, $5::jsonb, NULL) RETURNING id`, e.tenant, e.aggType, e.aggID, e.eventType, e.payload).Scan(&id)
	return id, err
}

func (h *harness) insertCommitted(e event) int64 {
	h.t.Helper()
	return h.insertTogether(e)[0]
}

// insertTogether writes events in one transaction (one commit, one stream
// batch) and returns their ids in order.
func (h *harness) insertTogether(events ...event) []int64 {
	h.t.Helper()
	var ids []int64
	err := pgx.BeginFunc(context.Background(), h.pool, func(tx pgx.Tx) error {
		for _, e := range events {
			id, err := insert(context.Background(), tx, e)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return ids
}

// exec runs a statement of the test's own set-up, failing the test on an error.
func (h *harness) exec(sql string, args ...any) {
	h.t.Helper()
	if _, err := h.pool.Exec(context.Background(), sql, args...); err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
}

// attemptsUsed is a row's attempts, counting the one of a batch that holds
// it (in flight, or whose relay died and which no claim took over yet).
func (h *harness) attemptsUsed(id int64) int64 {
	return h.count(`SELECT m.attempts + (SELECT count(*) FROM outbox_batches b WHERE m.id = ANY(b.ids))
		FROM outbox_messages m WHERE m.id = $1`, id)
}

// count runs a counting query.
func (h *harness) count(query string, args ...any) int64 {
	h.t.Helper()
	var n int64
	if err := h.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		h.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		<-ticker.C
	}
}

type aggKey struct {
	tenant  int64
	aggType string
	aggID   int64
}

func keyOf(m outbox.Message) aggKey { return aggKey{m.TenantID, m.AggregateType, m.AggregateID} }

// recordingSink records deliveries and checks, as they happen, that no
// aggregate is in two deliveries at once.
type recordingSink struct {
	mu         sync.Mutex
	deliveries [][]outbox.Message
	inflight   map[aggKey]bool
	violations []string
	// reject, when set, decides per message (poison); fail, when set, fails
	// whole batches (an unavailable store).
	reject func(outbox.Message) error
	fail   func() error
	// hold, when set, is waited on inside Deliver (to widen the race window).
	hold func(ctx context.Context, batch []outbox.Message)
	// onApply, when set, sees each message as it is applied.
	onApply func(outbox.Message)
	// seen counts the deliveries each message was in.
	seen map[int64]int
}

func newRecordingSink() *recordingSink {
	return &recordingSink{inflight: map[aggKey]bool{}, seen: map[int64]int{}}
}

func (s *recordingSink) Deliver(ctx context.Context, batch []outbox.Message) (map[int64]error, error) {
	s.mu.Lock()
	if s.fail != nil {
		if err := s.fail(); err != nil {
			s.mu.Unlock()
			return nil, err
		}
	}
	keys := map[aggKey]bool{}
	for _, m := range batch {
		keys[keyOf(m)] = true
		s.seen[m.ID]++
	}
	for k := range keys {
		if s.inflight[k] {
			s.violations = append(s.violations, fmt.Sprintf("aggregate %v delivered concurrently", k))
		}
		s.inflight[k] = true
	}
	s.mu.Unlock()

	if s.hold != nil {
		s.hold(ctx, batch)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range keys {
		delete(s.inflight, k)
	}
	// The Sink contract: once a message is rejected, the later messages of
	// its aggregate in the batch are held back, not applied.
	rejected := map[int64]error{}
	failing := map[aggKey]bool{}
	var applied []outbox.Message
	for _, m := range batch {
		if failing[keyOf(m)] {
			rejected[m.ID] = outbox.ErrHeldBack
			continue
		}
		if s.reject != nil {
			if err := s.reject(m); err != nil {
				rejected[m.ID] = err
				failing[keyOf(m)] = true
				continue
			}
		}
		if s.onApply != nil {
			s.onApply(m)
		}
		applied = append(applied, m)
	}
	s.deliveries = append(s.deliveries, applied)
	return rejected, nil
}

// applied returns every applied message in delivery order.
func (s *recordingSink) applied() []outbox.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []outbox.Message
	for _, batch := range s.deliveries {
		all = append(all, batch...)
	}
	return all
}

func (s *recordingSink) appliedIDs() map[int64]int {
	seen := map[int64]int{}
	for _, m := range s.applied() {
		seen[m.ID]++
	}
	return seen
}

// checkOrder fails t for every message applied after a later message of its
// aggregate, and returns the last id applied per aggregate.
func (s *recordingSink) checkOrder(t testing.TB) map[aggKey]int64 {
	t.Helper()
	last := map[aggKey]int64{}
	for _, m := range s.applied() {
		if m.ID < last[keyOf(m)] {
			t.Errorf("aggregate %v: %d applied after %d", keyOf(m), m.ID, last[keyOf(m)])
		}
		last[keyOf(m)] = m.ID
	}
	return last
}

func (s *recordingSink) checkViolations(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.violations {
		t.Error(v)
	}
}

// relayProcess is a relay in a child process (this test binary), for tests
// that kill it.
type relayProcess struct {
	cmd   *exec.Cmd
	lines chan string
}

// processConfig is what the child reads from envRelayConfig.
type processConfig struct {
	Config Config
	// Behaviour: "hang" blocks in Deliver after printing DELIVERING;
	// "crash-on-poison" exits the process when a batch holds a poison row.
	Behaviour string
}

func (h *harness) startProcess(cfg Config, behaviour string) *relayProcess {
	h.t.Helper()
	encoded, err := json.Marshal(processConfig{Config: cfg, Behaviour: behaviour})
	if err != nil {
		h.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRelayProcess+"=1", envRelayURL+"="+h.url, envRelayConfig+"="+string(encoded))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	p := &relayProcess{cmd: cmd, lines: make(chan string, 100)}
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			p.lines <- scanner.Text()
		}
		close(p.lines)
	}()
	h.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return p
}

// waitLine waits for a line starting with prefix and returns it.
func (p *relayProcess) waitLine(t testing.TB, prefix string, within time.Duration) string {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("relay process ended before printing %q", prefix)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timer.C:
			t.Fatalf("relay process did not print %q within %s", prefix, within)
		}
	}
}

func (p *relayProcess) kill(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
}

// waitExit waits for the process to end by itself and returns its exit code.
func (p *relayProcess) waitExit(t testing.TB, within time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("relay process still running after %s", within)
		return -1
	}
}

// runRelayProcess is the child side of startProcess.
func runRelayProcess() int {
	var pc processConfig
	if err := json.Unmarshal([]byte(os.Getenv(envRelayConfig)), &pc); err != nil {
		fmt.Fprintln(os.Stderr, "relay process: bad config:", err)
		return 2
	}
	pool, err := pgxpool.New(context.Background(), os.Getenv(envRelayURL))
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay process:", err)
		return 2
	}
	sink := outbox.SinkFunc(func(ctx context.Context, batch []outbox.Message) (map[int64]error, error) {
		ids := make([]string, len(batch))
		for i, m := range batch {
			ids[i] = strconv.FormatInt(m.ID, 10)
			if pc.Behaviour == "crash-on-poison" && strings.Contains(string(m.Payload), "crash") {
				fmt.Println("CRASHING " + ids[i])
				os.Exit(3)
			}
		}
		fmt.Println("DELIVERING " + strings.Join(ids, ","))
		if pc.Behaviour == "hang" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return nil, nil
	})
	r, err := New(pool, sink, pc.Config, zap.NewNop(), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay process:", err)
		return 2
	}
	fmt.Println("STARTED")
	if err := r.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "relay process:", err)
		return 1
	}
	return 0
}
