package projector

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap/zaptest"

	"graphsync/events"
	"graphsync/graphmodel"
	"graphsync/internal/stacktest"
	"graphsync/outbox"
)

var (
	schemaOnce sync.Once
	schemaErr  error
)

// liveProjector returns a projector on the shared Neo4j, with the schema in place.
func liveProjector(t testing.TB) (*Projector, neo4j.DriverWithContext) {
	t.Helper()
	driver := stacktest.Neo4j(t)
	schemaOnce.Do(func() { schemaErr = EnsureSchema(context.Background(), driver) })
	if schemaErr != nil {
		t.Fatalf("EnsureSchema: %v", schemaErr)
	}
	p, err := New(driver, Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close) // no check of this test's runs beside the next test
	return p, driver
}

// newIDs draws a random tenant and id range, and removes the tenant's graph
// when the test ends. Ids are far above what PostgreSQL identities reach in
// other tests, so no test sees another's ids as another tenant's.
func newIDs(t testing.TB, driver neo4j.DriverWithContext) *ids {
	t.Helper()
	i := &ids{tenant: 1<<50 + rand.Int64N(1<<40), base: 1<<52 + rand.Int64N(1<<40)*1000, outboxID: rand.Int64N(1 << 40)}
	t.Cleanup(func() { stacktest.CleanGraph(t, driver, i.tenant) })
	return i
}

func deliver(t testing.TB, p *Projector, batch ...outbox.Message) map[int64]error {
	t.Helper()
	rejected, err := p.Deliver(context.Background(), batch)
	if err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	return rejected
}

func deliverAll(t testing.TB, p *Projector, batch ...outbox.Message) {
	t.Helper()
	if rejected := deliver(t, p, batch...); len(rejected) > 0 {
		t.Fatalf("Deliver rejected events: %v", rejected)
	}
}

