package rebuild

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap/zaptest"

	"graphsync/drift"
	"graphsync/embed"
	"graphsync/embed/stage"
	"graphsync/graphmodel"
	"graphsync/internal/stacktest"
	"graphsync/projector"
	"graphsync/workload"
)

// countingEmbedder counts the texts the real model is asked to embed.
type countingEmbedder struct {
	embed.Embedder
	texts atomic.Int64
}

func (c *countingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	c.texts.Add(int64(len(texts)))
	return c.Embedder.Embed(ctx, texts)
}

// openModel opens the default embedding model, closed when the test ends.
func openModel(t *testing.T) embed.Embedder {
	t.Helper()
	model, err := embed.Open(embed.Config{})
	if err != nil {
		t.Fatalf("open the embedding model (make model fetches it): %v", err)
	}
	t.Cleanup(func() { model.Close() })
	return model
}

// A rebuild with vectors, by snapshot then by replay, into an emptied
// graph: every product gets the vector of its text, drift (vectors
// included) is zero, and the second rebuild takes every vector from the
// cache: the model embeds nothing.
func TestRebuildWritesVectorsFromTheCache(t *testing.T) {
	pool, driver := stack(t)
	ctx := context.Background()
	model := openModel(t)
	emb := &countingEmbedder{Embedder: model}
	startSync(t, pool, driver, "sync-vectors")
	tenant := writeWorkload(t, pool, driver, workload.Config{Seed: 31, Tenants: 1, Orders: 30, Writers: 1})[0]
	waitCaughtUp(t, pool)

	for i, source := range []Source{SourceSnapshot, SourceReplay} {
		stacktest.CleanGraph(t, driver, tenant)
		sink, err := projector.New(driver, projector.Config{EmbeddingModel: emb.Model()}, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		s, err := stage.New(driver, stage.NewCache(pool), emb, stage.Config{Tenants: []int64{tenant}}, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		before := emb.texts.Load()
		b, err := New(pool, driver, Config{TenantID: tenant, Source: source, Sink: sink, Embedding: s, RecheckAfter: drift.NoRecheckWait}, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.Run(ctx)
		sink.Close()
		if err != nil {
			t.Fatal(err)
		}
		requireNoDrift(t, res, string(source)+" rebuild with vectors")
		embedded := emb.texts.Load() - before
		switch {
		case i == 0 && (embedded == 0 || res.Embedded == 0):
			t.Fatalf("%s: the first rebuild embedded nothing (%+v)", source, res)
		case i > 0 && (embedded != 0 || res.Embedded != 0 || res.EmbeddedFromCache == 0):
			t.Fatalf("%s: the second rebuild embedded %d texts (result: %d embedded, %d from the cache), want all from the cache",
				source, embedded, res.Embedded, res.EmbeddedFromCache)
		}
		requireCurrentVectors(t, driver, tenant, emb.Model(), emb.Dimension())
	}
}

// requireCurrentVectors fails unless every product of tenant holds the
// vector of its own text, by model, of dimension floats.
func requireCurrentVectors(t *testing.T, driver neo4j.DriverWithContext, tenant int64, model string, dimension int) {
	t.Helper()
	res, err := neo4j.ExecuteQuery(context.Background(), driver, `MATCH (n:Product {tenant_id: $tenant}) RETURN properties(n) AS props`,
		map[string]any{"tenant": tenant}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) == 0 {
		t.Fatal("no products")
	}
	for _, rec := range res.Records {
		props, _, _ := neo4j.GetRecordValue[map[string]any](rec, "props")
		want := graphmodel.EmbeddingHash(model, graphmodel.EmbeddedText(graphmodel.LabelProduct, props))
		vector, _ := props[graphmodel.PropEmbedding].([]any)
		if props[graphmodel.PropEmbeddingHash] != want || props[graphmodel.PropEmbeddingModel] != model || len(vector) != dimension ||
			props[graphmodel.PropEmbeddingPending] != nil {
			t.Fatalf("product %v: hash %v (want %s), model %v, %d floats, pending %v", props[graphmodel.KeyID],
				props[graphmodel.PropEmbeddingHash], want, props[graphmodel.PropEmbeddingModel], len(vector), props[graphmodel.PropEmbeddingPending])
		}
	}
}

// refusingEmbedder refuses, as a server answering 400 does, every batch
// holding the text refuse.
type refusingEmbedder struct {
	embed.Embedder
	refuse string
}

func (r *refusingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	for _, text := range texts {
		if text == r.refuse {
			return nil, errors.New("test server: embedding request refused: status 400")
		}
	}
	return r.Embedder.Embed(ctx, texts)
}

// One text the embedder refuses does not fail the rebuild: every other
// product gets its vector, the summary counts the refused ones (never their
// text), and the final drift check reports them as missing embeddings.
func TestRebuildSkipsATextTheEmbedderRefuses(t *testing.T) {
	pool, driver := stack(t)
	ctx := context.Background()
	model := openModel(t)
	startSync(t, pool, driver, "sync-refused")
	tenant := writeWorkload(t, pool, driver, workload.Config{Seed: 37, Tenants: 1, Orders: 20, Writers: 1})[0]
	waitCaughtUp(t, pool)
	res, err := neo4j.ExecuteQuery(ctx, driver, `MATCH (n:Product {tenant_id: $tenant}) RETURN properties(n) AS props`,
		map[string]any{"tenant": tenant}, neo4j.EagerResultTransformer)
	if err != nil || len(res.Records) < 3 {
		t.Fatalf("read products: %v (%d)", err, len(res.Records))
	}
	texts := map[string]int{}
	for _, rec := range res.Records {
		props, _, _ := neo4j.GetRecordValue[map[string]any](rec, "props")
		texts[graphmodel.EmbeddedText(graphmodel.LabelProduct, props)]++
	}
	props, _, _ := neo4j.GetRecordValue[map[string]any](res.Records[len(res.Records)/2], "props")
	emb := &refusingEmbedder{Embedder: model, refuse: graphmodel.EmbeddedText(graphmodel.LabelProduct, props)}
	refused := texts[emb.refuse]

	stacktest.CleanGraph(t, driver, tenant)
	sink, err := projector.New(driver, projector.Config{EmbeddingModel: emb.Model()}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	s, err := stage.New(driver, stage.NewCache(pool), emb, stage.Config{Tenants: []int64{tenant}, BatchSize: 4}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(pool, driver, Config{TenantID: tenant, Source: SourceSnapshot, Sink: sink, Embedding: s, RecheckAfter: drift.NoRecheckWait}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	result, err := b.Run(ctx)
	if err != nil {
		t.Fatalf("rebuild with one refused text: %v", err)
	}
	if result.EmbeddingRefused != refused {
		t.Fatalf("rebuild counted %d refused products, want %d", result.EmbeddingRefused, refused)
	}
	got := map[drift.Kind]int{}
	for _, c := range result.Report.Counts {
		got[c.Kind] += c.Count
	}
	if result.Report.DriftTotal != refused || got[drift.MissingEmbedding] != refused {
		t.Fatalf("final drift check: %v (total %d), want %d missing_embedding only", got, result.Report.DriftTotal, refused)
	}
	check, err := neo4j.ExecuteQuery(ctx, driver, `MATCH (n:Product {tenant_id: $tenant})
RETURN sum(CASE WHEN n.embedding IS NULL THEN 1 ELSE 0 END) AS without, sum(CASE WHEN n.embedding_pending_since IS NULL AND n.embedding_refused_hash IS NULL THEN 0 ELSE 1 END) AS pending`,
		map[string]any{"tenant": tenant}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	without, _, _ := neo4j.GetRecordValue[int64](check.Records[0], "without")
	pending, _, _ := neo4j.GetRecordValue[int64](check.Records[0], "pending")
	if without != int64(refused) || pending != int64(refused) {
		t.Fatalf("%d products without a vector and %d pending, want the %d refused", without, pending, refused)
	}
}
