package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"graphsync/outbox"
)

// TestConformance runs one delivery suite against every wake mode.
func TestConformance(t *testing.T) {
	for _, mode := range []WakeMode{WakePoll, WakeNotify, WakeStream} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			t.Run("ConcurrentProducersAndRelays", func(t *testing.T) { testConcurrentProducersAndRelays(t, mode) })
			t.Run("PoisonRowsGoToDLQ", func(t *testing.T) { testPoisonRows(t, mode) })
			t.Run("KilledRelayLosesNothing", func(t *testing.T) { testKilledRelay(t, mode) })
			t.Run("CrashingRowReachesDLQ", func(t *testing.T) { testCrashingRow(t, mode) })
			t.Run("OutOfIDOrderCommits", func(t *testing.T) { testOutOfIDOrderCommits(t, mode) })
			t.Run("SinkUnavailableCountsNoAttempt", func(t *testing.T) { testSinkUnavailable(t, mode) })
			t.Run("UnreadableRowsGoToDLQ", func(t *testing.T) { testUnreadableRows(t, mode) })
			t.Run("AFailingAggregateStallsNoOther", func(t *testing.T) { testFailingAggregateStallsNoOther(t, mode) })
			t.Run("ClaimsStayWithinTheByteBound", func(t *testing.T) { testClaimsStayWithinTheByteBound(t, mode) })
		})
	}
}

