package projector

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap/zaptest"

	"graphsync/cypher"
	"graphsync/events"
	"graphsync/outbox"
)

// A batch sends the owner lookup and the batch query with replan=skip, and
// once planCheckEvery has passed, a batch starts a check that runs both
// without it, beside the batch (plans.go). Neo4j's own record of the queries
// it ran (db.stats, section QUERIES) tells which texts reached it.
func TestBatchesUseCachedPlansAndACheckReplansBesideThem(t *testing.T) {
	p, driver := liveProjector(t)
	run := func(query string) []*neo4j.Record { return records(t, driver, query, nil) }
	ran := func() map[string]bool {
		t.Helper()
		texts := map[string]bool{}
		for _, record := range run(`CALL db.stats.retrieve('QUERIES') YIELD data RETURN data.query AS query`) {
			query, _, _ := neo4j.GetRecordValue[string](record, "query")
			texts[query] = true
		}
		return texts
	}
	collectQueryStats(t, driver)

	owners, batch := p.builder.OwnersQuery(), p.builder.BatchText()
	// The look-ahead reads in a session of its own, outside the write
	// transaction: it asks for no cached plan (plans.go).
	i := newIDs(t, driver)
	// A check just started: the batch starts none.
	p.plans.mu.Lock()
	p.plans.last = time.Now()
	p.plans.mu.Unlock()
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
	p.plans.mu.Lock()
	p.plans.last = time.Now().Add(-planCheckEvery)
	p.plans.mu.Unlock()
	deliverAll(t, p, i.message(t, events.ProductCreated{ProductState: product(i.id(2), 1, "Cup", 0, "", 1, "active")}))
	// The check plans the batch query (about a second on a quiet machine,
	// far longer on a loaded one): wait as long as it may run.
	waitFor(t, planCheckTimeout+30*time.Second, "a check of the plans running both queries without "+strings.TrimSpace(cachedPlan), func() bool {
		texts = ran()
		return texts[owners] && texts[batch]
	})
	if got := dump(t, driver, i.tenant); len(got.Nodes) != 3 { // the tenant and the two products
		t.Fatalf("the batches wrote %v", got.Nodes)
	}
}

// The check refreshes the plans the batches use only if Neo4j caches a
// query's plan under the same key with and without replan=skip. Neo4j
// records, per query text it ran, the plan it ran it with and that plan's
// row estimates (db.stats, QUERIES): a query planned on an empty label
// estimates no more than a few rows for it; after 1,000 nodes of the label
// are written, the same query with replan=skip must still run that plan
// (the same key, and skip keeps it), while replan=force (the control) plans
// it again on 1,000 nodes. The label is new, so no earlier plan exists.
func TestBatchesUseThePlansTheCheckMakes(t *testing.T) {
	_, driver := liveProjector(t)
	i := newIDs(t, driver)
	run := func(query string, params map[string]any) []*neo4j.Record { return records(t, driver, query, params) }
	collectQueryStats(t, driver)

	label := fmt.Sprintf("PlanCacheProbe%d", i.tenant)
	query := "MATCH (n:" + label + ") RETURN n.id AS id"
	run(query, nil)
	run("UNWIND range(1, 1000) AS i CREATE (:"+label+" {tenant_id: $t, id: i})", map[string]any{"t": i.tenant})
	run(cachedPlan+query, nil)
	run("CYPHER replan=force "+query, nil)

	estimates := map[string]float64{}
	for _, record := range run(`CALL db.stats.retrieve('QUERIES') YIELD data
		RETURN data.query AS query, data.estimatedRows AS rows`, nil) {
		text, _, _ := neo4j.GetRecordValue[string](record, "query")
		rows, _, _ := neo4j.GetRecordValue[[]any](record, "rows")
		for _, r := range rows {
			if f, ok := r.(float64); ok && f > estimates[text] {
				estimates[text] = f
			}
		}
	}
	plain, skip, force := estimates[query], estimates[cachedPlan+query], estimates["CYPHER replan=force "+query]
	t.Logf("largest row estimate of the plan: %g planned on the empty label, %g with replan=skip after 1,000 nodes, %g with replan=force", plain, skip, force)
	if force < 1000 || plain >= force {
		t.Fatalf("the control did not work: the plan made on the empty label estimates %g rows, the forced plan %g", plain, force)
	}
	if skip != plain {
		t.Fatalf("with replan=skip the query ran a plan estimating %g rows, not the cached plan (%g): Neo4j keys the option, so a check would refresh plans the batches never use", skip, plain)
	}
}

