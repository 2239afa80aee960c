package retrieve

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/graphmodel"
	"graphsync/internal/stacktest"
	"graphsync/projector"
)

var (
	benchNodes     = flag.Int("context-nodes", 1_000_000, "BenchmarkContext: nodes of the graph it builds")
	benchQuestions = flag.Int("context-questions", 100, "BenchmarkContext: questions asked")
)

// Vocabulary of the benchmark's products, close to the demo workload's.
var (
	benchAdjectives = []string{"Classic", "Compact", "Deluxe", "Eco", "Ergonomic", "Heavy-Duty", "Portable", "Smart", "Vintage", "Wireless",
		"Bamboo", "Cordless", "Foldable", "Insulated", "Modular", "Rugged", "Solar", "Stainless", "Travel", "Waterproof"}
	benchNouns = []string{"Blender", "Backpack", "Desk Lamp", "Headphones", "Kettle", "Notebook", "Planter", "Puzzle", "Speaker", "Tent",
		"Toolkit", "Yoga Mat", "Grinder", "Teapot", "Jacket", "Drone", "Camera", "Bottle", "Charger", "Keyboard"}
	benchBits = []string{"Built to last.", "Ships in recycled packaging.", "Two-year warranty.", "Customer favourite.",
		"Now with a longer cable.", "Dishwasher safe.", "Fits in a carry-on.", "Made from 60% recycled material."}
)

// BenchmarkContext builds a graph of -context-nodes nodes over ten tenants
// (products, customers, orders with Zipf-skewed lines, categories), asks
// -context-questions questions and reports p50/p99 of the whole context
// (seed + expansion) beside the bare tenant-filtered fulltext query, both
// measured in the same run, alternating. Run it with `make bench-context`.
func BenchmarkContext(b *testing.B) {
	ctx := context.Background()
	driver := stacktest.Neo4j(b)
	if err := projector.EnsureSchema(ctx, driver); err != nil {
		b.Fatal(err)
	}
	const tenants = 10
	base := 1<<53 + rand.Int64N(1<<40)*10_000_000
	tenantIDs := make([]int64, tenants)
	for i := range tenantIDs {
		tenantIDs[i] = 1<<51 + rand.Int64N(1<<40)
	}
	b.Cleanup(func() { dropBenchGraph(b, driver, tenantIDs) })
	start := time.Now()
	nodes, rels := buildBenchGraph(b, driver, tenantIDs, base, *benchNodes)
	b.Logf("graph: %d nodes, %d relationships in %s", nodes, rels, time.Since(start).Round(time.Second))

	r := retriever(b, driver, Config{})
	productLabel, _ := graphmodel.Default.Label(graphmodel.LabelProduct)
	productText := graphmodel.Default.Fulltext[0]
	rng := rand.New(rand.NewPCG(7, 11))
	questions := make([]string, *benchQuestions)
	for i := range questions {
		questions[i] = fmt.Sprintf("%s %s %s", strings.ToLower(benchAdjectives[rng.IntN(len(benchAdjectives))]),
			strings.ToLower(benchNouns[rng.IntN(len(benchNouns))]), strings.ToLower(benchNouns[rng.IntN(len(benchNouns))]))
	}
	// Warm both paths once, so the first question does not pay for the page cache.
	for _, q := range questions[:min(5, len(questions))] {
		if _, err := r.Retrieve(ctx, tenantIDs[0], q); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		var full, bare []time.Duration
		for i, q := range questions {
			tenant := tenantIDs[i%tenants]
			query, _ := LuceneQuery(q)
			t0 := time.Now()
			if _, err := neo4j.ExecuteQuery(ctx, driver, fulltextSeedQuery(productLabel), map[string]any{
				"index": graphmodel.FulltextProductText, "query": TenantLuceneQuery(productText, tenant, query), "tenant": tenant, "topK": int64(5)},
				neo4j.EagerResultTransformer, neo4j.ExecuteQueryWithReadersRouting()); err != nil {
				b.Fatal(err)
			}
			bare = append(bare, time.Since(t0))
			t0 = time.Now()
			res, err := r.Retrieve(ctx, tenant, q)
			if err != nil {
				b.Fatal(err)
			}
			full = append(full, time.Since(t0))
			if len(res.Items) == 0 {
				b.Fatalf("question %q found nothing in tenant %d", q, tenant)
			}
		}
		fp50, fp99 := percentiles(full)
		bp50, bp99 := percentiles(bare)
		b.ReportMetric(float64(fp50.Microseconds())/1000, "context-p50-ms")
		b.ReportMetric(float64(fp99.Microseconds())/1000, "context-p99-ms")
		b.ReportMetric(float64(bp50.Microseconds())/1000, "fulltext-p50-ms")
		b.ReportMetric(float64(bp99.Microseconds())/1000, "fulltext-p99-ms")
		b.Logf("%d nodes, %d questions: context p50 %s p99 %s; bare fulltext query p50 %s p99 %s; ratio p50 %.2f, p99 %.2f",
			nodes, len(questions), fp50, fp99, bp50, bp99, float64(fp50)/float64(bp50), float64(fp99)/float64(bp99))
	}
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	sorted := append([]time.Duration(nil), d...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	at := func(q float64) time.Duration { return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))] }
	return at(0.50), at(0.99)
}

