package rebuild

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap"

	"graphsync/internal/teststack"
	"graphsync/projector"
	"graphsync/relay"
)

var benchSizes = flag.String("rebuild-nodes", "100000,1000000", "BenchmarkRebuild: graph sizes in nodes, comma-separated")

// BenchmarkRebuild fills, for each size, business tables of ten tenants and
// a processed outbox history that implies the same graph (one
// ProductUpdated per product, one OrderPlaced per order), then measures in
// the same run, each into an emptied graph:
//   - the ceiling: the same nodes and relationships written by plain
//     UNWIND ... MERGE statements, 2000 rows a transaction;
//   - graphsync rebuild --source snapshot and --source replay: the base
//     phase (the ceiling's work) and the whole command (sweep and check
//     included);
//   - the peak RSS of `graphsync rebuild` as a process.
//
// Run it with `make bench-rebuild`.
func BenchmarkRebuild(b *testing.B) {
	binary := filepath.Join(b.TempDir(), "graphsync")
	build := exec.Command("go", "build", "-o", binary, "./cmd/graphsync")
	build.Dir = teststack.RepoRoot(b)
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build graphsync: %v\n%s", err, out)
	}
	var rss []string
	for _, field := range strings.Split(*benchSizes, ",") {
		size, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || size < 1000 {
			b.Fatalf("-rebuild-nodes: %q is not a size of at least 1000", field)
		}
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			rss = append(rss, benchRebuildSize(b, binary, size))
		})
	}
	b.Logf("peak RSS of graphsync rebuild: %s", strings.Join(rss, ", "))
}

type benchShape struct {
	base                                 int64
	tenants, products, customers, orders int64
}

func (s benchShape) tenantIDs() []int64 {
	ids := make([]int64, s.tenants)
	for i := range ids {
		ids[i] = s.base + int64(i)
	}
	return ids
}

