package stage

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	gsql "graphsync/sql"
)

// Cache is the content-addressed embedding cache in PostgreSQL: (model,
// text hash) -> vector. It outlives the graph, so a rebuild into an empty
// Neo4j embeds nothing embedded before.
type Cache struct {
	pool *pgxpool.Pool
}

// NewCache returns the cache in pool's database (migration 0014).
func NewCache(pool *pgxpool.Pool) *Cache { return &Cache{pool: pool} }

// Get returns the cached vectors of model among hashes, by hash.
func (c *Cache) Get(ctx context.Context, model string, hashes []string) (map[string][]float32, error) {
	rows, err := c.pool.Query(ctx, gsql.Query("EmbeddingCacheGet"), model, hashes)
	if err != nil {
		return nil, fmt.Errorf("read the embedding cache: %w", err)
	}
	defer rows.Close()
	out := make(map[string][]float32, len(hashes))
	for rows.Next() {
		var hash string
		var vector []float32
		if err := rows.Scan(&hash, &vector); err != nil {
			return nil, fmt.Errorf("read the embedding cache: %w", err)
		}
		out[hash] = vector
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the embedding cache: %w", err)
	}
	return out, nil
}

// Put stores vectors (each of dimension floats) by hash; a hash cached
// already keeps its vector.
func (c *Cache) Put(ctx context.Context, model string, dimension int, vectors map[string][]float32) error {
	if len(vectors) == 0 {
		return nil
	}
	hashes := make([]string, 0, len(vectors))
	flat := make([]float32, 0, len(vectors)*dimension)
	for hash, v := range vectors {
		if len(v) != dimension {
			return fmt.Errorf("cache a vector of %d floats for a model of dimension %d", len(v), dimension)
		}
		hashes = append(hashes, hash)
		flat = append(flat, v...)
	}
	if _, err := c.pool.Exec(ctx, gsql.Query("EmbeddingCachePut"), model, dimension, hashes, flat); err != nil {
		return fmt.Errorf("write the embedding cache: %w", err)
	}
	return nil
}
