package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sync/errgroup"

	"graphsync/outbox"
)

// A batch that keeps failing with no event singled out (a transaction that
// always times out because of one event) is split down to single events:
// the event behind it reaches the DLQ after its attempts, every other
// aggregate of the same batches flows, and none of them is counted against.
func TestSuspectBatchIsSplitDownToTheEvent(t *testing.T) {
	h := newHarness(t, WakePoll)
	var poison atomic.Int64
	sink := newRecordingSink()
	sink.fail = func() error { return nil }
	failing := &suspectSink{recordingSink: sink, poison: &poison}
	var ids []int64
	for i := range 40 {
		// Interleaved aggregates: the poison's aggregate has events before
		// and after it in the same batch.
		id := h.insertCommitted(event{1 + int64(i%3), "Order", int64(i % 7), "OrderConfirmed", fmt.Sprintf(`{"n": %d}`, i)})
		ids = append(ids, id)
		if i == 17 {
			poison.Store(id)
		}
	}
	cfg := h.config("relay-suspect")
	cfg.BatchSize = 16
	h.start(failing, cfg)
	eventually(t, 20*time.Second, "the suspect event dead-lettered and the rest processed", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages_dlq WHERE id = $1`, poison.Load()) == 1 &&
			h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL AND (tenant_id, aggregate_id) NOT IN
				(SELECT tenant_id, aggregate_id FROM outbox_messages_dlq)`) == 0
	})
	if n := h.count(`SELECT count(*) FROM outbox_messages_dlq`); n != 1 {
		t.Errorf("%d rows dead-lettered, want the suspect one only", n)
	}
	if n := h.count(`SELECT coalesce(max(attempts), 0) FROM outbox_messages WHERE processed_at IS NOT NULL`); n != 1 {
		t.Errorf("an event applied beside the suspect one was counted %d attempts, want 1", n)
	}
	var lastError string
	if err := h.pool.QueryRow(context.Background(), `SELECT last_error FROM outbox_messages_dlq WHERE id = $1`, poison.Load()).Scan(&lastError); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lastError, "transaction timed out") {
		t.Errorf("last_error %q does not say what failed", lastError)
	}
	sink.checkViolations(t)
}

// suspectSink fails, as a whole and with no event named, every batch that
// holds the poison event.
type suspectSink struct {
	*recordingSink
	poison *atomic.Int64
}

func (s *suspectSink) Deliver(ctx context.Context, batch []outbox.Message) (map[int64]error, error) {
	for _, m := range batch {
		if m.ID == s.poison.Load() {
			return nil, errors.New("the transaction timed out")
		}
	}
	return s.recordingSink.Deliver(ctx, batch)
}

