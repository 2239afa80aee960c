package relay

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// Each claim leases under an identity of its own. A batch whose lease ran
// out, and whose rows and aggregates were claimed again meanwhile (here by
// the same worker, as a claim ahead would), must not touch the new claim's
// leases when its late settle, failure record or renewal arrives: ending
// them would let another relay take the aggregates while the new batch is
// still in delivery. The batch mixes two aggregates, one row applied and
// two handed back.
func TestALateSettleTouchesOnlyItsOwnClaim(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	x1 := h.insertCommitted(event{1, "Order", 1, "OrderConfirmed", `{"order_id": 1}`})
	y1 := h.insertCommitted(event{1, "Order", 2, "OrderConfirmed", `{"order_id": 2}`})
	x2 := h.insertCommitted(event{1, "Order", 1, "OrderShipped", `{"order_id": 1}`})

	w := &store{pool: h.pool, relayID: "worker-a/0", cfg: Config{BatchSize: 10, Lease: time.Second, MaxAttempts: 5}.withDefaults()}
	first, err := w.OutboxClaim(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := messageIDs(first.messages); len(got) != 3 {
		t.Fatalf("first claim took %v, want %v", got, []int64{x1, y1, x2})
	}
	eventually(t, 10*time.Second, "the first claim's lease to run out", func() bool {
		return h.count(`SELECT count(*) FROM outbox_batches WHERE locked_until >= now()`) == 0
	})
	w.cfg.Lease = time.Minute
	second, err := w.OutboxClaim(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := messageIDs(second.messages); len(got) != 3 {
		t.Fatalf("second claim took %v, want the same three rows", got)
	}
	if first.holder == second.holder {
		t.Errorf("two claims leased under one identity %q", first.holder)
	}

	// The first batch's bookkeeping arrives late: a renewal (for ten
	// minutes, so that one applied shows), a failure, a settle.
	late := &store{pool: h.pool, relayID: w.relayID, cfg: w.cfg}
	late.cfg.Lease = 10 * time.Minute
	if err := late.OutboxExtendLease(ctx, first.holder, len(first.messages)); err != nil {
		t.Fatal(err)
	}
	if n := h.count(`SELECT count(*) FROM outbox_batches WHERE locked_until > now() + interval '2 minutes'`); n != 0 {
		t.Errorf("the late renewal extended %d batches (the second claim's)", n)
	}
	if _, err := w.OutboxFail(ctx, first.holder, first.messages[:1], map[int64]error{x1: errors.New("late failure")}); err != nil {
		t.Fatal(err)
	}
	marked, _, err := w.OutboxSettle(ctx, first.holder, settlement{applied: []int64{y1}, released: []int64{x1, x2}})
	if err != nil {
		t.Fatal(err)
	}
	if marked != 0 {
		t.Errorf("the late settle marked %d rows of the second claim", marked)
	}
	if n := h.count(`SELECT count(*) FROM outbox_messages m JOIN outbox_batches b ON m.id = ANY(b.ids)
		WHERE b.holder = $1 AND b.locked_until > now() + interval '30 seconds'
		AND m.processed_at IS NULL AND m.last_error IS NULL AND m.available_at <= now()`, second.holder); n != 3 {
		t.Errorf("%d of the second claim's 3 rows are still its own, pending and unfailed, want 3", n)
	}
	if n := h.count(`SELECT count(DISTINCT k) FROM outbox_batches, unnest(aggregate_keys) k WHERE holder = $1`, second.holder); n != 2 {
		t.Errorf("the second claim's batch holds %d aggregates, want 2", n)
	}
	if n := h.count(`SELECT count(*) FROM outbox_aggregate_leases`); n != 0 {
		t.Errorf("the late failure left %d holds behind", n)
	}
	other := &store{pool: h.pool, relayID: "worker-b/0", cfg: w.cfg}
	stolen, err := other.OutboxClaim(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if stolen.taken() != 0 {
		other.OutboxSettle(ctx, stolen.holder, settlement{released: messageIDs(stolen.messages)})
		t.Fatalf("another relay took %v while the second claim still holds them", messageIDs(stolen.messages))
	}

	marked, _, err = w.OutboxSettle(ctx, second.holder, settlement{applied: messageIDs(second.messages)})
	if err != nil {
		t.Fatal(err)
	}
	if marked != 3 || h.count(`SELECT count(*) FROM outbox_batches`) != 0 {
		t.Fatalf("the second claim's settle marked %d of 3 rows and left %d batches",
			marked, h.count(`SELECT count(*) FROM outbox_batches`))
	}
}

// An aggregate waiting for another aggregate's events keeps how long it has
// waited when a batch of it is handed back (Neo4j unavailable, a split-down,
// a claim ahead given up): its hold, run out, stays with since when it
// waits. Applied, it forgets. The batch mixes it with another aggregate,
// which leaves no hold.
func TestHandedBackAggregateKeepsItsWait(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	waiting := h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`})
	other := h.insertCommitted(event{1, "Order", 2, "OrderPlaced", `{}`})
	w := &store{pool: h.pool, relayID: "worker-w/0", cfg: Config{BatchSize: 10, Lease: time.Minute, MaxAttempts: 5,
		DependencyWait: time.Millisecond, DependencyWaitMax: time.Millisecond}.withDefaults()}
	claim := func(want int) claimed {
		t.Helper()
		var c claimed
		eventually(t, 10*time.Second, "a claim", func() bool {
			var err error
			if c, err = w.OutboxClaim(ctx, 10); err != nil {
				t.Fatal(err)
			}
			return len(c.messages) == want
		})
		return c
	}
	c := claim(2)
	if _, _, err := w.OutboxSettle(ctx, c.holder, settlement{applied: []int64{other}, deferred: []int64{waiting}}); err != nil {
		t.Fatal(err)
	}
	var since time.Time
	if err := h.pool.QueryRow(ctx, `SELECT deferred_since FROM outbox_aggregate_leases WHERE aggregate_id = 1`).Scan(&since); err != nil {
		t.Fatal(err)
	}
	other2 := h.insertCommitted(event{1, "Order", 2, "OrderConfirmed", `{}`})
	c = claim(2)
	if _, _, err := w.OutboxSettle(ctx, c.holder, settlement{released: []int64{waiting, other2}}); err != nil {
		t.Fatal(err)
	}
	var kept time.Time
	if err := h.pool.QueryRow(ctx, `SELECT deferred_since FROM outbox_aggregate_leases WHERE aggregate_id = 1 AND locked_until <= now()`).Scan(&kept); err != nil {
		t.Fatalf("the waiting aggregate's hold after the hand-back (run out): %v", err)
	}
	if !kept.Equal(since) {
		t.Errorf("after the hand-back: deferred_since %v, want %v", kept, since)
	}
	if n := h.count(`SELECT count(*) FROM outbox_aggregate_leases WHERE aggregate_id = 2`); n != 0 {
		t.Errorf("the other aggregate kept its lease after the hand-back")
	}
	c = claim(2)
	if _, _, err := w.OutboxSettle(ctx, c.holder, settlement{applied: []int64{waiting, other2}}); err != nil {
		t.Fatal(err)
	}
	if n := h.count(`SELECT count(*) FROM outbox_aggregate_leases`); n != 0 {
		t.Errorf("%d lease rows after both aggregates were applied", n)
	}
}

// Two processes given one --relay-id (a copied deployment) claim under
// identities of their own: each batch is its own row in outbox_batches, and
// one's settle cannot end the other's batch.
func TestOneRelayIDTwiceKeepsTheBatchesApart(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	cfg := Config{BatchSize: 1, Lease: time.Minute, MaxAttempts: 5}.withDefaults()
	first := &store{pool: h.pool, relayID: "same-id/0", cfg: cfg}
	second := &store{pool: h.pool, relayID: "same-id/0", cfg: cfg}
	a := h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`})
	b := h.insertCommitted(event{1, "Order", 2, "OrderPlaced", `{}`})
	c1, err := first.OutboxClaim(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := second.OutboxClaim(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got1, got2 := messageIDs(c1.messages), messageIDs(c2.messages); len(got1) != 1 || got1[0] != a || len(got2) != 1 || got2[0] != b {
		t.Fatalf("the two claims took %v and %v, want [%d] and [%d]", got1, got2, a, b)
	}
	if c1.holder == c2.holder {
		t.Fatalf("both processes claimed as %q", c1.holder)
	}
	if marked, _, err := first.OutboxSettle(ctx, c1.holder, settlement{applied: []int64{a}}); err != nil || marked != 1 {
		t.Fatalf("the first settle marked %d (%v), want 1", marked, err)
	}
	if n := h.count(`SELECT count(*) FROM outbox_batches WHERE holder = $1 AND $2 = ANY(ids)`, c2.holder, b); n != 1 {
		t.Errorf("the other process's batch is gone after the first one's settle")
	}
}

// A claim passes over the id range of the batches in flight, but not for
// long: a row left inside a batch's range (its aggregate was in another
// batch then) is taken once that other batch settles, within about a
// second, while the batch around it stays in flight.
func TestRowLeftInsideABatchInFlightIsTakenSoon(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	s := &store{pool: h.pool, relayID: "range/0", cfg: Config{BatchSize: 10, Lease: time.Minute, MaxAttempts: 5}.withDefaults()}
	c1 := h.insertCommitted(event{1, "Order", 3, "OrderPlaced", `{}`})
	other, err := s.OutboxClaim(ctx, 10)
	if err != nil || len(other.messages) != 1 {
		t.Fatalf("first claim: %v, %v", messageIDs(other.messages), err)
	}
	x1 := h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`})
	c2 := h.insertCommitted(event{1, "Order", 3, "OrderConfirmed", `{}`})
	x2 := h.insertCommitted(event{1, "Order", 1, "OrderConfirmed", `{}`})
	around, err := s.OutboxClaim(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := messageIDs(around.messages); !slices.Equal(got, []int64{x1, x2}) {
		t.Fatalf("second claim took %v, want [%d %d] (row %d waits for its aggregate's batch)", got, x1, x2, c2)
	}
	if marked, _, err := s.OutboxSettle(ctx, other.holder, settlement{applied: []int64{c1}}); err != nil || marked != 1 {
		t.Fatalf("settle of the first batch marked %d: %v", marked, err)
	}
	var got []int64
	eventually(t, 5*time.Second, "the row inside the range of a batch in flight taken", func() bool {
		c, err := s.OutboxClaim(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		got = messageIDs(c.messages)
		return len(got) > 0
	})
	if !slices.Equal(got, []int64{c2}) {
		t.Fatalf("took %v, want [%d]", got, c2)
	}
	if n := h.count(`SELECT count(*) FROM outbox_batches WHERE holder = $1`, around.holder); n != 1 {
		t.Error("the batch around the row is no longer in flight: the test proves nothing")
	}
}
