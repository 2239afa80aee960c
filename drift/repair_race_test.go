package drift

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap/zaptest"

	"graphsync/events"
	"graphsync/workload"
)

// A missing Customer or Category node is repaired under a guard, as every
// other repair is: when sync applies an event that writes the node (an
// OrderPlaced with the customer's newer segment, a ProductUpdated with the
// category's new name) after drift's last read and before its repair, the
// repair, which holds the older rows, leaves the event's state alone. The
// interleaving is forced: the events are committed and applied between the
// second look and the repair.
func TestRepairOfAMissingReferenceNodeLeavesALaterEvent(t *testing.T) {
	pool, driver, tenants := syncedWorkload(t, workload.Config{Seed: 23, Tenants: 1, Orders: 20, DeleteEvery: -1}, "sync-missing-reference")
	tenant := tenants[0]
	ctx := context.Background()
	customer := ids(t, pool, `SELECT customer_id FROM sales_orders WHERE tenant_id = $1 ORDER BY id LIMIT 1`, tenant)[0]
	product := ids(t, pool, `SELECT id FROM products WHERE tenant_id = $1 AND category_id IS NOT NULL AND status = 'active' ORDER BY id LIMIT 1`, tenant)[0]
	category := ids(t, pool, `SELECT category_id FROM products WHERE id = $1`, product)[0]
	cypherExec(t, driver, `MATCH (n:Customer {tenant_id: $t, id: $id}) DETACH DELETE n`, map[string]any{"t": tenant, "id": customer})
	cypherExec(t, driver, `MATCH (n:Category {tenant_id: $t, id: $id}) DETACH DELETE n`, map[string]any{"t": tenant, "id": category})

	c, err := New(pool, driver, Config{TenantID: tenant, RecheckAfter: 100 * time.Millisecond}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	c.beforeRepair = func() {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // committed below
		placeOrderAs(t, tx, tenant, customer, product, "newer segment")
		renameCategoryOf(t, tx, tenant, product, "newer name")
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		waitCaughtUp(t, pool)
	}
	report, err := c.Run(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	_ = report.WriteMarkdown(&md, 0)
	missing := 0
	for _, f := range report.Examples[MissingNode] {
		if (f.Label == "Customer" && f.ID == customer) || (f.Label == "Category" && f.ID == category) {
			missing++
		}
	}
	if missing != 2 {
		t.Fatalf("the missing customer and category were not both found:\n%s", md.String())
	}
	res, err := neo4j.ExecuteQuery(ctx, driver, `MATCH (cu:Customer {tenant_id: $t, id: $customer}), (ca:Category {tenant_id: $t, id: $category})
		RETURN cu.segment AS segment, ca.name AS name`, map[string]any{"t": tenant, "customer": customer, "category": category}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 1 {
		t.Fatalf("%d customer and category pairs after the repair, want 1", len(res.Records))
	}
	segment, _, _ := neo4j.GetRecordValue[string](res.Records[0], "segment")
	name, _, _ := neo4j.GetRecordValue[string](res.Records[0], "name")
	if segment != "newer segment" || name != "newer name" {
		t.Errorf("the repair overwrote the events sync applied before it: segment %q, category %q, want \"newer segment\", \"newer name\"\n%s",
			segment, name, md.String())
	}
	if after := check(t, pool, driver, tenant, false); after.DriftTotal != 0 {
		md.Reset()
		_ = after.WriteMarkdown(&md, 0)
		t.Errorf("drift %d after the repair:\n%s", after.DriftTotal, md.String())
	}
}

// placeOrderAs gives a customer a new segment and places an order of one
// line of product for it, with its OrderPlaced event, in tx.
func placeOrderAs(t *testing.T, tx pgx.Tx, tenant, customer, product int64, segment string) {
	t.Helper()
	ctx := context.Background()
	var country pgtype.Text
	if err := tx.QueryRow(ctx, `UPDATE customers SET segment = $3 WHERE tenant_id = $1 AND id = $2 RETURNING country_code`,
		tenant, customer, segment).Scan(&country); err != nil {
		t.Fatal(err)
	}
	line := events.OrderLine{LineNo: 1, ProductID: product, Quantity: 1}
	if err := tx.QueryRow(ctx, `SELECT price_cents FROM products WHERE id = $1`, product).Scan(&line.UnitPriceCents); err != nil {
		t.Fatal(err)
	}
	var s events.OrderState
	if err := tx.QueryRow(ctx, `INSERT INTO sales_orders (tenant_id, customer_id, total_cents) VALUES ($1, $2, $3)
		RETURNING id, version, status, currency, total_cents, placed_at`, tenant, customer, line.UnitPriceCents).
		Scan(&s.ID, &s.Version, &s.Status, &s.Currency, &s.TotalCents, &s.PlacedAt); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO order_lines (tenant_id, order_id, line_no, product_id, quantity, unit_price_cents)
		VALUES ($1, $2, $3, $4, $5, $6)`, tenant, s.ID, line.LineNo, line.ProductID, line.Quantity, line.UnitPriceCents); err != nil {
		t.Fatal(err)
	}
	ev := events.OrderPlaced{OrderState: s, Customer: events.CustomerRef{ID: customer, Segment: segment, CountryCode: country.String},
		Lines: []events.OrderLine{line}}
	if err := events.Enqueue(ctx, tx, tenant, ev); err != nil {
		t.Fatal(err)
	}
}

// renameCategoryOf renames product's category and writes the product's
// ProductUpdated event (which carries the category's name), in tx.
func renameCategoryOf(t *testing.T, tx pgx.Tx, tenant, product int64, name string) {
	t.Helper()
	ctx := context.Background()
	var s events.ProductState
	category := &events.CategoryRef{Name: name}
	err := tx.QueryRow(ctx, `WITH c AS (
		  UPDATE categories SET name = $3 WHERE tenant_id = $1 AND id = (SELECT category_id FROM products WHERE id = $2) RETURNING id),
		p AS (UPDATE products SET version = version + 1, updated_at = now() WHERE tenant_id = $1 AND id = $2
		  RETURNING id, version, sku, name, description, price_cents, currency, status)
		SELECT p.id, p.version, p.sku, p.name, p.description, c.id, p.price_cents, p.currency, p.status FROM p, c`, tenant, product, name).
		Scan(&s.ID, &s.Version, &s.SKU, &s.Name, &s.Description, &category.ID, &s.PriceCents, &s.Currency, &s.Status)
	if err != nil {
		t.Fatal(err)
	}
	s.Category = category
	if err := events.Enqueue(ctx, tx, tenant, events.ProductUpdated{ProductState: s}); err != nil {
		t.Fatal(err)
	}
}