// A sink that reports itself broken (its server rejects our statements)
// stops the relay from claiming: no attempt is counted, nothing is
// dead-lettered, Health names the reason; once it clears, rows flow.
func TestBrokenSinkStopsClaiming(t *testing.T) {
	h := newHarness(t, WakePoll)
	var broken atomic.Bool
	broken.Store(true)
	var deliveries atomic.Int64
	sink := newRecordingSink()
	sink.fail = func() error {
		deliveries.Add(1)
		if broken.Load() {
			return fmt.Errorf("%w: Neo.ClientError.Statement.SyntaxError", outbox.ErrSinkBroken)
		}
		return nil
	}
	cfg := h.config("relay-broken")
	cfg.SinkBackoffMax = 300 * time.Millisecond
	r, _ := h.startRelay(sink, cfg)
	for i := range 10 {
		h.insertCommitted(event{1, "Order", int64(i), "OrderConfirmed", `{}`})
	}
	eventually(t, 10*time.Second, "the relay reports the broken sink", func() bool {
		health := r.Health()
		return len(health) == 1 && strings.Contains(health[0], "SyntaxError")
	})
	before := deliveries.Load()
	eventually(t, 5*time.Second, "a few more tries", func() bool { return deliveries.Load() >= before+2 })
	if n := h.count(`SELECT count(*) FROM outbox_messages_dlq`) + h.count(`SELECT count(*) FROM outbox_messages WHERE attempts > 1 OR last_error IS NOT NULL`); n != 0 {
		t.Fatalf("%d rows dead-lettered or counted while the sink was broken", n)
	}
	broken.Store(false)
	eventually(t, 10*time.Second, "rows flow once the sink works", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`) == 0
	})
	if health := r.Health(); len(health) != 0 {
		t.Errorf("health after recovery: %v", health)
	}
}

// An event waiting for another aggregate's events (ErrDeferred) is not a
// failure: no attempt counted, no last_error, and it is applied once its
// dependency is there; other aggregates flow meanwhile.
func TestDeferredEventIsNotAFailure(t *testing.T) {
	h := newHarness(t, WakeStream)
	var ready atomic.Bool
	var waitingID atomic.Int64
	sink := newRecordingSink()
	sink.reject = func(m outbox.Message) error {
		if m.ID == waitingID.Load() && !ready.Load() {
			return fmt.Errorf("product 9 is not in the graph yet: %w", outbox.ErrDeferred)
		}
		return nil
	}
	cfg := h.config("relay-deferred")
	cfg.DependencyWait = 50 * time.Millisecond
	cfg.MaxAttempts = 2
	h.start(sink, cfg)
	waitingID.Store(h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`}))
	later := h.insertCommitted(event{1, "Order", 1, "OrderConfirmed", `{}`})
	other := h.insertCommitted(event{2, "Order", 2, "OrderPlaced", `{}`})
	eventually(t, 10*time.Second, "the other aggregate applied", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND processed_at IS NOT NULL`, other) == 1
	})
	// Several deferrals, more than MaxAttempts: still not a failure.
	eventually(t, 10*time.Second, "several deferrals", func() bool {
		n := 0
		for _, d := range sink.deliveriesOf(waitingID.Load()) {
			n += d
		}
		return n >= 3
	})
	ready.Store(true)
	eventually(t, 10*time.Second, "the waiting event and the one behind it applied", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE id IN ($1, $2) AND processed_at IS NOT NULL`, waitingID.Load(), later) == 2
	})
	if n := h.count(`SELECT count(*) FROM outbox_messages WHERE last_error IS NOT NULL OR attempts > 1`); n != 0 {
		t.Errorf("%d rows carry a failure after only waiting", n)
	}
	if n := h.count(`SELECT count(*) FROM outbox_messages_dlq`); n != 0 {
		t.Errorf("%d rows dead-lettered for waiting", n)
	}
	applied := sink.applied()
	for i, m := range applied {
		if m.ID == later && (i == 0 || !containsID(applied[:i], waitingID.Load())) {
			t.Errorf("the event behind the waiting one was applied before it")
		}
	}
}

// An event that keeps waiting for another aggregate's events is tried less
// and less often: each deferral waits about as long as its aggregate has
// waited so far, from DependencyWait up to DependencyWaitMax, so a product
// that never comes does not send its orders to Neo4j every second. The
// worker looks again when the row is due: polls are an hour away here, in
// poll and in stream mode. Other aggregates of the same batches flow
// meanwhile. When the event is applied and the one behind it, in the same
// batch, is deferred, the aggregate made progress: its wait starts again
// at DependencyWait.
func TestDeferredEventsBackOff(t *testing.T) {
	for _, mode := range []WakeMode{WakePoll, WakeStream} {
		t.Run(string(mode), func(t *testing.T) { testDeferredEventsBackOff(t, mode) })
	}
}

