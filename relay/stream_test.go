package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"graphsync/outbox"
)

// streamConfig turns the fallback poll off in practice, so that only the
// replication stream can deliver.
func streamOnlyConfig(h *harness, id string) Config {
	cfg := h.config(id)
	cfg.FallbackPollInterval = time.Hour
	return cfg
}

// newFailingSink returns a sink that cannot take batches (Neo4j down) until
// the returned flag is cleared.
func newFailingSink() (*recordingSink, *atomic.Bool) {
	sink := newRecordingSink()
	failing := &atomic.Bool{}
	failing.Store(true)
	sink.fail = func() error {
		if failing.Load() {
			return fmt.Errorf("%w: neo4j down", outbox.ErrSinkUnavailable)
		}
		return nil
	}
	return sink, failing
}

func (h *harness) confirmedLSN() string {
	h.t.Helper()
	var lsn string
	if err := h.pool.QueryRow(context.Background(), `SELECT coalesce(confirmed_flush_lsn::text, '') FROM pg_replication_slots WHERE slot_name = $1`, h.slot).Scan(&lsn); err != nil {
		h.t.Fatal(err)
	}
	return lsn
}

func (h *harness) lsnAtLeast(lsn string) bool {
	h.t.Helper()
	var ok bool
	if err := h.pool.QueryRow(context.Background(), `SELECT coalesce((SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1), false)`, h.slot, lsn).Scan(&ok); err != nil {
		h.t.Fatal(err)
	}
	return ok
}

// walsenderPID is the process serving the slot's replication connection
// (0: none): it changes when the relay reconnects.
func (h *harness) walsenderPID() int64 {
	return h.count(`SELECT coalesce(max(active_pid), 0) FROM pg_replication_slots WHERE slot_name = $1`, h.slot)
}

func (h *harness) currentLSN() string {
	h.t.Helper()
	var lsn string
	if err := h.pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		h.t.Fatal(err)
	}
	return lsn
}

// Rows committed one by one reach the sink through the stream alone, each
// aggregate in order, with no help from the fallback poll.
func TestStreamDeliversWithoutFallbackPoll(t *testing.T) {
	h := newHarness(t, WakeStream)
	sink := newRecordingSink()
	h.start(sink, streamOnlyConfig(h, "relay-stream-only"))
	// Let the start-up drain pass before the rows exist.
	eventually(t, 10*time.Second, "the stream connected", func() bool {
		return h.count(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active`, h.slot) == 1
	})
	var ids []int64
	for i := 0; i < 300; i++ {
		ids = append(ids, h.insertCommitted(event{1, "Order", int64(i % 7), "OrderConfirmed", `{}`}))
	}
	eventually(t, 15*time.Second, "every row delivered by the stream", func() bool {
		seen := sink.appliedIDs()
		for _, id := range ids {
			if seen[id] == 0 {
				return false
			}
		}
		return true
	})
	last := map[aggKey]int64{}
	for _, m := range sink.applied() {
		if m.ID < last[keyOf(m)] {
			t.Errorf("aggregate %v: %d after %d", keyOf(m), m.ID, last[keyOf(m)])
		}
		last[keyOf(m)] = m.ID
	}
	sink.checkViolations(t)
}

// The slot's confirmed position passes a transaction only after its rows
// were delivered and marked.
func TestStreamConfirmsOnlyAfterMarking(t *testing.T) {
	h := newHarness(t, WakeStream)
	sink, failing := newFailingSink()
	h.start(sink, streamOnlyConfig(h, "relay-confirm"))
	eventually(t, 10*time.Second, "the stream connected", func() bool {
		return h.count(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active`, h.slot) == 1
	})
	id := h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`})
	afterCommit := h.currentLSN()
	// While the sink fails, the row stays pending and the slot stays behind it.
	eventually(t, 10*time.Second, "a failed delivery attempt", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND processed_at IS NULL`, id) == 1 &&
			h.count(`SELECT count(*) FROM pg_stat_replication`) >= 1
	})
	for i := 0; i < 5; i++ {
		if h.lsnAtLeast(afterCommit) {
			t.Fatalf("slot confirmed %s past the undelivered row's commit (%s)", h.confirmedLSN(), afterCommit)
		}
		<-time.After(100 * time.Millisecond)
	}
	failing.Store(false)
	eventually(t, 15*time.Second, "row marked and slot confirmed past it", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND processed_at IS NOT NULL`, id) == 1 &&
			h.lsnAtLeast(afterCommit)
	})
}

// While the outbox is quiet and other tables are busy, the heartbeat lets the
// slot follow the server's WAL end instead of pinning WAL.
func TestStreamHeartbeatAdvancesIdleSlot(t *testing.T) {
	h := newHarness(t, WakeStream)
	h.start(newRecordingSink(), streamOnlyConfig(h, "relay-heartbeat"))
	eventually(t, 10*time.Second, "the stream connected", func() bool {
		return h.count(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active`, h.slot) == 1
	})
	ctx := context.Background()
	if _, err := h.pool.Exec(ctx, `CREATE TABLE busy (n int)`); err != nil {
		t.Fatal(err)
	}
	if _, err := h.pool.Exec(ctx, `INSERT INTO busy SELECT generate_series(1, 50000)`); err != nil {
		t.Fatal(err)
	}
	target := h.currentLSN()
	eventually(t, 20*time.Second, "idle slot confirmed past unrelated WAL", func() bool {
		// Keep the database busy so there is WAL to pass.
		if _, err := h.pool.Exec(ctx, `UPDATE busy SET n = n + 1 WHERE n < 10`); err != nil {
			t.Fatal(err)
		}
		return h.lsnAtLeast(target)
	})
}

