package projector

import (
	"fmt"
	"math"
	"time"

	"graphsync/events"
	"graphsync/graphmodel"
	"graphsync/outbox"
)

// The row projection: the graph state the business tables imply, through
// the very translation the events take (translate), so the property list and
// the mapping of each field exist once. Drift compares it with the graph and
// repair writes it back. It is pure.

// ProductRow is a products row with its category's name.
type ProductRow struct {
	ID           int64
	Version      int64
	SKU          string
	Name         string
	Description  string
	CategoryID   *int64
	CategoryName string
	PriceCents   int64
	Currency     string
	Status       string
}

// OrderRow is a sales_orders row with its customer's non-personal columns and
// its lines.
type OrderRow struct {
	ID              int64
	Version         int64
	Status          string
	Currency        string
	TotalCents      int64
	PlacedAt        time.Time
	ConfirmedAt     *time.Time
	ShippedAt       *time.Time
	CancelledAt     *time.Time
	CustomerID      int64
	CustomerSegment string
	CustomerCountry string
	Lines           []events.OrderLine
}

// ProjectProductRow returns the mutations that make the graph hold a
// product row: its node (guarded by the row's version), its category and
// IN_CATEGORY edge.
func ProjectProductRow(tenantID int64, r ProductRow) (graphmodel.Mutations, error) {
	s := events.ProductState{ID: r.ID, Version: r.Version, SKU: r.SKU, Name: r.Name, Description: r.Description,
		PriceCents: r.PriceCents, Currency: r.Currency, Status: r.Status}
	if r.CategoryID != nil {
		s.Category = &events.CategoryRef{ID: *r.CategoryID, Name: r.CategoryName}
	}
	return projectRow(tenantID, events.ProductUpdated{ProductState: s})
}

// ProjectOrderRow returns the mutations that make the graph hold an order
// row: its node (guarded by the row's version), its customer, PLACED and one
// CONTAINS edge per line.
func ProjectOrderRow(tenantID int64, r OrderRow) (graphmodel.Mutations, error) {
	s := events.OrderState{ID: r.ID, Version: r.Version, Status: r.Status, Currency: r.Currency, TotalCents: r.TotalCents,
		PlacedAt: r.PlacedAt, ConfirmedAt: r.ConfirmedAt, ShippedAt: r.ShippedAt, CancelledAt: r.CancelledAt}
	// OrderPlaced carries everything an order row holds (the customer and
	// the lines); the status only decides which event a producer writes.
	placed := events.OrderPlaced{OrderState: s, Customer: events.CustomerRef{ID: r.CustomerID, Segment: r.CustomerSegment,
		CountryCode: r.CustomerCountry}, Lines: r.Lines}
	it, err := translate(outbox.Message{TenantID: tenantID, AggregateType: events.AggregateOrder, AggregateID: r.ID,
		EventType: events.TypeOrderPlaced, EventVersion: 1}, placed)
	if err != nil {
		return graphmodel.Mutations{}, err
	}
	return it.mut, nil
}

// NodesWritten is the nodes that applying message m would upsert, by the
// decoding and translation sync uses: drift asks which reference nodes
// (categories, customers) a pending event will write. An event that does
// not decode is an error: it will write nothing. The size limits are not
// applied: sync may run with larger ones than the defaults (--max-payload-
// bytes, --max-order-lines), and an event it rejects for its size goes to
// the DLQ and stops being pending.
func NodesWritten(m outbox.Message) ([]graphmodel.NodeUpsert, error) {
	ev, err := events.DecodeWithin(events.Record{OutboxID: m.ID, AggregateType: m.AggregateType, AggregateID: m.AggregateID,
		EventType: m.EventType, EventVersion: m.EventVersion, Payload: m.Payload},
		events.Limits{MaxPayloadBytes: math.MaxInt, MaxOrderLines: math.MaxInt})
	if err != nil {
		return nil, err
	}
	it, err := translate(m, ev)
	if err != nil {
		return nil, err
	}
	return it.mut.Nodes, nil
}

// ProjectCategoryRow and ProjectCustomerRow are the reference nodes alone,
// masked as translate masks them.
func ProjectCategoryRow(tenantID, id int64, name string) graphmodel.NodeUpsert {
	return graphmodel.Default.NodeWithoutPersonalData(graphmodel.NodeUpsert{Label: graphmodel.LabelCategory, TenantID: tenantID, ID: id,
		Props: map[string]any{"name": name}})
}

// ProjectCustomerRow is a customer's node: its non-personal columns only.
func ProjectCustomerRow(tenantID, id int64, segment, countryCode string) graphmodel.NodeUpsert {
	return graphmodel.Default.NodeWithoutPersonalData(graphmodel.NodeUpsert{Label: graphmodel.LabelCustomer, TenantID: tenantID, ID: id,
		Props: map[string]any{"segment": segment, "country_code": nilIfEmpty(countryCode)}})
}

func projectRow(tenantID int64, ev events.Event) (graphmodel.Mutations, error) {
	it, err := translate(outbox.Message{TenantID: tenantID, AggregateType: ev.AggregateType(), AggregateID: ev.AggregateID(),
		EventType: ev.EventType(), EventVersion: ev.EventVersion()}, ev)
	if err != nil {
		return graphmodel.Mutations{}, fmt.Errorf("project %s row %d: %w", ev.AggregateType(), ev.AggregateID(), err)
	}
	return it.mut, nil
}