func testDeferredEventsBackOff(t *testing.T, mode WakeMode) {
	h := newHarness(t, mode)
	var waitingReady, behindReady atomic.Bool
	var waitingID, behindID atomic.Int64
	var mu sync.Mutex
	var tries, behindTries []time.Time
	var behindFirstWait []float64 // ms between the aggregate's deferred_since and the row's due time
	sink := newRecordingSink()
	sink.reject = func(m outbox.Message) error {
		switch {
		case m.ID == waitingID.Load() && !waitingReady.Load():
			mu.Lock()
			tries = append(tries, time.Now())
			mu.Unlock()
			return fmt.Errorf("product 9 is not in the graph yet: %w", outbox.ErrDeferred)
		case m.ID == behindID.Load() && !behindReady.Load():
			mu.Lock()
			behindTries = append(behindTries, time.Now())
			if len(behindTries) == 2 {
				// The claim left the row's due time and the aggregate's
				// deferred_since as the first deferral set them.
				var ms float64
				if err := h.pool.QueryRow(context.Background(), `SELECT extract(epoch FROM m.available_at - l.deferred_since) * 1000
					FROM outbox_messages m JOIN outbox_aggregate_leases l
					  ON l.tenant_id = m.tenant_id AND l.aggregate_type = m.aggregate_type AND l.aggregate_id = m.aggregate_id
					WHERE m.id = $1`, m.ID).Scan(&ms); err != nil {
					t.Error(err)
				}
				behindFirstWait = append(behindFirstWait, ms)
			}
			mu.Unlock()
			return fmt.Errorf("category 3 is not in the graph yet: %w", outbox.ErrDeferred)
		}
		return nil
	}
	const wait, waitMax = 40 * time.Millisecond, 400 * time.Millisecond
	cfg := h.config("relay-deferral-backoff")
	cfg.PollInterval, cfg.FallbackPollInterval = time.Hour, time.Hour
	cfg.DependencyWait, cfg.DependencyWaitMax = wait, waitMax
	waitingID.Store(h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`}))
	behindID.Store(h.insertCommitted(event{1, "Order", 1, "OrderConfirmed", `{}`}))
	var others []int64
	for i := range 3 {
		others = append(others, h.insertCommitted(event{2, "Order", int64(10 + i), "OrderPlaced", `{}`}))
	}
	h.start(sink, cfg) // one batch holds them all
	eventually(t, 10*time.Second, "the other aggregates applied", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE id = ANY($1) AND processed_at IS NOT NULL`, others) == 3
	})
	eventually(t, 20*time.Second, "seven tries of the waiting event", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(tries) >= 7
	})
	// The gauges show the waiting aggregate and how long it has waited.
	stats, err := ReadStats(context.Background(), h.pool)
	if err != nil {
		t.Fatal(err)
	}
	if stats.WaitingAggregates != 1 || stats.LongestWaitSeconds <= 0 {
		t.Errorf("gauges while one aggregate waits: %d waiting, longest %.3fs", stats.WaitingAggregates, stats.LongestWaitSeconds)
	}
	// A wait never exceeds DependencyWaitMax.
	if n := h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND available_at > now() + $2::interval`, waitingID.Load(), waitMax); n != 0 {
		t.Errorf("the waiting event is due later than %s from now", waitMax)
	}
	mu.Lock()
	var gaps []time.Duration
	for i := 1; i < len(tries); i++ {
		gaps = append(gaps, tries[i].Sub(tries[i-1]).Round(time.Millisecond))
	}
	mu.Unlock()
	// Without backoff every gap is about DependencyWait plus a claim; with
	// it the waits run 40, ~40, ~80, ~160, ~320, then 400 ms.
	if last := gaps[len(gaps)-1]; last < 5*wait {
		t.Errorf("gaps between tries of the waiting event %v: the last is %s, want at least %s (the wait doubles)", gaps, last, 5*wait)
	}
	// The waiting event is applied; the one behind it, in the same batch,
	// is deferred in its turn: its first wait is DependencyWait again.
	waitingReady.Store(true)
	eventually(t, 10*time.Second, "two tries of the event behind", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(behindFirstWait) > 0
	})
	mu.Lock()
	if got := behindFirstWait[0]; got < float64(wait.Milliseconds())-0.5 || got > float64(wait.Milliseconds())+0.5 {
		t.Errorf("the event deferred right after its aggregate's progress waited %.0f ms first, want %d", got, wait.Milliseconds())
	}
	mu.Unlock()
	behindReady.Store(true)
	eventually(t, 10*time.Second, "both events applied", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE id IN ($1, $2) AND processed_at IS NOT NULL`, waitingID.Load(), behindID.Load()) == 2
	})
	if n := h.count(`SELECT count(*) FROM outbox_aggregate_leases WHERE tenant_id = 1 AND aggregate_id = 1`); n != 0 {
		t.Errorf("the applied aggregate kept its lease row (and its time of first deferral)")
	}
	if stats, err := ReadStats(context.Background(), h.pool); err != nil || stats.WaitingAggregates != 0 || stats.LongestWaitSeconds != 0 {
		t.Errorf("gauges once nothing waits: %+v, %v", stats, err)
	}
	if n := h.count(`SELECT count(*) FROM outbox_messages WHERE last_error IS NOT NULL OR attempts > 1`); n != 0 {
		t.Errorf("%d rows carry a failure after only waiting", n)
	}
	sink.checkOrder(t)
}

