package retrieve

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap/zaptest"

	"graphsync/events"
	"graphsync/internal/stacktest"
	"graphsync/outbox"
	"graphsync/projector"
)

var (
	schemaOnce sync.Once
	schemaErr  error
)

// tenantGraph writes one tenant's graph through the real projector, as sync
// does. Neo4j is shared by every test and ids must be unique across tenants,
// so each fixture draws its own tenant and id range.
type tenantGraph struct {
	t        testing.TB
	driver   neo4j.DriverWithContext
	sink     *projector.Projector
	tenant   int64
	base     int64
	outboxID int64
}

func newTenantGraph(t testing.TB) *tenantGraph {
	t.Helper()
	driver := stacktest.Neo4j(t)
	schemaOnce.Do(func() { schemaErr = projector.EnsureSchema(context.Background(), driver) })
	if schemaErr != nil {
		t.Fatalf("EnsureSchema: %v", schemaErr)
	}
	sink, err := projector.New(driver, projector.Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	g := &tenantGraph{t: t, driver: driver, sink: sink,
		tenant: 1<<50 + rand.Int64N(1<<40), base: 1<<52 + rand.Int64N(1<<40)*1000, outboxID: rand.Int64N(1 << 40)}
	t.Cleanup(func() { stacktest.CleanGraph(t, driver, g.tenant) })
	return g
}

func (g *tenantGraph) id(n int64) int64 { return g.base + n }

// apply delivers events in one batch and fails the test on any rejection.
func (g *tenantGraph) apply(evs ...events.Event) {
	g.t.Helper()
	var batch []outbox.Message
	for _, ev := range evs {
		payload, err := json.Marshal(ev)
		if err != nil {
			g.t.Fatal(err)
		}
		g.outboxID++
		batch = append(batch, outbox.Message{ID: g.outboxID, TenantID: g.tenant, AggregateType: ev.AggregateType(),
			AggregateID: ev.AggregateID(), EventType: ev.EventType(), EventVersion: ev.EventVersion(),
			Payload: payload, OccurredAt: fixtureTime, Attempts: 1})
	}
	rejected, err := g.sink.Deliver(context.Background(), batch)
	if err != nil || len(rejected) != 0 {
		g.t.Fatalf("deliver: rejected %v, err %v", rejected, err)
	}
}

var fixtureTime = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func (g *tenantGraph) product(n, version int64, name, description string, category int64, categoryName string, priceCents int64) events.ProductState {
	s := events.ProductState{ID: g.id(n), Version: version, SKU: "SKU-" + name, Name: name, Description: description,
		PriceCents: priceCents, Currency: "EUR", Status: events.ProductStatusActive}
	if category != 0 {
		s.Category = &events.CategoryRef{ID: g.id(category), Name: categoryName}
	}
	return s
}

func (g *tenantGraph) order(n, customer int64, segment, country string, lines ...events.OrderLine) events.OrderPlaced {
	return events.OrderPlaced{
		OrderState: events.OrderState{ID: g.id(n), Version: 1, Status: events.OrderStatusPlaced, Currency: "EUR",
			TotalCents: 1000, PlacedAt: fixtureTime},
		Customer: events.CustomerRef{ID: g.id(customer), Segment: segment, CountryCode: country},
		Lines:    lines,
	}
}

func (g *tenantGraph) line(no int32, product int64, quantity int32) events.OrderLine {
	return events.OrderLine{LineNo: no, ProductID: g.id(product), Quantity: quantity, UnitPriceCents: 1000}
}

// shop writes a small fixed shop: three products in two categories, three
// customers, three orders (one shipped).
func (g *tenantGraph) shop() {
	g.apply(
		events.ProductCreated{ProductState: g.product(11, 1, "Electric Kettle", "Boils water in a minute. Two-year warranty.", 1, "Kitchen", 2999)},
		events.ProductCreated{ProductState: g.product(12, 1, "Wireless Speaker", "Bluetooth speaker with deep bass.", 2, "Audio", 4999)},
		events.ProductCreated{ProductState: g.product(13, 1, "Coffee Grinder", "Burr grinder for fresh coffee.", 1, "Kitchen", 3999)},
	)
	g.apply(
		g.order(31, 21, "retail", "DE", g.line(1, 11, 1), g.line(2, 13, 2)),
		g.order(32, 22, "vip", "FR", g.line(1, 11, 2), g.line(2, 12, 1)),
		g.order(33, 23, "retail", "DE", g.line(1, 11, 1), g.line(2, 13, 1)),
	)
	shipped := fixtureTime.Add(24 * time.Hour)
	g.apply(events.OrderShipped{OrderState: events.OrderState{ID: g.id(32), Version: 2, Status: events.OrderStatusShipped,
		Currency: "EUR", TotalCents: 1000, PlacedAt: fixtureTime, ShippedAt: &shipped}})
}

func retriever(t testing.TB, driver neo4j.DriverWithContext, cfg Config) *Retriever {
	t.Helper()
	r, err := New(driver, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
