package relay

import (
	"context"
	"errors"
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
	eventually(t, 10*time.Second, "the first claim's leases to run out", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE locked_until >= now()`)+
			h.count(`SELECT count(*) FROM outbox_aggregate_leases WHERE locked_until >= now()`) == 0
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
	if err := late.OutboxExtendLease(ctx, first.holder, messageIDs(first.messages), first.aggregates); err != nil {
		t.Fatal(err)
	}
	if n := h.count(`SELECT count(*) FROM outbox_messages WHERE locked_until > now() + interval '2 minutes'`) +
		h.count(`SELECT count(*) FROM outbox_aggregate_leases WHERE locked_until > now() + interval '2 minutes'`); n != 0 {
		t.Errorf("the late renewal extended %d leases of the second claim", n)
	}
	if _, err := w.OutboxFail(ctx, first.holder, first.messages[:1], map[int64]error{x1: errors.New("late failure")}); err != nil {
		t.Fatal(err)
	}
	marked, _, err := w.OutboxSettle(ctx, first.holder, settlement{applied: []int64{y1}, released: []int64{x1, x2}}, first.aggregates)
	if err != nil {
		t.Fatal(err)
	}
	if marked != 0 {
		t.Errorf("the late settle marked %d rows of the second claim", marked)
	}
	if n := h.count(`SELECT count(*) FROM outbox_messages WHERE locked_by = $1 AND locked_until > now() + interval '30 seconds'
		AND processed_at IS NULL AND last_error IS NULL`, second.holder); n != 3 {
		t.Errorf("%d of the second claim's 3 rows are still its own, pending and unfailed, want 3", n)
	}
	if n := h.count(`SELECT count(*) FROM outbox_aggregate_leases WHERE locked_by = $1 AND locked_until > now() + interval '30 seconds'`, second.holder); n != 2 {
		t.Errorf("%d of the second claim's 2 aggregate leases are left, want 2", n)
	}
	other := &store{pool: h.pool, relayID: "worker-b/0", cfg: w.cfg}
	stolen, err := other.OutboxClaim(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if stolen.taken() != 0 {
		other.OutboxSettle(ctx, stolen.holder, settlement{released: messageIDs(stolen.messages)}, stolen.aggregates)
		t.Fatalf("another relay took %v while the second claim still holds them", messageIDs(stolen.messages))
	}

	marked, _, err = w.OutboxSettle(ctx, second.holder, settlement{applied: messageIDs(second.messages)}, second.aggregates)
	if err != nil {
		t.Fatal(err)
	}
	if marked != 3 || h.count(`SELECT count(*) FROM outbox_aggregate_leases`) != 0 {
		t.Fatalf("the second claim's settle marked %d of 3 rows and left %d aggregate leases",
			marked, h.count(`SELECT count(*) FROM outbox_aggregate_leases`))
	}
}

// An aggregate waiting for another aggregate's events keeps how long it has
// waited when a batch of it is handed back (Neo4j unavailable, a split-down,
// a claim ahead given up): its lease becomes a hold that has run out, which
// the next claim takes over. Applied, it forgets. The batch mixes it with
// another aggregate, whose lease simply ends.
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
	if _, _, err := w.OutboxSettle(ctx, c.holder, settlement{applied: []int64{other}, deferred: []int64{waiting}}, c.aggregates); err != nil {
		t.Fatal(err)
	}
	var since time.Time
	if err := h.pool.QueryRow(ctx, `SELECT deferred_since FROM outbox_aggregate_leases WHERE aggregate_id = 1`).Scan(&since); err != nil {
		t.Fatal(err)
	}
	other2 := h.insertCommitted(event{1, "Order", 2, "OrderConfirmed", `{}`})
	c = claim(2)
	if _, _, err := w.OutboxSettle(ctx, c.holder, settlement{released: []int64{waiting, other2}}, c.aggregates); err != nil {
		t.Fatal(err)
	}
	var kept time.Time
	var by string
	if err := h.pool.QueryRow(ctx, `SELECT deferred_since, locked_by FROM outbox_aggregate_leases WHERE aggregate_id = 1 AND locked_until <= now()`).Scan(&kept, &by); err != nil {
		t.Fatalf("the waiting aggregate's lease after the hand-back: %v", err)
	}
	if !kept.Equal(since) || by != "held back" {
		t.Errorf("after the hand-back: deferred_since %v by %q, want %v by a hold", kept, by, since)
	}
	if n := h.count(`SELECT count(*) FROM outbox_aggregate_leases WHERE aggregate_id = 2`); n != 0 {
		t.Errorf("the other aggregate kept its lease after the hand-back")
	}
	c = claim(2)
	if _, _, err := w.OutboxSettle(ctx, c.holder, settlement{applied: []int64{waiting, other2}}, c.aggregates); err != nil {
		t.Fatal(err)
	}
	if n := h.count(`SELECT count(*) FROM outbox_aggregate_leases`); n != 0 {
		t.Errorf("%d lease rows after both aggregates were applied", n)
	}
}

// Two processes given one --relay-id number their claims alike, so two
// claims can share a lease identity. A settle ends the waiting leases of its
// own batch's aggregates only: here the other claim's aggregate 2, waiting
// for another aggregate's events under the same identity, keeps its lease
// while the settle of aggregate 1's batch hands everything back.
func TestSettleLeavesAnotherClaimsWaitingLeaseUnderTheSameIdentity(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	const holder = "same-id/0#7"
	mine := h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`})
	h.exec(`UPDATE outbox_messages SET locked_by = $1, locked_until = now() + interval '1 minute' WHERE id = $2`, holder, mine)
	h.exec(`INSERT INTO outbox_aggregate_leases (tenant_id, aggregate_type, aggregate_id, locked_by, locked_until, deferred_since, deferred_at)
		VALUES (1, 'Order', 1, $1, now() + interval '1 minute', now() - interval '1 minute', now() - interval '1 minute'),
		       (1, 'Order', 2, $1, now() + interval '1 minute', now() - interval '1 minute', now() - interval '1 minute')`, holder)
	s := &store{pool: h.pool, relayID: "same-id/0", cfg: Config{BatchSize: 10, Lease: time.Minute, MaxAttempts: 5}.withDefaults()}
	if _, _, err := s.OutboxSettle(ctx, holder, settlement{released: []int64{mine}},
		aggregates{tenantIDs: []int64{1}, types: []string{"Order"}, ids: []int64{1}}); err != nil {
		t.Fatal(err)
	}
	if n := h.count(`SELECT count(*) FROM outbox_aggregate_leases WHERE aggregate_id = 1 AND locked_by = 'held back'`); n != 1 {
		t.Errorf("the settled batch's waiting aggregate: %d holds, want its lease turned into one", n)
	}
	if n := h.count(`SELECT count(*) FROM outbox_aggregate_leases WHERE aggregate_id = 2 AND locked_by = $1 AND locked_until > now()`, holder); n != 1 {
		t.Errorf("the other claim's waiting aggregate lost its lease to a settle it was not part of")
	}
}
