package retrieve

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/embed"
	"graphsync/graphmodel"
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

// ensureVectorIndex creates the product vector index of the embedding
// stage's contract (cosine, the model's dimension) if it is missing.
func ensureVectorIndex(t testing.TB, driver neo4j.DriverWithContext, dimension int) {
	t.Helper()
	ctx := context.Background()
	if _, err := neo4j.ExecuteQuery(ctx, driver, fmt.Sprintf(`CREATE VECTOR INDEX %s IF NOT EXISTS FOR (n:%s) ON n.%s
		OPTIONS {indexConfig: {`+"`vector.dimensions`: %d, `vector.similarity_function`: 'cosine'"+`}}`,
		VectorIndexProduct, graphmodel.LabelProduct, PropEmbedding, dimension), nil, neo4j.EagerResultTransformer); err != nil {
		t.Fatal(err)
	}
	if _, err := neo4j.ExecuteQuery(ctx, driver, "CALL db.awaitIndexes(300)", nil, neo4j.EagerResultTransformer); err != nil {
		t.Fatal(err)
	}
}

// embedTenant writes every product of the tenant its vector, as the
// embedding stage does: the embedded text is name, a line break and
// description, as the graph holds them (masked).
func embedTenant(t testing.TB, driver neo4j.DriverWithContext, e embed.Embedder, tenant int64) {
	t.Helper()
	ctx := context.Background()
	ensureVectorIndex(t, driver, e.Dimension())
	res, err := neo4j.ExecuteQuery(ctx, driver, "MATCH (p:Product {tenant_id: $t}) RETURN p.id AS id, coalesce(p.name, '') + '\n' + coalesce(p.description, '') AS text ORDER BY id",
		map[string]any{"t": tenant}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	var texts []string
	for _, rec := range res.Records {
		id, _, _ := neo4j.GetRecordValue[int64](rec, "id")
		text, _, _ := neo4j.GetRecordValue[string](rec, "text")
		ids, texts = append(ids, id), append(texts, text)
	}
	vectors, err := e.Embed(ctx, texts)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]map[string]any, len(ids))
	for i := range ids {
		rows[i] = map[string]any{"id": ids[i], "v": float64s(vectors[i])}
	}
	if _, err := neo4j.ExecuteQuery(ctx, driver, `UNWIND $rows AS r MATCH (p:Product {tenant_id: $t, id: r.id})
		SET p.`+PropEmbedding+` = r.v`, map[string]any{"t": tenant, "rows": rows}, neo4j.EagerResultTransformer); err != nil {
		t.Fatal(err)
	}
	if _, err := neo4j.ExecuteQuery(ctx, driver, "CALL db.awaitIndexes(300)", nil, neo4j.EagerResultTransformer); err != nil {
		t.Fatal(err)
	}
}