// One check at a time, at most every planCheckEvery: many batches at once
// start one check, a batch while it runs or within the interval none.
func TestOnePlanCheckAtATime(t *testing.T) {
	p, err := New(nil, Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	var started atomic.Int64
	release := make(chan struct{})
	p.plans.run = func(context.Context) error {
		started.Add(1)
		<-release
		return nil
	}
	due := func() {
		p.plans.mu.Lock()
		p.plans.last = time.Now().Add(-planCheckEvery)
		p.plans.mu.Unlock()
	}

	p.checkPlansWhenDue()
	if n := started.Load(); n != 0 {
		t.Fatalf("a batch right after New started %d checks", n)
	}
	due()
	var batches sync.WaitGroup
	for range 50 {
		batches.Go(p.checkPlansWhenDue)
	}
	batches.Wait()
	waitFor(t, 10*time.Second, "the check to start", func() bool { return started.Load() >= 1 })
	due() // the interval passed while the check runs: still one at a time
	p.checkPlansWhenDue()
	close(release)
	p.plans.done.Wait()
	if n := started.Load(); n != 1 {
		t.Fatalf("%d checks started, want 1", n)
	}
	p.checkPlansWhenDue() // due, and none runs
	p.plans.done.Wait()
	if n := started.Load(); n != 2 {
		t.Fatalf("a batch after the interval, no check running, started none: %d checks", n)
	}
	p.checkPlansWhenDue() // within the interval of the one that just ran
	p.plans.done.Wait()
	if n := started.Load(); n != 2 {
		t.Fatalf("a batch within planCheckEvery of the last check started one: %d checks", n)
	}

	// Close cancels the check that runs, waits for it, and none starts
	// after it.
	p.plans.run = func(ctx context.Context) error {
		started.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	due()
	p.checkPlansWhenDue()
	waitFor(t, 10*time.Second, "the check to start", func() bool { return started.Load() == 3 })
	p.Close()
	p.plans.mu.Lock()
	running := p.plans.running
	p.plans.mu.Unlock()
	if running {
		t.Fatal("Close returned while a check ran")
	}
	due()
	p.checkPlansWhenDue()
	p.plans.done.Wait()
	if n := started.Load(); n != 3 {
		t.Fatalf("a check started after Close: %d checks", n)
	}
}

// Neo4j keys a plan by the query text and the types of its top-level
// parameters: the check sends the names and kinds a batch sends, or it
// would refresh a plan no batch uses.
func TestThePlanCheckSendsWhatBatchesSend(t *testing.T) {
	p, err := New(nil, Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	a := &ids{tenant: 5}
	prep := p.Prepare([]outbox.Message{
		a.message(t, events.ProductCreated{ProductState: product(1, 1, "Mug", 0, "", 100, "active")}),
		a.message(t, orderPlaced(2, 3, events.OrderLine{LineNo: 1, ProductID: 1, Quantity: 2, UnitPriceCents: 100})),
	})
	if len(prep.items) != 2 {
		t.Fatalf("prepared %d of 2 events: %v", len(prep.items), prep.rejected)
	}
	batch, err := p.builder.Batch(p.builder.StatementsOf(statementRows(prep.items)))
	if err != nil {
		t.Fatal(err)
	}
	owners := cypher.OwnersParams(ownersParams(p.builder.Model(), prep.items, nil))
	checkOwners, checkBatch, err := p.planCheckParams()
	if err != nil {
		t.Fatal(err)
	}
	shape := func(params map[string]any) map[string]string {
		kinds := map[string]string{}
		for name, value := range params {
			kinds[name] = reflect.TypeOf(value).String()
		}
		return kinds
	}
	if got, want := shape(checkOwners), shape(owners); !reflect.DeepEqual(got, want) {
		t.Errorf("the check's owner lookup parameters %v, a batch's %v", got, want)
	}
	if got, want := shape(checkBatch.Params), shape(batch.Params); !reflect.DeepEqual(got, want) {
		t.Errorf("the check's batch query parameters %v, a batch's %v", got, want)
	}
	if checkBatch.Text != batch.Text {
		t.Errorf("the check's batch query is not the text a batch sends")
	}
}

// records runs query and returns its records, failing the test on an error.
func records(t *testing.T, driver neo4j.DriverWithContext, query string, params map[string]any) []*neo4j.Record {
	t.Helper()
	res, err := neo4j.ExecuteQuery(context.Background(), driver, query, params, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return res.Records
}

// collectQueryStats has Neo4j record the queries it runs from now until the
// test ends (db.stats, section QUERIES), with nothing recorded before.
func collectQueryStats(t *testing.T, driver neo4j.DriverWithContext) {
	t.Helper()
	records(t, driver, `CALL db.stats.stop('QUERIES')`, nil)
	records(t, driver, `CALL db.stats.clear('QUERIES')`, nil)
	records(t, driver, `CALL db.stats.collect('QUERIES', {durationSeconds: 300})`, nil)
	t.Cleanup(func() { records(t, driver, `CALL db.stats.stop('QUERIES')`, nil) })
}
