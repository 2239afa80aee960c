package relay

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"graphsync/outbox"

	dto "github.com/prometheus/client_model/go"
)

// While the sink applies a batch, the relay claims the next one (drain). The
// batch claimed ahead must hold no aggregate of the batch in delivery; when
// the batch in delivery fails, the one claimed ahead goes back uncounted;
// nothing is lost and every aggregate is applied in id order. Every batch
// mixes 50 aggregates, and later batches hold later events of the aggregates
// of earlier ones.
func TestBatchClaimedAheadHoldsNoAggregateInDelivery(t *testing.T) {
	inDrainModes(t, testClaimedAhead)
}

// inDrainModes runs test in each wake mode whose drain claims ahead.
func inDrainModes(t *testing.T, test func(*testing.T, WakeMode)) {
	for _, mode := range []WakeMode{WakePoll, WakeNotify} {
		t.Run(string(mode), func(t *testing.T) { test(t, mode) })
	}
}

// fillInterleaved writes perAggregate events of each of aggregates Order
// aggregates in one transaction, ids interleaved: event n belongs to
// aggregate n % aggregates.
func fillInterleaved(t *testing.T, h *harness, aggregates, perAggregate int) {
	t.Helper()
	if _, err := h.pool.Exec(context.Background(), `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT 1, 'Order', g % $1, 'OrderConfirmed', jsonb_build_object('n', g) FROM generate_series(0, $2 - 1) g`,
		aggregates, aggregates*perAggregate); err != nil {
		t.Fatal(err)
	}
}