// buildBenchGraph writes the benchmark graph straight into Neo4j with
// batched, parameterised CREATEs: the benchmark is about reading, and
// projecting a million events would take longer than the measurement.
func buildBenchGraph(b *testing.B, driver neo4j.DriverWithContext, tenantIDs []int64, base int64, totalNodes int) (nodes, rels int) {
	ctx := context.Background()
	perTenant := totalNodes / len(tenantIDs)
	products, customers := perTenant/5, perTenant/5
	orders := perTenant - products - customers - 12 - 1
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.2, 4, uint64(products-1))
	run := func(query string, rows []map[string]any) {
		b.Helper()
		for len(rows) > 0 {
			n := min(len(rows), 10_000)
			if _, err := neo4j.ExecuteQuery(ctx, driver, query, map[string]any{"rows": rows[:n]}, neo4j.EagerResultTransformer); err != nil {
				b.Fatalf("build the benchmark graph: %v", err)
			}
			rows = rows[n:]
		}
	}
	next := base
	for _, tenant := range tenantIDs {
		run(`UNWIND $rows AS r CREATE (:Tenant {tenant_id: r.t, id: r.t})`, []map[string]any{{"t": tenant}})
		categoryIDs := make([]int64, 12)
		var rows []map[string]any
		for i := range categoryIDs {
			next++
			categoryIDs[i] = next
			rows = append(rows, map[string]any{"t": tenant, "id": next, "name": fmt.Sprintf("Category %d", i)})
		}
		run(`UNWIND $rows AS r CREATE (:Category {tenant_id: r.t, id: r.id, name: r.name})`, rows)
		productIDs := make([]int64, products)
		rows = rows[:0]
		for i := range productIDs {
			next++
			productIDs[i] = next
			rows = append(rows, map[string]any{"t": tenant, "id": next, "c": categoryIDs[rng.IntN(len(categoryIDs))],
				"name": benchAdjectives[rng.IntN(len(benchAdjectives))] + " " + benchNouns[rng.IntN(len(benchNouns))],
				"d":    benchBits[rng.IntN(len(benchBits))] + " " + benchBits[rng.IntN(len(benchBits))], "p": int64(100 + rng.IntN(30_000))})
		}
		run(`UNWIND $rows AS r MATCH (c:Category {tenant_id: r.t, id: r.c})
			CREATE (p:Product {tenant_id: r.t, tenant_key: 't' + toString(r.t), id: r.id, sku: 'SKU-' + r.id, name: r.name, description: r.d, price_cents: r.p,
				currency: 'EUR', status: 'active', sync_version: 1})-[:IN_CATEGORY {tenant_id: r.t}]->(c)`, rows)
		customerIDs := make([]int64, customers)
		rows = rows[:0]
		segments, countries := []string{"retail", "retail", "business", "vip"}, []string{"DE", "FR", "NL", "GB", "US", "ES", "IT", "PL"}
		for i := range customerIDs {
			next++
			customerIDs[i] = next
			rows = append(rows, map[string]any{"t": tenant, "id": next, "s": segments[rng.IntN(len(segments))], "c": countries[rng.IntN(len(countries))]})
		}
		run(`UNWIND $rows AS r CREATE (:Customer {tenant_id: r.t, id: r.id, segment: r.s, country_code: r.c})`, rows)
		rows = rows[:0]
		var lines []map[string]any
		statuses := []string{"placed", "confirmed", "shipped", "shipped", "cancelled"}
		for range orders {
			next++
			rows = append(rows, map[string]any{"t": tenant, "id": next, "c": customerIDs[rng.IntN(len(customerIDs))], "s": statuses[rng.IntN(len(statuses))]})
			for line := range 1 + rng.IntN(3) {
				lines = append(lines, map[string]any{"t": tenant, "o": next, "p": productIDs[zipf.Uint64()], "n": int64(line + 1), "q": int64(1 + rng.IntN(4))})
			}
		}
		run(`UNWIND $rows AS r MATCH (c:Customer {tenant_id: r.t, id: r.c})
			CREATE (c)-[:PLACED {tenant_id: r.t}]->(:Order {tenant_id: r.t, id: r.id, status: r.s, currency: 'EUR', total_cents: 1000, sync_version: 1})`, rows)
		run(`UNWIND $rows AS r MATCH (o:Order {tenant_id: r.t, id: r.o}) MATCH (p:Product {tenant_id: r.t, id: r.p})
			CREATE (o)-[:CONTAINS {tenant_id: r.t, line_no: r.n, quantity: r.q, unit_price_cents: 1000}]->(p)`, lines)
		nodes += 1 + len(categoryIDs) + products + customers + orders
		rels += products + orders + len(lines)
	}
	if _, err := neo4j.ExecuteQuery(ctx, driver, "CALL db.awaitIndexes(600)", nil, neo4j.EagerResultTransformer); err != nil {
		b.Fatal(err)
	}
	return nodes, rels
}

// dropBenchGraph deletes the benchmark's tenants label by label, in batches
// that use the key index.
func dropBenchGraph(b *testing.B, driver neo4j.DriverWithContext, tenantIDs []int64) {
	ctx := context.Background()
	session := driver.NewSession(ctx, neo4j.SessionConfig{})
	defer session.Close(ctx)
	for _, label := range []string{"Order", "Customer", "Product", "Category", "Tenant"} {
		for _, tenant := range tenantIDs {
			// CALL ... IN TRANSACTIONS runs only in an auto-commit transaction.
			result, err := session.Run(ctx, `MATCH (n:`+label+` {tenant_id: $t})
				CALL (n) { DETACH DELETE n } IN TRANSACTIONS OF 10000 ROWS`, map[string]any{"t": tenant})
			if err == nil {
				_, err = result.Consume(ctx)
			}
			if err != nil {
				b.Errorf("drop the benchmark graph: %v", err)
				return
			}
		}
	}
}
