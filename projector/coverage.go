package projector

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"graphsync/events"
	"graphsync/graphmodel"
	"graphsync/outbox"
)

// checkCoverage translates one sample of every event the catalog knows and
// checks that the translations write every property the model allowlists,
// on every label and relationship the model declares. The statements set
// each allowlisted property from the mutation, so a property added to the
// model but filled by no translation would be erased on every upsert: that
// is an error at start, not a silent wipe. It also checks that each
// aggregate label's AggregateType is the outbox aggregate_type whose events
// write it.
func checkCoverage(model graphmodel.Model) error {
	written := map[string]map[string]bool{} // label or relationship type -> property keys
	aggregateTypes := map[string]map[string]bool{}
	note := func(owner string, props map[string]any) {
		if written[owner] == nil {
			written[owner] = map[string]bool{}
		}
		for k := range props {
			written[owner][k] = true
		}
	}
	for i, ev := range sampleEvents() {
		payload, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("projector: sample %s: %w", ev.EventType(), err)
		}
		m := outbox.Message{ID: int64(i + 1), TenantID: 1, AggregateType: ev.AggregateType(), AggregateID: ev.AggregateID(),
			EventType: ev.EventType(), EventVersion: ev.EventVersion(), Payload: payload}
		decoded, err := events.Decode(events.Record{AggregateType: m.AggregateType, AggregateID: m.AggregateID,
			EventType: m.EventType, EventVersion: m.EventVersion, Payload: m.Payload})
		if err != nil {
			return fmt.Errorf("projector: sample %s does not decode: %w", ev.EventType(), err)
		}
		it, err := translate(m, decoded)
		if err != nil {
			return fmt.Errorf("projector: %w", err)
		}
		for _, n := range it.mut.Nodes {
			note(n.Label, n.Props)
			if n.Guard.Version > 0 {
				if aggregateTypes[n.Label] == nil {
					aggregateTypes[n.Label] = map[string]bool{}
				}
				aggregateTypes[n.Label][m.AggregateType] = true
			}
		}
		for _, r := range it.mut.Rels {
			note(r.Type, r.Props)
		}
	}
	for _, l := range model.Labels {
		for _, p := range l.Properties {
			if !written[l.Name][p.Key] {
				return fmt.Errorf("projector: graph model property %s.%s (from %s) is filled by no event translation; "+
					"every upsert would erase it: translate it or remove it from the model", l.Name, p.Key, p.Source)
			}
		}
		if l.Role == graphmodel.RoleAggregate {
			if types := aggregateTypes[l.Name]; len(types) != 1 || !types[l.AggregateType] {
				return fmt.Errorf("projector: aggregate label %s declares aggregate type %q, but its versioned writes come from %v",
					l.Name, l.AggregateType, slices.Sorted(mapKeys(types)))
			}
		}
	}
	for _, r := range model.Relationships {
		for _, p := range slices.Concat(r.Key, r.Properties) {
			if !written[r.Type][p.Key] {
				return fmt.Errorf("projector: graph model property %s.%s (from %s) is filled by no event translation; "+
					"every upsert would erase it: translate it or remove it from the model", r.Type, p.Key, p.Source)
			}
		}
	}
	return nil
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// sampleEvents is one valid event of every type in the catalog, each field
// set, so that translations show every property they write.
func sampleEvents() []events.Event {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	product := events.ProductState{ID: 1, Version: 1, SKU: "S", Name: "N", Description: "D", PriceCents: 100,
		Currency: "EUR", Status: events.ProductStatusActive, Category: &events.CategoryRef{ID: 2, Name: "C"}}
	order := events.OrderState{ID: 3, Version: 1, Status: events.OrderStatusPlaced, Currency: "EUR", TotalCents: 100, PlacedAt: at}
	confirmed, shipped, cancelled := order, order, order
	confirmed.Status, confirmed.ConfirmedAt = events.OrderStatusConfirmed, &at
	shipped.Status, shipped.ConfirmedAt, shipped.ShippedAt = events.OrderStatusShipped, &at, &at
	cancelled.Status, cancelled.CancelledAt = events.OrderStatusCancelled, &at
	discontinued := product
	discontinued.Status = events.ProductStatusDiscontinued
	old := int64(90)
	return []events.Event{
		events.ProductCreated{ProductState: product},
		events.ProductUpdated{ProductState: product},
		events.ProductPriceChanged{ProductState: product, OldPriceCents: &old},
		events.ProductDiscontinued{ProductState: discontinued},
		events.ProductDeleted{ID: 1, Version: 2},
		events.OrderPlaced{OrderState: order, Customer: events.CustomerRef{ID: 4, Segment: "retail", CountryCode: "DE"},
			Lines: []events.OrderLine{{LineNo: 1, ProductID: 1, Quantity: 1, UnitPriceCents: 100}}},
		events.OrderConfirmed{OrderState: confirmed},
		events.OrderShipped{OrderState: shipped},
		events.OrderCancelled{OrderState: cancelled},
	}
}