// Two aggregates deferred in one batch, one that has waited long and one
// that just started: the settle wakes the worker when the first is due, and
// when that drain ends the worker still looks again when the other's hold
// runs out. Polls are an hour away.
func TestEveryDeferredRowIsLookedAtWhenDue(t *testing.T) {
	h := newHarness(t, WakePoll)
	var longReady atomic.Bool
	var longID, shortID atomic.Int64
	var mu sync.Mutex
	var longTries []time.Time
	shortDeferred := false
	var together atomic.Bool
	sink := newRecordingSink()
	sink.hold = func(_ context.Context, batch []outbox.Message) {
		ids := map[int64]bool{}
		for _, m := range batch {
			ids[m.ID] = true
		}
		if ids[longID.Load()] && ids[shortID.Load()] {
			together.Store(true)
		}
	}
	sink.reject = func(m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case m.ID == longID.Load() && !longReady.Load():
			longTries = append(longTries, time.Now())
			return fmt.Errorf("product 9 is not in the graph yet: %w", outbox.ErrDeferred)
		case m.ID == shortID.Load() && !shortDeferred:
			shortDeferred = true
			return fmt.Errorf("product 8 is not in the graph yet: %w", outbox.ErrDeferred)
		}
		return nil
	}
	cfg := h.config("relay-every-hold")
	cfg.PollInterval, cfg.FallbackPollInterval = time.Hour, time.Hour
	cfg.DependencyWait, cfg.DependencyWaitMax = 40*time.Millisecond, 600*time.Millisecond
	longID.Store(h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`}))
	h.start(sink, cfg)
	tries := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(longTries)
	}
	eventually(t, 20*time.Second, "the long wait grown", func() bool { return tries() >= 6 })
	// Written while the first aggregate is held, due when it is: the next
	// claim, when that hold runs out, takes both. The insert holds the
	// claims' lock until it commits, so no claim can run between the hold's
	// end and a slow commit.
	eventually(t, 10*time.Second, "the second aggregate written while the first is held", func() bool {
		ctx := context.Background()
		tx, err := h.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('graphsync outbox claim', 0))`); err != nil {
			t.Fatal(err)
		}
		var id int64
		err = tx.QueryRow(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload, available_at)
			SELECT 2, 'Order', 2, 'OrderPlaced', '{}', m.available_at
			FROM outbox_messages m
			WHERE m.id = $1 AND m.id NOT IN `+inFlight+` AND m.available_at > now() + interval '100 milliseconds'
			RETURNING id`, longID.Load()).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		shortID.Store(id)
		return true
	})
	eventually(t, 20*time.Second, "the short wait's aggregate applied", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND processed_at IS NOT NULL`, shortID.Load()) == 1
	})
	mu.Lock()
	if !shortDeferred {
		t.Error("the second aggregate was never deferred")
	}
	mu.Unlock()
	before := tries()
	eventually(t, 10*time.Second, "the long-waiting aggregate tried again after the other was applied", func() bool { return tries() > before })
	longReady.Store(true)
	eventually(t, 10*time.Second, "the long-waiting aggregate applied", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND processed_at IS NOT NULL`, longID.Load()) == 1
	})
	if !together.Load() {
		t.Error("the two aggregates were never in one batch: the test proves nothing")
	}
}

func containsID(ms []outbox.Message, id int64) bool {
	for _, m := range ms {
		if m.ID == id {
			return true
		}
	}
	return false
}

// deliveriesOf counts the batches that held id, applied or not.
func (s *recordingSink) deliveriesOf(id int64) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return []int{s.seen[id]}
}

// A relay killed with a full batch in flight leaves its rows orphaned; a
// new relay reclaims them in batches, within a few claims, not one row per
// wake-up. The poll interval is an hour: only the start-up drain runs.
func TestOrphansAreReclaimedInBatches(t *testing.T) {
	h := newHarness(t, WakePoll)
	for i := range 300 {
		h.insertCommitted(event{1 + int64(i%4), "Order", int64(i % 50), "OrderConfirmed", `{}`})
	}
	// What a SIGKILLed relay leaves: the attempt counted, the lease run out.
	if _, err := h.pool.Exec(context.Background(), `UPDATE outbox_messages
		SET attempts = 1, locked_by = 'killed/0', locked_until = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	sink := newRecordingSink()
	cfg := h.config("relay-after-kill")
	cfg.PollInterval = time.Hour
	cfg.BatchSize = 100
	h.start(sink, cfg)
	eventually(t, 15*time.Second, "every orphaned row delivered by the start-up drain", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`) == 0
	})
	sink.mu.Lock()
	batches := len(sink.deliveries)
	sink.mu.Unlock()
	// 300 rows of 200 aggregates in batches of 100; an aggregate's second
	// row waits for its first, so a few more claims than 3, never 300.
	if batches > 12 {
		t.Errorf("%d deliveries for 300 orphaned rows", batches)
	}
	sink.checkViolations(t)
}

// A row whose last attempt died with its relay goes to the DLQ saying so,
// with the error its attempt before recorded; the other rows of the batch,
// orphaned once, are delivered.
func TestExhaustedOrphanKeepsItsLastRecordedError(t *testing.T) {
	h := newHarness(t, WakePoll)
	cfg := h.config("relay-after-last-attempt")
	cfg.PollInterval = time.Hour
	var ids []int64
	for i := range 6 {
		ids = append(ids, h.insertCommitted(event{1 + int64(i%2), "Order", int64(i % 3), "OrderConfirmed", `{}`}))
	}
	exhausted := ids[2]
	recorded := fmt.Sprintf("attempt %d of %d: OrderConfirmed v1 (outbox id %d): boom", cfg.MaxAttempts-1, cfg.MaxAttempts, exhausted)
	// What a SIGKILL during the last attempt leaves: every attempt counted,
	// the one before failed and recorded, the lease run out.
	if _, err := h.pool.Exec(context.Background(), `UPDATE outbox_messages
		SET attempts = CASE WHEN id = $1 THEN $2::smallint ELSE 1 END,
		    last_error = CASE WHEN id = $1 THEN $3 END,
		    locked_by = 'killed/0', locked_until = now() - interval '1 second'`, exhausted, cfg.MaxAttempts, recorded); err != nil {
		t.Fatal(err)
	}
	sink := newRecordingSink()
	h.start(sink, cfg)
	eventually(t, 15*time.Second, "the exhausted row in the DLQ and the others delivered", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages_dlq WHERE id = $1`, exhausted) == 1 &&
			h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`) == 0
	})
	var lastError string
	if err := h.pool.QueryRow(context.Background(), `SELECT last_error FROM outbox_messages_dlq WHERE id = $1`, exhausted).Scan(&lastError); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("gave up after %d attempts: no outcome was recorded for the last one", cfg.MaxAttempts)
	if !strings.Contains(lastError, want) || !strings.Contains(lastError, "the attempt before it: "+recorded) {
		t.Errorf("last_error %q does not say %q and keep the error recorded before", lastError, want)
	}
	if sink.appliedIDs()[exhausted] > 0 {
		t.Error("the exhausted row was delivered")
	}
	for _, id := range ids {
		if id != exhausted && sink.appliedIDs()[id] == 0 {
			t.Errorf("outbox row %d was not delivered", id)
		}
	}
	sink.checkViolations(t)
}

// A claim whose move of an exhausted row to the DLQ fails takes nothing:
// the rest of its batch goes back at once, uncounted, and is delivered long
// before the lease would run out, while the exhausted row's own aggregate
// waits behind it. MaxAttempts 1: a row orphaned once is exhausted at its
// next claim and, not yet suspect, is taken with batch-mates.
func TestFailedDLQMoveHandsTheRestOfTheBatchBack(t *testing.T) {
	h := newHarness(t, WakePoll)
	cfg := h.config("relay-dlq-refused")
	cfg.MaxAttempts = 1
	cfg.Lease = time.Hour // nothing of the batch comes back by running out
	h.exec(`CREATE FUNCTION refuse_dlq() RETURNS trigger LANGUAGE plpgsql
		AS $$ BEGIN RAISE EXCEPTION 'the DLQ refuses rows'; END $$`)
	h.exec(`CREATE TRIGGER refuse_dlq BEFORE INSERT ON outbox_messages_dlq
		FOR EACH ROW EXECUTE FUNCTION refuse_dlq()`)
	ids := h.insertTogether(
		event{1, "Order", 10, "OrderConfirmed", `{}`},
		event{1, "Order", 11, "OrderConfirmed", `{}`},
		event{2, "Order", 10, "OrderConfirmed", `{}`},
		event{1, "Order", 10, "OrderShipped", `{}`},
		event{2, "Order", 10, "OrderShipped", `{}`},
		event{1, "Order", 12, "OrderConfirmed", `{}`},
	)
	exhausted, behind := ids[0], ids[3]
	// What a SIGKILL during the only attempt leaves.
	h.exec(`UPDATE outbox_messages SET attempts = 1, locked_by = 'killed/0',
		locked_until = now() - interval '1 second' WHERE id = $1`, exhausted)
	sink := newRecordingSink()
	r, _ := h.startRelay(sink, cfg)
	eventually(t, 15*time.Second, "every row delivered but the exhausted one and the one behind it", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`) == 2
	})
	// The refused move shows in /metrics, not only in the log.
	if n := testutil.ToFloat64(r.metrics.passErrors); n < 1 {
		t.Errorf("outbox_relay_pass_errors_total %v after the DLQ refused a move, want at least 1", n)
	}
	applied := sink.appliedIDs()
	if applied[exhausted] > 0 || applied[behind] > 0 {
		t.Errorf("delivered the exhausted row (%d times) or the row behind it (%d times)", applied[exhausted], applied[behind])
	}
	if n := h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND id IN `+inFlight, exhausted); n != 1 {
		t.Error("the exhausted row is not in flight until the move is tried again")
	}
	if n := h.count(`SELECT count(*) FROM outbox_messages WHERE id <> $1 AND attempts > 1`, exhausted); n != 0 {
		t.Errorf("%d batch-mates of the exhausted row were charged more than their one delivery", n)
	}
	sink.checkViolations(t)
}

// A relay stopped between claiming a batch and delivering it still records
// the failure of the batch's unreadable row and delivers the rest (within
// DrainTimeout): nothing of the batch stays leased, its attempt counted and
// unexplained, until the lease runs out. The row behind the unreadable one
// is handed back, uncounted.
func TestStopAfterTheClaimStillRecordsUnreadableRows(t *testing.T) {
	h := newHarness(t, WakePoll)
	cfg := h.config("relay-stopped-after-claim")
	cfg.Lease = time.Hour
	sink := newRecordingSink()
	r, err := New(h.pool, sink, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.stats.wait()
	ctx := context.Background()
	var unreadable int64
	if err := h.pool.QueryRow(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload, occurred_at)
		VALUES (1, 'Order', 2, 'OrderPlaced', '{}', 'infinity') RETURNING id`).Scan(&unreadable); err != nil {
		t.Fatal(err)
	}
	ids := h.insertTogether(
		event{1, "Order", 2, "OrderConfirmed", `{}`},
		event{2, "Order", 3, "OrderPlaced", `{}`},
	)
	behind, healthy := ids[0], ids[1]
	w := r.newWorker(0)
	c, err := w.store.OutboxClaim(ctx, r.cfg.BatchSize)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.unreadable) != 1 || len(c.messages) != 2 {
		t.Fatalf("claimed %d unreadable and %d readable rows, want 1 and 2", len(c.unreadable), len(c.messages))
	}
	stopped, stop := context.WithCancel(ctx)
	stop() // SIGTERM arrives as the claim returns
	if err := w.finish(stopped, c); err != nil {
		t.Fatalf("finishing the batch after a stop: %v", err)
	}
	if n := h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND id NOT IN `+inFlight+`
		AND last_error LIKE '%occurred_at is infinity%'`, unreadable); n != 1 {
		t.Error("the unreadable row's failure was not recorded (or it is still leased)")
	}
	if n := h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND processed_at IS NOT NULL`, healthy); n != 1 {
		t.Error("the healthy row of another aggregate was not delivered and marked")
	}
	if n := h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND processed_at IS NULL
		AND id NOT IN `+inFlight+` AND attempts = 0`, behind); n != 1 {
		t.Error("the row behind the unreadable one was not handed back uncounted")
	}
	if sink.appliedIDs()[behind] > 0 {
		t.Error("the row behind the unreadable one was delivered")
	}
}

// A row whose attempts reached the column's largest value (a DLQ that kept
// refusing it, claimed again every lease) is still claimed and dead-lettered:
// counting one more attempt must not fail every claim.
func TestAttemptsAtTheColumnsLimitDoNotStopTheClaim(t *testing.T) {
	h := newHarness(t, WakePoll)
	cfg := h.config("relay-attempts-limit")
	ids := h.insertTogether(
		event{1, "Order", 5, "OrderPlaced", `{}`},
		event{2, "Order", 6, "OrderPlaced", `{}`},
	)
	worn := ids[0]
	h.exec(`UPDATE outbox_messages SET attempts = 32767, locked_by = 'killed/0',
		locked_until = now() - interval '1 second' WHERE id = $1`, worn)
	h.start(newRecordingSink(), cfg)
	eventually(t, 15*time.Second, "the worn row dead-lettered and the other one delivered", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages_dlq WHERE id = $1`, worn) == 1 &&
			h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`) == 0
	})
}

// A rejection is recorded as the logs show it: a password in the sink's
// error is redacted and a long error is cut, in last_error as in the log.
func TestRecordedRejectionIsRedactedAndBounded(t *testing.T) {
	h := newHarness(t, WakePoll)
	ids := h.insertTogether(
		event{1, "Order", 7, "OrderPlaced", `{}`},
		event{2, "Order", 8, "OrderPlaced", `{}`},
	)
	rejected, other := ids[0], ids[1]
	sink := newRecordingSink()
	sink.reject = func(m outbox.Message) error {
		if m.ID == rejected {
			return fmt.Errorf("write to bolt://graph:hunter2@neo4j.internal:7687 refused: %s", strings.Repeat("x", 3*maxRecordedError))
		}
		return nil
	}
	h.start(sink, h.config("relay-redacted-rejection"))
	eventually(t, 15*time.Second, "the rejection recorded and the other row delivered", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND last_error IS NOT NULL`, rejected) == 1 &&
			h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND processed_at IS NOT NULL`, other) == 1
	})
	var lastError string
	if err := h.pool.QueryRow(context.Background(), `SELECT last_error FROM outbox_messages WHERE id = $1`, rejected).Scan(&lastError); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(lastError, "hunter2") || !strings.Contains(lastError, "graph:xxxxx@neo4j.internal") {
		t.Errorf("last_error does not redact the password: %.200s", lastError)
	}
	if len(lastError) > maxRecordedError+len("…(truncated)") {
		t.Errorf("last_error keeps %d bytes, want at most %d", len(lastError), maxRecordedError)
	}
}

// A relay whose NotifyChannel is not the default is still woken by the
// trigger installed for it.
func TestChangedNotifyChannelStillWakes(t *testing.T) {
	h := newHarness(t, WakePoll) // no trigger yet
	if err := NotifyTriggerEnable(context.Background(), h.pool, "orders_outbox_hint"); err != nil {
		t.Fatal(err)
	}
	cfg := h.config("relay-channel")
	cfg.Wake = WakeNotify
	cfg.NotifyChannel = "orders_outbox_hint"
	cfg.PollInterval = time.Hour
	sink := newRecordingSink()
	h.start(sink, cfg)
	// The first wake-up drains what is there; wait for LISTEN to be in place.
	eventually(t, 10*time.Second, "LISTEN on the channel", func() bool {
		return h.count(`SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%orders_outbox_hint%'`) >= 1
	})
	id := h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`})
	eventually(t, 10*time.Second, "the row delivered on the hint alone", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND processed_at IS NOT NULL`, id) == 1
	})
	if err := NotifyTriggerEnable(context.Background(), h.pool, "bad channel'; DROP TABLE tenants; --"); err == nil {
		t.Error("a channel that is not a plain identifier was accepted")
	}
}