// Slot and publication are created idempotently and dropped by DropStream;
// names that could carry SQL are refused.
func TestEnsureAndDropStream(t *testing.T) {
	h := newHarness(t, WakePoll)
	if err := EnsureStream(context.Background(), h.pool, "bad name", "ok"); err == nil {
		t.Error("an invalid slot name was accepted")
	}
	pool := h.pool
	if err := EnsureStream(context.Background(), pool, h.slot, h.slot); err != nil {
		t.Fatalf("ensure stream twice (1): %v", err)
	}
	if err := EnsureStream(context.Background(), pool, h.slot, h.slot); err != nil {
		t.Fatalf("ensure stream twice (2): %v", err)
	}
	if err := DropStream(context.Background(), pool, h.slot, h.slot, 0); err != nil {
		t.Fatal(err)
	}
	if h.count(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, h.slot) != 0 ||
		h.count(`SELECT count(*) FROM pg_publication WHERE pubname = $1`, h.slot) != 0 {
		t.Error("stream drop left the slot or the publication")
	}
}

// Dropping the stream waits for the slot to be let go: a relay that has just
// stopped has closed its replication connection, but PostgreSQL's walsender
// may hold the slot a moment longer. A slot a running relay streams from is
// an error once the wait has passed.
func TestDropStreamWaitsForTheSlotToBeLetGo(t *testing.T) {
	h := newHarness(t, WakeStream)
	stop := h.start(newRecordingSink(), streamOnlyConfig(h, "relay-drop"))
	eventually(t, 10*time.Second, "the stream connected", func() bool { return h.walsenderPID() != 0 })
	const wait = 300 * time.Millisecond
	began := time.Now()
	err := DropStream(context.Background(), h.pool, h.slot, h.slot, wait)
	if err == nil || !strings.Contains(err.Error(), "stop the sync service using it first") {
		t.Fatalf("dropping the slot of a running relay: %v; want an error saying to stop the sync service first", err)
	}
	if waited := time.Since(began); waited < wait {
		t.Errorf("dropping the slot of a running relay gave up after %s; want it to wait %s", waited, wait)
	}

	// A drop that has found the slot in use at least once, and the relay
	// stops then: the drop succeeds.
	var since time.Time
	if err := h.pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&since); err != nil {
		t.Fatal(err)
	}
	// The drop has a connection of its own, whose last query the test reads.
	dropPool, err := pgxpool.New(context.Background(), h.url)
	if err != nil {
		t.Fatal(err)
	}
	defer dropPool.Close()
	dropped := make(chan error, 1)
	go func() { dropped <- DropStream(context.Background(), dropPool, h.slot, h.slot, time.Minute) }()
	eventually(t, 10*time.Second, "the drop to find the slot in use", func() bool {
		select {
		case err := <-dropped:
			t.Fatalf("the drop ended (%v) while the relay still streamed; want it to wait", err)
		default:
		}
		return h.count(`SELECT count(*) FROM pg_stat_activity WHERE state = 'idle' AND query_start > $1
			AND query LIKE 'SELECT pg_drop_replication_slot%'`, since) > 0
	})
	stop()
	select {
	case err := <-dropped:
		if err != nil {
			t.Fatalf("dropping the slot once its relay stopped: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the drop did not end within 30s of the relay's stop")
	}
	if h.count(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, h.slot) != 0 {
		t.Error("the slot is still there")
	}
}

