package rebuild

import (
	"context"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/events"
	"graphsync/graphmodel"
	"graphsync/internal/stacktest"
	"graphsync/workload"
)

// largeOrderLines is a real B2B order's size: about 370 kB of payload,
// over the old defaults (256 KiB, 1,000 lines) that dead-lettered it.
const largeOrderLines = 5000

// A valid order of 5,000 lines, written between small orders of other
// aggregates and tenants so that sync takes it in a batch with them, reaches
// the graph whole (every CONTAINS edge, the order's version) with the
// default limits and nothing in the DLQ; a replay and a snapshot of its
// tenant give the same graph (issue 37, item 7).
func TestLargeOrderIsSyncedAndRebuiltWhole(t *testing.T) {
	ctx := context.Background()
	pool, driver := stack(t)
	tenants := writeWorkload(t, pool, driver, workload.Config{Seed: 37, Tenants: 2, Orders: 60, Writers: 2, DeleteEvery: -1})
	target := tenants[0]
	orderID := placeLargeOrder(t, pool, target, largeOrderLines)
	writeWorkload(t, pool, driver, workload.Config{Seed: 38, Tenants: 1, Orders: 40, Writers: 1, DeleteEvery: -1})
	// Sync starts with every event pending, so its claims mix the large
	// order with the small ones around it.
	startSync(t, pool, driver, "sync-large")
	waitCaughtUp(t, pool)

	if dead := count(t, pool, `SELECT count(*) FROM outbox_messages_dlq`); dead != 0 {
		var why string
		_ = pool.QueryRow(ctx, `SELECT coalesce(last_error, '') FROM outbox_messages_dlq LIMIT 1`).Scan(&why)
		t.Fatalf("%d events in the DLQ, want none: %s", dead, why)
	}
	version := count(t, pool, `SELECT version FROM sales_orders WHERE tenant_id = $1 AND id = $2`, target, orderID)
	requireWholeOrder(t, driver, target, orderID, version, "sync")
	synced := dump(t, driver, target)

	stacktest.CleanGraph(t, driver, target)
	res := rebuildScope(t, pool, driver, Config{TenantID: target, Source: SourceReplay})
	if res.NotApplied != 0 {
		t.Errorf("replay: %d events not applied (%s); want all applied", res.NotApplied, res.FirstRejection)
	}
	requireNoDrift(t, res, "replay into an empty graph")
	requireWholeOrder(t, driver, target, orderID, version, "replay")
	if got := dump(t, driver, target); full(got) != full(synced) {
		t.Errorf("replay: the rebuilt graph differs from the synced one\nsynced:\n%s\nrebuilt:\n%s", full(synced), full(got))
	}

	stacktest.CleanGraph(t, driver, target)
	res = rebuildScope(t, pool, driver, Config{TenantID: target, Source: SourceSnapshot})
	requireNoDrift(t, res, "snapshot into an empty graph")
	requireWholeOrder(t, driver, target, orderID, version, "snapshot")
	if got := dump(t, driver, target); withoutTombstones(got) != withoutTombstones(synced) {
		t.Errorf("snapshot: the rebuilt graph differs from the synced one\nsynced:\n%s\nrebuilt:\n%s", synced, got)
	}
}