func testClaimedAhead(t *testing.T, mode WakeMode) {
	h := newHarness(t, mode)
	const aggregates, perAggregate = 200, 3
	// A batch of 50 holds 50 aggregates; the batch after it (claimed ahead)
	// holds 50 others, and the events of the first 50 aggregates come again
	// four batches later.
	fillInterleaved(t, h, aggregates, perAggregate)

	sink := newRecordingSink()
	var mu sync.Mutex
	failures, overlaps := 0, 0
	var problems []string
	sink.fail = func() error {
		// Called under the sink's lock, once per delivery.
		if failures < 2 {
			failures++
			return fmt.Errorf("%w: neo4j unreachable", outbox.ErrSinkUnavailable)
		}
		return nil
	}
	// Rows of batches handed to the sink before: in flight while they are
	// settled beside a later delivery, they are not claimed ahead.
	var handed []int64
	sink.hold = func(ctx context.Context, batch []outbox.Message) {
		inBatch := map[aggKey]bool{}
		ids := make([]int64, len(batch))
		for i, m := range batch {
			inBatch[keyOf(m)] = true
			ids[i] = m.ID
		}
		mu.Lock()
		notAhead := append(slices.Clone(handed), ids...)
		handed = append(handed, ids...)
		mu.Unlock()
		// Wait (bounded) for the claim ahead: rows in flight outside this batch,
		// unless nothing else is left to claim.
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			var ahead, free int64
			if err := h.pool.QueryRow(ctx, `SELECT
				count(*) FILTER (WHERE id IN `+inFlight+` AND NOT (id = ANY($1))),
				count(*) FILTER (WHERE id NOT IN `+inFlight+`)
				FROM outbox_messages WHERE processed_at IS NULL`, notAhead).Scan(&ahead, &free); err != nil {
				return
			}
			if ahead > 0 || free == 0 {
				break
			}
			<-time.After(5 * time.Millisecond)
		}
		rows, err := h.pool.Query(ctx, `SELECT tenant_id, aggregate_type, aggregate_id FROM outbox_messages
			WHERE processed_at IS NULL AND id IN `+inFlight+` AND NOT (id = ANY($1))`, notAhead)
		if err != nil {
			return
		}
		defer rows.Close()
		mu.Lock()
		defer mu.Unlock()
		sawAhead := false
		for rows.Next() {
			var k aggKey
			if err := rows.Scan(&k.tenant, &k.aggType, &k.aggID); err != nil {
				problems = append(problems, err.Error())
				return
			}
			sawAhead = true
			if inBatch[k] {
				problems = append(problems, fmt.Sprintf("aggregate %v is in delivery and in the batch claimed ahead", k))
			}
		}
		if sawAhead {
			overlaps++
		}
	}
	h.start(sink, h.config("relay-ahead"))

	eventually(t, 30*time.Second, "every row applied", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`) == 0
	})
	sink.checkViolations(t)
	mu.Lock()
	for _, p := range problems {
		t.Error(p)
	}
	if overlaps == 0 {
		t.Error("no batch was claimed while another was in delivery")
	}
	mu.Unlock()
	if n := h.count(`SELECT count(*) FROM outbox_messages_dlq`); n != 0 {
		t.Errorf("%d rows dead-lettered", n)
	}
	// The two failed deliveries and the batches claimed ahead of them were
	// handed back uncounted: every row was counted once, when it was applied.
	if n := h.count(`SELECT count(*) FROM outbox_messages WHERE attempts <> 1`); n != 0 {
		t.Errorf("%d rows with an attempt count other than 1", n)
	}
	if last := sink.checkOrder(t); len(last) != aggregates {
		t.Errorf("%d aggregates applied, want %d", len(last), aggregates)
	}
}

// While a backlog exists, each full claim lets the next take twice as many
// rows, up to BacklogBatchSize (larger Neo4j transactions); a short claim
// returns to BatchSize, so the first batch after the backlog is small again.
func TestBatchesGrowWhileABacklogExists(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	insert := func(rows, aggregates int) {
		if _, err := h.pool.Exec(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
			SELECT 1, 'Order', g % $1, 'OrderConfirmed', jsonb_build_object('n', g) FROM generate_series(0, $2 - 1) g`,
			aggregates, rows); err != nil {
			t.Fatal(err)
		}
	}
	drained := func() {
		eventually(t, 30*time.Second, "every row applied", func() bool {
			return h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`) == 0
		})
	}
	sink := newRecordingSink()
	cfg := h.config("relay-grow")
	cfg.BatchSize, cfg.BacklogBatchSize = 50, 200
	insert(2000, 1000)
	h.start(sink, cfg)
	drained()
	batchSizes := func() []int {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		var out []int
		for _, d := range sink.deliveries {
			out = append(out, len(d))
		}
		return out
	}
	backlog := batchSizes()
	largest := 0
	for _, n := range backlog {
		largest = max(largest, n)
	}
	if largest != 200 {
		t.Errorf("largest batch during the backlog %d, want 200 (BacklogBatchSize); batches %v", largest, backlog)
	}
	// The drain ended on a short claim: the next backlog starts at BatchSize.
	insert(120, 120)
	drained()
	after := batchSizes()[len(backlog):]
	if len(after) == 0 || after[0] != 50 {
		t.Errorf("first batch after the backlog: %v, want 50 (BatchSize)", after)
	}
	sink.checkViolations(t)
}

// A backlog of hot aggregates: half the rows belong to 10 aggregates, so a
// batch claimed ahead often finds them in flight and takes only the other
// half of its window. The claims still grow to BacklogBatchSize (how much of
// each window is in flight depends on timing, so the batches delivered may
// never reach it), no batch exceeds it, and every aggregate is applied in
// order.
func TestBatchesGrowBehindHotAggregatesInFlight(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	if _, err := h.pool.Exec(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT 1, 'Product', CASE WHEN g % 2 = 0 THEN g % 10 ELSE 1000 + g END, 'ProductRepriced', jsonb_build_object('n', g)
		FROM generate_series(0, 3999) g`); err != nil {
		t.Fatal(err)
	}
	sink := newRecordingSink()
	cfg := h.config("relay-hot")
	cfg.BatchSize, cfg.BacklogBatchSize = 50, 400
	r, _ := h.startRelay(sink, cfg)
	eventually(t, 60*time.Second, "every row applied", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`) == 0
	})
	sink.checkViolations(t)
	sink.mu.Lock()
	largest := 0
	var sizes []int
	for _, d := range sink.deliveries {
		largest = max(largest, len(d))
		sizes = append(sizes, len(d))
	}
	sink.mu.Unlock()
	if largest > cfg.BacklogBatchSize || largest <= cfg.BatchSize {
		t.Errorf("largest batch behind hot aggregates %d, want more than %d (BatchSize) and at most %d (BacklogBatchSize): %v",
			largest, cfg.BatchSize, cfg.BacklogBatchSize, sizes)
	}
	// Limits here are 50, 100, 200 and 400: a claim above 256 could take 400.
	if n := claimsAbove(t, r.metrics, 256); n == 0 {
		t.Errorf("no claim could take %d rows (BacklogBatchSize); batches %v", cfg.BacklogBatchSize, sizes)
	}
	if n := claimsAbove(t, r.metrics, 512); n != 0 {
		t.Errorf("%d claims could take more than %d rows (BacklogBatchSize)", n, cfg.BacklogBatchSize)
	}
	sink.checkOrder(t)
}

// claimsAbove counts the poll claims that could take more than bound rows,
// from the outbox_claim_limit_rows histogram; bound must be one of its
// bucket bounds (a power of two).
func claimsAbove(t *testing.T, m *Metrics, bound float64) uint64 {
	t.Helper()
	var metric dto.Metric
	if err := m.claimLimit.Write(&metric); err != nil {
		t.Fatal(err)
	}
	h := metric.GetHistogram()
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == bound {
			return h.GetSampleCount() - b.GetCumulativeCount()
		}
	}
	t.Fatalf("%v is no bucket bound of outbox_claim_limit_rows", bound)
	return 0
}

// The sizing rule itself: a claim whose window was full is a backlog even
// when it took fewer rows (rows of aggregates in flight are in the window
// but not taken); a window short of the limit ends it; a claim the byte
// bound ended looks at about twice the rows it took next.
func TestSizeForBacklog(t *testing.T) {
	cfg := Config{BatchSize: 50, BacklogBatchSize: 400, MaxBatchBytes: 1000}
	for _, c := range []struct {
		name                        string
		limit, window, start, taken int
		bytesEach                   int
		want                        int
	}{
		{"full window doubles", 50, 50, 50, 50, 1, 100},
		{"full window, few taken, still doubles", 100, 100, 100, 10, 1, 200},
		{"capped at BacklogBatchSize", 400, 400, 400, 400, 1, 400},
		{"short window returns to BatchSize", 200, 120, 400, 120, 1, 50},
		{"split-down left to deliver", 50, 50, 12, 12, 1, 12},
		{"the byte bound ended it", 400, 400, 400, 9, 100, 18},
		{"few rows, well within the bytes", 400, 400, 400, 9, 10, 400},
		{"all the window taken, whatever its bytes", 100, 100, 100, 100, 100, 200},
	} {
		w := &worker{Relay: &Relay{cfg: cfg}, limit: c.start}
		claim := claimed{limit: c.limit, window: c.window}
		for range c.taken {
			claim.messages = append(claim.messages, outbox.Message{Payload: make([]byte, c.bytesEach)})
		}
		w.sizeForBacklog(claim)
		if w.limit != c.want {
			t.Errorf("%s: limit %d after taking %d rows of a window of %d of %d (from %d), want %d",
				c.name, w.limit, c.taken, c.window, c.limit, c.start, c.want)
		}
	}
}

// A batch claimed ahead does not renew its lease while it waits. When the
// batch in delivery takes longer than the lease, another relay may take the
// waiting batch's rows; the relay that claimed them must then not deliver
// them too: it hands them back instead. Two relays, one slow delivery.
func TestBatchClaimedAheadOfASlowBatchIsHandedBack(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	if _, err := h.pool.Exec(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT 1, 'Order', g, 'OrderConfirmed', jsonb_build_object('n', g) FROM generate_series(0, 399) g`); err != nil {
		t.Fatal(err)
	}
	// A lease of 4s, not the harness's 1s: renewals come every third of it,
	// and on a busy machine one can come late enough to lose a 1s lease,
	// which delivers its rows again for another reason than the one tested.
	const lease = 4 * time.Second
	sink := newRecordingSink()
	var slow sync.Once
	sink.hold = func(ctx context.Context, batch []outbox.Message) {
		slow.Do(func() {
			select { // longer than the lease; the batch in delivery keeps renewing its own
			case <-ctx.Done():
			case <-time.After(lease * 8 / 5):
			}
		})
	}
	for _, id := range []string{"relay-slow", "relay-other"} {
		cfg := h.config(id)
		cfg.Lease = lease
		h.start(sink, cfg)
	}
	eventually(t, 30*time.Second, "every row applied", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`) == 0
	})
	sink.checkViolations(t)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for id, n := range sink.seen {
		if n > 1 {
			t.Errorf("row %d delivered %d times", id, n)
		}
	}
}

// A batch is settled while the next one is delivered (drain). When that
// settle fails, the batch delivered beside it is settled at once and the
// worker backs off; the failed batch's rows stay unmarked and leased, so the
// later events of its aggregates wait behind them until the lease runs out,
// and then they are delivered again (the sink's guards make that a no-op).
// Nothing is lost, and no event is applied, the first time or again, after
// a later event of its aggregate. Every batch mixes 50 aggregates, and later
// batches hold later events of the aggregates of earlier ones.
func TestAFailedSettleLosesNothingAndKeepsOrder(t *testing.T) {
	inDrainModes(t, testFailedSettle)
}

func testFailedSettle(t *testing.T, mode WakeMode) {
	h := newHarness(t, mode)
	ctx := context.Background()
	const aggregates, perAggregate = 200, 3
	fillInterleaved(t, h, aggregates, perAggregate)
	// The first batch's settle fails once: marking its first row raises
	// (a sequence, which the rollback does not undo, makes it once).
	var first int64
	if err := h.pool.QueryRow(ctx, `SELECT min(id) FROM outbox_messages`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	for _, ddl := range []string{
		`CREATE SEQUENCE test_settle_failures`,
		`CREATE TABLE test_settle_target (id bigint NOT NULL)`,
		`CREATE FUNCTION test_fail_mark_once() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  IF NEW.processed_at IS NOT NULL AND OLD.processed_at IS NULL
		     AND NEW.id = (SELECT id FROM test_settle_target)
		     AND nextval('test_settle_failures') = 1 THEN
		    RAISE EXCEPTION 'test: this settle fails';
		  END IF;
		  RETURN NEW;
		END $$`,
		`CREATE TRIGGER test_fail_mark_once BEFORE UPDATE ON outbox_messages
		   FOR EACH ROW EXECUTE FUNCTION test_fail_mark_once()`,
	} {
		if _, err := h.pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.pool.Exec(ctx, `INSERT INTO test_settle_target VALUES ($1)`, first); err != nil {
		t.Fatal(err)
	}

	sink := newRecordingSink()
	h.start(sink, h.config("relay-settle-fails"))
	eventually(t, 30*time.Second, "every row applied and marked", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`) == 0
	})
	sink.checkViolations(t)
	seen := sink.appliedIDs()
	if seen[first] < 2 {
		t.Errorf("row %d, whose settle failed, was applied %d times; want it delivered again", first, seen[first])
	}
	if len(seen) != aggregates*perAggregate {
		t.Errorf("%d distinct rows applied, want %d", len(seen), aggregates*perAggregate)
	}
	if n := h.count(`SELECT count(*) FROM outbox_messages_dlq`); n != 0 {
		t.Errorf("%d rows dead-lettered", n)
	}
	// Strictly, for an event applied again too: the later events of its
	// aggregate waited behind it.
	sink.checkOrder(t)
}

