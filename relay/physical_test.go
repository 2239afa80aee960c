package relay

import (
	"context"
	"testing"
	"time"
)

// The claim's lease update (attempts, locked_by, locked_until: columns no
// index holds) must be a HOT update, written beside the row on its own page
// without a new entry in any index (docs/adr/0014). It is, only while the
// page has room for a new version of most of its rows: a batch takes
// consecutive ids, so it updates most rows of a page at once. The outbox's
// pages are filled here as producers' inserts fill them, up to the
// fillfactor, with payloads of an ordinary size; at the seed-era fillfactor of 80 about a
// quarter of these updates were HOT, at 50 over 90 % (a few do not fit: the
// longer the lease identity, the larger each new row version).
func TestClaimLeaseUpdatesAreHOT(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	if _, err := h.pool.Exec(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT 1 + g % 100, 'Order', g % 2000, 'OrderConfirmed',
		       jsonb_build_object('order_id', g % 2000, 'status', 'confirmed', 'note', repeat('x', 80))
		FROM generate_series(1, 5000) g`); err != nil {
		t.Fatal(err)
	}
	// Statistics reach pg_stat_user_tables asynchronously; wait until the
	// inserts are counted, so that the counters read next are the claim's.
	before := waitTableCounters(t, h, func(c tableCounters) bool { return c.inserted >= 5000 })

	// A lease identity as long as production's after a billion claims
	// (host-pid-random/worker#claim): it is part of each new row version.
	s := &store{pool: h.pool, relayID: defaultRelayID() + "/0", cfg: Config{BatchSize: 500, Lease: time.Minute, MaxAttempts: 5}.withDefaults()}
	s.claims.Store(1_000_000_000)
	c, err := s.OutboxClaim(ctx, 500)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.messages) != 500 {
		t.Fatalf("claimed %d rows, want 500", len(c.messages))
	}
	after := waitTableCounters(t, h, func(c tableCounters) bool { return c.updated >= before.updated+500 })
	updated, hot := after.updated-before.updated, after.hot-before.hot
	if float64(hot) < 0.8*float64(updated) {
		t.Fatalf("%d of the claim's %d row updates were HOT, want at least 80%%: its lease updates write index entries", hot, updated)
	}
	t.Logf("%d of %d claim updates were HOT", hot, updated)
}

type tableCounters struct{ inserted, updated, hot int64 }

// waitTableCounters polls outbox_messages' statistics until done holds.
// Each query runs in a transaction of its own, so it reads fresh figures.
func waitTableCounters(t *testing.T, h *harness, done func(tableCounters) bool) tableCounters {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var c tableCounters
		if err := h.pool.QueryRow(context.Background(), `SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd
			FROM pg_stat_user_tables WHERE relname = 'outbox_messages'`).Scan(&c.inserted, &c.updated, &c.hot); err != nil {
			t.Fatal(err)
		}
		if done(c) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("outbox_messages statistics did not arrive within 30s: %+v", c)
		}
		waitTick()
	}
}
