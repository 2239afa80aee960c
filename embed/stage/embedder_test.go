package stage_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"graphsync/embed"
)

// counting wraps an embedder and counts the texts it is asked to embed;
// before, when set, runs before each call reaches the embedder (a test
// forces an interleaving with it).
type counting struct {
	embed.Embedder
	texts  atomic.Int64
	mu     sync.Mutex
	before func()
}

func (c *counting) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	c.mu.Lock()
	before := c.before
	c.before = nil
	c.mu.Unlock()
	if before != nil {
		before()
	}
	c.texts.Add(int64(len(texts)))
	return c.Embedder.Embed(ctx, texts)
}

// embedders holds one model for the whole package: loading it costs
// seconds and hundreds of MB.
var embedders struct {
	once sync.Once
	e    embed.Embedder
	err  error
}

func testEmbedder(t testing.TB) *counting {
	t.Helper()
	embedders.once.Do(func() { embedders.e, embedders.err = openTestEmbedder() })
	if embedders.err != nil {
		t.Fatalf("open the embedding model (make model fetches it): %v", embedders.err)
	}
	return &counting{Embedder: embedders.e}
}
