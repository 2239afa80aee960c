package rebuild

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/internal/stacktest"
	"graphsync/relay"
	gsql "graphsync/sql"
	"graphsync/workload"
)

// productOfFirstOrder is the product the tenant's first order names first.
func productOfFirstOrder(t *testing.T, pool *pgxpool.Pool, tenant int64) int64 {
	t.Helper()
	return count(t, pool, `SELECT (payload->'lines'->0->>'product_id')::bigint FROM outbox_messages
		WHERE tenant_id = $1 AND event_type = 'OrderPlaced' ORDER BY id LIMIT 1`, tenant)
}

// productEvents are the outbox ids of a product's events.
func productEvents(t *testing.T, pool *pgxpool.Pool, tenant, product int64) []int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id FROM outbox_messages
		WHERE tenant_id = $1 AND aggregate_type = 'Product' AND aggregate_id = $2 ORDER BY id`, tenant, product)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil || len(ids) == 0 {
		t.Fatalf("events of product %d: %v (%d found)", product, err, len(ids))
	}
	return ids
}

// deadLetter moves the events ids to the DLQ, as the relay does with an
// event it gives up on.
func deadLetter(t *testing.T, pool *pgxpool.Pool, ids []int64) {
	t.Helper()
	reasons := make([]string, len(ids))
	for i := range reasons {
		reasons[i] = "moved by the test"
	}
	if _, err := pool.Exec(context.Background(), gsql.Query("OutboxMoveToDLQ"), ids, reasons, nil); err != nil {
		t.Fatal(err)
	}
}

// deadLetterAndRetry moves the events ids to the DLQ and back (`dlq retry`),
// which gives them a new created_xid: they come after every event written
// before the retry.
func deadLetterAndRetry(t *testing.T, pool *pgxpool.Pool, tenant int64, ids []int64) {
	t.Helper()
	deadLetter(t, pool, ids)
	if back, err := relay.DLQRetry(context.Background(), pool, tenant, ids); err != nil || len(back) != len(ids) {
		t.Fatalf("dlq retry of %v: %v (%d back)", ids, err, len(back))
	}
}

// An event that comes before what it needs in the history's order waits
// within the replay and applies once that is written, as sync defers it:
// here every event of a product that orders name went to the DLQ and back
// (`dlq retry` gives them a new created_xid, so they come after those
// orders). The replay, in one chunk and in chunks of 7, gives the graph sync
// gave, every event applied and nothing for the sweep to repair. Before,
// the orders were counted as not applied and left to the sweep.
func TestReplayAppliesEventsThatComeBeforeWhatTheyNeed(t *testing.T) {
	pool, driver := stack(t)
	tenant := writeWorkload(t, pool, driver, workload.Config{Seed: 31, Tenants: 1, Orders: 40, Writers: 1})[0]
	product := productOfFirstOrder(t, pool, tenant)
	ids := productEvents(t, pool, tenant, product)
	deadLetterAndRetry(t, pool, tenant, ids)
	if n := count(t, pool, `SELECT count(*) FROM outbox_messages o WHERE tenant_id = $1 AND event_type = 'OrderPlaced'
		AND payload->'lines' @> jsonb_build_array(jsonb_build_object('product_id', $2::bigint))
		AND created_xid < (SELECT min(created_xid) FROM outbox_messages WHERE id = ANY($3))`, tenant, product, ids); n == 0 {
		t.Fatalf("no order names product %d before its events in the history's order", product)
	}
	startSync(t, pool, driver, "sync-wait")
	waitCaughtUp(t, pool)
	synced := dump(t, driver, tenant)

	for _, chunk := range []int{0, 7} {
		stacktest.CleanGraph(t, driver, tenant)
		res := rebuildScope(t, pool, driver, Config{TenantID: tenant, Source: SourceReplay, ChunkSize: chunk})
		if res.NotApplied != 0 || len(res.Repaired) > 0 {
			t.Errorf("chunks of %d: %d events not applied (%s), the sweep repaired %v; want every event replayed",
				chunk, res.NotApplied, res.FirstRejection, res.Repaired)
		}
		requireNoDrift(t, res, "replay")
		if got := dump(t, driver, tenant); full(got) != full(synced) {
			t.Errorf("chunks of %d: the replayed graph differs from the synced one\nsynced:\n%s\nreplayed:\n%s", chunk, full(synced), full(got))
		}
	}
}

// The running sync writes a batch to Neo4j, then marks its rows processed:
// a graph lost in between held a product's events that are still pending,
// while the orders naming it, applied and marked by another batch, are
// processed. Sync never delivers the product's events again (it applied
// them), so the replay applies pending rows too: the orders find their
// product, every event applies, and the sweep has nothing to repair.
// Before, the replay passed the pending rows over and the orders waited
// for a product nobody would write.
func TestReplayAppliesWhatSyncHasNotMarkedYet(t *testing.T) {
	pool, driver := stack(t)
	tenant := writeWorkload(t, pool, driver, workload.Config{Seed: 37, Tenants: 1, Orders: 40, Writers: 1})[0]
	product := productOfFirstOrder(t, pool, tenant)
	// What sync had marked when Neo4j lost the graph: all but the product.
	if _, err := pool.Exec(context.Background(), `UPDATE outbox_messages SET processed_at = now()
		WHERE tenant_id = $1 AND NOT (aggregate_type = 'Product' AND aggregate_id = $2)`, tenant, product); err != nil {
		t.Fatal(err)
	}
	pending := count(t, pool, `SELECT count(*) FROM outbox_messages WHERE tenant_id = $1 AND processed_at IS NULL`, tenant)
	if pending == 0 {
		t.Fatal("no pending row")
	}

	res := rebuildScope(t, pool, driver, Config{TenantID: tenant, Source: SourceReplay, ChunkSize: 9})
	if res.NotApplied != 0 || len(res.Repaired) > 0 {
		t.Errorf("%d events not applied (%s), the sweep repaired %v; want every event replayed", res.NotApplied, res.FirstRejection, res.Repaired)
	}
	requireNoDrift(t, res, "replay beside pending rows")
	orders := count(t, pool, `SELECT count(DISTINCT order_id) FROM order_lines WHERE tenant_id = $1 AND product_id = $2`, tenant, product)
	got := countGraph(t, driver, `MATCH (o:Order {tenant_id: $t})-[:CONTAINS]->(p:Product {tenant_id: $t, id: $p}) RETURN count(DISTINCT o) AS n`,
		map[string]any{"t": tenant, "p": product})
	if orders == 0 || got != orders {
		t.Errorf("%d orders contain product %d in the graph, %d in PostgreSQL", got, product, orders)
	}
}

// countGraph runs a query returning one count, n.
func countGraph(t *testing.T, driver neo4j.DriverWithContext, query string, params map[string]any) int64 {
	t.Helper()
	res, err := neo4j.ExecuteQuery(context.Background(), driver, query, params, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	n, _, err := neo4j.GetRecordValue[int64](res.Records[0], "n")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A replay that could not apply an order's OrderPlaced (dead-lettered)
// while the order's next event is pending writes the order from that event,
// without customer and lines. The sweep's check must not take the pending
// event as the explanation of the missing PLACED and CONTAINS edges (it
// writes the Order node alone): it repairs them from the rows. Before, the
// rebuild ended with no drift and the order without its edges, and sync
// then applied the pending event on top.
func TestRebuildRepairsEdgesAPendingEventDoesNotWrite(t *testing.T) {
	pool, driver := stack(t)
	ctx := context.Background()
	tenant := writeWorkload(t, pool, driver, workload.Config{Seed: 41, Tenants: 1, Orders: 30, Writers: 1})[0]
	order := count(t, pool, `SELECT aggregate_id FROM outbox_messages WHERE tenant_id = $1 AND event_type = 'OrderConfirmed' ORDER BY id LIMIT 1`, tenant)
	placed := count(t, pool, `SELECT id FROM outbox_messages WHERE tenant_id = $1 AND event_type = 'OrderPlaced' AND aggregate_id = $2`, tenant, order)
	deadLetter(t, pool, []int64{placed})
	// Sync applied and marked everything but the order's later events.
	if _, err := pool.Exec(ctx, `UPDATE outbox_messages SET processed_at = now()
		WHERE tenant_id = $1 AND NOT (aggregate_type = 'Order' AND aggregate_id = $2)`, tenant, order); err != nil {
		t.Fatal(err)
	}

	res := rebuildScope(t, pool, driver, Config{TenantID: tenant, Source: SourceReplay})
	requireNoDrift(t, res, "rebuild beside the order's pending event")
	lines := count(t, pool, `SELECT count(*) FROM order_lines WHERE tenant_id = $1 AND order_id = $2`, tenant, order)
	p := map[string]any{"t": tenant, "o": order}
	contains := countGraph(t, driver, `MATCH (o:Order {tenant_id: $t, id: $o})-[r:CONTAINS]->(:Product) RETURN count(r) AS n`, p)
	customer := countGraph(t, driver, `MATCH (:Customer {tenant_id: $t})-[r:PLACED]->(o:Order {tenant_id: $t, id: $o}) RETURN count(r) AS n`, p)
	if contains != lines || customer != 1 {
		t.Errorf("order %d after the rebuild: %d CONTAINS (rows: %d lines), %d PLACED; the sweep left the edges a pending OrderConfirmed does not write",
			order, contains, lines, customer)
	}
}
