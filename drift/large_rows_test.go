package drift

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap/zaptest"

	"graphsync/cypher"
	"graphsync/workload"
)

// The row path writes a large order within the statement bound sync's
// batches keep (cypher.StatementRows, ADR 0026; lowered here to 40 rows): a
// drift repair of an order of over twice the bound in lines beside the other
// orders of its tenant (read 20,000 keys at a time, so one transaction holds
// them all) and a snapshot chunk of every order of the tenant send no UNWIND
// list longer than the bound, and the graph gets every line. Before, each
// sent the order's CONTAINS rows as one list.
func TestRowPathWritesLargeOrdersWithinTheStatementBound(t *testing.T) {
	pool, driver, tenants := syncedWorkload(t, workload.Config{Seed: 53, Tenants: 2, Orders: 30, Writers: 2, DeleteEvery: -1}, "sync-large-rows")
	ctx := context.Background()
	tenant := tenants[0]
	var order, other, products int64
	if err := pool.QueryRow(ctx, `SELECT min(id), max(id) FROM sales_orders WHERE tenant_id = $1`, tenant).Scan(&order, &other); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM products WHERE tenant_id = $1 AND status = 'active'`, tenant).Scan(&products); err != nil || products < 10 {
		t.Fatalf("%d active products of tenant %d (%v), want 10 or more", products, tenant, err)
	}
	// The lines name every product in turn: Neo4j merges a line's edge
	// among those between its order and product.
	// The bound lowered, so that an order of a hundred lines is large
	// (the 5,000-line order of rebuild's TestLargeOrderIsSyncedAndRebuiltWhole
	// takes Neo4j 20 s here); a real 50,000-line order splits the same way.
	const bound = 40
	statementRows = bound
	t.Cleanup(func() { statementRows = cypher.StatementRows })
	added := 2*bound + 7
	if _, err := pool.Exec(ctx, `INSERT INTO order_lines (tenant_id, order_id, line_no, product_id, quantity, unit_price_cents)
		SELECT $1, $2, 1000 + g, p.id, 1, 100 FROM generate_series(1, $3::int) g
		JOIN (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM products WHERE tenant_id = $1 AND status = 'active') p ON p.k = g % $4`,
		tenant, order, added, products); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE sales_orders SET version = version + 1 WHERE tenant_id = $1 AND id = $2`, tenant, order); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	longest := 0
	run := txRun
	txRun = func(ctx context.Context, tx neo4j.ManagedTransaction, text string, params map[string]any) (neo4j.ResultWithContext, error) {
		if rows, ok := params["rows"].([]map[string]any); ok {
			mu.Lock()
			longest = max(longest, len(rows))
			mu.Unlock()
		}
		return run(ctx, tx, text, params)
	}
	t.Cleanup(func() { txRun = run })
	requireLines := func(what string) {
		t.Helper()
		for _, id := range []int64{order, other} {
			var lines int64
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM order_lines WHERE tenant_id = $1 AND order_id = $2`, tenant, id).Scan(&lines); err != nil {
				t.Fatal(err)
			}
			res, err := neo4j.ExecuteQuery(ctx, driver, `MATCH (:Order {tenant_id: $t, id: $o})-[c:CONTAINS]->(:Product {tenant_id: $t}) RETURN count(c) AS n`,
				map[string]any{"t": tenant, "o": id}, neo4j.EagerResultTransformer)
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Records[0].AsMap()["n"]; got != lines {
				t.Errorf("%s: order %d has %v CONTAINS edges, %d lines in PostgreSQL", what, id, got, lines)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if longest == 0 || longest > bound {
			t.Errorf("%s: the longest UNWIND list sent %d rows, want 1 to %d", what, longest, bound)
		}
		longest = 0
	}

	c, err := New(pool, driver, Config{TenantID: tenant, ChunkSize: 20000, RecheckAfter: 100 * time.Millisecond}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(ctx, true); err != nil {
		t.Fatal(err)
	}
	requireLines("repair")

	if _, err := neo4j.ExecuteQuery(ctx, driver, `MATCH (:Order {tenant_id: $t})-[c:CONTAINS]->() DELETE c`,
		map[string]any{"t": tenant}, neo4j.EagerResultTransformer); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReprojectChunk(ctx, tenant, "Order", 0, 2000); err != nil {
		t.Fatal(err)
	}
	requireLines("snapshot chunk")
	if r := check(t, pool, driver, tenant, false); r.DriftTotal != 0 {
		t.Errorf("drift after the snapshot chunk: %d", r.DriftTotal)
	}
}
