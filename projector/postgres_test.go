package projector

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap/zaptest"

	"graphsync/internal/stacktest"
	"graphsync/outbox"
	"graphsync/workload"
)

// The demo workload's events, read back from the outbox and projected, give a
// graph equal to the business tables' non-personal columns; a second full
// replay changes nothing.
func TestWorkloadGraphEqualsPostgres(t *testing.T) {
	p, driver := liveProjector(t)
	_, pool := stacktest.FreshDatabase(t)
	ctx := context.Background()
	report, err := workload.Run(ctx, pool, workload.Config{Seed: 7, Tenants: 2, CategoriesPerTenant: 3, ProductsPerTenant: 8,
		CustomersPerTenant: 4, Orders: 30, Writers: 2, PriceChangeEvery: 3, UpdateEvery: 4, DiscontinueEvery: 7, DeleteEvery: 5}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stacktest.CleanGraph(t, driver, report.TenantIDs...) })

	batch := outboxMessages(t, pool)
	if int64(len(batch)) != report.Events {
		t.Fatalf("%d outbox rows, workload reports %d events", len(batch), report.Events)
	}
	for start := 0; start < len(batch); start += 25 {
		deliverAll(t, p, batch[start:min(start+25, len(batch))]...)
	}
	for _, tenantID := range report.TenantIDs {
		want := graphFromPostgres(t, pool, tenantID)
		got := dump(t, driver, tenantID)
		if got := withoutOrphanCategories(got).String(); got != want {
			t.Fatalf("tenant %d: graph differs from PostgreSQL:\n%s\nwant:\n%s", tenantID, got, want)
		}
	}
	deliverAll(t, p, batch...)
	for _, tenantID := range report.TenantIDs {
		if got, want := withoutOrphanCategories(dump(t, driver, tenantID)).String(), graphFromPostgres(t, pool, tenantID); got != want {
			t.Fatalf("tenant %d: replay changed the graph:\n%s\nwant:\n%s", tenantID, got, want)
		}
	}
}

func outboxMessages(t testing.TB, pool *pgxpool.Pool) []outbox.Message {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id, tenant_id, aggregate_type, aggregate_id, event_type, event_version,
		payload, occurred_at, coalesce(trace_id, '') FROM outbox_messages ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var batch []outbox.Message
	for rows.Next() {
		var m outbox.Message
		if err := rows.Scan(&m.ID, &m.TenantID, &m.AggregateType, &m.AggregateID, &m.EventType, &m.EventVersion,
			&m.Payload, &m.OccurredAt, &m.TraceID); err != nil {
			t.Fatal(err)
		}
		batch = append(batch, m)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return batch
}

// withoutOrphanCategories drops categories no product points at: the graph
// keeps a category it once saw (a true fact: the row exists), PostgreSQL-side
// expectations list only categories in use.
func withoutOrphanCategories(d Dump) Dump {
	used := map[int64]bool{}
	for _, r := range d.Relationships {
		if r.Type == "IN_CATEGORY" {
			used[r.ToID] = true
		}
	}
	nodes := d.Nodes[:0:0]
	for _, n := range d.Nodes {
		if n.Label != "Category" || used[n.ID] {
			nodes = append(nodes, n)
		}
	}
	d.Nodes = nodes
	return d
}

// graphFromPostgres renders, in DumpGraph's canonical form, the graph the
// tenant's business rows call for: their non-personal columns only.
func graphFromPostgres(t testing.TB, pool *pgxpool.Pool, tenantID int64) string {
	t.Helper()
	ctx := context.Background()
	d := Dump{TenantID: tenantID, Nodes: []DumpNode{{Label: "Tenant", ID: tenantID, Props: map[string]any{}}}}
	query := func(sql string, scan func(values []any)) {
		rows, err := pool.Query(ctx, sql, tenantID)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			values, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			scan(values)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	rel := func(typ, fromLabel string, from int64, toLabel string, to int64, props map[string]any) {
		d.Relationships = append(d.Relationships, DumpRel{Type: typ, FromLabel: fromLabel, FromID: from, ToLabel: toLabel, ToID: to,
			TenantID: tenantID, FromTenant: tenantID, ToTenant: tenantID, Props: props})
	}
	query(`SELECT id, name FROM categories c WHERE tenant_id = $1
		AND EXISTS (SELECT FROM products p WHERE p.tenant_id = c.tenant_id AND p.category_id = c.id)`, func(v []any) {
		d.Nodes = append(d.Nodes, DumpNode{Label: "Category", ID: v[0].(int64), Props: map[string]any{"name": v[1]}})
	})
	query(`SELECT id, segment, country_code FROM customers c WHERE tenant_id = $1
		AND EXISTS (SELECT FROM sales_orders o WHERE o.tenant_id = c.tenant_id AND o.customer_id = c.id)`, func(v []any) {
		d.Nodes = append(d.Nodes, DumpNode{Label: "Customer", ID: v[0].(int64), Props: nonNull(map[string]any{"segment": v[1], "country_code": v[2]})})
	})
	query(`SELECT id, sku, name, description, price_cents, currency, status, category_id FROM products WHERE tenant_id = $1`, func(v []any) {
		d.Nodes = append(d.Nodes, DumpNode{Label: "Product", ID: v[0].(int64), Props: map[string]any{
			"sku": v[1], "name": v[2], "description": v[3], "price_cents": v[4], "currency": v[5], "status": v[6]}})
		if v[7] != nil {
			rel("IN_CATEGORY", "Product", v[0].(int64), "Category", v[7].(int64), map[string]any{})
		}
	})
	query(`SELECT id, status, currency, total_cents, placed_at, confirmed_at, shipped_at, cancelled_at, customer_id
		FROM sales_orders WHERE tenant_id = $1`, func(v []any) {
		d.Nodes = append(d.Nodes, DumpNode{Label: "Order", ID: v[0].(int64), Props: nonNull(map[string]any{
			"status": v[1], "currency": v[2], "total_cents": v[3], "placed_at": v[4], "confirmed_at": v[5], "shipped_at": v[6], "cancelled_at": v[7]})})
		rel("PLACED", "Customer", v[8].(int64), "Order", v[0].(int64), map[string]any{})
	})
	query(`SELECT order_id, line_no, product_id, quantity, unit_price_cents FROM order_lines WHERE tenant_id = $1`, func(v []any) {
		rel("CONTAINS", "Order", v[0].(int64), "Product", v[2].(int64), map[string]any{
			"line_no": int64(v[1].(int32)), "quantity": int64(v[3].(int32)), "unit_price_cents": v[4]})
	})
	sortDump(&d)
	return d.String()
}

func nonNull(props map[string]any) map[string]any {
	for k, v := range props {
		if v == nil {
			delete(props, k)
		}
		if ts, ok := v.(time.Time); ok {
			props[k] = ts.UTC()
		}
	}
	return props
}
