package drift

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap"

	"graphsync/graphmodel"
	gsql "graphsync/sql"
)

// Chunk is one chunk of rows read for ReprojectChunk's write.
type Chunk struct {
	Tenant int64
	Label  string
	// Rows is how many rows were read; fewer than the limit means the
	// label of the tenant is done.
	Rows int
	// Last is the last key read: the next chunk starts after it.
	Last int64

	nodes     []node
	snapshot  string
	lastDrawn int64
	reference bool
}

// ChunkResult is what one ReprojectChunk read and wrote.
type ChunkResult struct {
	Rows int
	Last int64
	// Applied counts the node and relationship writes Neo4j applied
	// (writes the guards refused are not counted).
	Applied int64
}

// ReprojectChunk is graphsync rebuild's snapshot step: ReadChunk, then
// WriteChunk.
func (c *Checker) ReprojectChunk(ctx context.Context, tenant int64, label string, after int64, limit int) (ChunkResult, error) {
	ch, err := c.ReadChunk(ctx, tenant, label, after, limit)
	if err != nil {
		return ChunkResult{}, err
	}
	applied, err := c.WriteChunk(ctx, ch)
	return ChunkResult{Rows: ch.Rows, Last: ch.Last, Applied: applied}, err
}

// ReadChunk reads up to limit rows of label of one tenant after key `after`,
// in key order, in one REPEATABLE READ transaction, through the row
// projection. Chunks are independent: the next can be read while one is
// written.
func (c *Checker) ReadChunk(ctx context.Context, tenant int64, label string, after int64, limit int) (*Chunk, error) {
	model := *c.cfg.Model
	l, ok := model.Label(label)
	if !ok || (l.Role != graphmodel.RoleAggregate && l.Role != graphmodel.RoleReference) {
		return nil, fmt.Errorf("rebuild: %q is not an aggregate or reference label of the model", label)
	}
	ch := &Chunk{Tenant: tenant, Label: label, Last: after, reference: l.Role == graphmodel.RoleReference}
	if ch.reference {
		if err := c.pool.QueryRow(ctx, gsql.Query("RebuildOutboxLastID")).Scan(&ch.lastDrawn); err != nil {
			return nil, fmt.Errorf("read the outbox id sequence: %w", err)
		}
	}
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, gsql.Query("RebuildSnapshot")).Scan(&ch.snapshot); err != nil {
			return fmt.Errorf("open a snapshot: %w", err)
		}
		var err error
		ch.nodes, err = rowsChunk(ctx, tx, model, label, tenant, after, limit, sample{offset: 0, share: 1000})
		return err
	})
	if err != nil {
		return nil, err
	}
	ch.Rows = len(ch.nodes)
	if ch.Rows > 0 {
		ch.Last = ch.nodes[ch.Rows-1].id
	}
	return ch, nil
}

// WriteChunk writes a chunk's row projection into the graph in one Neo4j
// transaction, under guards that never let the read overwrite a newer state
// live sync applied meanwhile:
//   - aggregates and the relationships they own: the row's version (a
//     newer event carries a higher one);
//   - reference nodes (no version of their own): an outbox-id watermark,
//     the lowest id an event committed after the read can carry (see
//     cypher.RebuildReferenceText). For that, the write waits until the
//     transactions running at the read have ended, as offset readers do.
//
// It deletes nothing: what no row backs is left to the sweep (Run with
// repair). Reference rows nothing refers to are not written, as sync would
// not write them either. It returns the writes Neo4j applied.
func (c *Checker) WriteChunk(ctx context.Context, ch *Chunk) (int64, error) {
	write := make([]*node, 0, len(ch.nodes))
	for i := range ch.nodes {
		if ch.nodes[i].required {
			write = append(write, &ch.nodes[i])
		}
	}
	if len(write) == 0 {
		return 0, nil
	}
	below := int64(1)
	if ch.reference {
		var err error
		if below, err = c.watermark(ctx, ch.snapshot, ch.lastDrawn); err != nil {
			return 0, err
		}
	}
	stmts, err := projectionStatements(*c.cfg.Model, write, below)
	if err != nil {
		return 0, err
	}
	session := c.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite, DatabaseName: c.cfg.Database,
		BookmarkManager: c.driver.ExecuteQueryBookmarkManager()})
	defer session.Close(context.WithoutCancel(ctx))
	applied, err := neo4j.ExecuteWrite(ctx, session, func(tx neo4j.ManagedTransaction) (int64, error) {
		var n int64
		for _, st := range stmts {
			// What the statement applied: its clear's deletions are part
			// of the same move, not writes of their own.
			a, err := runTexts(ctx, tx, st.texts(), st.params)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", st.what, err)
			}
			n += a
		}
		return n, nil
	})
	if err != nil {
		return 0, fmt.Errorf("rebuild: write %s rows of tenant %d up to id %d: %w", ch.Label, ch.Tenant, ch.Last, err)
	}
	return applied, nil
}

// watermarkPatience is how long AwaitTransactionsBefore waits before it
// says so in the log (and every minute after).
var watermarkPatience = 10 * time.Second

// AwaitTransactionsBefore returns once every transaction with an id below
// xid (RebuildXactID's, taken after a read) has ended: a transaction left
// open holds the caller here, and the log says so after watermarkPatience.
func (c *Checker) AwaitTransactionsBefore(ctx context.Context, xid string) error {
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	started := time.Now()
	warnAt := started.Add(watermarkPatience)
	for {
		var ended bool
		if err := c.pool.QueryRow(ctx, gsql.Query("RebuildXactsEnded"), xid).Scan(&ended); err != nil {
			return fmt.Errorf("wait for the transactions running at the read: %w", err)
		}
		if ended {
			return nil
		}
		if time.Now().After(warnAt) {
			c.log.Warn("waiting for transactions that were running when the rows were read: a transaction left open "+
				"(idle in transaction, or prepared and never committed) holds the rebuild here; pg_stat_activity and pg_prepared_xacts show it",
				zap.Duration("waited", time.Since(started).Round(time.Second)))
			warnAt = time.Now().Add(time.Minute)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
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
	if err := c.AwaitTransactionsBefore(ctx, after); err != nil {
		return 0, err
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
