package projector

import (
	"context"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap"

	"graphsync/cypher"
)

// Neo4j plans a query again when it finds the statistics its cached plan was
// made on out of date (a label's count or an index's selectivity moved by
// more than 75 %, at most every 10 s: "Discarded stale query from the query
// cache" in debug.log). It does that when the query next runs, inside the
// transaction that runs it. The projector's batch query holds every
// statement (cypher.Batch), and planning it takes about a second on the
// 2-core machine: each such replan stalled the stream's batches for that
// second (docs/adr/0013, addendum of stop 35).
//
// So the batches use the cached plan as it is (replan=skip; Neo4j still
// plans a query it has no plan for), and the replans happen beside them:
// at most every planCheckEvery, a batch starts a check that runs the same
// two queries, without the option and on empty lists, in a transaction of
// its own that is rolled back. Where Neo4j finds a plan stale, it plans it
// in that check and caches the new plan under the same query text, which
// the batches then use (Neo4j's cache key leaves the replan option out:
// TestBatchesUseThePlansTheCheckMakes).
const (
	// cachedPlan is the option the batches' queries carry.
	cachedPlan = "CYPHER replan=skip "
	// planCheckEvery is Neo4j's own default for the shortest time between
	// two plans of one query (dbms.cypher.min_replan_interval).
	planCheckEvery = 10 * time.Second
	// planCheckTimeout bounds a check (a replan takes about a second).
	planCheckTimeout = time.Minute
)

// withCachedPlan is query as the batches send it.
func withCachedPlan(query string) string { return cachedPlan + query }

// checkPlansWhenDue starts a check of the plans (checkPlans) beside the
// caller, when planCheckEvery has passed since the last one started and no
// other check runs.
func (p *Projector) checkPlansWhenDue() {
	now := time.Now().UnixNano()
	last := p.planChecked.Load()
	if now-last < int64(planCheckEvery) || !p.planChecked.CompareAndSwap(last, now) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), planCheckTimeout)
		defer cancel()
		if err := p.checkPlans(ctx); err != nil {
			p.log.Debug("Neo4j's plans were not checked; the next batch after the interval tries again", zap.Error(err))
		}
	}()
}

// checkPlans runs the owner lookup and the batch query as Neo4j plans them
// by default, on empty lists (they read and write nothing), and rolls back.
func (p *Projector) checkPlans(ctx context.Context) (err error) {
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
	result, err := tx.Run(ctx, p.builder.OwnersQuery(), cypher.OwnersParams(ownersParams(p.builder.Model(), nil, nil)))
	if err == nil {
		_, err = result.Consume(ctx)
	}
	if err != nil {
		return err
	}
	batch, err := p.builder.Batch(nil)
	if err != nil {
		return err
	}
	result, err = tx.Run(ctx, batch.Text, batch.Params)
	if err == nil {
		_, err = result.Consume(ctx)
	}
	return err
}