// Several producers write in concurrent transactions, a fifth of them rolled
// back; two relays deliver. Every committed row arrives, none that rolled back
// does, each aggregate in id order and never in two deliveries at once.
func testConcurrentProducersAndRelays(t *testing.T, mode WakeMode) {
	h := newHarness(t, mode)
	sink := newRecordingSink()
	sink.hold = func(ctx context.Context, batch []outbox.Message) {
		// Widen the window in which a second relay could wrongly take the
		// same aggregate: yield to the scheduler a little per batch.
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(rand.IntN(3)) * time.Millisecond):
		}
	}
	h.start(sink, h.config("relay-a"))
	h.start(sink, h.config("relay-b"))

	const producers, txPerProducer, aggregatesPerProducer = 4, 40, 5
	var mu sync.Mutex
	committed := map[int64]bool{}
	rolledBack := map[int64]bool{}
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 7))
			for i := 0; i < txPerProducer; i++ {
				tx, err := h.pool.Begin(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				var ids []int64
				for j := 0; j < 1+rng.IntN(3); j++ {
					// Each producer owns its aggregates, so within one
					// aggregate commit order is id order.
					agg := int64(p*100 + rng.IntN(aggregatesPerProducer))
					id, err := insert(context.Background(), tx, event{tenant: 1 + int64(p%2), aggType: "Order", aggID: agg,
						eventType: "OrderConfirmed", payload: fmt.Sprintf(`{"n":%d}`, i)})
					if err != nil {
						t.Error(err)
						return
					}
					ids = append(ids, id)
				}
				rollback := rng.IntN(5) == 0
				if rollback {
					err = tx.Rollback(context.Background())
				} else {
					err = tx.Commit(context.Background())
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, id := range ids {
					if rollback {
						rolledBack[id] = true
					} else {
						committed[id] = true
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	eventually(t, 30*time.Second, "every committed row delivered", func() bool {
		seen := sink.appliedIDs()
		for id := range committed {
			if seen[id] == 0 {
				return false
			}
		}
		return true
	})
	eventually(t, 10*time.Second, "every committed row marked processed", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`) == 0
	})
	sink.checkViolations(t)
	seen := sink.appliedIDs()
	for id := range rolledBack {
		if seen[id] > 0 {
			t.Errorf("row %d of a rolled-back transaction was delivered", id)
		}
	}
	last := map[aggKey]int64{}
	for _, m := range sink.applied() {
		k := keyOf(m)
		if m.ID < last[k] {
			t.Errorf("aggregate %v: row %d delivered after %d", k, m.ID, last[k])
		}
		last[k] = m.ID
	}
	if got := h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NOT NULL`); got != int64(len(committed)) {
		t.Errorf("processed rows = %d, want %d", got, len(committed))
	}
}

// Poison rows fail with a clear last_error, retry on schedule, and land in the
// DLQ after MaxAttempts; their aggregate is blocked until then, every other
// aggregate keeps flowing, and rows with NULLs the schema allows or an unknown
// event type get a clear error too, never a crash.
func testPoisonRows(t *testing.T, mode WakeMode) {
	h := newHarness(t, mode)
	sink := newRecordingSink()
	sink.reject = func(m outbox.Message) error {
		if strings.Contains(string(m.Payload), "poison") {
			return errors.New("payload rejected: field total must be a number")
		}
		if m.EventType != "OrderConfirmed" {
			return fmt.Errorf("unknown event_type %q", m.EventType)
		}
		return nil
	}
	cfg := h.config("relay-poison")
	// Both rows of aggregate 1 are committed together, so they share a batch.
	var poison, behindPoison int64
	err := pgx.BeginFunc(context.Background(), h.pool, func(tx pgx.Tx) error {
		var err error
		if poison, err = insert(context.Background(), tx, event{1, "Order", 1, "OrderConfirmed", `{"poison": true}`}); err != nil {
			return err
		}
		behindPoison, err = insert(context.Background(), tx, event{1, "Order", 1, "OrderConfirmed", `{"n": 2}`})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The row behind the poison must not be applied while the poison is
	// still in the outbox: it is held back, batch after batch, until then.
	var appliedTooEarly atomic.Bool
	sink.onApply = func(m outbox.Message) {
		if m.ID == behindPoison && h.count(`SELECT count(*) FROM outbox_messages_dlq WHERE id = $1`, poison) == 0 {
			appliedTooEarly.Store(true)
		}
	}
	h.start(sink, cfg)

	unknown := h.insertCommitted(event{1, "Order", 2, "OrderVanished", `{}`})
	var healthy []int64
	for i := 0; i < 20; i++ {
		healthy = append(healthy, h.insertCommitted(event{2, "Order", int64(10 + i%4), "OrderConfirmed", `{}`}))
	}
	eventually(t, 20*time.Second, "healthy rows delivered", func() bool {
		seen := sink.appliedIDs()
		for _, id := range healthy {
			if seen[id] == 0 {
				return false
			}
		}
		return true
	})
	eventually(t, 20*time.Second, "poison and unknown rows in the DLQ", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages_dlq`) == 2
	})
	eventually(t, 10*time.Second, "the row behind the poison delivered after it left, and marked", func() bool {
		return sink.appliedIDs()[behindPoison] > 0 &&
			h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND processed_at IS NOT NULL`, behindPoison) == 1
	})
	if appliedTooEarly.Load() {
		t.Error("the row behind the poison was applied while the poison was still pending")
	}
	if n := h.count(`SELECT attempts FROM outbox_messages WHERE id = $1`, behindPoison); n != 1 {
		t.Errorf("the held-back row used %d attempts, want 1 (holding back counts none)", n)
	}
	rows, err := h.pool.Query(context.Background(), `SELECT id, attempts, last_error FROM outbox_messages_dlq ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	type dead struct {
		id       int64
		attempts int16
		err      string
	}
	letters, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (dead, error) {
		var d dead
		return d, r.Scan(&d.id, &d.attempts, &d.err)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{poison: "field total must be a number", unknown: `unknown event_type "OrderVanished"`}
	for _, d := range letters {
		if !strings.Contains(d.err, want[d.id]) || want[d.id] == "" {
			t.Errorf("DLQ row %d: last_error %q, want it to name %q", d.id, d.err, want[d.id])
		}
		if int(d.attempts) != cfg.MaxAttempts {
			t.Errorf("DLQ row %d: attempts %d, want %d", d.id, d.attempts, cfg.MaxAttempts)
		}
	}
	if sink.appliedIDs()[poison] > 0 {
		t.Error("the poison row was reported applied")
	}
	sink.checkViolations(t)
}

// A relay process SIGKILLed in the middle of a batch loses nothing: once its
// lease runs out, another relay takes the rows over and delivers them.
func testKilledRelay(t *testing.T, mode WakeMode) {
	h := newHarness(t, mode)
	var ids []int64
	for i := 0; i < 10; i++ {
		ids = append(ids, h.insertCommitted(event{1, "Product", int64(i % 3), "ProductCreated", `{}`}))
	}
	victim := h.startProcess(h.config("relay-victim"), "hang")
	victim.waitLine(t, "DELIVERING", 20*time.Second)
	victim.kill(t)
	if n := h.count(`SELECT count(*) FROM outbox_batches WHERE holder LIKE 'relay-victim/%'`); n == 0 {
		t.Fatal("the killed relay held no rows: the test did not kill it mid-batch")
	}

	sink := newRecordingSink()
	h.start(sink, h.config("relay-survivor"))
	eventually(t, 20*time.Second, "the killed relay's rows delivered by the survivor", func() bool {
		seen := sink.appliedIDs()
		for _, id := range ids {
			if seen[id] == 0 {
				return false
			}
		}
		return h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`) == 0
	})
	sink.checkViolations(t)
}

// A row that makes the relay process itself crash has each crash counted
// (when the next claim takes its batch over), so after MaxAttempts crashes
// the next claim moves it to the DLQ instead of crashing again; the rows
// after it are delivered.
func testCrashingRow(t *testing.T, mode WakeMode) {
	h := newHarness(t, mode)
	crasher := h.insertCommitted(event{1, "Order", 7, "OrderPlaced", `{"crash": true}`})
	after := h.insertCommitted(event{1, "Order", 7, "OrderConfirmed", `{}`})
	cfg := h.config("relay-crashy")
	for crash := 1; crash <= cfg.MaxAttempts; crash++ {
		p := h.startProcess(cfg, "crash-on-poison")
		p.waitLine(t, "CRASHING", 20*time.Second)
		if code := p.waitExit(t, 10*time.Second); code != 3 {
			t.Fatalf("relay process exit code %d, want 3 (crash %d)", code, crash)
		}
		if got := h.attemptsUsed(crasher); got != int64(crash) {
			t.Fatalf("after crash %d the row has used %d attempts", crash, got)
		}
	}
	sink := newRecordingSink()
	h.start(sink, cfg)
	eventually(t, 20*time.Second, "the crashing row in the DLQ and the next row delivered", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages_dlq WHERE id = $1`, crasher) == 1 &&
			sink.appliedIDs()[after] > 0
	})
	var lastError string
	if err := h.pool.QueryRow(context.Background(), `SELECT last_error FROM outbox_messages_dlq WHERE id = $1`, crasher).Scan(&lastError); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lastError, "no outcome was recorded") {
		t.Errorf("last_error %q does not say the relay died delivering it", lastError)
	}
	if sink.appliedIDs()[crasher] > 0 {
		t.Error("the crashing row was delivered")
	}
}

// Two transactions on one aggregate commit in the opposite order of their
// ids. The later-committing, lower id must be delivered (not skipped), and
// never at the same time as the higher one.
func testOutOfIDOrderCommits(t *testing.T, mode WakeMode) {
	h := newHarness(t, mode)
	sink := newRecordingSink()
	release := make(chan struct{})
	var holdOnce sync.Once
	sink.hold = func(ctx context.Context, batch []outbox.Message) {
		for _, m := range batch {
			if strings.Contains(string(m.Payload), "second") {
				// Keep the higher id in delivery while the lower commits.
				holdOnce.Do(func() {
					select {
					case <-release:
					case <-ctx.Done():
					}
				})
			}
		}
	}
	h.start(sink, h.config("relay-order"))
	h.start(sink, h.config("relay-order-2"))

	ctx := context.Background()
	first, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx) //nolint:errcheck
	lowID, err := insert(ctx, first, event{1, "Order", 42, "OrderConfirmed", `{"step": "first"}`})
	if err != nil {
		t.Fatal(err)
	}
	highID := h.insertCommitted(event{1, "Order", 42, "OrderConfirmed", `{"step": "second"}`})
	if highID <= lowID {
		t.Fatalf("ids %d, %d not in the order the test needs", lowID, highID)
	}
	eventually(t, 10*time.Second, "the higher id in delivery", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND id IN `+inFlight, highID) == 1
	})
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The lower id is now visible while the higher one is in delivery: no relay
	// may take it until the higher one is done. A probe on another aggregate,
	// committed after it, proves a claim ran while the lower id was visible.
	probe := h.insertCommitted(event{1, "Order", 43, "OrderConfirmed", `{"step": "probe"}`})
	eventually(t, 10*time.Second, "the probe delivered", func() bool { return sink.appliedIDs()[probe] > 0 })
	if h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND (id IN `+inFlight+` OR processed_at IS NOT NULL)`, lowID) != 0 ||
		sink.appliedIDs()[lowID] > 0 {
		t.Errorf("the lower id was claimed while the higher id of its aggregate was in delivery")
	}
	close(release)
	eventually(t, 10*time.Second, "both rows delivered and marked", func() bool {
		seen := sink.appliedIDs()
		return seen[lowID] > 0 && seen[highID] > 0 &&
			h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`) == 0
	})
	sink.checkViolations(t)
}

