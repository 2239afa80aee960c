package projector

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/cypher"
	"graphsync/graphmodel"
)

// WarmUp has Neo4j plan the projector's two queries, the owner lookup and
// cypher.Batch (every statement in one query), before the first batch.
// Planning costs 15 to 110 ms a statement on the 2-core machine; without it
// the first batches after a start (or after Neo4j restarted) waited 250 to
// 560 ms while a batch took 5 ms once the plans were cached
// (docs/adr/0013). EXPLAIN alone leaves part of that to the first
// execution, so the query runs, in one transaction that is rolled back, on
// rows of tenant -1 and id -1, which the projector never writes (it rejects
// ids that are not positive): nothing is written, and no real node is
// locked.
func (p *Projector) WarmUp(ctx context.Context) error {
	_, err := p.warmUp(ctx)
	return err
}

// warmUp is WarmUp; it returns how many entities each statement wrote
// before the rollback, so a test can tell that every statement ran past
// its filters.
func (p *Projector) warmUp(ctx context.Context) (writes map[string]int, err error) {
	session := p.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite, DatabaseName: p.cfg.Database, FetchSize: neo4j.FetchAll})
	defer closeSession(ctx, session)
	tx, err := session.BeginTransaction(ctx, neo4j.WithTxTimeout(p.cfg.TxTimeout))
	if err != nil {
		return nil, warmUpError(err)
	}
	defer func() {
		rollbackCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rollbackErr := tx.Rollback(rollbackCtx); rollbackErr != nil && err == nil {
			err = warmUpError(rollbackErr)
		}
	}()
	result, err := tx.Run(ctx, p.builder.OwnersQuery(), cypher.OwnersParams(ownersParams(p.builder.Model(), nil, nil)))
	if err == nil {
		_, err = result.Consume(ctx)
	}
	if err != nil {
		return nil, warmUpError(err)
	}
	// Removals run last: a tombstone written first would make the node
	// upserts skip the row, and they would run no further than that filter.
	texts := slices.Clone(p.builder.Texts())
	slices.SortStableFunc(texts, func(a, b string) int {
		return boolOrder(p.builder.Removes(a)) - boolOrder(p.builder.Removes(b))
	})
	row := warmUpRow(p.builder.Model())
	writes = map[string]int{}
	// Sync sends every batch as the one query of cypher.Batch, whose map
	// parameter has no size classes: one plan. Running it once for each
	// statement, with only that statement's rows, takes each one past its
	// filters and tells the test which of them wrote.
	for _, text := range texts {
		batch, err := p.builder.Batch([]cypher.Statement{{Text: text, Params: map[string]any{"rows": []any{row}}}})
		if err != nil {
			return nil, err
		}
		result, err := tx.Run(ctx, batch.Text, batch.Params)
		if err != nil {
			return nil, warmUpError(err)
		}
		summary, err := result.Consume(ctx)
		if err != nil {
			return nil, warmUpError(err)
		}
		c := summary.Counters()
		writes[text] += c.NodesCreated() + c.NodesDeleted() + c.RelationshipsCreated() + c.RelationshipsDeleted() + c.PropertiesSet()
	}
	return writes, nil
}

func boolOrder(b bool) int {
	if b {
		return 1
	}
	return 0
}

// warmUpRow is a statement row of tenant -1 and id -1 that every statement
// can run on: each relationship key property the model declares has a
// value of its type (a MERGE refuses a null key).
func warmUpRow(model graphmodel.Model) map[string]any {
	props := map[string]any{}
	for _, r := range model.Relationships {
		for _, key := range r.Key {
			switch key.Type {
			case graphmodel.Int:
				props[key.Key] = int64(0)
			case graphmodel.DateTime:
				props[key.Key] = time.Unix(0, 0).UTC()
			default:
				props[key.Key] = ""
			}
		}
	}
	return map[string]any{
		graphmodel.KeyTenantID: int64(-1), graphmodel.KeyID: int64(-1), "from_id": int64(-1), "to_id": int64(-1),
		"version": int64(1), "outbox_id": int64(1), "props": props,
	}
}

func warmUpError(err error) error {
	return fmt.Errorf("projector: warm up Neo4j's plans: %w", sinkError(classify(err), err))
}
