package drift

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"graphsync/events"
	"graphsync/workload"
)

// A pending event explains only a difference on what it writes: an
// OrderConfirmed writes the Order node alone, so it explains the order's
// stale status but not its missing PLACED and CONTAINS edges, which stay
// drift. Before, any pending event of the order explained all of them.
func TestOnlyAnEventThatWritesARelationshipExplainsIt(t *testing.T) {
	pool, driver, tenants := syncedWorkload(t, workload.Config{Seed: 19, Tenants: 1, Orders: 6, DeleteEvery: -1}, "sync-explains")
	a := tenants[0]
	ctx := context.Background()
	order := ids(t, pool, `SELECT id FROM sales_orders WHERE tenant_id = $1 ORDER BY id LIMIT 1`, a)[0]
	// An OrderConfirmed of the order, due in an hour so that sync leaves it
	// pending.
	var s events.OrderState
	if err := pool.QueryRow(ctx, `SELECT id, version + 1, currency, total_cents, placed_at FROM sales_orders WHERE tenant_id = $1 AND id = $2`,
		a, order).Scan(&s.ID, &s.Version, &s.Currency, &s.TotalCents, &s.PlacedAt); err != nil {
		t.Fatal(err)
	}
	confirmed := time.Now()
	s.Status, s.ConfirmedAt = events.OrderStatusConfirmed, &confirmed
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := events.Enqueue(ctx, tx, a, events.OrderConfirmed{OrderState: s}); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE outbox_messages SET available_at = now() + interval '1 hour'
			WHERE tenant_id = $1 AND processed_at IS NULL`, a)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	cypherExec(t, driver, `MATCH (o:Order {tenant_id: $t, id: $o}) SET o.status = 'edited in the browser'
		WITH o MATCH (o)-[r:CONTAINS]->() DELETE r`, map[string]any{"t": a, "o": order})
	cypherExec(t, driver, `MATCH (:Customer)-[r:PLACED]->(o:Order {tenant_id: $t, id: $o}) DELETE r`, map[string]any{"t": a, "o": order})

	report := check(t, pool, driver, a, false)
	missing := 0
	for _, f := range report.Examples[MissingRelationship] {
		if f.Label == "Order" && f.ID == order {
			missing++
		}
	}
	lines := ids(t, pool, `SELECT line_no FROM order_lines WHERE tenant_id = $1 AND order_id = $2`, a, order)
	if missing != len(lines)+1 {
		t.Errorf("order %d: %d missing relationships reported, want its %d CONTAINS and its PLACED", order, missing, len(lines))
	}
	explained := false
	for _, e := range report.Explained {
		explained = explained || (e.Label == "Order" && e.ID == order)
	}
	for _, f := range report.Examples[StaleNode] {
		if f.Label == "Order" && f.ID == order {
			t.Errorf("order %d's status is reported stale: the pending OrderConfirmed writes it", order)
		}
	}
	if !explained {
		t.Errorf("order %d's stale status is not explained by its pending OrderConfirmed", order)
	}
}