// A relay whose replication connection was cut and that finds the slot still
// held (its old walsender has not let go yet) tries again soon, not after
// the fallback poll interval, which is for a slot another relay holds. The
// test stands in for the slow walsender: it takes the slot as soon as the
// relay's connection is gone and lets go once the relay has found it held.
func TestStreamRetriesSoonForTheSlotItJustLost(t *testing.T) {
	h := newHarness(t, WakeStream)
	cfg := streamOnlyConfig(h, "relay-lost") // fallback poll: an hour
	cfg.SinkBackoff = 3 * time.Second        // time for the test to take the slot, on a busy machine too
	cfg.SinkBackoffMax = 5 * time.Second
	core, logs := observer.New(zap.InfoLevel)
	h.startRelayLogging(newRecordingSink(), cfg, zap.New(core))
	eventually(t, 10*time.Second, "the stream connected", func() bool { return h.walsenderPID() != 0 })

	replConfig, err := pgconn.ParseConfig(h.url)
	if err != nil {
		t.Fatal(err)
	}
	replConfig.RuntimeParams["replication"] = "database"
	holder, err := pgconn.ConnectConfig(context.Background(), replConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	relayPID := h.walsenderPID()
	h.count(`SELECT count(*) FROM (SELECT pg_terminate_backend($1::int)) t`, relayPID)
	eventually(t, 10*time.Second, "the relay's walsender gone", func() bool { return h.walsenderPID() == 0 })
	if err := pglogrepl.StartReplication(context.Background(), holder, h.slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + h.slot + "'"},
	}); err != nil {
		t.Fatalf("the test could not take the slot before the relay's reconnect (backoff %s): %v", cfg.SinkBackoff, err)
	}
	holderPID := h.walsenderPID()
	eventually(t, 10*time.Second, "the relay to find the slot held", func() bool {
		return logs.FilterMessageSnippet("replication slot is").Len() > 0
	})
	if n := logs.FilterMessageSnippet("held by another relay").Len(); n != 0 {
		t.Errorf("the relay took the slot it had just lost for another relay's (%d times)", n)
	}
	holder.Close(context.Background())
	// Its backoff (up to SinkBackoffMax) and a reconnect; the fallback poll
	// it must not wait for is an hour.
	eventually(t, 30*time.Second, "the relay streaming again", func() bool {
		pid := h.walsenderPID()
		return pid != 0 && pid != relayPID && pid != holderPID
	})
}