// Starting a notify-mode relay while a producer's transaction that wrote to
// the outbox is open: with the trigger in place it creates nothing (no DDL
// that would queue every other producer's insert behind that transaction);
// with a trigger to change or drop it gives up after its lock timeout,
// saying why, and the producers are not held back longer than that.
func TestNotifyTriggerWaitsForNoOpenProducer(t *testing.T) {
	h := newHarness(t, WakeNotify) // the trigger is installed on graphsync_outbox
	ctx := context.Background()
	open, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	if _, err := insert(ctx, open, event{1, "Order", 1, "OrderPlaced", `{}`}); err != nil {
		t.Fatal(err)
	}
	quick, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := NotifyTriggerEnable(quick, h.pool, "graphsync_outbox"); err != nil {
		t.Fatalf("enabling the trigger that is in place: %v", err)
	}
	started := time.Now()
	err = NotifyTriggerEnable(ctx, h.pool, "another_channel")
	if err == nil || !strings.Contains(err.Error(), "gave up after 5s waiting for a transaction that wrote to the outbox") {
		t.Fatalf("changing the trigger's channel beside an open producer: %v, want it to give up on the lock", err)
	}
	if waited := time.Since(started); waited > 20*time.Second {
		t.Errorf("gave up after %s, want about 5s", waited)
	}
	// Dropping it gives up the same way (graphsync notify disable).
	started = time.Now()
	err = NotifyTriggerDisable(ctx, h.pool)
	if err == nil || !strings.Contains(err.Error(), "drop notify trigger: gave up after 5s waiting for a transaction that wrote to the outbox") {
		t.Fatalf("dropping the trigger beside an open producer: %v, want it to give up on the lock", err)
	}
	if waited := time.Since(started); waited > 20*time.Second {
		t.Errorf("gave up after %s, want about 5s", waited)
	}
	// The others' inserts go on once it gave up.
	bounded, cancelInsert := context.WithTimeout(ctx, 5*time.Second)
	defer cancelInsert()
	if err := pgx.BeginFunc(bounded, h.pool, func(tx pgx.Tx) error {
		_, err := insert(bounded, tx, event{2, "Order", 2, "OrderPlaced", `{}`})
		return err
	}); err != nil {
		t.Fatalf("a producer's insert after the trigger gave up: %v", err)
	}
}