// Behind a sink that is done before the previous batch's settle, the claim
// ahead runs beside that settle (docs/adr/0012): with the first batch's
// settle held up by a row lock, the batch after the next one is claimed
// while it waits. Six aggregates in batches of two: A0 A1, then A2 A3, then
// A4 A5, then the second events of A0 and A1, which must wait for the first
// batch's settle and still come after their first events.
func TestClaimAheadRunsBesideASlowSettle(t *testing.T) {
	inDrainModes(t, testClaimAheadBesideSettle)
}

func testClaimAheadBesideSettle(t *testing.T, mode WakeMode) {
	h := newHarness(t, mode)
	ctx := context.Background()
	var events []event
	for n, a := range []int64{0, 1, 2, 3, 4, 5, 0, 1} {
		events = append(events, event{tenant: 1, aggType: "Order", aggID: a, eventType: "OrderConfirmed", payload: fmt.Sprintf(`{"n": %d}`, n)})
	}
	ids := h.insertTogether(events...)

	// The first delivery takes a row lock on its first row, so the settle's
	// mark of that batch waits until the test lets go.
	lock, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx) //nolint:errcheck
	locked := make(chan error, 1)
	var once sync.Once
	sink := newRecordingSink()
	sink.hold = func(ctx context.Context, batch []outbox.Message) {
		once.Do(func() {
			_, err := lock.Exec(ctx, `SELECT 1 FROM outbox_messages WHERE id = $1 FOR UPDATE`, ids[0])
			locked <- err
		})
	}
	cfg := h.config("relay-beside-settle")
	cfg.BatchSize, cfg.BacklogBatchSize = 2, 2
	cfg.Lease = 10 * time.Second // the held-up settle must not outlive its lease
	h.start(sink, cfg)
	select {
	case err := <-locked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first batch was not delivered")
	}
	eventually(t, 5*time.Second, "A4 and A5 claimed while the first batch's settle waits", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE id = ANY($1) AND id IN `+inFlight, ids[4:6]) == 2
	})
	if n := h.count(`SELECT count(*) FROM outbox_messages WHERE id = ANY($1) AND processed_at IS NOT NULL`, ids[0:2]); n != 0 {
		t.Fatalf("the first batch's settle was not held up (%d of its rows marked)", n)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "every row applied", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`) == 0
	})
	sink.checkViolations(t)
	if last := sink.checkOrder(t); len(last) != 6 {
		t.Errorf("%d aggregates applied, want 6", len(last))
	}
	if n := h.count(`SELECT count(*) FROM outbox_messages WHERE attempts <> 1`); n != 0 {
		t.Errorf("%d rows with an attempt count other than 1", n)
	}
}
