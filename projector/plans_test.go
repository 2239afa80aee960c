package projector

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/events"
)

// A batch sends the owner lookup and the batch query with replan=skip, and
// once planCheckEvery has passed, a batch starts a check that runs both
// without it, beside the batch (plans.go). Neo4j's own record of the queries
// it ran (db.stats, section QUERIES) tells which texts reached it.
func TestBatchesUseCachedPlansAndACheckReplansBesideThem(t *testing.T) {
	p, driver := liveProjector(t)
	ctx := context.Background()
	run := func(query string) []*neo4j.Record {
		t.Helper()
		res, err := neo4j.ExecuteQuery(ctx, driver, query, nil, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		return res.Records
	}
	ran := func() map[string]bool {
		t.Helper()
		texts := map[string]bool{}
		for _, record := range run(`CALL db.stats.retrieve('QUERIES') YIELD data RETURN data.query AS query`) {
			query, _, _ := neo4j.GetRecordValue[string](record, "query")
			texts[query] = true
		}
		return texts
	}
	run(`CALL db.stats.stop('QUERIES')`)
	run(`CALL db.stats.clear('QUERIES')`)
	run(`CALL db.stats.collect('QUERIES', {durationSeconds: 300})`)
	t.Cleanup(func() { run(`CALL db.stats.stop('QUERIES')`) })

	owners, batch := p.builder.OwnersQuery(), p.builder.BatchText()
	i := newIDs(t, driver)
	// Checked just now (New): the batch starts no check.
	deliverAll(t, p, i.message(t, events.ProductCreated{ProductState: product(i.id(1), 1, "Mug", 0, "", 1, "active")}))
	texts := ran()
	for _, query := range []string{owners, batch} {
		if !texts[cachedPlan+query] {
			t.Errorf("the batch did not send with %q:\n%s", cachedPlan, query)
		}
		if texts[query] {
			t.Errorf("a batch within planCheckEvery of the last check ran without %q:\n%s", cachedPlan, query)
		}
	}

	// The interval has passed: the next batch starts the check, which
	// runs both queries as Neo4j plans them by default.
	p.planChecked.Store(time.Now().Add(-planCheckEvery).UnixNano())
	deliverAll(t, p, i.message(t, events.ProductCreated{ProductState: product(i.id(2), 1, "Cup", 0, "", 1, "active")}))
	waitFor(t, 30*time.Second, "a check of the plans running both queries without "+strings.TrimSpace(cachedPlan), func() bool {
		texts = ran()
		return texts[owners] && texts[batch]
	})
	if got := dump(t, driver, i.tenant); len(got.Nodes) != 3 { // the tenant and the two products
		t.Fatalf("the batches wrote %v", got.Nodes)
	}
}
