package projector

import (
	"context"
	"errors"
	"testing"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"graphsync/events"
	"graphsync/outbox"
)

// The owner lookup read ahead, before the batch in flight committed, must
// not miss what that batch changed: the nodes it created, a product it
// deleted, a customer another tenant then names, a Single relationship it
// set. Each event below depends on one of those, in one batch that mixes
// aggregates and tenants; read entirely ahead, each would go wrong (the
// other tenant's order would even be written).
func TestLookAheadRereadsWhatTheBatchInFlightTouched(t *testing.T) {
	ctx := context.Background()
	p, driver := liveProjector(t)
	a := newIDs(t, driver)
	b := newIDs(t, driver)
	b.base = a.base + 500 // within a's range, apart from a's ids
	// One outbox id sequence for both tenants, as in PostgreSQL.
	messageB := func(ev events.Event) outbox.Message {
		b.outboxID = a.outboxID
		m := b.message(t, ev)
		a.outboxID = b.outboxID
		return m
	}
	line := func(no int32, productID int64) events.OrderLine {
		return events.OrderLine{LineNo: no, ProductID: productID, Quantity: 1, UnitPriceCents: 100}
	}
	deliverAll(t, p,
		a.message(t, events.ProductCreated{ProductState: product(a.id(2), 1, "Kept", 0, "", 100, "active")}),
		a.message(t, events.ProductCreated{ProductState: product(a.id(3), 1, "Gone", 0, "", 100, "active")}),
		a.message(t, events.ProductCreated{ProductState: product(a.id(4), 1, "Moving", a.id(12), "Shelf A", 100, "active")}),
		messageB(events.ProductCreated{ProductState: product(b.id(5), 1, "Theirs", 0, "", 100, "active")}))

	inFlight := p.Prepare([]outbox.Message{
		a.message(t, events.ProductCreated{ProductState: product(a.id(1), 1, "New", a.id(10), "Old shelf", 100, "active")}),
		a.message(t, events.ProductDeleted{ID: a.id(3), Version: 2}),
		a.message(t, orderPlaced(a.id(20), a.id(30), line(1, a.id(2)))),
		a.message(t, events.ProductUpdated{ProductState: product(a.id(4), 2, "Moving", a.id(13), "Shelf B", 100, "active")}),
	})
	newProduct := a.message(t, orderPlaced(a.id(21), a.id(31), line(1, a.id(1))))
	deletedProduct := a.message(t, orderPlaced(a.id(22), a.id(31), line(1, a.id(3))))
	moved := a.message(t, events.ProductUpdated{ProductState: product(a.id(1), 2, "New", a.id(11), "New shelf", 100, "active")})
	otherTenant := messageB(orderPlaced(b.id(40), a.id(30), line(1, b.id(5))))
	movedBack := a.message(t, events.ProductUpdated{ProductState: product(a.id(4), 3, "Moving", a.id(12), "Shelf A", 100, "active")})
	next := p.Prepare([]outbox.Message{newProduct, deletedProduct, otherTenant, moved, movedBack})

	if err := p.LookAhead(ctx, next, inFlight); err != nil {
		t.Fatal(err)
	}
	if next.ahead == nil || len(next.ahead.touched) == 0 {
		t.Fatal("LookAhead kept no reading, or no touched node")
	}
	if rejected, err := p.DeliverPrepared(ctx, inFlight); err != nil || len(rejected) > 0 {
		t.Fatalf("in flight: rejected %v, err %v", rejected, err)
	}
	refusals := testutil.ToFloat64(p.metrics.neo4jErrors.WithLabelValues(classData.String()))
	rejected, err := p.DeliverPrepared(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	// Admission decided on what the graph holds: Neo4j refused nothing (a
	// refusal would bisect the batch, and the halves read everything again).
	if got := testutil.ToFloat64(p.metrics.neo4jErrors.WithLabelValues(classData.String())); got != refusals {
		t.Errorf("Neo4j refused the batch %v times: admission worked from a stale reading", got-refusals)
	}
	if next.ahead != nil {
		t.Error("the reading ahead outlived its delivery")
	}
	if err := rejected[deletedProduct.ID]; !errors.Is(err, ErrNotProjected) || errors.Is(err, outbox.ErrDeferred) {
		t.Errorf("order naming the product the batch in flight deleted: %v, want ErrNotProjected, not deferred", err)
	}
	if err := rejected[otherTenant.ID]; !errors.Is(err, ErrCrossTenant) {
		t.Errorf("other tenant's order naming the customer the batch in flight created: %v, want ErrCrossTenant", err)
	}
	for _, m := range []outbox.Message{newProduct, moved, movedBack} {
		if err := rejected[m.ID]; err != nil {
			t.Errorf("outbox id %d: rejected with %v", m.ID, err)
		}
	}
	if len(rejected) != 2 {
		t.Errorf("rejected = %v, want the two orders", rejected)
	}

	// Each product has one category, the newest: a stale reading of where
	// IN_CATEGORY points would leave the old edge in place.
	for id, want := range map[int64]int64{a.id(1): a.id(11), a.id(4): a.id(12)} {
		res, err := neo4j.ExecuteQuery(ctx, driver, `MATCH (p:Product {tenant_id: $t, id: $p})-[:IN_CATEGORY]->(c:Category)
			RETURN collect(c.id) AS categories`, map[string]any{"t": a.tenant, "p": id}, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		categories, _ := res.Records[0].Get("categories")
		if cs, _ := categories.([]any); len(cs) != 1 || cs[0] != want {
			t.Errorf("product %d's categories = %v, want only %d", id, categories, want)
		}
	}
	res, err := neo4j.ExecuteQuery(ctx, driver, `MATCH (o:Order {tenant_id: $t, id: $o})-[:CONTAINS]->(p:Product {tenant_id: $t, id: $p})
		RETURN count(*) AS lines`, map[string]any{"t": a.tenant, "p": a.id(1), "o": a.id(21)}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	if lines, _ := res.Records[0].Get("lines"); lines != int64(1) {
		t.Errorf("lines to the product the batch in flight created = %v, want 1", lines)
	}
}