// A stream whose transactions cannot be delivered lets go of its replication
// connection after StreamStallTimeout (a shutting-down PostgreSQL waits for
// the walsender, which waits for us), reconnects, and delivers once it can.
func TestStreamLetsGoWhenStalled(t *testing.T) {
	h := newHarness(t, WakeStream)
	sink, failing := newFailingSink()
	cfg := streamOnlyConfig(h, "relay-stall")
	cfg.StreamStallTimeout = 500 * time.Millisecond
	h.start(sink, cfg)
	activePID := h.walsenderPID
	eventually(t, 10*time.Second, "the stream connected", func() bool { return activePID() != 0 })
	first := activePID()
	id := h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`})
	eventually(t, 10*time.Second, "the stalled stream to let go of its connection", func() bool {
		pid := activePID()
		return pid != first
	})
	failing.Store(false)
	eventually(t, 15*time.Second, "the row delivered after the stall", func() bool {
		return sink.appliedIDs()[id] > 0
	})
}

// Stalls in a row back off: the sink is still failing, and each new
// connection has the server decode the stalled transactions again, so the
// stream does not reconnect at once after every stall.
func TestStreamBacksOffAfterStallsInARow(t *testing.T) {
	h := newHarness(t, WakeStream)
	sink, failing := newFailingSink()
	cfg := streamOnlyConfig(h, "relay-stalls")
	cfg.StreamStallTimeout = 300 * time.Millisecond
	core, logs := observer.New(zap.WarnLevel)
	_, stop := h.startRelayLogging(sink, cfg, zap.New(core))
	defer stop()
	eventually(t, 10*time.Second, "the stream connected", func() bool { return h.walsenderPID() != 0 })
	id := h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`})
	stalls := func() []time.Duration {
		var waits []time.Duration
		for _, e := range logs.FilterMessageSnippet("replication stream stalled").All() {
			for _, f := range e.Context {
				if f.Key == "backoff" {
					waits = append(waits, time.Duration(f.Integer))
				}
			}
		}
		return waits
	}
	eventually(t, 20*time.Second, "three stalls in a row", func() bool { return len(stalls()) >= 3 })
	if waits := stalls(); waits[2] <= waits[0] {
		t.Errorf("backoff after stalls in a row: %v, want it to grow", waits)
	}
	failing.Store(false)
	eventually(t, 15*time.Second, "the row delivered after the stalls", func() bool {
		return sink.appliedIDs()[id] > 0
	})
}

// A healthy stream keeps its replication connection: a transaction that
// arrives after a quiet spell longer than StreamStallTimeout is delivered
// on the same connection, not taken for a stall.
func TestStreamKeepsItsConnectionAfterAQuietSpell(t *testing.T) {
	h := newHarness(t, WakeStream)
	sink := newRecordingSink()
	cfg := streamOnlyConfig(h, "relay-quiet")
	// Long enough for one delivery on a loaded machine (the test runs under
	// -race beside others); the quiet spells below are twice as long.
	cfg.StreamStallTimeout = 2 * time.Second
	h.start(sink, cfg)
	activePID := h.walsenderPID
	eventually(t, 10*time.Second, "the stream connected", func() bool { return activePID() != 0 })
	first := activePID()
	for round := 0; round < 2; round++ {
		// Quiet: nothing in flight for twice the stall timeout, while the
		// heartbeats confirm the server's WAL end.
		quietSince, mark := time.Now(), h.currentLSN()
		eventually(t, 10*time.Second, "a quiet spell of twice the stall timeout", func() bool {
			return time.Since(quietSince) > 2*cfg.StreamStallTimeout && h.lsnAtLeast(mark)
		})
		id := h.insertCommitted(event{1, "Order", int64(round + 1), "OrderPlaced", `{}`})
		eventually(t, 10*time.Second, "the row delivered", func() bool {
			return h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND processed_at IS NOT NULL`, id) == 1
		})
		if pid := activePID(); pid != first {
			t.Fatalf("round %d: the stream reconnected (walsender pid %d, then %d): the quiet spell was taken for a stall", round, first, pid)
		}
	}
}

// A pass over one large transaction that takes longer than
// StreamStallTimeout but keeps moving, chunk by chunk, is no stall: the
// stream keeps its connection (it used to let go, and the server decoded
// and sent the whole transaction again).
func TestStreamKeepsItsConnectionThroughALongPass(t *testing.T) {
	h := newHarness(t, WakeStream)
	sink := newRecordingSink()
	sink.hold = func(ctx context.Context, batch []outbox.Message) {
		select { // a slow Neo4j: each chunk takes a while
		case <-ctx.Done():
		case <-time.After(150 * time.Millisecond):
		}
	}
	cfg := streamOnlyConfig(h, "relay-long-pass")
	cfg.BatchSize, cfg.BacklogBatchSize = 10, 10
	cfg.StreamStallTimeout = 3 * time.Second // a chunk is far shorter, on a busy machine too
	h.start(sink, cfg)
	activePID := h.walsenderPID
	eventually(t, 10*time.Second, "the stream connected", func() bool { return activePID() != 0 })
	first := activePID()
	var rows []event
	for i := range 450 { // 45 chunks of 150 ms: over twice the stall timeout
		rows = append(rows, event{1 + int64(i%3), "Order", int64(i % 11), "OrderConfirmed", `{}`})
	}
	ids := h.insertTogether(rows...)
	eventually(t, 60*time.Second, "the large transaction delivered", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE id = ANY($1) AND processed_at IS NOT NULL`, ids) == int64(len(ids))
	})
	if pid := activePID(); pid != first {
		t.Errorf("the stream reconnected during a pass that kept moving (walsender pid %d, then %d)", first, pid)
	}
	sink.checkViolations(t)
}

