package projector

import (
	"fmt"
	"time"

	"graphsync/cypher"
	"graphsync/events"
	"graphsync/graphmodel"
	"graphsync/outbox"
)

// item is one decoded event on its way into the graph.
type item struct {
	msg  outbox.Message
	name string // "OrderPlaced v1 (outbox id 42)", for errors
	mut  graphmodel.Mutations
	// rows are mut as statement rows, made before the write transaction.
	rows *cypher.Rows
	// refs are the ids the event names; admission checks who owns them.
	refs []ref
	// creates and deletes are the aggregate nodes the event brings into or
	// out of existence, for later events of the same batch.
	creates, deletes []nodeID
}

// ref is an id an event names under its tenant.
type ref struct {
	label string
	id    int64
	// field names where in the event the id came from, for errors.
	field string
	// mustExist: the node must already be in the graph (or be created earlier
	// in the batch); the event does not create it.
	mustExist bool
}

type nodeID struct {
	label    string
	tenantID int64
	id       int64
}

func eventName(m outbox.Message) string {
	return fmt.Sprintf("%s v%d (outbox id %d)", m.EventType, m.EventVersion, m.ID)
}

// translate maps a decoded event to the mutations and references that make
// the graph reflect it. It is pure: the graph model's allowlist decides which
// fields become properties, here spelled out per event type, and e-mail
// addresses and phone numbers in free text are masked
// (graphmodel.Model.WithoutPersonalData).
func translate(m outbox.Message, ev events.Event) (*item, error) {
	it := &item{msg: m, name: eventName(m)}
	tenantID := m.TenantID
	it.mut.Nodes = append(it.mut.Nodes, graphmodel.NodeUpsert{Label: graphmodel.LabelTenant, TenantID: tenantID, ID: tenantID})
	switch e := ev.(type) {
	case events.ProductCreated:
		it.product(e.ProductState)
	case events.ProductUpdated:
		it.product(e.ProductState)
	case events.ProductPriceChanged:
		it.product(e.ProductState)
	case events.ProductDiscontinued:
		it.product(e.ProductState)
	case events.ProductDeleted:
		it.refs = append(it.refs, ref{label: graphmodel.LabelProduct, id: e.ID, field: "aggregate_id"})
		it.mut.Deletes = append(it.mut.Deletes, graphmodel.NodeDelete{Label: graphmodel.LabelProduct, TenantID: tenantID, ID: e.ID,
			Guard: graphmodel.Guard{Version: e.Version, OutboxID: m.ID}})
		it.deletes = append(it.deletes, nodeID{graphmodel.LabelProduct, tenantID, e.ID})
	case events.OrderPlaced:
		it.order(e.OrderState)
		customer := e.Customer
		it.refs = append(it.refs, ref{label: graphmodel.LabelCustomer, id: customer.ID, field: "customer.id"})
		it.mut.Nodes = append(it.mut.Nodes, graphmodel.NodeUpsert{Label: graphmodel.LabelCustomer, TenantID: tenantID, ID: customer.ID,
			Guard: graphmodel.Guard{OutboxID: m.ID},
			Props: map[string]any{"segment": customer.Segment, "country_code": nilIfEmpty(customer.CountryCode)}})
		// Lines and the customer link are facts: merged even when a newer
		// Order event already wrote the node's properties.
		it.mut.Rels = append(it.mut.Rels, graphmodel.RelUpsert{Type: graphmodel.RelPlaced, TenantID: tenantID,
			FromID: customer.ID, ToID: e.ID, OutboxID: m.ID})
		for i, line := range e.Lines {
			it.refs = append(it.refs, ref{label: graphmodel.LabelProduct, id: line.ProductID,
				field: fmt.Sprintf("lines[%d].product_id", i), mustExist: true})
			it.mut.Rels = append(it.mut.Rels, graphmodel.RelUpsert{Type: graphmodel.RelContains, TenantID: tenantID,
				FromID: e.ID, ToID: line.ProductID, OutboxID: m.ID,
				Props: map[string]any{"line_no": int64(line.LineNo), "quantity": int64(line.Quantity), "unit_price_cents": line.UnitPriceCents}})
		}
	case events.OrderConfirmed:
		it.order(e.OrderState)
	case events.OrderShipped:
		it.order(e.OrderState)
	case events.OrderCancelled:
		it.order(e.OrderState)
	default:
		// events.Decode only returns catalog types; a new one must be added here.
		return nil, &rejection{kind: ErrInvalidEvent, msg: fmt.Sprintf("%s: the projector has no translation for %T", it.name, ev)}
	}
	// Free text may hold what a producer typed into it (a contact address
	// in a description): masked here, for events and rows alike, by the
	// flags of the model whose properties the cases above spell out.
	it.mut = graphmodel.Default.WithoutPersonalData(it.mut)
	return it, nil
}

