package drift

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/graphmodel"
	gsql "graphsync/sql"
)

// ChunkResult is what one ReprojectChunk read and wrote.
type ChunkResult struct {
	// Rows is how many rows were read; fewer than the limit means the
	// label of the tenant is done.
	Rows int
	// Last is the last key read: the next chunk starts after it.
	Last int64
	// Applied counts the node and relationship writes Neo4j applied
	// (writes the guards refused are not counted).
	Applied int64
}

// ReprojectChunk is graphsync rebuild's snapshot step: it reads up to limit
// rows of label of one tenant after key `after`, in key order, in one
// REPEATABLE READ transaction, and writes their row projection into the
// graph in one Neo4j transaction, under guards that never let the read
// overwrite a newer state live sync applied meanwhile:
//   - aggregates and the relationships they own: the row's version (a
//     newer event carries a higher one);
//   - reference nodes (no version of their own): an outbox-id watermark,
//     the lowest id an event committed after the read can carry (see
//     cypher.RebuildReferenceText). For that, the chunk waits until the
//     transactions running at the read have ended, as offset readers do.
//
// It deletes nothing: what no row backs is left to the sweep (Run with
// repair). Reference rows nothing refers to are not written, as sync would
// not write them either.
func (c *Checker) ReprojectChunk(ctx context.Context, tenant int64, label string, after int64, limit int) (ChunkResult, error) {
	model := *c.cfg.Model
	l, ok := model.Label(label)
	if !ok || (l.Role != graphmodel.RoleAggregate && l.Role != graphmodel.RoleReference) {
		return ChunkResult{}, fmt.Errorf("rebuild: %q is not an aggregate or reference label of the model", label)
	}
	reference := l.Role == graphmodel.RoleReference
	var lastDrawn int64
	if reference {
		if err := c.pool.QueryRow(ctx, gsql.Query("RebuildOutboxLastID")).Scan(&lastDrawn); err != nil {
			return ChunkResult{}, fmt.Errorf("read the outbox id sequence: %w", err)
		}
	}
	var snapshot string
	var nodes []node
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, gsql.Query("RebuildSnapshot")).Scan(&snapshot); err != nil {
			return fmt.Errorf("open a snapshot: %w", err)
		}
		var err error
		nodes, err = rowsChunk(ctx, tx, model, label, tenant, after, limit, sample{offset: 0, share: 1000})
		return err
	})
	if err != nil {
		return ChunkResult{}, err
	}
	result := ChunkResult{Rows: len(nodes), Last: after}
	if len(nodes) == 0 {
		return result, nil
	}
	result.Last = nodes[len(nodes)-1].id
	below := int64(1)
	write := make([]*node, 0, len(nodes))
	for i := range nodes {
		if nodes[i].required {
			write = append(write, &nodes[i])
		}
	}
	if reference && len(write) > 0 {
		if below, err = c.watermark(ctx, snapshot, lastDrawn); err != nil {
			return result, err
		}
	}
	if len(write) == 0 {
		return result, nil
	}
	stmts, err := projectionStatements(model, write, below)
	if err != nil {
		return result, err
	}
	session := c.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite, DatabaseName: c.cfg.Database})
	defer session.Close(context.WithoutCancel(ctx))
	applied, err := neo4j.ExecuteWrite(ctx, session, func(tx neo4j.ManagedTransaction) (int64, error) {
		var n int64
		for _, st := range stmts {
			res, err := tx.Run(ctx, st.text, st.params)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", st.what, err)
			}
			rec, err := res.Single(ctx)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", st.what, err)
			}
			a, _, _ := neo4j.GetRecordValue[int64](rec, "applied")
			n += a
		}
		return n, nil
	})
	if err != nil {
		return result, fmt.Errorf("rebuild: write %s rows of tenant %d after id %d: %w", label, tenant, after, err)
	}
	result.Applied = applied
	return result, nil
}

// watermark returns the lowest outbox id an event whose business change
// snapshot does not see can carry: one more than the highest id drawn
// before the snapshot (lastDrawn), or lower, the lowest id written by a
// transaction the snapshot does not see that started before a transaction
// id assigned after it, once all of those have ended. A transaction that
// starts later draws its ids after lastDrawn was read.
func (c *Checker) watermark(ctx context.Context, snapshot string, lastDrawn int64) (int64, error) {
	var after string
	if err := c.pool.QueryRow(ctx, gsql.Query("RebuildXactID")).Scan(&after); err != nil {
		return 0, fmt.Errorf("take a transaction id after the read: %w", err)
	}
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	for {
		var ended bool
		if err := c.pool.QueryRow(ctx, gsql.Query("RebuildXactsEnded"), after).Scan(&ended); err != nil {
			return 0, fmt.Errorf("wait for the transactions running at the read: %w", err)
		}
		if ended {
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-ticker.C:
		}
	}
	var inFlight int64
	if err := c.pool.QueryRow(ctx, gsql.Query("RebuildLowestInFlight"), snapshot, after, lastDrawn).Scan(&inFlight); err != nil {
		return 0, fmt.Errorf("find events of the transactions running at the read: %w", err)
	}
	below := lastDrawn + 1
	if inFlight > 0 && inFlight < below {
		below = inFlight
	}
	return below, nil
}