// After a stream connection is gone, the worker must neither spend the new
// connection's time on the old one's queued transactions nor keep the new
// connection's stall clock running while it finishes the old one's pass.
// Before, only a connection's own batches counted as progress and queued
// batches of a gone connection were delivered first; at load 19 every new
// connection let go before its first transaction came up, and the slot did
// not move for two minutes (TestChaos/stream). Deterministic: the
// connection goes away while the sink applies the first chunk of a pass,
// and another transaction of that connection is still queued.
func TestStreamPassAfterItsConnectionIsGone(t *testing.T) {
	h := newHarness(t, WakePoll) // the worker alone: no relay runs
	sink := newRecordingSink()
	s := &streamer{}
	old, current := &streamSession{}, &streamSession{}
	s.current.Store(old)
	current.lastProgress = time.Now().Add(-time.Hour)
	sink.hold = func(ctx context.Context, batch []outbox.Message) {
		// The old connection fails and a new one opens while the first
		// chunk is applied.
		if old.isLive() {
			old.close()
			s.current.Store(current)
		}
	}
	cfg := h.config("relay-pass-gone")
	cfg.BatchSize, cfg.BacklogBatchSize = 4, 4
	r, err := New(h.pool, sink, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.stats.wait()
	transaction := func(first int) []int64 {
		var rows []event
		for i := first; i < first+12; i++ { // three chunks of four, aggregates mixed
			rows = append(rows, event{1 + int64(i%2), "Order", int64(i % 5), "OrderConfirmed", `{}`})
		}
		return h.insertTogether(rows...)
	}
	inPass, queued := transaction(0), transaction(12)
	batchOf := func(ids []int64) streamBatch {
		return streamBatch{ids: ids, done: func() {}, progress: s.progressed, live: old.isLive}
	}
	w := r.newWorker(0)
	w.streamPass(context.Background(), []streamBatch{batchOf(inPass)}, newBackoff(cfg.SinkBackoff, cfg.SinkBackoffMax))
	delivered := sink.appliedIDs()
	for _, id := range inPass {
		if delivered[id] == 0 {
			t.Errorf("row %d of the pass running when its connection went was not delivered", id)
		}
	}
	// The chunks delivered after the connection went are the worker moving
	// on: they count for the open connection's stall clock.
	if time.Since(current.lastProgress) > time.Minute {
		t.Error("chunks delivered after the connection went did not count as progress for the open one")
	}
	// The gone connection's queued transaction is left for the next
	// connection, which names it again.
	w.streamPass(context.Background(), []streamBatch{batchOf(queued)}, newBackoff(cfg.SinkBackoff, cfg.SinkBackoffMax))
	delivered = sink.appliedIDs()
	for _, id := range queued {
		if delivered[id] > 0 {
			t.Errorf("row %d, queued by a connection gone, was delivered", id)
		}
	}
	sink.checkViolations(t)
}

// TestStreamClaimKeepsIDOrderWithinAnAggregate: two transactions write
// aggregate A without a lock between them and commit in the opposite order
// of their ids, beside transactions of other aggregates, and the stream
// names all of them in one chunk, in commit order. The claim takes both rows
// of A (the lower id is the higher one's predecessor); they must go out in
// id order, in the places A's rows hold, with the other aggregates' rows
// left in commit order.
func TestStreamClaimKeepsIDOrderWithinAnAggregate(t *testing.T) {
	h := newHarness(t, WakePoll) // the claim alone: no relay runs
	ctx := context.Background()
	late, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx) //nolint:errcheck
	aLow, err := insert(ctx, late, event{1, "Order", 7, "OrderConfirmed", `{}`})
	if err != nil {
		t.Fatal(err)
	}
	early := h.insertTogether(
		event{1, "Order", 8, "OrderConfirmed", `{}`}, // B
		event{1, "Order", 7, "OrderConfirmed", `{}`}, // A, the higher id
		event{2, "Order", 7, "OrderConfirmed", `{}`}, // another tenant's aggregate 7
	)
	d, err := insert(ctx, late, event{1, "Order", 9, "OrderConfirmed", `{}`})
	if err != nil {
		t.Fatal(err)
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b, aHigh, other := early[0], early[1], early[2]
	if aHigh <= aLow {
		t.Fatalf("ids %d, %d not in the order the test needs", aLow, aHigh)
	}
	named := []int64{b, aHigh, other, aLow, d} // commit order
	s := &store{pool: h.pool, relayID: "order/0", cfg: Config{BatchSize: 10, Lease: 10 * time.Second, MaxAttempts: 5}.withDefaults()}
	c, err := s.OutboxClaimByID(ctx, named, false)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, m := range c.messages {
		got = append(got, m.ID)
	}
	want := []int64{b, aLow, other, aHigh, d}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the claim of %v (commit order) handed over %v, want %v: A (%d, %d) in id order in A's places, the rest in commit order",
			named, got, want, aLow, aHigh)
	}
}