func (it *item) product(s events.ProductState) {
	tenantID, outboxID := it.msg.TenantID, it.msg.ID
	it.refs = append(it.refs, ref{label: graphmodel.LabelProduct, id: s.ID, field: "aggregate_id"})
	it.mut.Nodes = append(it.mut.Nodes, graphmodel.NodeUpsert{Label: graphmodel.LabelProduct, TenantID: tenantID, ID: s.ID,
		Guard: graphmodel.Guard{Version: s.Version, OutboxID: outboxID},
		Props: map[string]any{
			"sku":         s.SKU,
			"name":        s.Name,
			"description": s.Description,
			"price_cents": s.PriceCents,
			"currency":    s.Currency,
			"status":      s.Status,
		}})
	it.creates = append(it.creates, nodeID{graphmodel.LabelProduct, tenantID, s.ID})
	category := graphmodel.RelUpsert{Type: graphmodel.RelInCategory, TenantID: tenantID, FromID: s.ID, OutboxID: outboxID}
	if s.Category != nil {
		it.refs = append(it.refs, ref{label: graphmodel.LabelCategory, id: s.Category.ID, field: "category.id"})
		it.mut.Nodes = append(it.mut.Nodes, graphmodel.NodeUpsert{Label: graphmodel.LabelCategory, TenantID: tenantID, ID: s.Category.ID,
			Guard: graphmodel.Guard{OutboxID: outboxID}, Props: map[string]any{"name": s.Category.Name}})
		category.ToID = s.Category.ID
	}
	// With no category, ToID 0 removes the product's old IN_CATEGORY edge.
	it.mut.Rels = append(it.mut.Rels, category)
}

func (it *item) order(s events.OrderState) {
	tenantID := it.msg.TenantID
	it.refs = append(it.refs, ref{label: graphmodel.LabelOrder, id: s.ID, field: "aggregate_id"})
	it.mut.Nodes = append(it.mut.Nodes, graphmodel.NodeUpsert{Label: graphmodel.LabelOrder, TenantID: tenantID, ID: s.ID,
		Guard: graphmodel.Guard{Version: s.Version, OutboxID: it.msg.ID},
		Props: map[string]any{
			"status":       s.Status,
			"currency":     s.Currency,
			"total_cents":  s.TotalCents,
			"placed_at":    pgTime(s.PlacedAt),
			"confirmed_at": utcOrNil(s.ConfirmedAt),
			"shipped_at":   utcOrNil(s.ShippedAt),
			"cancelled_at": utcOrNil(s.CancelledAt),
		}})
	it.creates = append(it.creates, nodeID{graphmodel.LabelOrder, tenantID, s.ID})
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func utcOrNil(t *time.Time) any {
	if t == nil {
		return nil
	}
	return pgTime(*t)
}

// pgTime is a time as PostgreSQL keeps it: in UTC, to the microsecond. A
// producer that sets a state's time from time.Now() writes microseconds to
// its row (pgx drops the rest) and nanoseconds to its event; the graph
// takes the row's, so that drift compares equal values and the event path
// and the row path write the same.
func pgTime(t time.Time) time.Time {
	return t.UTC().Truncate(time.Microsecond)
}
