// Package benchdatatest fills PostgreSQL with the business rows (and, on
// request, the processed outbox history) of a graph of a given size, for the
// drift and rebuild benchmarks, and removes such a graph from Neo4j.
package benchdatatest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/internal/stacktest"
)

// Shape is a data set: ten tenants, per tenant 12 categories and products,
// customers and orders (two lines each) in the ratio 1:1:3.
type Shape struct {
	Base                                 int64 // the first tenant id; every id derives from it
	Tenants, Products, Customers, Orders int64 // per tenant, but Tenants
}

// NewShape returns a shape of about nodes nodes with a random id base, so
// that runs sharing a Neo4j do not collide.
func NewShape(nodes int) Shape {
	per := int64(nodes / 10)
	s := Shape{Base: 1<<49 + rand.Int64N(1<<20)*100_000_000, Tenants: 10, Products: per / 5, Customers: per / 5}
	s.Orders = per - s.Products - s.Customers - 13
	return s
}

// TenantIDs are the shape's tenants.
func (s Shape) TenantIDs() []int64 {
	ids := make([]int64, s.Tenants)
	for i := range ids {
		ids[i] = s.Base + int64(i)
	}
	return ids
}

// Ids of the shape's rows, per tenant index t.
func (s Shape) CategoryID(t, c int64) int64 { return s.Base + 1000 + t*100 + c }
func (s Shape) ProductID(t, p int64) int64  { return s.Base + 10000000 + t*1000000 + p }
func (s Shape) CustomerID(t, c int64) int64 { return s.Base + 30000000 + t*1000000 + c }
func (s Shape) OrderID(t, o int64) int64    { return s.Base + 50000000 + t*1000000 + o }

// Options of Fill.
type Options struct {
	// MixedStatuses confirms or cancels two orders in three; otherwise
	// every order is placed.
	MixedStatuses bool
	// Events writes, processed, the history that implies the same graph:
	// one ProductUpdated per product, one OrderPlaced per order (requires
	// placed orders).
	Events bool
}

