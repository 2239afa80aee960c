package rebuild

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap/zaptest"

	"graphsync/drift"
	"graphsync/events"
	"graphsync/workload"
)

// PostgreSQL restored from a backup taken before the last events: its
// outbox id sequence starts again below the outbox ids that stamp the
// reference nodes those events wrote, and sync's guard (outbox ids only, for
// a Category or a Customer) drops every later rename, segment or country
// until the sequence passes them. Drift reports such stamps, and a hand-set
// sync_version on a reference node, as a finding of its own; its repair, a
// snapshot rebuild and a replay rebuild each reset them, and the updates
// made after that reach the graph.
func TestReferenceStampsAboveARestoredOutboxAreReset(t *testing.T) {
	for i, fix := range []string{"drift repair", "snapshot rebuild", "replay rebuild"} {
		t.Run(fix, func(t *testing.T) {
			pool, driver := stack(t)
			ctx := context.Background()
			tenant := writeWorkload(t, pool, driver, workload.Config{Seed: int64(60 + i), Tenants: 1, Orders: 30, DeleteEvery: -1})[0]
			startSync(t, pool, driver, fmt.Sprintf("sync-stamps-%d", i))
			waitCaughtUp(t, pool)

			products := ids(t, pool, `SELECT DISTINCT ON (category_id) id FROM products
				WHERE tenant_id = $1 AND category_id IS NOT NULL AND status = 'active' ORDER BY category_id, id LIMIT 2`, tenant)
			customers := ids(t, pool, `SELECT DISTINCT customer_id FROM sales_orders WHERE tenant_id = $1 ORDER BY 1 LIMIT 2`, tenant)
			if len(products) < 2 || len(customers) < 2 {
				t.Fatalf("tenant %d: %d products of distinct categories and %d customers with orders, want 2 each", tenant, len(products), len(customers))
			}
			product, customer := products[0], customers[0]
			category := count(t, pool, `SELECT category_id FROM products WHERE id = $1`, product)
			handCategory := count(t, pool, `SELECT category_id FROM products WHERE id = $1`, products[1])
			handCustomer := customers[1]

			// The backup is taken here; then a rename and an order (a
			// segment and a country) are applied, stamping the category
			// and the customer above it.
			backup := count(t, pool, `SELECT pg_sequence_last_value(pg_get_serial_sequence('outbox_messages', 'id')::regclass)`)
			inTx(t, pool, func(tx pgx.Tx) {
				changeProduct(t, tx, tenant, product, "after the backup")
				placeOrder(t, tx, tenant, customer, "after the backup", "FR")
			})
			waitCaughtUp(t, pool)
			// The restore: the events after the backup are gone and the
			// sequence is back where the backup had it. (The rows keep
			// their state, so the graph says what they say: only the
			// stamps are wrong.)
			inTx(t, pool, func(tx pgx.Tx) {
				for _, table := range []string{"outbox_messages", "outbox_messages_archive", "outbox_messages_dlq"} {
					if _, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE id > $1`, backup); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := tx.Exec(ctx, `SELECT setval(pg_get_serial_sequence('outbox_messages', 'id'), $1)`, backup); err != nil {
					t.Fatal(err)
				}
			})
			// A version set by hand on a reference node, and an outbox id
			// that is not an integer.
			cypherExec(t, driver, `MATCH (c:Customer {tenant_id: $t, id: $id}) SET c.sync_version = 3`, map[string]any{"t": tenant, "id": handCustomer})
			cypherExec(t, driver, `MATCH (c:Category {tenant_id: $t, id: $id}) SET c.sync_outbox_id = 'restored'`, map[string]any{"t": tenant, "id": handCategory})

			report := checkTenant(t, pool, driver, tenant, false)
			var md strings.Builder
			_ = report.WriteMarkdown(&md, 0)
			for _, want := range []struct {
				label  string
				id     int64
				detail string
			}{
				{"Category", category, "is above every outbox id drawn"},
				{"Customer", customer, "is above every outbox id drawn"},
				{"Customer", handCustomer, "sync_version 3 on a reference node"},
				{"Category", handCategory, "sync_outbox_id is text of 8 characters, not an integer"},
			} {
				found := false
				for _, f := range report.Examples[drift.ReferenceStampAhead] {
					found = found || (f.Label == want.label && f.ID == want.id && strings.Contains(f.Detail, want.detail))
				}
				if !found {
					t.Errorf("%s %d: %s %q not reported:\n%s", want.label, want.id, drift.ReferenceStampAhead, want.detail, md.String())
				}
			}
			if report.DriftTotal != 4 {
				t.Errorf("drift %d after the restore, want the 4 stamps:\n%s", report.DriftTotal, md.String())
			}

			switch fix {
			case "drift repair":
				checkTenant(t, pool, driver, tenant, true)
			case "snapshot rebuild":
				requireNoDrift(t, rebuildScope(t, pool, driver, Config{TenantID: tenant, Source: SourceSnapshot}), fix)
			case "replay rebuild":
				requireNoDrift(t, rebuildScope(t, pool, driver, Config{TenantID: tenant, Source: SourceReplay}), fix)
			}

			// The next rename, segments and country reach the graph.
			inTx(t, pool, func(tx pgx.Tx) {
				changeProduct(t, tx, tenant, product, "after the fix")
				changeProduct(t, tx, tenant, products[1], "after the fix, too")
				placeOrder(t, tx, tenant, customer, "after the fix", "IT")
				placeOrder(t, tx, tenant, handCustomer, "hand-set before", "PT")
			})
			waitCaughtUp(t, pool)
			for _, want := range []struct {
				label string
				id    int64
				props string
			}{
				{"Category", category, "category after the fix"},
				{"Category", handCategory, "category after the fix, too"},
				{"Customer", customer, "after the fix IT"},
				{"Customer", handCustomer, "hand-set before PT"},
			} {
				if got := referenceProps(t, driver, tenant, want.label, want.id); got != want.props {
					t.Errorf("%s after %s: %s %d holds %q, want %q", fix, "the next events", want.label, want.id, got, want.props)
				}
			}
			if after := checkTenant(t, pool, driver, tenant, false); after.DriftTotal != 0 {
				md.Reset()
				_ = after.WriteMarkdown(&md, 0)
				t.Errorf("drift %d after the next events:\n%s", after.DriftTotal, md.String())
			}
		})
	}
}

func ids(t *testing.T, pool *pgxpool.Pool, query string, args ...any) []int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func inTx(t *testing.T, pool *pgxpool.Pool, write func(pgx.Tx)) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	write(tx)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// placeOrder sets a customer's segment and country and places an order of
// one line for it, with its OrderPlaced event, in tx.
func placeOrder(t *testing.T, tx pgx.Tx, tenant, customer int64, segment, country string) {
	t.Helper()
	ctx := context.Background()
	if _, err := tx.Exec(ctx, `UPDATE customers SET segment = $3, country_code = $4 WHERE tenant_id = $1 AND id = $2`,
		tenant, customer, segment, country); err != nil {
		t.Fatal(err)
	}
	line := events.OrderLine{LineNo: 1, Quantity: 2}
	if err := tx.QueryRow(ctx, `SELECT id, price_cents FROM products WHERE tenant_id = $1 AND status = 'active' ORDER BY id LIMIT 1`, tenant).
		Scan(&line.ProductID, &line.UnitPriceCents); err != nil {
		t.Fatal(err)
	}
	var s events.OrderState
	if err := tx.QueryRow(ctx, `INSERT INTO sales_orders (tenant_id, customer_id, total_cents) VALUES ($1, $2, $3)
		RETURNING id, version, status, currency, total_cents, placed_at`, tenant, customer, 2*line.UnitPriceCents).
		Scan(&s.ID, &s.Version, &s.Status, &s.Currency, &s.TotalCents, &s.PlacedAt); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO order_lines (tenant_id, order_id, line_no, product_id, quantity, unit_price_cents)
		VALUES ($1, $2, $3, $4, $5, $6)`, tenant, s.ID, line.LineNo, line.ProductID, line.Quantity, line.UnitPriceCents); err != nil {
		t.Fatal(err)
	}
	ev := events.OrderPlaced{OrderState: s, Customer: events.CustomerRef{ID: customer, Segment: segment, CountryCode: country},
		Lines: []events.OrderLine{line}}
	if err := events.Enqueue(ctx, tx, tenant, ev); err != nil {
		t.Fatal(err)
	}
}

// referenceProps is a Category's name, or a Customer's segment and country.
func referenceProps(t *testing.T, driver neo4j.DriverWithContext, tenant int64, label string, id int64) string {
	t.Helper()
	res, err := neo4j.ExecuteQuery(context.Background(), driver, `MATCH (n {tenant_id: $t, id: $id}) WHERE $label IN labels(n)
		RETURN CASE $label WHEN 'Category' THEN n.name ELSE n.segment + ' ' + n.country_code END AS props`,
		map[string]any{"t": tenant, "id": id, "label": label}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 1 {
		t.Fatalf("%s %d of tenant %d: %d nodes, want 1", label, id, tenant, len(res.Records))
	}
	props, _, _ := neo4j.GetRecordValue[string](res.Records[0], "props")
	return props
}

// checkTenant runs the boundary review of one tenant, with repair or not.
func checkTenant(t *testing.T, pool *pgxpool.Pool, driver neo4j.DriverWithContext, tenant int64, repair bool) *drift.Report {
	t.Helper()
	c, err := drift.New(pool, driver, drift.Config{TenantID: tenant, RecheckAfter: 100 * time.Millisecond}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	report, err := c.Run(context.Background(), repair)
	if err != nil {
		t.Fatal(err)
	}
	return report
}
