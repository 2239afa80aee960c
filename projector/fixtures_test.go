package projector

import (
	"encoding/json"
	"testing"
	"time"

	"graphsync/events"
	"graphsync/outbox"
)

// ids hands out a test's business ids and outbox ids. Neo4j is shared by all
// tests and ids must be unique across tenants, so every test draws its own.
type ids struct {
	tenant   int64
	base     int64
	outboxID int64
}

func (i *ids) id(n int64) int64 { return i.base + n }

// message wraps ev as the relay would hand it over, with the next outbox id.
func (i *ids) message(t testing.TB, ev events.Event) outbox.Message {
	t.Helper()
	payload, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return i.raw(ev.AggregateType(), ev.AggregateID(), ev.EventType(), ev.EventVersion(), string(payload))
}

// raw builds a message from stored columns, as a plain-SQL producer writes them.
func (i *ids) raw(aggregateType string, aggregateID int64, eventType string, eventVersion int16, payload string) outbox.Message {
	i.outboxID++
	return outbox.Message{ID: i.outboxID, TenantID: i.tenant, AggregateType: aggregateType, AggregateID: aggregateID,
		EventType: eventType, EventVersion: eventVersion, Payload: json.RawMessage(payload), OccurredAt: placedAt, Attempts: 1}
}

var placedAt = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func at(hours int) *time.Time {
	t := placedAt.Add(time.Duration(hours) * time.Hour)
	return &t
}

func product(id, version int64, name string, categoryID int64, categoryName string, priceCents int64, status string) events.ProductState {
	s := events.ProductState{ID: id, Version: version, SKU: "SKU-" + name, Name: name, Description: "About " + name,
		PriceCents: priceCents, Currency: "EUR", Status: status}
	if categoryID != 0 {
		s.Category = &events.CategoryRef{ID: categoryID, Name: categoryName}
	}
	return s
}

func orderState(id, version int64, status string, confirmed, shipped, cancelled *time.Time) events.OrderState {
	return events.OrderState{ID: id, Version: version, Status: status, Currency: "EUR", TotalCents: 4997,
		PlacedAt: placedAt, ConfirmedAt: confirmed, ShippedAt: shipped, CancelledAt: cancelled}
}

func orderPlaced(id, customerID int64, lines ...events.OrderLine) events.OrderPlaced {
	return events.OrderPlaced{
		OrderState: orderState(id, 1, events.OrderStatusPlaced, nil, nil, nil),
		Customer:   events.CustomerRef{ID: customerID, Segment: "retail", CountryCode: "DE"},
		Lines:      lines,
	}
}
