package stage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/cypher"
	"graphsync/graphmodel"
)

// DefaultVectorIndexWait is how long EnsureVectorIndex waits for the
// vector index to come online: populating it over 1M products of 384
// floats takes tens of minutes on two cores, far past the 300 s the
// migration once allowed.
const DefaultVectorIndexWait = 2 * time.Hour

// ErrVectorIndexNotOnline is wrapped by EnsureVectorIndexWithin's error
// when the index is still populating at the end of the wait, or failed.
var ErrVectorIndexNotOnline = errors.New("vector index not online")

// vectorIndexStateQuery reads the state and population progress of the
// index named $name.
const vectorIndexStateQuery = "SHOW INDEXES YIELD name, state, populationPercent WHERE name = $name RETURN state, populationPercent"

// EnsureVectorIndex is EnsureVectorIndexWithin DefaultVectorIndexWait.
func EnsureVectorIndex(ctx context.Context, driver neo4j.DriverWithContext, database string, model graphmodel.Model, dimension int) error {
	return EnsureVectorIndexWithin(ctx, driver, database, model, dimension, DefaultVectorIndexWait)
}

// EnsureVectorIndexWithin creates the model's vector index (cosine, of
// dimension floats), and drops and recreates it when the one in place has
// another label, property, dimension or similarity (an embedder of
// another dimension). graphsync migrate calls it. A model change of the
// same dimension keeps the index: its vectors are re-embedded (drift's
// wrong_embedding_model), and the index follows them. It then waits up to
// wait for the index (new or not) to come online; past it, the error names
// the index, its state and population progress (the index keeps
// populating: run migrate again to wait again).
func EnsureVectorIndexWithin(ctx context.Context, driver neo4j.DriverWithContext, database string, model graphmodel.Model, dimension int, wait time.Duration) error {
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
			return awaitVectorIndex(ctx, driver, e.Index, wait, opts)
		}
		// e.Index passed graphmodel.Validate: a plain identifier.
		if _, err := neo4j.ExecuteQuery(ctx, driver, "DROP INDEX "+e.Index+" IF EXISTS", nil, neo4j.EagerResultTransformer, opts...); err != nil {
			return fmt.Errorf("vector index %s: drop the changed index: %w", e.Index, err)
		}
	}
	if _, err := neo4j.ExecuteQuery(ctx, driver, cypher.VectorIndexText(e, dimension), nil, neo4j.EagerResultTransformer, opts...); err != nil {
		return fmt.Errorf("vector index %s: create: %w", e.Index, err)
	}
	return awaitVectorIndex(ctx, driver, e.Index, wait, opts)
}

// awaitVectorIndex polls the index's state until it is ONLINE, FAILED or
// wait has passed (the state is read at least once).
func awaitVectorIndex(ctx context.Context, driver neo4j.DriverWithContext, name string, wait time.Duration, opts []neo4j.ExecuteQueryConfigurationOption) error {
	deadline := time.Now().Add(wait)
	pause := 50 * time.Millisecond
	for {
		res, err := neo4j.ExecuteQuery(ctx, driver, vectorIndexStateQuery, map[string]any{"name": name}, neo4j.EagerResultTransformer, opts...)
		if err != nil {
			return fmt.Errorf("vector index %s: read its state: %w", name, err)
		}
		if len(res.Records) != 1 {
			return fmt.Errorf("vector index %s: %w: it is gone", name, ErrVectorIndexNotOnline)
		}
		state, _, _ := neo4j.GetRecordValue[string](res.Records[0], "state")
		percent, _, _ := neo4j.GetRecordValue[float64](res.Records[0], "populationPercent")
		switch {
		case state == "ONLINE":
			return nil
		case state == "FAILED":
			return fmt.Errorf("vector index %s: %w: population failed at %.1f%% (SHOW INDEXES names the cause; drop it and run graphsync migrate again)",
				name, ErrVectorIndexNotOnline, percent)
		case !time.Now().Before(deadline):
			return fmt.Errorf("vector index %s: %w after %s: %s, %.1f%% populated; it keeps populating, run graphsync migrate again (or with a longer --index-wait) to wait for it",
				name, ErrVectorIndexNotOnline, wait, state, percent)
		}
		timer := time.NewTimer(min(pause, time.Until(deadline)))
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("vector index %s: %s, %.1f%% populated: %w", name, state, percent, ctx.Err())
		case <-timer.C:
		}
		pause = min(2*pause, 2*time.Second)
	}
}