// While the sink cannot take batches at all, rows are released uncounted
// (no attempt burnt, nothing marked, nothing dead-lettered), and flow once it
// recovers.
func testSinkUnavailable(t *testing.T, mode WakeMode) {
	h := newHarness(t, mode)
	sink := newRecordingSink()
	var mu sync.Mutex
	failures := 0
	sink.fail = func() error {
		mu.Lock()
		defer mu.Unlock()
		if failures < 8 {
			failures++
			return fmt.Errorf("%w: neo4j unreachable", outbox.ErrSinkUnavailable)
		}
		return nil
	}
	cfg := h.config("relay-outage")
	h.start(sink, cfg)
	var ids []int64
	for i := 0; i < 5; i++ {
		ids = append(ids, h.insertCommitted(event{1, "Product", int64(i), "ProductCreated", `{}`}))
	}
	eventually(t, 20*time.Second, "rows delivered after the outage", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NOT NULL`) == int64(len(ids))
	})
	if n := h.count(`SELECT count(*) FROM outbox_messages_dlq`); n != 0 {
		t.Errorf("%d rows dead-lettered by a sink outage", n)
	}
	if n := h.count(`SELECT max(attempts) FROM outbox_messages`); n != 1 {
		t.Errorf("max attempts after outage = %d, want 1 (outage attempts are not counted)", n)
	}
}

// Rows PostgreSQL accepts but a relay could choke on while claiming them (a
// jsonb nested deeper than Go's decoder allows, an infinite occurred_at, a
// tenant PostgreSQL does not have) become poison events: they end in the
// DLQ with a last_error naming the problem, and every other tenant keeps
// flowing. Before, the claim itself failed, for everyone, forever.
func testUnreadableRows(t *testing.T, mode WakeMode) {
	h := newHarness(t, mode)
	sink := newRecordingSink()
	sink.reject = func(m outbox.Message) error {
		var v any
		if err := json.Unmarshal(m.Payload, &v); err != nil {
			return fmt.Errorf("payload does not decode: %w", err)
		}
		return nil
	}
	ctx := context.Background()
	// The row behind the infinite one, of the same aggregate and claimed
	// with it, must wait until the infinite one has left the outbox.
	var deep, infinite, behindInfinite, unknownTenant int64
	var appliedTooEarly atomic.Bool
	sink.onApply = func(m outbox.Message) {
		if m.ID == behindInfinite && h.count(`SELECT count(*) FROM outbox_messages_dlq WHERE id = $1`, infinite) == 0 {
			appliedTooEarly.Store(true)
		}
	}
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
			VALUES (1, 'Order', 1, 'OrderPlaced', (repeat('[', 10050) || repeat(']', 10050))::jsonb) RETURNING id`).Scan(&deep); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload, occurred_at)
			VALUES (1, 'Order', 2, 'OrderPlaced', '{}', 'infinity') RETURNING id`).Scan(&infinite); err != nil {
			return err
		}
		var err error
		if behindInfinite, err = insert(ctx, tx, event{1, "Order", 2, "OrderConfirmed", `{}`}); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
			VALUES (424242, 'Order', 3, 'OrderPlaced', '{}') RETURNING id`).Scan(&unknownTenant)
	})
	if err != nil {
		t.Fatal(err)
	}
	h.start(sink, h.config("relay-unreadable"))
	good := []int64{behindInfinite}
	for i := range 10 {
		good = append(good, h.insertCommitted(event{2 + int64(i%3), "Order", int64(10 + i), "OrderPlaced", `{}`}))
	}
	eventually(t, 20*time.Second, "the unreadable rows dead-lettered and the others processed", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages_dlq WHERE id IN ($1, $2, $3)`, deep, infinite, unknownTenant) == 3 &&
			h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NOT NULL`) == int64(len(good))
	})
	if appliedTooEarly.Load() {
		t.Errorf("outbox id %d was applied while the unreadable row %d before it was still pending", behindInfinite, infinite)
	}
	for id, want := range map[int64]string{deep: "does not decode", infinite: "occurred_at is infinity", unknownTenant: "tenant 424242 does not exist"} {
		var lastError string
		if err := h.pool.QueryRow(ctx, `SELECT last_error FROM outbox_messages_dlq WHERE id = $1`, id).Scan(&lastError); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(lastError, want) {
			t.Errorf("outbox id %d: last_error %q, want it to say %q", id, lastError, want)
		}
	}
}