// placeLargeOrder writes an order of n lines and its OrderPlaced in one
// transaction, as a producer does, and returns the order's id.
func placeLargeOrder(t *testing.T, pool *pgxpool.Pool, tenant int64, n int) int64 {
	t.Helper()
	ctx := context.Background()
	var customer events.CustomerRef
	var country *string
	if err := pool.QueryRow(ctx, `SELECT id, segment, country_code FROM customers WHERE tenant_id = $1 ORDER BY id LIMIT 1`, tenant).
		Scan(&customer.ID, &customer.Segment, &country); err != nil {
		t.Fatal(err)
	}
	if country != nil {
		customer.CountryCode = *country
	}
	rows, err := pool.Query(ctx, `SELECT id, price_cents, currency FROM products WHERE tenant_id = $1 AND status = 'active' ORDER BY id LIMIT 50`, tenant)
	if err != nil {
		t.Fatal(err)
	}
	type product struct {
		id, price int64
		currency  string
	}
	var products []product
	for rows.Next() {
		var p product
		if err := rows.Scan(&p.id, &p.price, &p.currency); err != nil {
			t.Fatal(err)
		}
		products = append(products, p)
	}
	if err := rows.Err(); err != nil || len(products) == 0 {
		t.Fatalf("no active product of tenant %d to order (%v)", tenant, err)
	}
	lines := make([]events.OrderLine, n)
	var lineNos, quantities []int32
	var productIDs, prices []int64
	var total int64
	for i := range lines {
		p := products[i%len(products)]
		lines[i] = events.OrderLine{LineNo: int32(i + 1), ProductID: p.id, Quantity: int32(1 + i%7), UnitPriceCents: p.price}
		lineNos, productIDs = append(lineNos, lines[i].LineNo), append(productIDs, p.id)
		quantities, prices = append(quantities, lines[i].Quantity), append(prices, p.price)
		total += int64(lines[i].Quantity) * p.price
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT set_config('role', 'graphsync_app', true), set_config('app.tenant_id', $1, true)`,
		strconv.FormatInt(tenant, 10)); err != nil {
		t.Fatal(err)
	}
	var state events.OrderState
	if err := tx.QueryRow(ctx, `INSERT INTO sales_orders (tenant_id, customer_id, currency, total_cents) VALUES ($1, $2, $3, $4)
		RETURNING id, version, status, currency, total_cents, placed_at`, tenant, customer.ID, products[0].currency, total).
		Scan(&state.ID, &state.Version, &state.Status, &state.Currency, &state.TotalCents, &state.PlacedAt); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO order_lines (tenant_id, order_id, line_no, product_id, quantity, unit_price_cents)
		SELECT $1, $2, x.line_no, x.product_id, x.quantity, x.unit_price_cents
		FROM unnest($3::int[], $4::bigint[], $5::int[], $6::bigint[]) AS x (line_no, product_id, quantity, unit_price_cents)`,
		tenant, state.ID, lineNos, productIDs, quantities, prices); err != nil {
		t.Fatal(err)
	}
	if err := events.Enqueue(ctx, tx, tenant, events.OrderPlaced{OrderState: state, Customer: customer, Lines: lines}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var payloadBytes int64
	if err := pool.QueryRow(ctx, `SELECT octet_length(payload::text) FROM outbox_messages WHERE tenant_id = $1 AND aggregate_id = $2`,
		tenant, state.ID).Scan(&payloadBytes); err != nil {
		t.Fatal(err)
	}
	if payloadBytes <= 256<<10 {
		t.Fatalf("the order's payload is %d bytes: the test wants one over the old 256 KiB default", payloadBytes)
	}
	return state.ID
}

// requireWholeOrder checks the graph holds the order with every line and
// the version PostgreSQL has.
func requireWholeOrder(t *testing.T, driver neo4j.DriverWithContext, tenant, orderID, version int64, what string) {
	t.Helper()
	result, err := neo4j.ExecuteQuery(context.Background(), driver, `
		MATCH (o:Order {tenant_id: $tenant, id: $id})
		OPTIONAL MATCH (o)-[c:CONTAINS]->(:Product {tenant_id: $tenant})
		RETURN o[$versionKey] AS version, count(c) AS lines, count(DISTINCT c.line_no) AS lineNos`,
		map[string]any{"tenant": tenant, "id": orderID, "versionKey": graphmodel.PropVersion}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	if len(result.Records) == 0 {
		t.Fatalf("%s: order %d of tenant %d is not in the graph", what, orderID, tenant)
	}
	rec := result.Records[0].AsMap()
	if rec["version"] != version || rec["lines"] != int64(largeOrderLines) || rec["lineNos"] != int64(largeOrderLines) {
		t.Fatalf("%s: order %d has version %v and %v CONTAINS edges (%v line numbers); want version %d and %d",
			what, orderID, rec["version"], rec["lines"], rec["lineNos"], version, largeOrderLines)
	}
}
