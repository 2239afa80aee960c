package retrieve

import (
	"context"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"graphsync/embed"
	"graphsync/embed/stage"
	"graphsync/graphmodel"
	"graphsync/internal/stacktest"
	"graphsync/projector"
)

var (
	embedderOnce sync.Once
	embedderErr  error
	testEmbedder embed.Embedder
)

// realEmbedder opens the local model make fetches (make model), once per
// test binary. Without it the test fails: retrieval quality is measured
// with the real model or not at all.
func realEmbedder(t testing.TB) embed.Embedder {
	t.Helper()
	embedderOnce.Do(func() { testEmbedder, embedderErr = embed.Open(embed.Config{}) })
	if embedderErr != nil {
		t.Fatalf("open the embedding model (run make model): %v", embedderErr)
	}
	return testEmbedder
}

// newEmbeddedTenantGraph is newTenantGraph with a projector that embeds
// with e's model, as sync does with --embedder: product nodes carry the
// hash of their text and are pending until embed runs the embedding stage.
func newEmbeddedTenantGraph(t testing.TB, e embed.Embedder) *tenantGraph {
	t.Helper()
	g := newTenantGraph(t)
	sink, err := projector.New(g.driver, projector.Config{EmbeddingModel: e.Model()}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sink.Close)
	g.sink = sink
	if err := stage.EnsureVectorIndex(context.Background(), g.driver, "", graphmodel.Default, e.Dimension()); err != nil {
		t.Fatal(err)
	}
	return g
}

// embed runs the embedding stage (e39b's, with its PostgreSQL cache in a
// fresh database) over the tenant until nothing is pending.
func (g *tenantGraph) embed(e embed.Embedder) {
	g.t.Helper()
	_, pool := stacktest.FreshDatabase(g.t)
	s, err := stage.New(g.driver, stage.NewCache(pool), e, stage.Config{Tenants: []int64{g.tenant}}, zaptest.NewLogger(g.t))
	if err != nil {
		g.t.Fatal(err)
	}
	round, err := s.Drain(context.Background())
	if err != nil {
		g.t.Fatal(err)
	}
	if round.Written == 0 {
		g.t.Fatalf("the embedding stage wrote no vector: %+v", round)
	}
}