func dump(t testing.TB, driver neo4j.DriverWithContext, tenantID int64) Dump {
	t.Helper()
	d, err := DumpGraph(context.Background(), driver, tenantID)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// expectGraph compares the tenant's canonical dump with want, whose lines may
// use {P}, {O}... placeholders resolved by replace.
func expectGraph(t testing.TB, driver neo4j.DriverWithContext, tenantID int64, want string, replace ...string) Dump {
	t.Helper()
	d := dump(t, driver, tenantID)
	want = strings.NewReplacer(replace...).Replace(strings.TrimLeft(want, "\n"))
	if got := d.String(); got != want {
		t.Fatalf("graph of tenant %d:\n%s\nwant:\n%s", tenantID, got, want)
	}
	return d
}

func placeholders(i *ids) []string {
	s := func(n int64) string { return itoa(i.id(n)) }
	return []string{"{T}", itoa(i.tenant), "{P1}", s(1), "{P2}", s(2), "{P3}", s(3), "{C}", s(10), "{C2}", s(11),
		"{O1}", s(20), "{O2}", s(21), "{U}", s(30)}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestEveryEventTypeApplied(t *testing.T) {
	p, driver := liveProjector(t)
	i := newIDs(t, driver)
	var batch []outbox.Message
	for _, ev := range everyEvent(i.id(1), i.id(20), i.id(30), i.id(10)) {
		batch = append(batch, i.message(t, ev))
	}
	// The deleted and discontinued products exist before the batch.
	deliverAll(t, p,
		i.message(t, events.ProductCreated{ProductState: product(i.id(2), 1, "Cup", 0, "", 500, "active")}),
		i.message(t, events.ProductCreated{ProductState: product(i.id(3), 1, "Gone", i.id(10), "Kitchen", 100, "active")}),
		i.message(t, orderPlaced(i.id(21), i.id(30), events.OrderLine{LineNo: 1, ProductID: i.id(2), Quantity: 1, UnitPriceCents: 500})))
	deliverAll(t, p, batch...)
	d := expectGraph(t, driver, i.tenant, `
(:Category {C} {name: "Kitchen"})
(:Customer {U} {country_code: "DE", segment: "retail"})
(:Order {O1} {confirmed_at: datetime("2026-05-01T13:00:00Z"), currency: "EUR", placed_at: datetime("2026-05-01T12:00:00Z"), shipped_at: datetime("2026-05-01T14:00:00Z"), status: "shipped", total_cents: 4997})
(:Order {O2} {cancelled_at: datetime("2026-05-01T15:00:00Z"), currency: "EUR", placed_at: datetime("2026-05-01T12:00:00Z"), status: "cancelled", total_cents: 4997})
(:Product {P1} {currency: "EUR", description: "About Big mug", name: "Big mug", price_cents: 2499, sku: "SKU-Big mug", status: "active"})
(:Product {P2} {currency: "EUR", description: "About Cup", name: "Cup", price_cents: 500, sku: "SKU-Cup", status: "discontinued"})
(:Tenant {T} {})
(:Customer {U})-[:PLACED {}]->(:Order {O1})
(:Customer {U})-[:PLACED {}]->(:Order {O2})
(:Order {O1})-[:CONTAINS {line_no: 1, quantity: 2, unit_price_cents: 1999}]->(:Product {P1})
(:Order {O2})-[:CONTAINS {line_no: 1, quantity: 1, unit_price_cents: 500}]->(:Product {P2})
(:Product {P1})-[:IN_CATEGORY {}]->(:Category {C})
`, placeholders(i)...)
	if len(d.Tombstones) != 1 || d.Tombstones[0].ID != i.id(3) {
		t.Fatalf("tombstones = %+v, want product %d's", d.Tombstones, i.id(3))
	}
	for _, n := range d.Nodes {
		if n.Label == graphmodel.LabelOrder && n.ID == i.id(20) && n.Sync.Version != 3 {
			t.Fatalf("order sync guard = %+v, want version 3", n.Sync)
		}
	}
}

// Everything applied twice, as one batch, event by event and as one prepared
// batch delivered twice, leaves the graph
// and every node's sync guard as it was.
func TestReplayChangesNothing(t *testing.T) {
	p, driver := liveProjector(t)
	i := newIDs(t, driver)
	var batch []outbox.Message
	batch = append(batch,
		i.message(t, events.ProductCreated{ProductState: product(i.id(2), 1, "Cup", 0, "", 500, "active")}),
		i.message(t, events.ProductCreated{ProductState: product(i.id(3), 1, "Gone", 0, "", 100, "active")}),
		i.message(t, orderPlaced(i.id(21), i.id(30), events.OrderLine{LineNo: 1, ProductID: i.id(2), Quantity: 1, UnitPriceCents: 500})))
	for _, ev := range everyEvent(i.id(1), i.id(20), i.id(30), i.id(10)) {
		batch = append(batch, i.message(t, ev))
	}
	deliverAll(t, p, batch...)
	first := dump(t, driver, i.tenant)

	deliverAll(t, p, batch...)
	for _, m := range batch {
		deliverAll(t, p, m)
	}
	deliverAll(t, p, append(append([]outbox.Message(nil), batch...), batch...)...)
	// One prepared batch delivered twice, as the rebuild retries a chunk:
	// the same outcome both times.
	// A malformed event among them is rejected both times, alone.
	bad := i.raw("Product", i.id(99), "ProductUpdated", 1, `{"id": `)
	prepared := p.Prepare(append(append([]outbox.Message(nil), batch...), bad))
	for range 2 {
		rejected, err := p.DeliverPrepared(context.Background(), prepared)
		if err != nil || len(rejected) != 1 || !errors.Is(rejected[bad.ID], ErrInvalidEvent) {
			t.Fatalf("DeliverPrepared: %v, rejected %v; want only outbox id %d, invalid", err, rejected, bad.ID)
		}
	}
	again := dump(t, driver, i.tenant)
	if first.String() != again.String() {
		t.Fatalf("replay changed the graph:\n%s\nthen:\n%s", first, again)
	}
	if guards(first) != guards(again) {
		t.Fatalf("replay changed sync guards:\n%s\nthen:\n%s", guards(first), guards(again))
	}
}

func guards(d Dump) string {
	var sb strings.Builder
	for _, n := range append(append([]DumpNode(nil), d.Nodes...), d.Tombstones...) {
		sb.WriteString(n.Label + " " + itoa(n.ID) + " " + itoa(n.Sync.Version) + " " + itoa(n.Sync.OutboxID) + "\n")
	}
	return sb.String()
}

// One aggregate's events applied in any order, one by one or in one batch,
// end in the graph that in-order delivery gives.
func TestShuffledOrderEndsInSameGraph(t *testing.T) {
	p, driver := liveProjector(t)
	i := newIDs(t, driver)
	prep := []outbox.Message{
		i.message(t, events.ProductCreated{ProductState: product(i.id(2), 1, "Cup", 0, "", 500, "active")}),
	}
	aggregates := [][]outbox.Message{
		{ // a product whose category changes, then loses it
			i.message(t, events.ProductCreated{ProductState: product(i.id(1), 1, "Mug", i.id(10), "Kitchen", 1999, "active")}),
			i.message(t, events.ProductPriceChanged{ProductState: product(i.id(1), 2, "Mug", i.id(10), "Kitchen", 2499, "active")}),
			i.message(t, events.ProductUpdated{ProductState: product(i.id(1), 3, "Tall mug", i.id(11), "Dining", 2499, "active")}),
			i.message(t, events.ProductUpdated{ProductState: product(i.id(1), 4, "Tall mug", 0, "", 2499, "active")}),
			i.message(t, events.ProductDiscontinued{ProductState: product(i.id(1), 5, "Tall mug", 0, "", 2499, "discontinued")}),
		},
		{ // an order through its life
			i.message(t, orderPlaced(i.id(20), i.id(30), events.OrderLine{LineNo: 1, ProductID: i.id(2), Quantity: 3, UnitPriceCents: 500},
				events.OrderLine{LineNo: 2, ProductID: i.id(2), Quantity: 1, UnitPriceCents: 0})),
			i.message(t, events.OrderConfirmed{OrderState: orderState(i.id(20), 2, events.OrderStatusConfirmed, at(1), nil, nil)}),
			i.message(t, events.OrderShipped{OrderState: orderState(i.id(20), 3, events.OrderStatusShipped, at(1), at(2), nil)}),
		},
		{ // a product deleted: no late event brings it back
			i.message(t, events.ProductCreated{ProductState: product(i.id(3), 1, "Gone", 0, "", 100, "active")}),
			i.message(t, events.ProductUpdated{ProductState: product(i.id(3), 2, "Gone soon", 0, "", 100, "active")}),
			i.message(t, events.ProductDeleted{ID: i.id(3), Version: 2}),
		},
	}
	reset := func() {
		stacktest.CleanGraph(t, driver, i.tenant)
		deliverAll(t, p, prep...)
	}
	reset()
	for _, events := range aggregates {
		deliverAll(t, p, events...)
	}
	want := dump(t, driver, i.tenant).String()
	if !strings.Contains(want, "Tall mug") || strings.Contains(want, "Gone") || !strings.Contains(want, `status: "shipped"`) {
		t.Fatalf("in-order graph is not the expected one:\n%s", want)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 6; round++ {
		reset()
		var shuffled []outbox.Message
		for _, events := range aggregates {
			shuffled = append(shuffled, events...)
		}
		rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		if round%2 == 0 {
			deliverAll(t, p, shuffled...)
		} else {
			for _, m := range shuffled {
				deliverAll(t, p, m)
			}
		}
		if got := dump(t, driver, i.tenant).String(); got != want {
			t.Fatalf("round %d, order %v:\n%s\nwant:\n%s", round, outboxIDs(shuffled), got, want)
		}
	}
}

func outboxIDs(batch []outbox.Message) []int64 {
	ids := make([]int64, len(batch))
	for k, m := range batch {
		ids[k] = m.ID
	}
	return ids
}

// OrderConfirmed v2 before OrderPlaced v1: the node keeps v2's properties,
// and the late OrderPlaced still adds the lines and the customer link.
func TestLateOrderPlacedAddsFactsOnly(t *testing.T) {
	p, driver := liveProjector(t)
	i := newIDs(t, driver)
	deliverAll(t, p, i.message(t, events.ProductCreated{ProductState: product(i.id(1), 1, "Mug", 0, "", 1999, "active")}))
	placed := orderPlaced(i.id(20), i.id(30), events.OrderLine{LineNo: 1, ProductID: i.id(1), Quantity: 2, UnitPriceCents: 1999})
	placed.TotalCents = 1 // differs from the newer event: must not win
	placedMsg := i.message(t, placed)
	confirmedMsg := i.message(t, events.OrderConfirmed{OrderState: orderState(i.id(20), 2, events.OrderStatusConfirmed, at(1), nil, nil)})
	deliverAll(t, p, confirmedMsg)
	deliverAll(t, p, placedMsg)
	expectGraph(t, driver, i.tenant, `
(:Customer {U} {country_code: "DE", segment: "retail"})
(:Order {O1} {confirmed_at: datetime("2026-05-01T13:00:00Z"), currency: "EUR", placed_at: datetime("2026-05-01T12:00:00Z"), status: "confirmed", total_cents: 4997})
(:Product {P1} {currency: "EUR", description: "About Mug", name: "Mug", price_cents: 1999, sku: "SKU-Mug", status: "active"})
(:Tenant {T} {})
(:Customer {U})-[:PLACED {}]->(:Order {O1})
(:Order {O1})-[:CONTAINS {line_no: 1, quantity: 2, unit_price_cents: 1999}]->(:Product {P1})
`, placeholders(i)...)
}

// A newer OrderPlaced of an order changes the lines it has in common with
// the one before. The older one applied after it (a dead letter retried
// after the order was amended and placed again, or a replay beside sync)
// adds only the lines the graph lacks: the lines the newer event wrote keep
// its quantity and price. In the same batch another order's first
// OrderPlaced writes its line's values.
func TestStaleEventLeavesRelationshipPropertiesAlone(t *testing.T) {
	p, driver := liveProjector(t)
	i := newIDs(t, driver)
	deliverAll(t, p,
		i.message(t, events.ProductCreated{ProductState: product(i.id(1), 1, "Mug", 0, "", 1999, "active")}),
		i.message(t, events.ProductCreated{ProductState: product(i.id(2), 1, "Cup", 0, "", 500, "active")}))
	stale := i.message(t, orderPlaced(i.id(20), i.id(30),
		events.OrderLine{LineNo: 1, ProductID: i.id(1), Quantity: 1, UnitPriceCents: 1999},
		events.OrderLine{LineNo: 2, ProductID: i.id(2), Quantity: 5, UnitPriceCents: 500}))
	amended := orderPlaced(i.id(20), i.id(30), events.OrderLine{LineNo: 1, ProductID: i.id(1), Quantity: 3, UnitPriceCents: 1799})
	amended.Version = 2
	// The first OrderPlaced, then the amended one, which wins the guard
	// and changes the line it has in common with the first; then the first
	// again (retried from the DLQ), beside another order's first event.
	deliverAll(t, p, stale)
	deliverAll(t, p, i.message(t, amended))
	deliverAll(t, p, stale,
		i.message(t, orderPlaced(i.id(21), i.id(30), events.OrderLine{LineNo: 1, ProductID: i.id(1), Quantity: 4, UnitPriceCents: 1899})))
	got := dump(t, driver, i.tenant).String()
	for _, want := range []string{
		"(:Order {O1})-[:CONTAINS {line_no: 1, quantity: 3, unit_price_cents: 1799}]->(:Product {P1})",
		"(:Order {O1})-[:CONTAINS {line_no: 2, quantity: 5, unit_price_cents: 500}]->(:Product {P2})",
		"(:Order {O2})-[:CONTAINS {line_no: 1, quantity: 4, unit_price_cents: 1899}]->(:Product {P1})",
	} {
		if want = strings.NewReplacer(placeholders(i)...).Replace(want); !strings.Contains(got, want) {
			t.Errorf("graph lacks %s:\n%s", want, got)
		}
	}
}

func TestDeletedProductStaysDeleted(t *testing.T) {
	p, driver := liveProjector(t)
	i := newIDs(t, driver)
	created := i.message(t, events.ProductCreated{ProductState: product(i.id(1), 1, "Mug", i.id(10), "Kitchen", 1999, "active")})
	updated := i.message(t, events.ProductUpdated{ProductState: product(i.id(1), 2, "Mug 2", i.id(10), "Kitchen", 1999, "active")})
	deleted := i.message(t, events.ProductDeleted{ID: i.id(1), Version: 2})
	deliverAll(t, p, created)
	deliverAll(t, p, deleted)
	deliverAll(t, p, updated) // late, after the delete
	deliverAll(t, p, created) // replayed
	d := expectGraph(t, driver, i.tenant, `
(:Category {C} {name: "Kitchen"})
(:Tenant {T} {})
`, placeholders(i)...)
	if len(d.Tombstones) != 1 || d.Tombstones[0].Sync != (graphmodel.Guard{Version: 2, OutboxID: deleted.ID}) {
		t.Fatalf("tombstones = %+v", d.Tombstones)
	}
	// An order naming the deleted product is refused.
	rejected := deliver(t, p, i.message(t, orderPlaced(i.id(20), i.id(30), events.OrderLine{LineNo: 1, ProductID: i.id(1), Quantity: 1})))
	for _, err := range rejected {
		if !errors.Is(err, ErrNotProjected) || !strings.Contains(err.Error(), "was deleted") {
			t.Fatalf("rejected with %v", err)
		}
	}
	if len(rejected) != 1 {
		t.Fatalf("rejected = %v, want the order", rejected)
	}
}
