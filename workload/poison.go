package workload

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"graphsync/events"
)

// PoisonKinds names the kinds of row PlantPoison writes, in the order it
// cycles through them: row i is of kind PoisonKinds[i%len(PoisonKinds)].
var PoisonKinds = []string{
	PoisonMalformedPayload,
	PoisonNegativeQuantity,
	PoisonUnknownEventType,
	PoisonWrongEventVersion,
	PoisonPayloadNotObject,
	PoisonAggregateMismatch,
}

// The kinds of poison row. Each is rejected by events.Decode: the first two
// and the last two with events.ErrInvalidPayload, the middle two with
// events.ErrUnknownEvent.
const (
	// PoisonMalformedPayload: a ProductCreated v2 whose fields have the wrong
	// JSON types (version and price_cents as strings, sku a number).
	PoisonMalformedPayload = "malformed-payload"
	// PoisonNegativeQuantity: an otherwise well-formed OrderPlaced v1 with a
	// line of quantity -3.
	PoisonNegativeQuantity = "negative-quantity"
	// PoisonUnknownEventType: event_type "OrderTeleported", not in the catalog.
	PoisonUnknownEventType = "unknown-event-type"
	// PoisonWrongEventVersion: a well-formed OrderConfirmed payload stored as
	// event_version 9, a version the catalog does not know.
	PoisonWrongEventVersion = "wrong-event-version"
	// PoisonPayloadNotObject: a ProductUpdated whose payload is a JSON string.
	PoisonPayloadNotObject = "payload-not-object"
	// PoisonAggregateMismatch: a valid ProductDiscontinued payload filed
	// under aggregate_type "Order".
	PoisonAggregateMismatch = "aggregate-mismatch"
)

// poisonAggregateBase keeps poison rows' aggregate ids far above any row the
// workload creates, so a poison row never holds up a real aggregate's events
// behind it (the relay delivers an aggregate's events in order).
const poisonAggregateBase = int64(1) << 52

type poisonRow struct {
	aggregateType string
	eventType     string
	eventVersion  int16
	payload       string
}

func poisonOf(kind string) poisonRow {
	const placedAt = `"placed_at": "2026-01-02T03:04:05Z"`
	switch kind {
	case PoisonMalformedPayload:
		return poisonRow{events.AggregateProduct, events.TypeProductCreated, 2,
			`{"version": "two", "sku": 42, "name": "Broken Kettle", "price_cents": "19.99", "currency": "EUR", "status": "active", "category": null}`}
	case PoisonNegativeQuantity:
		return poisonRow{events.AggregateOrder, events.TypeOrderPlaced, 1,
			`{"version": 1, "status": "placed", "currency": "EUR", "total_cents": 0, ` + placedAt + `,
			  "customer": {"id": 1, "segment": "retail"},
			  "lines": [{"line_no": 1, "product_id": 1, "quantity": -3, "unit_price_cents": 999}]}`}
	case PoisonUnknownEventType:
		return poisonRow{events.AggregateOrder, "OrderTeleported", 1,
			`{"version": 2, "status": "teleported", "currency": "EUR", "total_cents": 100, ` + placedAt + `}`}
	case PoisonWrongEventVersion:
		return poisonRow{events.AggregateOrder, events.TypeOrderConfirmed, 9,
			`{"version": 2, "status": "confirmed", "currency": "EUR", "total_cents": 100, ` + placedAt + `, "confirmed_at": "2026-01-02T04:00:00Z"}`}
	case PoisonPayloadNotObject:
		return poisonRow{events.AggregateProduct, events.TypeProductUpdated, 1, `"price went up"`}
	case PoisonAggregateMismatch:
		return poisonRow{events.AggregateOrder, events.TypeProductDiscontinued, 1,
			`{"version": 3, "sku": "SKU-X", "name": "Old Lamp", "description": "", "category": null, "price_cents": 1999, "currency": "EUR", "status": "discontinued"}`}
	}
	panic(fmt.Sprintf("workload: unknown poison kind %q", kind))
}

// PlantPoison writes n outbox rows the projector must reject, cycling through
// PoisonKinds, each in its own transaction and in plain SQL as a buggy
// producer would (bypassing events.Enqueue and its validation), and returns
// their outbox ids in order. It runs as the pool's own role: reading the ids
// back needs more than the application role may do. The rows' aggregate ids
// are random and far above any real row's.
func PlantPoison(ctx context.Context, pool *pgxpool.Pool, tenantID int64, n int) ([]int64, error) {
	if tenantID <= 0 {
		return nil, fmt.Errorf("plant poison: tenant id must be > 0, got %d", tenantID)
	}
	ids := make([]int64, 0, n)
	for i := range n {
		kind := PoisonKinds[i%len(PoisonKinds)]
		row := poisonOf(kind)
		aggregateID := poisonAggregateBase + rand.Int64N(poisonAggregateBase)
		var id int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, sqlPoisonInsert, tenantID, row.aggregateType, aggregateID,
				row.eventType, row.eventVersion, row.payload, "poison-"+kind).Scan(&id)
		})
		if err != nil {
			return ids, fmt.Errorf("plant poison row %d (%s): %w", i, kind, err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
