package events

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// The event catalogue: each event type is registered once, here, with its
// current version's Go type, the payload keys it requires, the id field
// that aggregate_id fills, its older versions (upcast on decode) and one
// valid sample. Every list of event types (decoding, Current, the
// projector's translations and coverage check, the bench ceiling) is
// derived from it, and tests fail when a derived list misses a kind.
var catalog = register(
	kindOf(ProductCreated{ProductState: sampleProductState(ProductStatusActive)}, productRequired,
		func(e *ProductCreated) *int64 { return &e.ID },
		olderVersion{1, catalogEntry{AggregateProduct, productCreatedV1Required, upcastProductCreatedV1, reflect.TypeFor[productCreatedV1]()}}),
	kindOf(ProductUpdated{ProductState: sampleProductState(ProductStatusActive)}, productRequired,
		func(e *ProductUpdated) *int64 { return &e.ID }),
	kindOf(ProductPriceChanged{ProductState: sampleProductState(ProductStatusActive), OldPriceCents: ptrTo(int64(90))}, productRequired,
		func(e *ProductPriceChanged) *int64 { return &e.ID }),
	kindOf(ProductDiscontinued{ProductState: sampleProductState(ProductStatusDiscontinued)}, productRequired,
		func(e *ProductDiscontinued) *int64 { return &e.ID }),
	kindOf(ProductDeleted{ID: 1, Version: 2}, []string{"version"}, func(e *ProductDeleted) *int64 { return &e.ID }),
	kindOf(OrderPlaced{OrderState: sampleOrderState(OrderStatusPlaced), Customer: CustomerRef{ID: 4, Segment: "retail", CountryCode: "DE"},
		Lines: []OrderLine{{LineNo: 1, ProductID: 1, Quantity: 1, UnitPriceCents: 100}}}, orderPlacedRequired,
		func(e *OrderPlaced) *int64 { return &e.ID }),
	kindOf(OrderConfirmed{OrderState: sampleOrderState(OrderStatusConfirmed)}, slices.Concat(orderRequired, []string{"confirmed_at"}),
		func(e *OrderConfirmed) *int64 { return &e.ID }),
	kindOf(OrderShipped{OrderState: sampleOrderState(OrderStatusShipped)}, slices.Concat(orderRequired, []string{"shipped_at"}),
		func(e *OrderShipped) *int64 { return &e.ID }),
	kindOf(OrderCancelled{OrderState: sampleOrderState(OrderStatusCancelled)}, slices.Concat(orderRequired, []string{"cancelled_at"}),
		func(e *OrderCancelled) *int64 { return &e.ID }),
)

// kind is one registered event type.
type kind struct {
	eventType     string
	aggregateType string
	// versions are the event_versions it decodes, the current one included.
	versions map[int16]catalogEntry
	// withID fills the id a payload may leave out; decode has already
	// checked that a present id equals aggregate_id.
	withID func(Event, int64) (Event, error)
	// sample is a valid event of the current version, every field set.
	sample Event
}

// olderVersion is a past payload shape of a kind, upcast on decode.
type olderVersion struct {
	version int16
	entry   catalogEntry
}

// kindOf registers T, the current version of an event type; sample gives
// its event_type, aggregate_type and current event_version.
func kindOf[T Event](sample T, required []string, idOf func(*T) *int64, older ...olderVersion) kind {
	k := kind{
		eventType:     sample.EventType(),
		aggregateType: sample.AggregateType(),
		versions:      map[int16]catalogEntry{sample.EventVersion(): entryOf[T](sample.AggregateType(), required)},
		withID: func(ev Event, id int64) (Event, error) {
			e, ok := ev.(T)
			if !ok { // an upcast that returns another type than its kind's
				return nil, fmt.Errorf("decodes to %T, not the current %T", ev, e)
			}
			*idOf(&e) = id
			return e, nil
		},
		sample: sample,
	}
	for _, o := range older {
		k.versions[o.version] = o.entry
	}
	return k
}

func register(kinds ...kind) map[string]kind {
	byType := make(map[string]kind, len(kinds))
	for _, k := range kinds {
		byType[k.eventType] = k
	}
	return byType
}

// Kind describes one registered event type.
type Kind struct {
	// EventType is the outbox event_type, e.g. "OrderConfirmed".
	EventType string
	// AggregateType is the outbox aggregate_type of its events.
	AggregateType string
	// Version is the current event_version.
	Version int16
	// Sample is a valid event of the current version with every field set,
	// for checks that every kind is handled (translations, coverage).
	Sample Event
}

// Kinds returns every registered event type, ordered by event type.
func Kinds() []Kind {
	var list []Kind
	for _, k := range catalog {
		list = append(list, Kind{EventType: k.eventType, AggregateType: k.aggregateType, Version: k.sample.EventVersion(), Sample: k.sample})
	}
	slices.SortFunc(list, func(a, b Kind) int { return strings.Compare(a.EventType, b.EventType) })
	return list
}

var sampleTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func sampleProductState(status string) ProductState {
	return ProductState{ID: 1, Version: 1, SKU: "S", Name: "N", Description: "D", PriceCents: 100,
		Currency: "EUR", Status: status, Category: &CategoryRef{ID: 2, Name: "C"}}
}

func sampleOrderState(status string) OrderState {
	s := OrderState{ID: 3, Version: 1, Status: status, Currency: "EUR", TotalCents: 100, PlacedAt: sampleTime}
	at := sampleTime
	switch status {
	case OrderStatusConfirmed:
		s.ConfirmedAt = &at
	case OrderStatusShipped:
		s.ConfirmedAt, s.ShippedAt = &at, &at
	case OrderStatusCancelled:
		s.CancelledAt = &at
	}
	return s
}

func ptrTo[T any](v T) *T { return &v }
