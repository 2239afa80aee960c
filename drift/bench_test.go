package drift

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

	"graphsync/graphmodel"
	"graphsync/internal/teststack"
	"graphsync/projector"
)

var benchSizes = flag.String("drift-nodes", "100000,1000000", "BenchmarkDrift: graph sizes in nodes, comma-separated")

// BenchmarkDrift builds, for each size, business tables of ten tenants in
// PostgreSQL and the graph they imply in Neo4j (through the row projection),
// then measures in the same run: the time to read both sides once (every
// label's rows and nodes, chunked, no comparison), a drift check with no
// drift, a drift check with 100 planted differences, and the peak RSS of
// `graphsync drift` as a process. Run it with `make bench-drift`.
func BenchmarkDrift(b *testing.B) {
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
			b.Fatalf("-drift-nodes: %q is not a size of at least 1000", field)
		}
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			rss = append(rss, benchDriftSize(b, binary, size))
		})
	}
	b.Logf("peak RSS of graphsync drift: %s", strings.Join(rss, ", "))
}

func benchDriftSize(b *testing.B, binary string, size int) string {
	ctx := context.Background()
	pgURL, pool := teststack.FreshDatabase(b)
	driver := teststack.Neo4j(b)
	if err := projector.EnsureSchema(ctx, driver); err != nil {
		b.Fatal(err)
	}
	const tenants = 10
	base := 1<<49 + rand.Int64N(1<<20)*100_000_000
	tenantIDs := make([]int64, tenants)
	for i := range tenantIDs {
		tenantIDs[i] = base + int64(i)
	}
	b.Cleanup(func() { dropTenants(b, driver, tenantIDs) })
	start := time.Now()
	fillTables(b, pool, base, tenants, size)
	b.Logf("%d nodes: tables filled in %s", size, time.Since(start).Round(time.Second))
	start = time.Now()
	buildGraph(b, pool, driver, tenantIDs)
	b.Logf("%d nodes: graph built in %s", size, time.Since(start).Round(time.Second))

	checker, err := New(pool, driver, Config{RecheckAfter: time.Millisecond, MaxExamples: 3}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var read, clean, planted time.Duration
	for range b.N {
		start = time.Now()
		nodes := readBothSides(b, checker, tenantIDs)
		read = time.Since(start)
		start = time.Now()
		report, err := checker.Run(ctx, false)
		if err != nil {
			b.Fatal(err)
		}
		clean = time.Since(start)
		if n := driftOf(report, tenantIDs); n != 0 {
			b.Fatalf("%d drift in the benchmark's own tenants before planting", n)
		}
		b.StopTimer()
		if _, err := neo4j.ExecuteQuery(ctx, driver, `UNWIND $tenants AS t
			MATCH (p:Product {tenant_id: t}) WITH p ORDER BY p.id LIMIT 100 SET p.name = 'planted'`,
			map[string]any{"tenants": tenantIDs}, neo4j.EagerResultTransformer); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start = time.Now()
		report, err = checker.Run(ctx, false)
		if err != nil {
			b.Fatal(err)
		}
		planted = time.Since(start)
		if n := driftOf(report, tenantIDs); n != 100 {
			b.Fatalf("found %d of 100 planted differences", n)
		}
		b.Logf("%d nodes (%d read): read both sides once %s; drift check %s (%.2fx), with 100 planted differences %s (%.2fx)",
			size, nodes, read.Round(time.Millisecond), clean.Round(time.Millisecond), clean.Seconds()/read.Seconds(),
			planted.Round(time.Millisecond), planted.Seconds()/read.Seconds())
	}
	b.ReportMetric(read.Seconds(), "read-s")
	b.ReportMetric(clean.Seconds(), "drift-s")
	b.ReportMetric(clean.Seconds()/read.Seconds(), "drift/read")
	b.ReportMetric(planted.Seconds()/read.Seconds(), "planted/read")

	// Peak RSS of the command as a user runs it.
	cmd := exec.Command(binary, "drift", "--format", "json", "--out", os.DevNull, "--recheck-after", "1ms", "--log-level", "error")
	cmd.Env = append(os.Environ(), "GRAPHSYNC_PG_URL="+pgURL, "GRAPHSYNC_NEO4J_URI="+teststack.Neo4jURI(b))
	if out, err := cmd.CombinedOutput(); err != nil && cmd.ProcessState.ExitCode() != 1 {
		b.Fatalf("graphsync drift: %v\n%s", err, out)
	}
	maxRSS := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB on Linux
	b.ReportMetric(float64(maxRSS)/1024, "peak-rss-MiB")
	return fmt.Sprintf("%d nodes %.1f MiB", size, float64(maxRSS)/1024)
}

func driftOf(r *Report, tenants []int64) int {
	n := 0
	for _, c := range r.Counts {
		for _, t := range tenants {
			if c.TenantID == t {
				n += c.Count
			}
		}
	}
	return n
}

// fillTables writes the business rows of about size nodes: per tenant 12
// categories, and products, customers and orders (two lines each) in the
// ratio 1:1:3.
func fillTables(b *testing.B, pool *pgxpool.Pool, base int64, tenants, size int) {
	per := size / tenants
	products, customers := per/5, per/5
	orders := per - products - customers - 13
	B, T, P, C, O := base, int64(tenants), int64(products), int64(customers), int64(orders)
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
			       (ARRAY['placed', 'confirmed', 'cancelled'])[1 + o % 3], 1000 + o, 1 + o % 3, '2026-01-01'::timestamptz + o * interval '1 minute'
			FROM generate_series(0, $2::bigint - 1) t, generate_series(0, $4::bigint - 1) o`, []any{B, T, C, O}},
		{`UPDATE sales_orders SET confirmed_at = placed_at + interval '1 hour'
			WHERE tenant_id >= $1::bigint AND tenant_id < $1::bigint + $2::bigint AND status = 'confirmed'`, []any{B, T}},
		{`UPDATE sales_orders SET cancelled_at = placed_at + interval '2 hours'
			WHERE tenant_id >= $1::bigint AND tenant_id < $1::bigint + $2::bigint AND status = 'cancelled'`, []any{B, T}},
		{`INSERT INTO order_lines (tenant_id, order_id, line_no, product_id, quantity, unit_price_cents)
			SELECT o.tenant_id, o.id, l, $1::bigint + 10000000 + (o.tenant_id - $1::bigint) * 1000000 + (o.id * 7 + l) % $3::bigint, 1 + l, 500
			FROM sales_orders o, generate_series(1, 2) l WHERE o.tenant_id >= $1::bigint AND o.tenant_id < $1::bigint + $2::bigint`, []any{B, T, P}},
		{`ANALYZE`, nil},
	}
	for _, stmt := range stmts {
		if _, err := pool.Exec(context.Background(), stmt.sql, stmt.args...); err != nil {
			b.Fatalf("fill tables: %v\n%s", err, stmt.sql)
		}
	}
}

// buildGraph writes the graph the rows imply, with the repair statements.
func buildGraph(b *testing.B, pool *pgxpool.Pool, driver neo4j.DriverWithContext, tenants []int64) {
	ctx := context.Background()
	checker, err := New(pool, driver, Config{ChunkSize: 5000}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	r := &run{c: checker, model: graphmodel.Default}
	write := func(what, text string, params map[string]any) error {
		_, err := neo4j.ExecuteQuery(ctx, driver, text, params, neo4j.EagerResultTransformer)
		return err
	}
	all := sample{share: 1000}
	for _, tenant := range tenants {
		for _, label := range r.comparedLabels() {
			after := int64(0)
			for {
				rows, err := rowsChunk(ctx, pool, r.model, label.Name, tenant, after, 5000, all)
				if err != nil {
					b.Fatal(err)
				}
				if len(rows) == 0 {
					break
				}
				after = rows[len(rows)-1].id
				upserts := map[nodeKey]*node{}
				for i := range rows {
					if rows[i].required {
						upserts[nodeKey{tenant, label.Name, rows[i].id}] = &rows[i]
					}
				}
				if err := r.reproject(upserts, write); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}

// readBothSides reads every label's rows and nodes once, chunked like the
// check, and compares nothing: the floor a check is measured against.
func readBothSides(b *testing.B, c *Checker, tenants []int64) int {
	ctx := context.Background()
	r := &run{c: c, model: graphmodel.Default}
	all := sample{share: 1000}
	n := 0
	for _, tenant := range tenants {
		for _, label := range r.comparedLabels() {
			for _, side := range []func(after int64) ([]node, error){
				func(after int64) ([]node, error) {
					return rowsChunk(ctx, c.pool, r.model, label.Name, tenant, after, c.cfg.ChunkSize, all)
				},
				func(after int64) ([]node, error) {
					return graphChunk(ctx, c.driver, "", r.model, label.Name, tenant, after, c.cfg.ChunkSize, all)
				},
			} {
				after := int64(0)
				for {
					chunk, err := side(after)
					if err != nil {
						b.Fatal(err)
					}
					if len(chunk) == 0 {
						break
					}
					n += len(chunk)
					after = chunk[len(chunk)-1].id
				}
			}
		}
	}
	return n
}

func dropTenants(b *testing.B, driver neo4j.DriverWithContext, tenants []int64) {
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
			b.Errorf("drop the benchmark graph: %v", err)
			return
		}
	}
}
