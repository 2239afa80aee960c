package rebuild

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/internal/stacktest"
	"graphsync/workload"
)

// replayEnv is a tenant's replay beside the test's services.
type replayEnv struct {
	pool   *pgxpool.Pool
	driver neo4j.DriverWithContext
	tenant int64
}

// stopReplayAfter runs a replay of tenant in chunks of chunkSize and stops
// it once chunk stopAt is checkpointed, leaving an unfinished rebuild.
func stopReplayAfter(t *testing.T, env replayEnv, chunkSize int, stopAt int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := runScope(ctx, t, env.pool, env.driver, Config{TenantID: env.tenant, Source: SourceReplay, ChunkSize: chunkSize,
		Progress: func(p Progress) {
			if p.Phase == "replay" && p.Chunks >= stopAt {
				cancel()
			}
		}})
	if err == nil {
		t.Fatal("the replay finished: nothing is left to resume")
	}
}

// A replay stopped while an order waits for its product (the product's
// events come later in the history's order, after `dlq retry`) is resumed
// from before that order, not after the chunk that read it: the resumed run
// delivers the order again, applies it once the product is written, and
// counts what it cannot apply. Before, the checkpoint passed the waiting
// order: the resumed run applied the order's later events without it, said
// every event applied, and the sweep repaired the order from the rows; with
// the product dead-lettered the resumed run counted nothing.
func TestResumedReplayDeliversWhatWaitedWhenItStopped(t *testing.T) {
	pool, driver := stack(t)
	tenants := writeWorkload(t, pool, driver, workload.Config{Seed: 43, Tenants: 2, Orders: 60, Writers: 2})
	tenant := tenants[0]
	product := productOfFirstOrder(t, pool, tenant)
	ids := productEvents(t, pool, tenant, product)
	deadLetterAndRetry(t, pool, tenant, ids)
	// The chunk (of 7) holding the first order naming the product, and
	// where the product's first event is now in the tenant's history.
	const chunkSize = 7
	rank := func(where string, args ...any) int64 {
		return count(t, pool, `WITH e AS (SELECT created_xid, id FROM outbox_messages WHERE tenant_id = $1 AND `+where+` ORDER BY created_xid, id LIMIT 1)
			SELECT count(*) FROM outbox_messages o, e WHERE o.tenant_id = $1 AND (o.created_xid, o.id) < (e.created_xid, e.id)`, args...)
	}
	orderRank := rank(`event_type = 'OrderPlaced' AND payload->'lines' @> jsonb_build_array(jsonb_build_object('product_id', $2::bigint))`, tenant, product)
	productRank := rank(`aggregate_type = 'Product' AND aggregate_id = $2`, tenant, product)
	stopAt := orderRank/chunkSize + 1
	if productRank < stopAt*chunkSize {
		t.Fatalf("the product's events (at %d) are not after the chunk of the order naming it (%d, chunk %d)", productRank, orderRank, stopAt)
	}
	startSync(t, pool, driver, "sync-resume-wait")
	waitCaughtUp(t, pool)
	synced := dump(t, driver, tenant)

	env := replayEnv{pool, driver, tenant}
	stacktest.CleanGraph(t, driver, tenant)
	stopReplayAfter(t, env, chunkSize, stopAt)
	res := rebuildScope(t, pool, driver, Config{TenantID: tenant, Source: SourceReplay, ChunkSize: chunkSize})
	if !res.Resumed {
		t.Fatalf("not resumed: %s", res.Why)
	}
	if res.NotApplied != 0 || len(res.Repaired) > 0 {
		t.Errorf("resumed: %d events not applied (%s), the sweep repaired %v; want every event replayed", res.NotApplied, res.FirstRejection, res.Repaired)
	}
	requireNoDrift(t, res, "resumed replay")
	if got := dump(t, driver, tenant); full(got) != full(synced) {
		t.Errorf("the resumed replay's graph differs from the synced one\nsynced:\n%s\nreplayed:\n%s", full(synced), full(got))
	}

	// The product dead-lettered for good: the orders naming it never
	// apply, and a resumed replay counts them as one that ran through does.
	deadLetter(t, pool, ids)
	stacktest.CleanGraph(t, driver, tenant)
	whole := rebuildScope(t, pool, driver, Config{TenantID: tenant, Source: SourceReplay, ChunkSize: chunkSize})
	if whole.NotApplied == 0 {
		t.Fatalf("a replay without the product's events applied every event (%s)", whole.Why)
	}
	stacktest.CleanGraph(t, driver, tenant)
	stopReplayAfter(t, env, chunkSize, stopAt)
	res = rebuildScope(t, pool, driver, Config{TenantID: tenant, Source: SourceReplay, ChunkSize: chunkSize})
	if !res.Resumed || res.NotApplied != whole.NotApplied {
		t.Errorf("resumed (%v) without the product: %d events not applied (%s); a replay that ran through counts %d (%s)",
			res.Resumed, res.NotApplied, res.FirstRejection, whole.NotApplied, whole.FirstRejection)
	}
	requireNoDrift(t, res, "resumed replay without the product")
}
