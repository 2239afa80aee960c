package drift

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap"

	"graphsync/graphmodel"
	"graphsync/internal/benchdatatest"
	"graphsync/internal/stacktest"
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
	binary := benchdatatest.Binary(b)
	var rss []string
	for _, size := range benchdatatest.Sizes(b, "drift-nodes", *benchSizes) {
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			rss = append(rss, benchDriftSize(b, binary, size))
		})
	}
	b.Logf("peak RSS of graphsync drift: %s", strings.Join(rss, ", "))
}

func benchDriftSize(b *testing.B, binary string, size int) string {
	ctx := context.Background()
	pgURL, pool := stacktest.FreshDatabase(b)
	driver := stacktest.Neo4j(b)
	if err := projector.EnsureSchema(ctx, driver); err != nil {
		b.Fatal(err)
	}
	shape := benchdatatest.NewShape(size)
	tenantIDs := shape.TenantIDs()
	b.Cleanup(func() {
		if err := benchdatatest.Wipe(context.Background(), driver, tenantIDs); err != nil {
			b.Error(err)
		}
	})
	start := time.Now()
	if err := benchdatatest.Fill(ctx, pool, shape, benchdatatest.Options{MixedStatuses: true}); err != nil {
		b.Fatal(err)
	}
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
	cmd.Env = append(os.Environ(), "GRAPHSYNC_PG_URL="+pgURL, "GRAPHSYNC_NEO4J_URI="+stacktest.Neo4jURI(b))
	peak, out, err := benchdatatest.PeakRSS(cmd)
	if err != nil && cmd.ProcessState.ExitCode() != 1 {
		b.Fatalf("graphsync drift: %v\n%s", err, out)
	}
	b.ReportMetric(peak, "peak-rss-MiB")
	return fmt.Sprintf("%d nodes %.1f MiB", size, peak)
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

// buildGraph writes the graph the rows imply, with the repair statements.
func buildGraph(b *testing.B, pool *pgxpool.Pool, driver neo4j.DriverWithContext, tenants []int64) {
	ctx := context.Background()
	checker, err := New(pool, driver, Config{ChunkSize: 5000}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	r := &run{c: checker, model: graphmodel.Default}
	write := func(what string, texts []string, params map[string]any) error {
		_, err := r.writeTransaction(ctx, texts, params)
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