// Fill writes the shape's rows.
func Fill(ctx context.Context, pool *pgxpool.Pool, s Shape, o Options) error {
	if o.MixedStatuses && o.Events {
		return fmt.Errorf("benchdatatest: events imply placed orders only")
	}
	statuses := "ARRAY['placed']"
	if o.MixedStatuses {
		statuses = "ARRAY['placed', 'confirmed', 'cancelled']"
	}
	B, T, P, C, O := s.Base, s.Tenants, s.Products, s.Customers, s.Orders
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
		// The status list is one of two constants above, never input.
		{`INSERT INTO sales_orders (id, tenant_id, customer_id, status, total_cents, version, placed_at)
			SELECT $1::bigint + 50000000 + t * 1000000 + o, $1::bigint + t, $1::bigint + 30000000 + t * 1000000 + o % $3::bigint,
			       (` + statuses + `)[1 + o % cardinality(` + statuses + `)], 1000 + o, 1 + o % 3, '2026-01-01'::timestamptz + o * interval '1 minute'
			FROM generate_series(0, $2::bigint - 1) t, generate_series(0, $4::bigint - 1) o`, []any{B, T, C, O}},
		{`UPDATE sales_orders SET confirmed_at = placed_at + interval '1 hour'
			WHERE tenant_id >= $1::bigint AND tenant_id < $1::bigint + $2::bigint AND status = 'confirmed'`, []any{B, T}},
		{`UPDATE sales_orders SET cancelled_at = placed_at + interval '2 hours'
			WHERE tenant_id >= $1::bigint AND tenant_id < $1::bigint + $2::bigint AND status = 'cancelled'`, []any{B, T}},
		{`INSERT INTO order_lines (tenant_id, order_id, line_no, product_id, quantity, unit_price_cents)
			SELECT o.tenant_id, o.id, l, $1::bigint + 10000000 + (o.tenant_id - $1::bigint) * 1000000 + (o.id * 7 + l) % $3::bigint, 1 + l, 500
			FROM sales_orders o, generate_series(1, 2) l WHERE o.tenant_id >= $1::bigint AND o.tenant_id < $1::bigint + $2::bigint`, []any{B, T, P}},
	}
	if o.Events {
		stmts = append(stmts, []struct {
			sql  string
			args []any
		}{
			{`INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload, processed_at)
				SELECT p.tenant_id, 'Product', p.id, 'ProductUpdated', 1,
				       jsonb_build_object('id', p.id, 'version', p.version, 'sku', p.sku, 'name', p.name, 'description', p.description,
				         'category', jsonb_build_object('id', c.id, 'name', c.name), 'price_cents', p.price_cents,
				         'currency', p.currency, 'status', p.status), now()
				FROM products p JOIN categories c ON c.tenant_id = p.tenant_id AND c.id = p.category_id
				WHERE p.tenant_id >= $1::bigint AND p.tenant_id < $1::bigint + $2::bigint
				ORDER BY p.tenant_id, p.id`, []any{B, T}},
			{`INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload, processed_at)
				SELECT o.tenant_id, 'Order', o.id, 'OrderPlaced', 1,
				       jsonb_build_object('id', o.id, 'version', o.version, 'status', o.status, 'currency', o.currency,
				         'total_cents', o.total_cents, 'placed_at', o.placed_at,
				         'customer', jsonb_build_object('id', cu.id, 'segment', cu.segment, 'country_code', cu.country_code),
				         'lines', (SELECT jsonb_agg(jsonb_build_object('line_no', l.line_no, 'product_id', l.product_id,
				                     'quantity', l.quantity, 'unit_price_cents', l.unit_price_cents) ORDER BY l.line_no)
				                   FROM order_lines l WHERE l.tenant_id = o.tenant_id AND l.order_id = o.id)), now()
				FROM sales_orders o JOIN customers cu ON cu.tenant_id = o.tenant_id AND cu.id = o.customer_id
				WHERE o.tenant_id >= $1::bigint AND o.tenant_id < $1::bigint + $2::bigint
				ORDER BY o.tenant_id, o.id`, []any{B, T}},
		}...)
	}
	stmts = append(stmts, struct {
		sql  string
		args []any
	}{`ANALYZE`, nil})
	for _, stmt := range stmts {
		if _, err := pool.Exec(ctx, stmt.sql, stmt.args...); err != nil {
			return fmt.Errorf("benchdatatest: %w\n%s", err, stmt.sql)
		}
	}
	return nil
}

// Wipe deletes every node of tenants from the graph, in batches.
func Wipe(ctx context.Context, driver neo4j.DriverWithContext, tenants []int64) error {
	session := driver.NewSession(ctx, neo4j.SessionConfig{})
	defer session.Close(ctx)
	for _, label := range []string{"Order", "Customer", "Product", "Category", "DeletedProduct", "Tenant"} {
		result, err := session.Run(ctx, `UNWIND $tenants AS t MATCH (n:`+label+` {tenant_id: t})
			CALL (n) { DETACH DELETE n } IN TRANSACTIONS OF 10000 ROWS`, map[string]any{"tenants": tenants})
		if err == nil {
			_, err = result.Consume(ctx)
		}
		if err != nil {
			return fmt.Errorf("benchdatatest: wipe the graph: %w", err)
		}
	}
	return nil
}

// Binary builds bin/graphsync into a temporary folder, for benchmarks that
// measure the command as a process.
func Binary(b *testing.B) string {
	b.Helper()
	binary := filepath.Join(b.TempDir(), "graphsync")
	build := exec.Command("go", "build", "-o", binary, "./cmd/graphsync")
	build.Dir = stacktest.RepoRoot(b)
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build graphsync: %v\n%s", err, out)
	}
	return binary
}

