package events

import "errors"

// Aggregate types, as stored in outbox_messages.aggregate_type.
const (
	AggregateProduct = "Product"
	AggregateOrder   = "Order"
)

// Event types, as stored in outbox_messages.event_type.
const (
	TypeProductCreated      = "ProductCreated"
	TypeProductUpdated      = "ProductUpdated"
	TypeProductPriceChanged = "ProductPriceChanged"
	TypeProductDiscontinued = "ProductDiscontinued"
	TypeProductDeleted      = "ProductDeleted"
	TypeOrderPlaced         = "OrderPlaced"
	TypeOrderConfirmed      = "OrderConfirmed"
	TypeOrderShipped        = "OrderShipped"
	TypeOrderCancelled      = "OrderCancelled"
)

// Event is one domain event in its current version.
type Event interface {
	// AggregateType is "Product" or "Order".
	AggregateType() string
	// AggregateID is the id of the affected products or sales_orders row.
	AggregateID() int64
	// EventType is the outbox event_type, e.g. "OrderConfirmed".
	EventType() string
	// EventVersion is the payload shape version written by Enqueue.
	EventVersion() int16
	// AggregateVersion is products.version or sales_orders.version after the change.
	AggregateVersion() int64
	// Validate reports the first problem with the event's fields, naming the field.
	Validate() error
}

// Sentinel errors callers branch on (wrapped with detail).
var (
	// ErrUnknownEvent: the (event_type, event_version) pair is not in the catalog.
	ErrUnknownEvent = errors.New("unknown event")
	// ErrInvalidPayload: the payload does not decode, lacks required fields,
	// has wrong types or fails validation.
	ErrInvalidPayload = errors.New("invalid payload")
)