// Two processes creating next month's archive partition at once: both
// succeed, one of them creates it.
func TestArchivePartitionCreationRace(t *testing.T) {
	h := newHarness(t, WakePoll)
	now := time.Now().AddDate(3, 0, 0) // months no other test creates
	var mu sync.Mutex
	var created []string
	var g errgroup.Group
	for range 4 {
		g.Go(func() error {
			names, err := ArchivePartitionsEnsure(context.Background(), h.pool, now, 1, 90*24*time.Hour)
			mu.Lock()
			created = append(created, names...)
			mu.Unlock()
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("concurrent partition creation: %v", err)
	}
	seen := map[string]int{}
	for _, name := range created {
		seen[name]++
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("partition %s reported created %d times", name, n)
		}
	}
}

// Looking up when the next hold runs out is bounded like a claim: a
// PostgreSQL that stops answering (here, a lock the lookup waits for) does
// not hold the worker past the lease.
func TestHoldLookupIsBounded(t *testing.T) {
	h := newHarness(t, WakePoll)
	cfg := h.config("relay-hold-lookup")
	cfg.Lease = 500 * time.Millisecond
	r, err := New(h.pool, newRecordingSink(), cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.stats.wait()
	ctx := context.Background()
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `LOCK TABLE outbox_aggregate_leases IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		r.newWorker(0).wakeForHolds(ctx)
	}()
	eventually(t, 5*time.Second, "the hold lookup gave up while the table stayed locked", func() bool {
		select {
		case <-returned:
			return true
		default:
			return false
		}
	})
}
