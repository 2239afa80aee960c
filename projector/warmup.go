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
func (p *Projector) warmUp(ctx context.Context) (map[string]int, error) {
	owners, _, err := p.planCheckParams()
	if err != nil {
		return nil, err
	}
	writes := map[string]int{}
	err = p.inRolledBackTransaction(ctx, func(tx neo4j.ExplicitTransaction) error {
		if _, err := consume(ctx, tx, p.builder.OwnersQuery(), owners); err != nil {
			return err
		}
		// Removals run last: a tombstone written first would make the node
		// upserts skip the row, and they would run no further than that
		// filter.
		texts := slices.Clone(p.builder.Texts())
		slices.SortStableFunc(texts, func(a, b string) int {
			return boolOrder(p.builder.Removes(a)) - boolOrder(p.builder.Removes(b))
		})
		row := warmUpRow(p.builder.Model())
		// Sync sends every batch as the one query of cypher.Batch, whose map
		// parameter has no size classes: one plan. Running it once for each
		// statement, with only that statement's rows, takes each one past
		// its filters and tells the test which of them wrote.
		for _, text := range texts {
			batch, err := p.builder.Batch([]cypher.Statement{{Text: text, Params: map[string]any{"rows": []any{row}}}})
			if err != nil {
				return err
			}
			summary, err := consume(ctx, tx, batch.Text, batch.Params)
			if err != nil {
				return err
			}
			c := summary.Counters()
			writes[text] += c.NodesCreated() + c.NodesDeleted() + c.RelationshipsCreated() + c.RelationshipsDeleted() + c.PropertiesSet()
		}
		return nil
	})
	if err != nil {
		return nil, warmUpError(err)
	}
	return writes, nil
}

// inRolledBackTransaction runs fn in a write transaction of its own, which
// is rolled back whatever fn returns: WarmUp and the checks of the plans
// have Neo4j plan and run queries without writing anything.
func (p *Projector) inRolledBackTransaction(ctx context.Context, fn func(tx neo4j.ExplicitTransaction) error) (err error) {
	session := p.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite, DatabaseName: p.cfg.Database, FetchSize: neo4j.FetchAll})
	defer closeSession(ctx, session)
	tx, err := session.BeginTransaction(ctx, neo4j.WithTxTimeout(p.cfg.TxTimeout))
	if err != nil {
		return err
	}
	defer func() {
		rollbackCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rollbackErr := tx.Rollback(rollbackCtx); rollbackErr != nil && err == nil {
			err = rollbackErr
		}
	}()
	return fn(tx)
}

// consume runs query in tx and reads its summary.
func consume(ctx context.Context, tx neo4j.ExplicitTransaction, query string, params map[string]any) (neo4j.ResultSummary, error) {
	result, err := tx.Run(ctx, query, params)
	if err != nil {
		return nil, err
	}
	return result.Consume(ctx)
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