func benchRebuildSize(b *testing.B, binary string, size int) string {
	ctx := context.Background()
	pgURL, pool := teststack.FreshDatabase(b)
	driver := teststack.Neo4j(b)
	if err := projector.EnsureSchema(ctx, driver); err != nil {
		b.Fatal(err)
	}
	per := int64(size / 10)
	shape := benchShape{base: 1<<49 + rand.Int64N(1<<20)*100_000_000, tenants: 10, products: per / 5, customers: per / 5}
	shape.orders = per - shape.products - shape.customers - 13
	tenants := shape.tenantIDs()
	b.Cleanup(func() { wipe(b, driver, tenants) })
	start := time.Now()
	fillBench(b, pool, shape)
	b.Logf("%d nodes: tables and outbox filled in %s", size, time.Since(start).Round(time.Second))
	// Leftovers of other runs in a shared Neo4j would be swept by the
	// first whole-graph rebuild; sweep them now, untimed.
	clean, err := New(pool, driver, Config{Sink: relay.SinkFunc(nil), RecheckAfter: time.Millisecond}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := clean.checker.Run(ctx, true); err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	var ceiling time.Duration
	results := map[Source]*Result{}
	for range b.N {
		wipe(b, driver, tenants)
		start = time.Now()
		writeCeiling(b, driver, shape)
		ceiling = time.Since(start)
		for _, source := range []Source{SourceSnapshot, SourceReplay} {
			wipe(b, driver, tenants)
			sink, err := projector.New(driver, projector.Config{}, zap.NewNop())
			if err != nil {
				b.Fatal(err)
			}
			rb, err := New(pool, driver, Config{Source: source, Sink: sink, RecheckAfter: time.Millisecond}, zap.NewNop())
			if err != nil {
				b.Fatal(err)
			}
			res, err := rb.Run(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if res.Report.DriftTotal != 0 || res.NotApplied != 0 {
				b.Fatalf("%s: drift %d, %d events not applied (%s)", source, res.Report.DriftTotal, res.NotApplied, res.FirstRejection)
			}
			results[source] = res
		}
	}
	b.StopTimer()
	for _, source := range []Source{SourceSnapshot, SourceReplay} {
		res := results[source]
		b.Logf("%d nodes: %s base %s (%.2fx the ceiling's rate), whole command %s (%.2fx); %d %s read",
			size, source, res.BaseTook.Round(time.Millisecond), ceiling.Seconds()/res.BaseTook.Seconds(),
			res.Took.Round(time.Millisecond), ceiling.Seconds()/res.Took.Seconds(), res.Done, map[Source]string{SourceSnapshot: "rows", SourceReplay: "events"}[source])
		b.ReportMetric(ceiling.Seconds()/res.BaseTook.Seconds(), string(source)+"-base/ceiling")
		b.ReportMetric(ceiling.Seconds()/res.Took.Seconds(), string(source)+"-total/ceiling")
	}
	b.Logf("%d nodes: ceiling (plain UNWIND ... MERGE of the same graph) %s", size, ceiling.Round(time.Millisecond))
	b.ReportMetric(ceiling.Seconds(), "ceiling-s")

	// Peak RSS of the command as a user runs it, into an emptied graph.
	wipe(b, driver, tenants)
	cmd := exec.Command(binary, "rebuild", "--source", "snapshot", "--recheck-after", "1ms", "--log-level", "error", "--progress", "log")
	cmd.Env = append(os.Environ(), "GRAPHSYNC_PG_URL="+pgURL, "GRAPHSYNC_NEO4J_URI="+teststack.Neo4jURI(b))
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("graphsync rebuild: %v\n%s", err, out)
	}
	maxRSS := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB on Linux
	b.ReportMetric(float64(maxRSS)/1024, "peak-rss-MiB")
	return fmt.Sprintf("%d nodes %.1f MiB", size, float64(maxRSS)/1024)
}

// fillBench writes the business rows (per tenant 12 categories, products,
// customers and placed orders of two lines) and, processed, the events that
// imply the same graph.
func fillBench(b *testing.B, pool *pgxpool.Pool, s benchShape) {
	B, T, P, C, O := s.base, s.tenants, s.products, s.customers, s.orders
	stmts := []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO tenants (id, name) SELECT $1::bigint + t, 'bench ' || t FROM generate_series(0, $2::bigint - 1) t`, []any{B, T}},
		{`INSERT INTO categories (id, tenant_id, name) SELECT $1::bigint + 1000 + t * 100 + c, $1::bigint + t, 'Category ' || c
			FROM generate_series(0, $2::bigint - 1) t, generate_series(0, 11) c`, []any{B, T}},
		{`INSERT INTO products (id, tenant_id, sku, name, description, category_id, price_cents, version)
			SELECT $1::bigint + 10000000 + t * 1000000 + p, $1::bigint + t, 'SKU-' || p, 'Product ' || p, 'Built to last, number ' || p,
			       $1::bigint + 1000 + t * 100 + p % 12, 100 + p, 1 + p % 3
			FROM generate_series(0, $2::bigint - 1) t, generate_series(0, $3::bigint - 1) p`, []any{B, T, P}},
		{`INSERT INTO customers (id, tenant_id, email, full_name, segment, country_code)
			SELECT $1::bigint + 30000000 + t * 1000000 + c, $1::bigint + t, 'c' || c || '@example.com', 'Customer ' || c,
			       (ARRAY['retail', 'business', 'vip'])[1 + c % 3], (ARRAY['DE', 'FR', 'US'])[1 + c % 3]
			FROM generate_series(0, $2::bigint - 1) t, generate_series(0, $3::bigint - 1) c`, []any{B, T, C}},
		{`INSERT INTO sales_orders (id, tenant_id, customer_id, status, total_cents, version, placed_at)
			SELECT $1::bigint + 50000000 + t * 1000000 + o, $1::bigint + t, $1::bigint + 30000000 + t * 1000000 + o % $3::bigint,
			       'placed', 1000 + o, 1 + o % 3, '2026-01-01'::timestamptz + o * interval '1 minute'
			FROM generate_series(0, $2::bigint - 1) t, generate_series(0, $4::bigint - 1) o`, []any{B, T, C, O}},
		{`INSERT INTO order_lines (tenant_id, order_id, line_no, product_id, quantity, unit_price_cents)
			SELECT o.tenant_id, o.id, l, $1::bigint + 10000000 + (o.tenant_id - $1::bigint) * 1000000 + (o.id * 7 + l) % $2::bigint, 1 + l, 500
			FROM sales_orders o, generate_series(1, 2) l`, []any{B, P}},
		{`INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload, processed_at)
			SELECT p.tenant_id, 'Product', p.id, 'ProductUpdated', 1,
			       jsonb_build_object('id', p.id, 'version', p.version, 'sku', p.sku, 'name', p.name, 'description', p.description,
			         'category', jsonb_build_object('id', c.id, 'name', c.name), 'price_cents', p.price_cents,
			         'currency', p.currency, 'status', p.status), now()
			FROM products p JOIN categories c ON c.tenant_id = p.tenant_id AND c.id = p.category_id
			ORDER BY p.tenant_id, p.id`, nil},
		{`INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload, processed_at)
			SELECT o.tenant_id, 'Order', o.id, 'OrderPlaced', 1,
			       jsonb_build_object('id', o.id, 'version', o.version, 'status', o.status, 'currency', o.currency,
			         'total_cents', o.total_cents, 'placed_at', o.placed_at,
			         'customer', jsonb_build_object('id', cu.id, 'segment', cu.segment, 'country_code', cu.country_code),
			         'lines', (SELECT jsonb_agg(jsonb_build_object('line_no', l.line_no, 'product_id', l.product_id,
			                     'quantity', l.quantity, 'unit_price_cents', l.unit_price_cents) ORDER BY l.line_no)
			                   FROM order_lines l WHERE l.tenant_id = o.tenant_id AND l.order_id = o.id)), now()
			FROM sales_orders o JOIN customers cu ON cu.tenant_id = o.tenant_id AND cu.id = o.customer_id
			ORDER BY o.tenant_id, o.id`, nil},
		{`ANALYZE`, nil},
	}
	for _, stmt := range stmts {
		if _, err := pool.Exec(context.Background(), stmt.sql, stmt.args...); err != nil {
			b.Fatalf("fill: %v\n%s", err, stmt.sql)
		}
	}
}

// writeCeiling writes the graph fillBench implies with the plainest
// statements: UNWIND ... MERGE ... SET n += props, 2000 rows a transaction.
func writeCeiling(b *testing.B, driver neo4j.DriverWithContext, s benchShape) {
	ctx := context.Background()
	const chunk = 2000
	write := func(text string, rows []map[string]any) {
		for len(rows) > 0 {
			n := min(chunk, len(rows))
			if _, err := neo4j.ExecuteQuery(ctx, driver, text, map[string]any{"rows": rows[:n]}, neo4j.EagerResultTransformer); err != nil {
				b.Fatal(err)
			}
			rows = rows[n:]
		}
	}
	node := func(label string) string {
		return "UNWIND $rows AS row MERGE (n:" + label + " {tenant_id: row.tenant_id, id: row.id}) SET n += row.props"
	}
	placed := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for t := range s.tenants {
		tenant := s.base + t
		var tenants, cats, custs, prods, orders, inCat, placedBy, contains []map[string]any
		tenants = append(tenants, map[string]any{"tenant_id": tenant, "id": tenant, "props": map[string]any{}})
		for c := range int64(12) {
			cats = append(cats, map[string]any{"tenant_id": tenant, "id": s.base + 1000 + t*100 + c, "props": map[string]any{"name": fmt.Sprintf("Category %d", c)}})
		}
		for c := range s.customers {
			custs = append(custs, map[string]any{"tenant_id": tenant, "id": s.base + 30000000 + t*1000000 + c,
				"props": map[string]any{"segment": []string{"retail", "business", "vip"}[c%3], "country_code": []string{"DE", "FR", "US"}[c%3]}})
		}
		for p := range s.products {
			id := s.base + 10000000 + t*1000000 + p
			prods = append(prods, map[string]any{"tenant_id": tenant, "id": id, "props": map[string]any{"sku": fmt.Sprintf("SKU-%d", p),
				"name": fmt.Sprintf("Product %d", p), "description": fmt.Sprintf("Built to last, number %d", p), "price_cents": 100 + p,
				"currency": "EUR", "status": "active", "sync_version": 1 + p%3}})
			inCat = append(inCat, map[string]any{"tenant_id": tenant, "from": id, "to": s.base + 1000 + t*100 + p%12})
		}
		for o := range s.orders {
			id := s.base + 50000000 + t*1000000 + o
			orders = append(orders, map[string]any{"tenant_id": tenant, "id": id, "props": map[string]any{"status": "placed", "currency": "EUR",
				"total_cents": 1000 + o, "placed_at": placed.Add(time.Duration(o) * time.Minute), "sync_version": 1 + o%3}})
			placedBy = append(placedBy, map[string]any{"tenant_id": tenant, "from": s.base + 30000000 + t*1000000 + o%s.customers, "to": id})
			for l := int64(1); l <= 2; l++ {
				contains = append(contains, map[string]any{"tenant_id": tenant, "from": id, "to": s.base + 10000000 + t*1000000 + (id*7+l)%s.products,
					"line_no": l, "quantity": 1 + l, "unit_price_cents": 500})
			}
		}
		write(node("Tenant"), tenants)
		write(node("Category"), cats)
		write(node("Customer"), custs)
		write(node("Product"), prods)
		write(node("Order"), orders)
		write(`UNWIND $rows AS row MATCH (a:Product {tenant_id: row.tenant_id, id: row.from}) MATCH (b:Category {tenant_id: row.tenant_id, id: row.to})
			MERGE (a)-[r:IN_CATEGORY {tenant_id: row.tenant_id}]->(b)`, inCat)
		write(`UNWIND $rows AS row MATCH (a:Customer {tenant_id: row.tenant_id, id: row.from}) MATCH (b:Order {tenant_id: row.tenant_id, id: row.to})
			MERGE (a)-[r:PLACED {tenant_id: row.tenant_id}]->(b)`, placedBy)
		write(`UNWIND $rows AS row MATCH (a:Order {tenant_id: row.tenant_id, id: row.from}) MATCH (b:Product {tenant_id: row.tenant_id, id: row.to})
			MERGE (a)-[r:CONTAINS {tenant_id: row.tenant_id, line_no: row.line_no}]->(b) SET r.quantity = row.quantity, r.unit_price_cents = row.unit_price_cents`, contains)
	}
}

// wipe deletes the benchmark's tenants from the graph.
func wipe(b *testing.B, driver neo4j.DriverWithContext, tenants []int64) {
	ctx := context.Background()
	session := driver.NewSession(ctx, neo4j.SessionConfig{})
	defer session.Close(ctx)
	for _, label := range []string{"Order", "Customer", "Product", "Category", "DeletedProduct", "Tenant"} {
		result, err := session.Run(ctx, `UNWIND $tenants AS t MATCH (n:`+label+` {tenant_id: t})
			CALL (n) { DETACH DELETE n } IN TRANSACTIONS OF 10000 ROWS`, map[string]any{"tenants": tenants})
		if err == nil {
			_, err = result.Consume(ctx)
		}
		if err != nil {
			b.Fatalf("wipe the benchmark graph: %v", err)
		}
	}
}
