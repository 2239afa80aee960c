package stage_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	// unavailable is how many calls fail as an unreachable server does
	// before calls reach the model again.
	unavailable int
	// refuse, when set, makes every call with a text containing it fail as
	// a server answering 400 does; refusedTexts counts those texts.
	refuse       string
	refusedTexts atomic.Int64
}

func (c *counting) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	c.mu.Lock()
	before := c.before
	c.before = nil
	failing := c.unavailable > 0
	if failing {
		c.unavailable--
	}
	refuse := c.refuse
	c.mu.Unlock()
	if failing {
		return nil, fmt.Errorf("test server: %w", embed.ErrUnavailable)
	}
	for _, text := range texts {
		if refuse != "" && strings.Contains(text, refuse) {
			c.refusedTexts.Add(1)
			return nil, errors.New("test server: embedding request refused: status 400")
		}
	}
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
