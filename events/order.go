package events

import (
	"fmt"
	"slices"
	"time"
)

// Order statuses (sales_orders.status).
const (
	OrderStatusPlaced    = "placed"
	OrderStatusConfirmed = "confirmed"
	OrderStatusShipped   = "shipped"
	OrderStatusCancelled = "cancelled"
)

const maxSegmentLen = 64

// OrderState is a sales order's whole non-personal header after a change;
// every Order event carries it. shipping_address is personal data and is
// never part of an event.
type OrderState struct {
	// ID is sales_orders.id; it equals aggregate_id. Optional in stored payloads.
	ID int64 `json:"id"`
	// Version is sales_orders.version after the change. Required, >= 1.
	Version int64 `json:"version"`
	// Status must match the event: OrderPlaced "placed", OrderConfirmed
	// "confirmed", OrderShipped "shipped", OrderCancelled "cancelled".
	Status string `json:"status"`
	// Currency is an ISO 4217 code, e.g. "EUR".
	Currency    string     `json:"currency"`
	TotalCents  int64      `json:"total_cents"`
	PlacedAt    time.Time  `json:"placed_at"`
	ConfirmedAt *time.Time `json:"confirmed_at,omitempty"`
	ShippedAt   *time.Time `json:"shipped_at,omitempty"`
	CancelledAt *time.Time `json:"cancelled_at,omitempty"`
}

// AggregateType implements Event.
func (OrderState) AggregateType() string { return AggregateOrder }

// AggregateID implements Event.
func (s OrderState) AggregateID() int64 { return s.ID }

// AggregateVersion implements Event.
func (s OrderState) AggregateVersion() int64 { return s.Version }

func (s OrderState) validate(eventType, status string) error {
	if err := checkVersion(s.Version); err != nil {
		return err
	}
	if s.Status != status {
		return fmt.Errorf("status must be %q in %s, got %.64q", status, eventType, s.Status)
	}
	if err := checkCurrency("currency", s.Currency); err != nil {
		return err
	}
	if s.TotalCents < 0 {
		return fmt.Errorf("total_cents must be >= 0, got %d", s.TotalCents)
	}
	if s.PlacedAt.IsZero() {
		return fmt.Errorf("placed_at is missing or the zero time (0001-01-01T00:00:00Z): it must say when the order was placed")
	}
	// The event's own transition must carry its timestamp.
	switch status {
	case OrderStatusConfirmed:
		if s.ConfirmedAt == nil {
			return fmt.Errorf("confirmed_at is required in %s", eventType)
		}
	case OrderStatusShipped:
		if s.ShippedAt == nil {
			return fmt.Errorf("shipped_at is required in %s", eventType)
		}
	case OrderStatusCancelled:
		if s.CancelledAt == nil {
			return fmt.Errorf("cancelled_at is required in %s", eventType)
		}
	}
	return nil
}

// orderRequired are the payload keys every Order event must have.
var orderRequired = []string{"version", "status", "currency", "total_cents", "placed_at"}

// CustomerRef is the ordering customer's non-personal attributes. A producer
// may add more (email, full_name...): they are ignored on decode and never
// reach the graph.
type CustomerRef struct {
	// ID is customers.id. Required, > 0.
	ID int64 `json:"id"`
	// Segment is customers.segment, e.g. "retail". Required.
	Segment string `json:"segment"`
	// CountryCode is customers.country_code (ISO 3166-1 alpha-2); empty when NULL.
	CountryCode string `json:"country_code,omitempty"`
}

// OrderLine is one order_lines row.
type OrderLine struct {
	LineNo         int32 `json:"line_no"`
	ProductID      int64 `json:"product_id"`
	Quantity       int32 `json:"quantity"`
	UnitPriceCents int64 `json:"unit_price_cents"`
}

// OrderPlaced (v1): a sales order and its lines were inserted.
type OrderPlaced struct {
	OrderState
	Customer CustomerRef `json:"customer"`
	// Lines are the order's lines; at least one.
	Lines []OrderLine `json:"lines"`
}

var orderPlacedRequired = slices.Concat(orderRequired, []string{
	"customer", "customer.id", "customer.segment", "lines",
	"lines[].line_no", "lines[].product_id", "lines[].quantity", "lines[].unit_price_cents",
})

// EventType implements Event.
func (OrderPlaced) EventType() string { return TypeOrderPlaced }

// EventVersion implements Event.
func (OrderPlaced) EventVersion() int16 { return 1 }

// Validate implements Event.
func (e OrderPlaced) Validate() error {
	if err := e.validate(TypeOrderPlaced, OrderStatusPlaced); err != nil {
		return err
	}
	if e.Customer.ID <= 0 {
		return fmt.Errorf("customer.id must be > 0, got %d", e.Customer.ID)
	}
	if err := checkText("customer.segment", e.Customer.Segment, 1, maxSegmentLen); err != nil {
		return err
	}
	if e.Customer.CountryCode != "" && !isUpperASCII(e.Customer.CountryCode, 2) {
		return fmt.Errorf("customer.country_code must be two upper-case letters, got %.64q", e.Customer.CountryCode)
	}
	if len(e.Lines) == 0 {
		return fmt.Errorf("lines must not be empty")
	}
	seen := make(map[int32]int, len(e.Lines))
	for i, line := range e.Lines {
		if line.LineNo <= 0 {
			return fmt.Errorf("lines[%d].line_no must be > 0, got %d", i, line.LineNo)
		}
		if j, dup := seen[line.LineNo]; dup {
			return fmt.Errorf("lines[%d].line_no %d repeats lines[%d]", i, line.LineNo, j)
		}
		seen[line.LineNo] = i
		if line.ProductID <= 0 {
			return fmt.Errorf("lines[%d].product_id must be > 0, got %d", i, line.ProductID)
		}
		if line.Quantity <= 0 {
			return fmt.Errorf("lines[%d].quantity must be > 0, got %d", i, line.Quantity)
		}
		if line.UnitPriceCents < 0 {
			return fmt.Errorf("lines[%d].unit_price_cents must be >= 0, got %d", i, line.UnitPriceCents)
		}
	}
	return nil
}

// OrderConfirmed (v1): status became "confirmed"; confirmed_at is required.
type OrderConfirmed struct{ OrderState }

// EventType implements Event.
func (OrderConfirmed) EventType() string { return TypeOrderConfirmed }

// EventVersion implements Event.
func (OrderConfirmed) EventVersion() int16 { return 1 }

// Validate implements Event.
func (e OrderConfirmed) Validate() error {
	return e.validate(TypeOrderConfirmed, OrderStatusConfirmed)
}

// OrderShipped (v1): status became "shipped"; shipped_at is required.
type OrderShipped struct{ OrderState }

// EventType implements Event.
func (OrderShipped) EventType() string { return TypeOrderShipped }

// EventVersion implements Event.
func (OrderShipped) EventVersion() int16 { return 1 }

// Validate implements Event.
func (e OrderShipped) Validate() error { return e.validate(TypeOrderShipped, OrderStatusShipped) }

// OrderCancelled (v1): status became "cancelled"; cancelled_at is required.
type OrderCancelled struct{ OrderState }

// EventType implements Event.
func (OrderCancelled) EventType() string { return TypeOrderCancelled }

// EventVersion implements Event.
func (OrderCancelled) EventVersion() int16 { return 1 }

// Validate implements Event.
func (e OrderCancelled) Validate() error {
	return e.validate(TypeOrderCancelled, OrderStatusCancelled)
}
