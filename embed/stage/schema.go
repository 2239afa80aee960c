package stage

import (
	"context"
	"fmt"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/cypher"
	"graphsync/graphmodel"
)

// EnsureVectorIndex creates the model's vector index (cosine, of
// dimension floats), and drops and recreates it when the one in place has
// another label, property, dimension or similarity (an embedder of
// another dimension). graphsync migrate calls it. A model change of the
// same dimension keeps the index: its vectors are re-embedded (drift's
// wrong_embedding_model), and the index follows them.
func EnsureVectorIndex(ctx context.Context, driver neo4j.DriverWithContext, database string, model graphmodel.Model, dimension int) error {
	if model.Embedding == nil {
		return nil
	}
	if dimension <= 0 {
		return fmt.Errorf("vector index: dimension %d", dimension)
	}
	e := *model.Embedding
	opts := []neo4j.ExecuteQueryConfigurationOption{neo4j.ExecuteQueryWithDatabase(database)}
	res, err := neo4j.ExecuteQuery(ctx, driver, cypher.VectorIndexQuery, map[string]any{"name": e.Index}, neo4j.EagerResultTransformer, opts...)
	if err != nil {
		return fmt.Errorf("vector index %s: read: %w", e.Index, err)
	}
	if len(res.Records) == 1 {
		rec := res.Records[0]
		typ, _, _ := neo4j.GetRecordValue[string](rec, "type")
		labels, _, _ := neo4j.GetRecordValue[[]any](rec, "labels")
		props, _, _ := neo4j.GetRecordValue[[]any](rec, "properties")
		dims, _, _ := neo4j.GetRecordValue[int64](rec, "dimensions")
		similarity, _, _ := neo4j.GetRecordValue[string](rec, "similarity")
		same := typ == "VECTOR" && len(labels) == 1 && labels[0] == e.Label && len(props) == 1 && props[0] == e.VectorProperty &&
			dims == int64(dimension) && (similarity == "COSINE" || similarity == "cosine")
		if same {
			return nil
		}
		// e.Index passed graphmodel.Validate: a plain identifier.
		if _, err := neo4j.ExecuteQuery(ctx, driver, "DROP INDEX "+e.Index+" IF EXISTS", nil, neo4j.EagerResultTransformer, opts...); err != nil {
			return fmt.Errorf("vector index %s: drop the changed index: %w", e.Index, err)
		}
	}
	if _, err := neo4j.ExecuteQuery(ctx, driver, cypher.VectorIndexText(e, dimension), nil, neo4j.EagerResultTransformer, opts...); err != nil {
		return fmt.Errorf("vector index %s: create: %w", e.Index, err)
	}
	if _, err := neo4j.ExecuteQuery(ctx, driver, "CALL db.awaitIndexes(300)", nil, neo4j.EagerResultTransformer, opts...); err != nil {
		return fmt.Errorf("vector index %s: wait: %w", e.Index, err)
	}
	return nil
}
