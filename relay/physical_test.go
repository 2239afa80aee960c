package relay

import (
	"context"
	"testing"
	"time"

	gsql "graphsync/sql"
)

// A claim writes no outbox row: it reads its window and records the batch
// in one row of outbox_batches (docs/adr/0018), so a delivered row is
// written once, by its mark, as the bare claim-and-mark loop writes it.
// Before, the claim wrote a lease into each row (HOT only while its page had
// room, docs/adr/0014), locked each row and wrote an aggregate lease for
// each aggregate. Read from the rows themselves: a claim that updated a row
// would give it a new xmin, one that locked it would set its xmax.
func TestClaimWritesNoOutboxRow(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	h.exec(`INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT 1 + g % 100, 'Order', g % 2000, 'OrderConfirmed',
		       jsonb_build_object('order_id', g % 2000, 'status', 'confirmed', 'note', repeat('x', 80))
		FROM generate_series(1, 5000) g`)
	touched := func() int64 {
		return h.count(`SELECT count(*) FROM outbox_messages
			WHERE xmin <> (SELECT xmin FROM outbox_messages ORDER BY id DESC LIMIT 1) OR xmax <> '0'::xid`)
	}
	s := &store{pool: h.pool, relayID: defaultRelayID() + "/0", cfg: Config{BatchSize: 500, Lease: time.Minute, MaxAttempts: 5}.withDefaults()}
	c, err := s.OutboxClaim(ctx, 500)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.messages) != 500 {
		t.Fatalf("claimed %d rows, want 500", len(c.messages))
	}
	if n := h.count(`SELECT count(*) FROM outbox_batches WHERE holder = $1 AND cardinality(ids) = 500`, c.holder); n != 1 {
		t.Fatalf("%d batch rows of 500 ids for the claim, want 1", n)
	}
	if n := touched(); n != 0 {
		t.Fatalf("the claim wrote or locked %d outbox rows, want none", n)
	}
	if marked, _, err := s.OutboxSettle(ctx, c.holder, settlement{applied: messageIDs(c.messages)}); err != nil || marked != 500 {
		t.Fatalf("settle marked %d (%v), want 500", marked, err)
	}
	// The same check sees a write: the marks are the only new row versions.
	if n := touched(); n != 500 {
		t.Fatalf("after the settle %d outbox rows were written, want the 500 marked", n)
	}
}

// outbox_blocked_aggregates is read at every scrape, and a scrape must not
// read the whole backlog to find the few failing rows: with 5,000 pending
// rows, 4 of them failing in 3 aggregates, the gauges' statement reads the
// failing rows through their own index (migration 0011) and the oldest
// pending row, not the backlog. Before that index it read all 5,000 (0.2 s
// per scrape at a 1M backlog; docs/adr/0014).
func TestStatsReadTheFailingRowsOnly(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	h.exec(`INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT 1 + g % 10, 'Order', g % 700, 'OrderConfirmed', '{}' FROM generate_series(1, 5000) g`)
	// (Aggregate n is tenant 1 + n % 10's.) Tenant 6's aggregate 5 fails
	// twice (one aggregate, counted once), tenant 10's 9 and tenant 3's 12
	// once each.
	h.exec(`UPDATE outbox_messages SET last_error = 'refused'
		WHERE id IN (SELECT id FROM outbox_messages WHERE tenant_id = 6 AND aggregate_id = 5 ORDER BY id LIMIT 2)
		   OR id = (SELECT min(id) FROM outbox_messages WHERE tenant_id = 10 AND aggregate_id = 9)
		   OR id = (SELECT min(id) FROM outbox_messages WHERE tenant_id = 3 AND aggregate_id = 12)`)
	h.exec(`ANALYZE outbox_messages`)
	if n := h.count(`SELECT count(*) FROM outbox_messages WHERE last_error IS NOT NULL`); n != 4 {
		t.Fatalf("%d failing rows planted, want 4", n)
	}

	stats, err := ReadStats(ctx, h.pool)
	if err != nil {
		t.Fatal(err)
	}
	if stats.BlockedAggregates != 3 {
		t.Errorf("outbox_blocked_aggregates %d, want 3", stats.BlockedAggregates)
	}

	var plan []struct{ Plan planNode }
	if err := h.pool.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+gsql.Query("OutboxStats")).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	read := 0.0
	plan[0].Plan.walk(func(n planNode) {
		if n.Relation == "outbox_messages" {
			read += (n.ActualRows + n.RemovedByFilter) * n.ActualLoops
		}
	})
	// The 4 failing rows and the oldest pending one; a few more would be a
	// different plan still, the backlog's 5,000 is the one to refuse.
	if read > 20 {
		t.Errorf("the gauges read %.0f rows of the outbox for 4 failing ones among 5,000 pending", read)
	}
}