// EnsureStream refuses a slot of the stream's name that this database
// cannot stream from (physical, another plugin), naming what it is; and a
// slot older than a publication made again (dropped by hand, or by a
// `stream drop` racing a start) is made again too: pgoutput would fail on
// the first change before the publication, on every connection, and the
// slot would never move.
func TestEnsureStreamMendsOrRefusesTheSlot(t *testing.T) {
	h := newHarness(t, WakeStream)
	ctx := context.Background()
	for create, want := range map[string]string{
		`SELECT pg_create_physical_replication_slot($1)`:                 "physical",
		`SELECT pg_create_logical_replication_slot($1, 'test_decoding')`: "test_decoding",
	} {
		h.exec(`SELECT pg_drop_replication_slot($1)`, h.slot)
		h.exec(create, h.slot)
		if err := EnsureStream(ctx, h.pool, h.slot, h.slot); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a %s slot of the stream's name: %v", want, err)
		}
	}
	h.exec(`SELECT pg_drop_replication_slot($1)`, h.slot)
	if err := EnsureStream(ctx, h.pool, h.slot, h.slot); err != nil {
		t.Fatal(err)
	}
	h.exec(`DROP PUBLICATION ` + h.slot)
	h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`}) // a change the publication did not exist for
	if err := EnsureStream(ctx, h.pool, h.slot, h.slot); err != nil {
		t.Fatal(err)
	}
	sink := newRecordingSink()
	h.start(sink, streamOnlyConfig(h, "relay-mended-slot"))
	id := h.insertCommitted(event{2, "Order", 2, "OrderPlaced", `{}`})
	afterCommit := h.currentLSN()
	eventually(t, 15*time.Second, "the stream delivered a new row and confirmed past it", func() bool {
		return sink.appliedIDs()[id] > 0 && h.lsnAtLeast(afterCommit)
	})
}

// A publication made again by hand (or by an EnsureStream that stopped
// before it looked at the slot) leaves the slot decoding changes from
// before it: pgoutput fails on every connection and the slot never moves.
// The stream makes the slot again and streams from there.
func TestStreamMendsASlotOlderThanItsPublication(t *testing.T) {
	h := newHarness(t, WakeStream)
	if err := EnsureStream(context.Background(), h.pool, h.slot, h.slot); err != nil {
		t.Fatal(err)
	}
	h.exec(`DROP PUBLICATION ` + h.slot)
	h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`}) // a change no publication existed for
	h.exec(`CREATE PUBLICATION ` + h.slot + ` FOR TABLE outbox_messages WITH (publish = 'insert')`)
	published := h.currentLSN()
	sink := newRecordingSink()
	h.start(sink, streamOnlyConfig(h, "relay-stale-slot"))
	// The stale slot cannot confirm past the publication; a slot made again
	// confirms the WAL's end while the outbox is quiet.
	eventually(t, 30*time.Second, "the slot streamed past the publication", func() bool { return h.lsnAtLeast(published) })
	id := h.insertCommitted(event{2, "Order", 2, "OrderPlaced", `{}`})
	afterCommit := h.currentLSN()
	eventually(t, 30*time.Second, "the stream delivered a new row and confirmed past it", func() bool {
		return sink.appliedIDs()[id] > 0 && h.lsnAtLeast(afterCommit)
	})
}