// An aggregate whose first event failed holds back its later events until
// the retry, and more of them wait than a claim's window holds. The window
// must not fill with them: rows of other aggregates written after them are
// delivered meanwhile. The failed row's aggregate shares its batches with
// the others, and stays in order.
func testFailingAggregateStallsNoOther(t *testing.T, mode WakeMode) {
	h := newHarness(t, mode)
	sink := newRecordingSink()
	sink.reject = func(m outbox.Message) error {
		if strings.Contains(string(m.Payload), "poison") {
			return errors.New("payload rejected: field total must be a number")
		}
		return nil
	}
	cfg := h.config("relay-stall")
	cfg.BacklogBatchSize = cfg.BatchSize
	cfg.RetryStep = time.Hour // the failed row is not due again in this test
	ctx := context.Background()
	var poison int64
	var behind []int64
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		var err error
		if _, err = insert(ctx, tx, event{2, "Order", 7, "OrderConfirmed", `{}`}); err != nil {
			return err
		}
		if poison, err = insert(ctx, tx, event{1, "Order", 1, "OrderConfirmed", `{"poison": true}`}); err != nil {
			return err
		}
		for i := 0; i < 3*cfg.BatchSize; i++ {
			id, err := insert(ctx, tx, event{1, "Order", 1, "OrderConfirmed", fmt.Sprintf(`{"n": %d}`, i)})
			if err != nil {
				return err
			}
			behind = append(behind, id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	h.start(sink, cfg)
	eventually(t, 20*time.Second, "the poison row failed once", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND last_error IS NOT NULL`, poison) == 1
	})
	var others []int64
	for i := 0; i < 10; i++ {
		others = append(others, h.insertCommitted(event{2 + int64(i%3), "Order", int64(10 + i), "OrderConfirmed", `{}`}))
	}
	eventually(t, 20*time.Second, "rows of other aggregates written after the held-back ones delivered", func() bool {
		seen := sink.appliedIDs()
		for _, id := range others {
			if seen[id] == 0 {
				return false
			}
		}
		return true
	})
	seen := sink.appliedIDs()
	for _, id := range behind {
		if seen[id] > 0 {
			t.Fatalf("outbox id %d applied while the failed row %d before it waits for its retry", id, poison)
		}
	}
	if n := h.count(`SELECT count(*) FROM outbox_messages WHERE id = ANY($1) AND processed_at IS NULL AND last_error IS NULL`, behind); n != int64(len(behind)) {
		t.Errorf("%d of the %d rows behind the failed row are pending without an error, want all", n, len(behind))
	}
	sink.checkOrder(t)
	sink.checkViolations(t)
}

// A claim takes at most MaxBatchBytes of payload, and at least one row (one
// larger than the bound goes alone). Large events of four aggregates,
// interleaved and committed in one transaction (one stream batch), reach
// the sink in batches within the bound, each aggregate in order. In stream
// mode the rows a claim leaves are claimed again at once: the fallback
// poll, an hour here, never runs.
func testClaimsStayWithinTheByteBound(t *testing.T, mode WakeMode) {
	h := newHarness(t, mode)
	const bound = 25_000
	sink := newRecordingSink()
	cfg := h.config("relay-bytes")
	cfg.MaxBatchBytes = bound
	cfg.FallbackPollInterval = time.Hour
	h.start(sink, cfg)
	if mode == WakeStream {
		// The start-up drain found nothing: the rows come by the stream.
		eventually(t, 10*time.Second, "the stream connected", func() bool {
			return h.count(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active`, h.slot) == 1
		})
	}
	filler := strings.Repeat("x", 6_000)
	var events []event
	for i := range 24 {
		payload := fmt.Sprintf(`{"n": %d, "filler": %q}`, i, filler)
		if i == 10 {
			payload = fmt.Sprintf(`{"n": %d, "filler": %q}`, i, strings.Repeat("y", 2*bound))
		}
		events = append(events, event{1, "Order", int64(i % 4), "OrderConfirmed", payload})
	}
	ids := h.insertTogether(events...)
	eventually(t, 20*time.Second, "every row applied", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE id = ANY($1) AND processed_at IS NOT NULL`, ids) == int64(len(ids))
	})
	sink.mu.Lock()
	var sizes []int
	for _, batch := range sink.deliveries {
		bytes := 0
		for _, m := range batch {
			bytes += len(m.Payload)
		}
		sizes = append(sizes, bytes)
		if bytes > bound && len(batch) > 1 {
			t.Errorf("a batch of %d rows and %d payload bytes, above the bound of %d", len(batch), bytes, bound)
		}
	}
	sink.mu.Unlock()
	if len(sizes) < 24*6_000/bound {
		t.Errorf("batches of %v bytes: too few for the bound", sizes)
	}
	sink.checkOrder(t)
	sink.checkViolations(t)
}