// Sizes parses a comma-separated list of graph sizes (a benchmark's flag
// called name), each at least 1000 nodes.
func Sizes(b *testing.B, name, list string) []int {
	b.Helper()
	var sizes []int
	for _, field := range strings.Split(list, ",") {
		size, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || size < 1000 {
			b.Fatalf("-%s: %q is not a size of at least 1000", name, field)
		}
		sizes = append(sizes, size)
	}
	return sizes
}

// PeakRSS runs cmd and returns its peak resident set size in MiB: the
// high-water mark (VmHWM) of the process after it exec'd, read from /proc
// while it runs. The rusage of a child the Go runtime started counts the
// parent's memory too (the child shares it until exec), so it is not used.
func PeakRSS(cmd *exec.Cmd) (float64, []byte, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return 0, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	var peakKiB int64
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	for {
		if body, err := os.ReadFile(status); err == nil {
			for _, line := range strings.Split(string(body), "\n") {
				if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					if kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64); err == nil && kib > peakKiB {
						peakKiB = kib
					}
				}
			}
		}
		select {
		case err := <-done:
			return float64(peakKiB) / 1024, out.Bytes(), err
		case <-ticker.C:
		}
	}
}

// Heap returns the initial and the largest heap of the Neo4j under test, in
// bytes, for a benchmark's log: Neo4j's garbage collections stop every
// transaction, and how often and how long depends on the heap (docs/adr/0013,
// stop 37: started at 256m, G1 kept it near 300 MiB, with a concurrent cycle
// and its Remark pause every 8 to 15 s).
func Heap(ctx context.Context, driver neo4j.DriverWithContext) (initial, largest int64, err error) {
	res, err := neo4j.ExecuteQuery(ctx, driver,
		"CALL dbms.queryJmx('java.lang:type=Memory') YIELD attributes "+
			"RETURN attributes.HeapMemoryUsage.value.properties.init AS initial, attributes.HeapMemoryUsage.value.properties.max AS largest",
		nil, neo4j.EagerResultTransformer)
	if err != nil {
		return 0, 0, fmt.Errorf("benchdatatest: read Neo4j's heap size: %w", err)
	}
	if len(res.Records) != 1 {
		return 0, 0, fmt.Errorf("benchdatatest: Neo4j reports no heap size")
	}
	initial, initialNil, err := neo4j.GetRecordValue[int64](res.Records[0], "initial")
	if err != nil {
		return 0, 0, fmt.Errorf("benchdatatest: Neo4j's initial heap size: %w", err)
	}
	largest, largestNil, err := neo4j.GetRecordValue[int64](res.Records[0], "largest")
	if err != nil {
		return 0, 0, fmt.Errorf("benchdatatest: Neo4j's largest heap size: %w", err)
	}
	if initialNil || largestNil {
		return 0, 0, fmt.Errorf("benchdatatest: Neo4j reports no heap size")
	}
	return initial, largest, nil
}

// PageCache returns the page cache size the Neo4j under test was given, for
// a benchmark's log: a page cache smaller than the store makes every write
// path read pages back from the file system, the guarded ones most (the
// rebuild benchmark at 1M moved from 112-138 s to 97 s for the snapshot when
// 128m became 2g; scripts/neo4j.sh sizes it).
func PageCache(ctx context.Context, driver neo4j.DriverWithContext) (string, error) {
	res, err := neo4j.ExecuteQuery(ctx, driver, "SHOW SETTINGS YIELD name, value WHERE name = 'server.memory.pagecache.size' RETURN value",
		nil, neo4j.EagerResultTransformer)
	if err != nil {
		return "", fmt.Errorf("benchdatatest: read Neo4j's page cache size: %w", err)
	}
	if len(res.Records) != 1 {
		return "", fmt.Errorf("benchdatatest: Neo4j reports no page cache size")
	}
	value, _, err := neo4j.GetRecordValue[string](res.Records[0], "value")
	return value, err
}
