package rebuild

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"graphsync/embed"
	"graphsync/embed/stage"
	"graphsync/graphmodel"
	"graphsync/internal/benchdatatest"
	"graphsync/internal/stacktest"
	"graphsync/projector"
)

var embedBenchNodes = flag.Int("rebuild-embed-nodes", 20000, "BenchmarkRebuildEmbeddings: graph size in nodes (a fifth of them products)")

// BenchmarkRebuildEmbeddings: a rebuild into an emptied graph with
// vectors from a warm cache against the same run's rebuild with
// --embedder none (target: at most 1.3 times as long). The cache is warmed
// by one rebuild with embeddings first (untimed for the ratio); the timed
// rebuild with embeddings must embed nothing. Rebuilds without vectors run
// before and after it; the faster counts.
//
//	. .local/services.env && go test -run '^$' -bench RebuildEmbeddings -benchtime 1x ./rebuild -args -rebuild-embed-nodes=20000
func BenchmarkRebuildEmbeddings(b *testing.B) {
	ctx := context.Background()
	_, pool := stacktest.FreshDatabase(b)
	driver := stacktest.Neo4j(b)
	if err := projector.EnsureSchema(ctx, driver); err != nil {
		b.Fatal(err)
	}
	embedder, err := embed.Open(embed.Config{})
	if err != nil {
		b.Fatalf("open the embedding model (make model): %v", err)
	}
	defer embedder.Close()
	if err := stage.EnsureVectorIndex(ctx, driver, "", graphmodel.Default, embedder.Dimension()); err != nil {
		b.Fatal(err)
	}
	shape := benchdatatest.NewShape(*embedBenchNodes)
	tenants := shape.TenantIDs()
	b.Cleanup(func() { wipe(b, driver, tenants) })
	if err := benchdatatest.Fill(ctx, pool, shape, benchdatatest.Options{Events: true}); err != nil {
		b.Fatal(err)
	}
	rebuildOnce := func(withVectors bool) *Result {
		wipe(b, driver, tenants)
		pcfg := projector.Config{}
		cfg := Config{TenantID: 0, ChunkSize: DefaultChunkSize, RecheckAfter: time.Millisecond}
		// Where the time goes: each phase's share, logged.
		phase, phaseStart := "", time.Now()
		var phases []string
		endPhase := func() {
			if phase != "" {
				phases = append(phases, fmt.Sprintf("%s %s", phase, time.Since(phaseStart).Round(time.Millisecond)))
			}
		}
		cfg.Progress = func(p Progress) {
			if p.Phase != phase {
				endPhase()
				phase, phaseStart = p.Phase, time.Now()
			}
		}
		defer func() {
			endPhase()
			b.Logf("vectors %t: %s", withVectors, strings.Join(phases, ", "))
		}()
		if withVectors {
			pcfg.EmbeddingModel = embedder.Model()
			s, err := stage.New(driver, stage.NewCache(pool), embedder, stage.Config{BatchSize: 256}, zap.NewNop())
			if err != nil {
				b.Fatal(err)
			}
			cfg.Embedding = s
		}
		sink, err := projector.New(driver, pcfg, zap.NewNop())
		if err != nil {
			b.Fatal(err)
		}
		defer sink.Close()
		cfg.Sink = sink
		rb, err := New(pool, driver, cfg, zap.NewNop())
		if err != nil {
			b.Fatal(err)
		}
		res, err := rb.Run(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if res.Report.DriftTotal != 0 {
			b.Fatalf("drift %d after the rebuild: %+v", res.Report.DriftTotal, res.Report.Counts)
		}
		return res
	}
	cold := rebuildOnce(true)
	b.Logf("%d nodes (%d products): cold rebuild with vectors %s, %d texts embedded, %d from the cache",
		*embedBenchNodes, shape.Products*shape.Tenants, cold.Took.Round(time.Millisecond), cold.Embedded, cold.EmbeddedFromCache)
	b.ResetTimer()
	for range b.N {
		none := rebuildOnce(false).Took
		warm := rebuildOnce(true)
		none = min(none, rebuildOnce(false).Took)
		if warm.Embedded != 0 {
			b.Fatalf("the warm rebuild embedded %d texts", warm.Embedded)
		}
		ratio := warm.Took.Seconds() / none.Seconds()
		b.Logf("%d nodes: rebuild --embedder none %s, with vectors from a warm cache %s (%d texts from the cache): %.2fx",
			*embedBenchNodes, none.Round(time.Millisecond), warm.Took.Round(time.Millisecond), warm.EmbeddedFromCache, ratio)
		b.ReportMetric(ratio, "warm/none")
	}
}
