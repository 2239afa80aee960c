package rebuild

import (
	"context"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"graphsync/outbox"
	"graphsync/projector"
	"graphsync/workload"
)

// countingSink is the projector, counting how often each event is handed
// to Deliver (the replay delivers waiting events there).
type countingSink struct {
	*projector.Projector
	mu        sync.Mutex
	delivered map[int64]int
}

func (s *countingSink) Deliver(ctx context.Context, batch []outbox.Message) (map[int64]error, error) {
	s.mu.Lock()
	for _, m := range batch {
		s.delivered[m.ID]++
	}
	s.mu.Unlock()
	return s.Projector.Deliver(ctx, batch)
}

// Orders that wait for a dead-lettered product are delivered again only
// when something they wait for may have been written, not after every
// chunk: here no chunk writes the product, so the first of them is
// delivered when its chunk holds it back or defers it and once at the end,
// and the replay counts the same events as not applied. Before, the whole
// queue went to Neo4j after every chunk: the order once per chunk after
// its own.
func TestReplayDeliversWaitingEventsOnlyWhenTheyMayApply(t *testing.T) {
	pool, driver := stack(t)
	ctx := context.Background()
	tenant := writeWorkload(t, pool, driver, workload.Config{Seed: 47, Tenants: 2, Orders: 50, Writers: 2})[0]
	product := productOfFirstOrder(t, pool, tenant)
	ids := productEvents(t, pool, tenant, product)
	deadLetter(t, pool, ids)
	// As if sync had applied and marked them: pending events the replay
	// cannot apply are sync's to retry, and not counted.
	if _, err := pool.Exec(ctx, `UPDATE outbox_messages SET processed_at = now() WHERE tenant_id = $1`, tenant); err != nil {
		t.Fatal(err)
	}
	order := count(t, pool, `SELECT id FROM outbox_messages WHERE tenant_id = $1 AND event_type = 'OrderPlaced'
		AND payload->'lines' @> jsonb_build_array(jsonb_build_object('product_id', $2::bigint)) ORDER BY created_xid, id LIMIT 1`, tenant, product)
	const chunkSize = 7
	after := count(t, pool, `SELECT count(*) FROM outbox_messages WHERE tenant_id = $1
		AND (created_xid, id) > (SELECT created_xid, id FROM outbox_messages WHERE id = $2)`, tenant, order)
	if after < 6*chunkSize {
		t.Fatalf("only %d events after the waiting order: too few chunks to tell", after)
	}

	sink, err := projector.New(driver, projector.Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	counting := &countingSink{Projector: sink, delivered: map[int64]int{}}
	b, err := New(pool, driver, Config{TenantID: tenant, Source: SourceReplay, ChunkSize: chunkSize, Sink: counting, RecheckAfter: 200e6},
		zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.NotApplied == 0 {
		t.Fatalf("every event applied without the product's (%s)", res.Why)
	}
	requireNoDrift(t, res, "replay without the product")
	if n := counting.delivered[order]; n > 2 {
		t.Errorf("the order waiting for dead-lettered product %d was delivered again %d times (%d events, %d chunks after it); want at most twice",
			product, n, after, after/chunkSize)
	}
}
