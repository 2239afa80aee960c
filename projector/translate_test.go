package projector

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"graphsync/cypher"
	"graphsync/events"
	"graphsync/graphmodel"
	"graphsync/outbox"
)

func newTestProjector(t testing.TB) *Projector {
	t.Helper()
	p, err := New(nil, Config{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTranslateProduct(t *testing.T) {
	ids := &ids{tenant: 5}
	p := newTestProjector(t)
	it, err := p.prepare(ids.message(t, events.ProductCreated{ProductState: product(7, 1, "Mug", 3, "Kitchen", 1999, "active")}))
	if err != nil {
		t.Fatal(err)
	}
	want := graphmodel.Mutations{
		Nodes: []graphmodel.NodeUpsert{
			{Label: "Tenant", TenantID: 5, ID: 5},
			{Label: "Product", TenantID: 5, ID: 7, Guard: graphmodel.Guard{Version: 1, OutboxID: 1}, Props: map[string]any{
				"sku": "SKU-Mug", "name": "Mug", "description": "About Mug", "price_cents": int64(1999), "currency": "EUR", "status": "active"}},
			{Label: "Category", TenantID: 5, ID: 3, Guard: graphmodel.Guard{OutboxID: 1}, Props: map[string]any{"name": "Kitchen"}},
		},
		Rels: []graphmodel.RelUpsert{{Type: "IN_CATEGORY", TenantID: 5, FromID: 7, ToID: 3, OutboxID: 1}},
	}
	if got, want := fmt.Sprintf("%+v", it.mut), fmt.Sprintf("%+v", want); got != want {
		t.Fatalf("mutations:\n got %s\nwant %s", got, want)
	}
	wantRefs := []ref{{label: "Product", id: 7, field: "aggregate_id"}, {label: "Category", id: 3, field: "category.id"}}
	if fmt.Sprint(it.refs) != fmt.Sprint(wantRefs) {
		t.Fatalf("refs = %v, want %v", it.refs, wantRefs)
	}

	// Without a category the product's IN_CATEGORY edge is removed (ToID 0).
	it, err = p.prepare(ids.message(t, events.ProductUpdated{ProductState: product(7, 2, "Mug", 0, "", 1999, "active")}))
	if err != nil {
		t.Fatal(err)
	}
	if rels := it.mut.Rels; len(rels) != 1 || rels[0].ToID != 0 || rels[0].Type != graphmodel.RelInCategory {
		t.Fatalf("rels = %+v, want one IN_CATEGORY removal", rels)
	}
}

func TestTranslateOrderPlaced(t *testing.T) {
	ids := &ids{tenant: 5}
	ev := orderPlaced(9, 11,
		events.OrderLine{LineNo: 1, ProductID: 7, Quantity: 2, UnitPriceCents: 1999},
		events.OrderLine{LineNo: 2, ProductID: 8, Quantity: 1, UnitPriceCents: 999})
	it, err := newTestProjector(t).prepare(ids.message(t, ev))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range it.mut.Nodes {
		got = append(got, fmt.Sprintf("%s %d %v", n.Label, n.ID, n.Guard))
	}
	for _, r := range it.mut.Rels {
		got = append(got, fmt.Sprintf("%s %d->%d %v", r.Type, r.FromID, r.ToID, r.Props))
	}
	want := []string{
		"Tenant 5 {0 0}", "Order 9 {1 1}", "Customer 11 {0 1}",
		"PLACED 11->9 map[]",
		"CONTAINS 9->7 map[line_no:1 quantity:2 unit_price_cents:1999]",
		"CONTAINS 9->8 map[line_no:2 quantity:1 unit_price_cents:999]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("mutations:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if placed := it.mut.Nodes[1].Props["placed_at"]; placed != placedAt {
		t.Fatalf("placed_at = %v", placed)
	}
	// A time set from time.Now() has nanoseconds; its row keeps
	// microseconds, and so does the graph.
	fine := time.Date(2026, 5, 1, 12, 0, 0, 123_456_789, time.FixedZone("CEST", 2*3600))
	confirmed := events.OrderConfirmed{OrderState: ev.OrderState}
	confirmed.Version, confirmed.Status, confirmed.PlacedAt, confirmed.ConfirmedAt = 2, "confirmed", fine, &fine
	later, err := newTestProjector(t).prepare(ids.message(t, confirmed))
	if err != nil {
		t.Fatal(err)
	}
	wantTime := time.Date(2026, 5, 1, 10, 0, 0, 123_456_000, time.UTC)
	for _, key := range []string{"placed_at", "confirmed_at"} {
		if got, ok := later.mut.Nodes[1].Props[key].(time.Time); !ok || !got.Equal(wantTime) || got.Location() != time.UTC {
			t.Errorf("%s = %v, want %v (UTC, to the microsecond)", key, later.mut.Nodes[1].Props[key], wantTime)
		}
	}
	mustExist := 0
	for _, r := range it.refs {
		if r.mustExist {
			mustExist++
			if r.label != graphmodel.LabelProduct {
				t.Fatalf("only products must pre-exist, got %+v", r)
			}
		}
	}
	if mustExist != 2 {
		t.Fatalf("%d refs must exist, want 2 (the lines' products)", mustExist)
	}
}

// Every event type translates into mutations the builder accepts: the
// translation writes only allowlisted keys with the model's types.
func TestTranslationFitsModel(t *testing.T) {
	ids := &ids{tenant: 5}
	p := newTestProjector(t)
	b, err := cypher.NewBuilder(graphmodel.Default)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range everyEvent(7, 9, 11, 3) {
		t.Run(ev.EventType(), func(t *testing.T) {
			it, err := p.prepare(ids.message(t, ev))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Statements(it.mut); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// everyEvent is one event of each catalog type, in an order that applies.
func everyEvent(productID, orderID, customerID, categoryID int64) []events.Event {
	line := events.OrderLine{LineNo: 1, ProductID: productID, Quantity: 2, UnitPriceCents: 1999}
	return []events.Event{
		events.ProductCreated{ProductState: product(productID, 1, "Mug", categoryID, "Kitchen", 1999, "active")},
		events.ProductUpdated{ProductState: product(productID, 2, "Big mug", categoryID, "Kitchen", 1999, "active")},
		events.ProductPriceChanged{ProductState: product(productID, 3, "Big mug", categoryID, "Kitchen", 2499, "active"), OldPriceCents: ptr(int64(1999))},
		orderPlaced(orderID, customerID, line),
		events.OrderConfirmed{OrderState: orderState(orderID, 2, events.OrderStatusConfirmed, at(1), nil, nil)},
		events.OrderShipped{OrderState: orderState(orderID, 3, events.OrderStatusShipped, at(1), at(2), nil)},
		events.OrderCancelled{OrderState: orderState(orderID+1, 2, events.OrderStatusCancelled, nil, nil, at(3))},
		events.ProductDiscontinued{ProductState: product(productID+1, 2, "Cup", 0, "", 500, "discontinued")},
		events.ProductDeleted{ID: productID + 2, Version: 3},
	}
}

func ptr[T any](v T) *T { return &v }

func TestPrepareRejectsWithNamedProblem(t *testing.T) {
	ids := &ids{tenant: 5, outboxID: 41}
	doc := map[string]any{}
	raw, _ := json.Marshal(orderPlaced(9, 11, events.OrderLine{LineNo: 1, ProductID: 7, Quantity: 1}, events.OrderLine{LineNo: 2, ProductID: 8, Quantity: 1}))
	_ = json.Unmarshal(raw, &doc)
	doc["lines"].([]any)[1].(map[string]any)["quantity"] = -3
	payload, _ := json.Marshal(doc)
	_, err := newTestProjector(t).prepare(ids.raw("Order", 9, "OrderPlaced", 1, string(payload)))
	want := "OrderPlaced v1 (outbox id 42): lines[1].quantity must be > 0, got -3"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %q", err, want)
	}
	if !errors.Is(err, ErrInvalidEvent) || !errors.Is(err, events.ErrInvalidPayload) {
		t.Fatalf("error %v does not match ErrInvalidEvent and events.ErrInvalidPayload", err)
	}

	ids.tenant = 0
	if _, err := newTestProjector(t).prepare(ids.raw("Order", 9, "OrderPlaced", 1, string(payload))); err == nil || !strings.Contains(err.Error(), "tenant_id must be > 0") {
		t.Fatalf("error = %v, want a tenant_id error", err)
	}
}

func TestPersonalDataNeverReachesMutations(t *testing.T) {
	ids := &ids{tenant: 5}
	doc := map[string]any{}
	raw, _ := json.Marshal(orderPlaced(9, 11, events.OrderLine{LineNo: 1, ProductID: 7, Quantity: 1}))
	_ = json.Unmarshal(raw, &doc)
	personal := []string{"jane@example.com", "Jane Doe", "+49 30 1234567", "1 Main St", "4111111111111111"}
	customer := doc["customer"].(map[string]any)
	customer["email"], customer["full_name"], customer["phone"], customer["address"] = personal[0], personal[1], personal[2], personal[3]
	doc["shipping_address"] = personal[3]
	doc["payment"] = map[string]any{"card_number": personal[4]}
	payload, _ := json.Marshal(doc)
	it, err := newTestProjector(t).prepare(ids.raw("Order", 9, "OrderPlaced", 1, string(payload)))
	if err != nil {
		t.Fatal(err)
	}
	rendered := fmt.Sprintf("%+v", it.mut)
	for _, value := range personal {
		if strings.Contains(rendered, value) {
			t.Fatalf("personal data %q reached the mutations: %s", value, rendered)
		}
	}
}

// What a producer typed into free text is masked before it is written, in
// every free-text property of every node an event or a row writes, and the
// row projection (drift, rebuild) masks exactly as the events do; a code
// such as the SKU is written as it is.
func TestPersonalDataInFreeTextIsMasked(t *testing.T) {
	const email, phone = "ask.planted@example.org", "+44 20 7946 0958"
	ids := &ids{tenant: 5}
	p := newTestProjector(t)
	state := product(7, 1, "Mug", 3, "Kitchen", 1999, "active")
	state.Name = "Mug " + phone
	state.Description = "Write to " + email + " for a quote."
	state.SKU = "KIT-100-250-1000" // a part number shaped like a phone number
	state.Category.Name = "Kitchen (" + email + ")"
	placed := orderPlaced(9, 11, events.OrderLine{LineNo: 1, ProductID: 7, Quantity: 1})
	placed.Customer.Segment = "vip " + phone
	var written []graphmodel.Mutations
	for _, ev := range []events.Event{events.ProductCreated{ProductState: state}, placed} {
		it, err := p.prepare(ids.message(t, ev))
		if err != nil {
			t.Fatal(err)
		}
		written = append(written, it.mut)
	}
	row := ProductRow{ID: state.ID, Version: state.Version, SKU: state.SKU, Name: state.Name, Description: state.Description,
		CategoryID: &state.Category.ID, CategoryName: state.Category.Name, PriceCents: state.PriceCents, Currency: state.Currency, Status: state.Status}
	fromRow, err := ProjectProductRow(5, row)
	if err != nil {
		t.Fatal(err)
	}
	written = append(written, fromRow, graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{
		ProjectCategoryRow(5, 3, state.Category.Name), ProjectCustomerRow(5, 11, placed.Customer.Segment, "GB")}})
	for _, mut := range written {
		rendered := fmt.Sprintf("%+v", mut)
		for _, personal := range []string{email, phone, "@", "7946"} {
			if strings.Contains(rendered, personal) {
				t.Errorf("%q reached the mutations: %s", personal, rendered)
			}
		}
	}
	// The masked text keeps the rest, the SKU stays, and events and rows
	// agree on it.
	for _, n := range written[0].Nodes {
		if n.Label == graphmodel.LabelProduct && (n.Props["description"] != "Write to [e-mail removed] for a quote." || n.Props["sku"] != state.SKU) {
			t.Errorf("description written as %q, SKU as %q", n.Props["description"], n.Props["sku"])
		}
	}
	propsOf := func(mut graphmodel.Mutations) map[string]map[string]any {
		props := map[string]map[string]any{}
		for _, n := range mut.Nodes {
			props[n.Label] = n.Props
		}
		return props
	}
	if got, want := propsOf(fromRow), propsOf(written[0]); !reflect.DeepEqual(got, want) {
		t.Errorf("the row projection writes\n %v\nthe event\n %v", got, want)
	}
	// The event as the producer wrote it is left as it was.
	if !strings.Contains(state.Description, email) {
		t.Error("masking changed the decoded event")
	}
}

// A property the model allowlists but no translation fills would be erased
// on every upsert: projector.New refuses such a model, naming the property.
func TestNewRefusesAModelPropertyNoTranslationFills(t *testing.T) {
	if _, err := New(nil, Config{}, nil); err != nil {
		t.Fatalf("the default model: %v", err)
	}
	model := graphmodel.Default
	model.Labels = slices.Clone(model.Labels)
	for i, l := range model.Labels {
		if l.Name == graphmodel.LabelProduct {
			l.Properties = append(slices.Clone(l.Properties), graphmodel.Property{Key: "weight_grams", Type: graphmodel.Int, Source: "products.weight_grams"})
			model.Labels[i] = l
		}
	}
	_, err := New(nil, Config{Model: &model}, nil)
	if err == nil || !strings.Contains(err.Error(), "Product.weight_grams") {
		t.Fatalf("New = %v, want an error naming Product.weight_grams", err)
	}
	model = graphmodel.Default
	model.Labels = slices.Clone(model.Labels)
	for i, l := range model.Labels {
		if l.Name == graphmodel.LabelOrder {
			l.AggregateType = "SalesOrder"
			model.Labels[i] = l
		}
	}
	if _, err := New(nil, Config{Model: &model}, nil); err == nil || !strings.Contains(err.Error(), "SalesOrder") {
		t.Fatalf("New = %v, want an error naming the wrong aggregate type", err)
	}
}

// NodesWritten answers for an event of any size: sync may take larger
// events than the default limits allow, and drift asks what a pending one
// will write. The order here is over the default lines limit.
func TestNodesWrittenIgnoresTheSizeLimits(t *testing.T) {
	ids := &ids{tenant: 5}
	lines := make([]events.OrderLine, events.DefaultMaxOrderLines+1)
	for i := range lines {
		lines[i] = events.OrderLine{LineNo: int32(i + 1), ProductID: int64(i + 1), Quantity: 1, UnitPriceCents: 100}
	}
	m := ids.message(t, orderPlaced(9, 11, lines...))
	nodes, err := NodesWritten(m)
	if err != nil {
		t.Fatalf("an order of %d lines: %v", len(lines), err)
	}
	var customers int
	for _, n := range nodes {
		if n.Label == graphmodel.LabelCustomer && n.ID == 11 {
			customers++
		}
	}
	if customers != 1 {
		t.Errorf("the order writes customer 11 once, got %d times in %d nodes", customers, len(nodes))
	}
}

// TestEveryRegisteredEventTranslates: each kind events registers has a
// translation, and the test list everyEvent holds one event of each.
func TestEveryRegisteredEventTranslates(t *testing.T) {
	inEveryEvent := map[string]bool{}
	for _, ev := range everyEvent(1, 2, 3, 4) {
		inEveryEvent[ev.EventType()] = true
	}
	for i, k := range events.Kinds() {
		payload, err := json.Marshal(k.Sample)
		if err != nil {
			t.Fatal(err)
		}
		m := outbox.Message{ID: int64(i + 1), TenantID: 1, AggregateType: k.AggregateType, AggregateID: k.Sample.AggregateID(),
			EventType: k.EventType, EventVersion: k.Version, Payload: payload}
		mut, err := Translate(m)
		if err != nil {
			t.Errorf("%s: %v", k.EventType, err)
			continue
		}
		if len(mut.Nodes) < 2 && len(mut.Deletes) == 0 {
			t.Errorf("%s: translation writes only %+v", k.EventType, mut)
		}
		if !inEveryEvent[k.EventType] {
			t.Errorf("everyEvent has no %s", k.EventType)
		}
	}
}