// A failure recorded in a stream pass is retried when its hold runs out,
// not at the next fallback poll: the pass arms the worker's wake-up for
// the hold it made, as the end of a drain does. The transaction mixes the
// failing aggregate (with a row behind the failure) and another one.
func TestStreamRetriesAFailureWhenItsHoldRunsOut(t *testing.T) {
	h := newHarness(t, WakeStream)
	cfg := streamOnlyConfig(h, "relay-stream-retry")
	cfg.RetryStep = 200 * time.Millisecond
	sink := newRecordingSink()
	var refused atomic.Bool
	var failing atomic.Int64
	sink.reject = func(m outbox.Message) error {
		if m.ID == failing.Load() && refused.CompareAndSwap(false, true) {
			return errors.New("refused once")
		}
		return nil
	}
	h.start(sink, cfg)
	// Let the start-up drain pass before the rows exist.
	eventually(t, 10*time.Second, "the stream connected", func() bool {
		return h.count(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active`, h.slot) == 1
	})
	failing.Store(h.count(`SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM outbox_messages_id_seq`))
	ids := h.insertTogether(
		event{1, "Order", 31, "OrderPlaced", `{}`},
		event{1, "Order", 32, "OrderPlaced", `{}`},
		event{1, "Order", 31, "OrderConfirmed", `{}`},
	)
	if ids[0] != failing.Load() {
		t.Fatalf("the first row is %d, not the %d the sink refuses", ids[0], failing.Load())
	}
	other, behind := ids[1], ids[2]
	eventually(t, 15*time.Second, "the refused event and the one behind it delivered after the hold", func() bool {
		applied := sink.appliedIDs()
		return refused.Load() && applied[failing.Load()] > 0 && applied[behind] > 0 && applied[other] > 0
	})
	sink.checkOrder(t)
	sink.checkViolations(t)
}

// A stop that comes while Run prepares (stream mode checks the server
// first) is a stop, not a failure: Run returns nil, as after a stop later.
func TestRunStoppedWhilePreparingIsNoFailure(t *testing.T) {
	h := newHarness(t, WakeStream)
	r, err := New(h.pool, newRecordingSink(), streamOnlyConfig(h, "relay-stopped-early"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Errorf("Run after a stop: %v, want nil", err)
	}
}
