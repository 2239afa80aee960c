package projector

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap"

	"graphsync/cypher"
	"graphsync/redact"
)

// Neo4j plans a query again when it finds the statistics its cached plan was
// made on out of date (a label's count or an index's selectivity moved by
// more than 75 %, at most every 10 s per plan: "Discarded stale query from
// the query cache" in debug.log). It does that when the query next runs,
// inside the transaction that runs it. The projector's batch query holds
// every statement (cypher.Batch), and planning it takes about a second on
// the 2-core machine: each such replan stalled the stream's batches for that
// second (docs/adr/0013, addendum of stop 35).
//
// So a batch's write transaction uses the cached plans as they are
// (replan=skip; Neo4j still plans a query it has no plan for), and the
// replans happen beside it: at most every planCheckEvery, a batch starts a
// check that runs the same two queries, without the option and on empty
// lists, in a transaction of its own that is rolled back. Where Neo4j finds
// a plan stale, it plans it in that check and caches the new plan under the
// same key, which the batches then use: the replan option is not part of
// Neo4j's cache key, nor are the lists inside the map parameters
// (TestBatchesUseThePlansTheCheckMakes). The look-ahead's owner lookup runs
// in a read session, which a cluster may route to a server the check (a
// write) never reaches, so it asks for no cached plan: a replan there runs
// beside the write in flight, and delays the next rebuild chunk (which waits
// for its look-ahead) by no more than it outlasts that write.
const (
	// cachedPlan is the option the batch's write transaction sends its
	// queries with.
	cachedPlan = "CYPHER replan=skip "
	// planCheckEvery is how often a check may start. A check that finds
	// nothing stale runs two cached queries on empty lists (a few ms), and
	// Neo4j tests a plan at most every 10 s (dbms.cypher.min_replan_interval),
	// so checks more often than that let Neo4j's own interval decide.
	planCheckEvery = 5 * time.Second
	// planCheckTimeout bounds a check. A replan takes about a second on a
	// quiet 2-core machine and ten times that on a loaded one; a check cut
	// short replans nothing, so the bound is generous: checks run one at a
	// time, beside the batches, and a slow one delays none of them.
	planCheckTimeout = 60 * time.Second
	// planCheckWarnAfter is how many checks in a row may fail before a
	// warning says that plans are not being refreshed.
	planCheckWarnAfter = 3
)

// withCachedPlan is query as a batch's write transaction sends it.
func withCachedPlan(query string) string { return cachedPlan + query }

// planChecks is the projector's state of the checks, under mu.
type planChecks struct {
	mu sync.Mutex
	// last is when the last check started (New counts as one); running is
	// set while one runs (one at a time); closed is set by Close (none
	// starts after it); failures counts the checks in a row that failed.
	last     time.Time
	running  bool
	closed   bool
	failures int
	// ctx ends with Close, cancelling a check that runs.
	ctx    context.Context
	cancel context.CancelFunc
	// run is checkPlans, or a fake in a test; done tracks the goroutines.
	run  func(ctx context.Context) error
	done sync.WaitGroup
}

// checkPlansWhenDue starts a check of the plans (checkPlans) beside the
// caller, when planCheckEvery has passed since the last one started and no
// other check runs.
func (p *Projector) checkPlansWhenDue() {
	c := &p.plans
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.running || time.Since(c.last) < planCheckEvery {
		return
	}
	c.last, c.running = time.Now(), true
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		ctx, cancel := context.WithTimeout(c.ctx, planCheckTimeout)
		defer cancel()
		err := c.run(ctx)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.running = false
		if err == nil {
			c.failures = 0
			return
		}
		if c.failures++; c.failures == planCheckWarnAfter {
			p.log.Warn("Neo4j's plans could not be checked for staleness, several times in a row; batches keep the plans they have until a check succeeds",
				zap.String("error", redact.ErrorText(err.Error())))
		}
	}()
}

// Close ends the checks of Neo4j's plans: none starts after it, and one
// that runs is cancelled and waited for. Batches delivered after Close are
// applied as before, on the plans Neo4j has.
func (p *Projector) Close() {
	c := &p.plans
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.done.Wait()
}

// checkPlans runs the owner lookup and the batch query as Neo4j plans them
// by default, on empty lists (they read and write nothing), and rolls back.
// Neo4j's cache key holds the query text, the types of its top-level
// parameters and whether the transaction has written yet: the check sends
// both queries with the parameters apply sends (the same names and kinds:
// TestThePlanCheckSendsWhatBatchesSend), and the batch query before any
// write, as apply does.
func (p *Projector) checkPlans(ctx context.Context) error {
	owners, batch, err := p.planCheckParams()
	if err != nil {
		return err
	}
	return p.inRolledBackTransaction(ctx, func(tx neo4j.ExplicitTransaction) error {
		if _, err := consume(ctx, tx, p.builder.OwnersQuery(), owners); err != nil {
			return fmt.Errorf("plan check: owner lookup: %w", err)
		}
		if _, err := consume(ctx, tx, batch.Text, batch.Params); err != nil {
			return fmt.Errorf("plan check: batch query: %w", err)
		}
		return nil
	})
}

// planCheckParams are the check's parameters: the owner lookup's and the
// batch query's, on empty lists.
func (p *Projector) planCheckParams() (owners map[string]any, batch cypher.Batch, err error) {
	batch, err = p.builder.Batch(nil)
	return cypher.OwnersParams(ownersParams(p.builder.Model(), nil, nil)), batch, err
}
