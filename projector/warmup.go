package projector

import (
	"context"
	"fmt"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/cypher"
	"graphsync/graphmodel"
)

// warmUpSizes has one list size of each class Neo4j plans a statement for
// separately: it caches a plan per size class of a list parameter (1, 2 to
// 10, 11 to 100, 101 to 1000, more), and a statement's rows are one list.
var warmUpSizes = []int{1, 2, 11, 101, 1001}

// WarmUp has Neo4j plan every statement the projector can send, for every
// size class of its rows, before the first batch. Planning one costs 15 to
// 110 ms on the 2-core machine; without it the first batches after a start
// (or after Neo4j restarted) waited 250 to 560 ms while a batch took 5 ms
// once the plans were cached (docs/adr/0013). EXPLAIN alone leaves part of
// that to the first execution, so the statements run, in one transaction
// that is rolled back, on rows of tenant -1, which no business row can be:
// nothing is written.
func (p *Projector) WarmUp(ctx context.Context) (err error) {
	session := p.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite, DatabaseName: p.cfg.Database, FetchSize: neo4j.FetchAll})
	defer closeSession(ctx, session)
	tx, err := session.BeginTransaction(ctx, neo4j.WithTxTimeout(p.cfg.TxTimeout))
	if err != nil {
		return warmUpError(err)
	}
	defer func() {
		if rollbackErr := tx.Rollback(context.WithoutCancel(ctx)); rollbackErr != nil && err == nil {
			err = warmUpError(rollbackErr)
		}
	}()
	result, err := tx.Run(ctx, p.builder.OwnersQuery(), cypher.OwnersParams(ownersParams(p.builder.Model(), nil, nil)))
	if err == nil {
		_, err = result.Consume(ctx)
	}
	if err != nil {
		return warmUpError(err)
	}
	row := map[string]any{
		graphmodel.KeyTenantID: int64(-1), graphmodel.KeyID: int64(-1), "from_id": int64(-1), "to_id": int64(-1),
		"version": int64(0), "outbox_id": int64(0), "props": map[string]any{},
	}
	for _, size := range warmUpSizes {
		rows := make([]any, size)
		for i := range rows {
			rows[i] = row
		}
		for _, text := range p.builder.Texts() {
			result, err := tx.Run(ctx, text, map[string]any{"rows": rows})
			if err == nil {
				_, err = result.Consume(ctx)
			}
			if err != nil {
				return warmUpError(err)
			}
		}
	}
	return nil
}

func warmUpError(err error) error {
	return fmt.Errorf("projector: warm up Neo4j's plans: %w", sinkError(classify(err), err))
}
