package projector

import (
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"graphsync/cypher"
	"graphsync/events"
	"graphsync/graphmodel"
	"graphsync/outbox"
)

func TestAdmission(t *testing.T) {
	const tenantA, tenantB = 5, 6
	a := &ids{tenant: tenantA}
	b := &ids{tenant: tenantB, outboxID: 100}
	p := newTestProjector(t)
	prep := func(ids *ids, ev events.Event) *item {
		it, err := p.prepare(ids.message(t, ev))
		if err != nil {
			t.Fatal(err)
		}
		return it
	}
	line := func(productID int64) events.OrderLine {
		return events.OrderLine{LineNo: 1, ProductID: productID, Quantity: 1, UnitPriceCents: 100}
	}
	created := func(id int64) events.Event {
		return events.ProductCreated{ProductState: product(id, 1, "P", 0, "", 100, "active")}
	}
	tests := []struct {
		name  string
		graph owners
		items func() []*item
		// want is, per item, "" when admitted, else a fragment of its error.
		want []string
		kind []error
	}{
		{
			name:  "product in the graph",
			graph: owners{{"Product", 7}: {tenantA}},
			items: func() []*item { return []*item{prep(a, orderPlaced(9, 11, line(7)))} },
			want:  []string{""},
		},
		{
			name:  "product not projected yet",
			items: func() []*item { return []*item{prep(a, orderPlaced(9, 11, line(7)))} },
			want:  []string{"OrderPlaced v1 (outbox id 1): lines[0].product_id: product 7 is not in the graph yet"},
			kind:  []error{ErrNotProjected},
		},
		{
			name:  "product created earlier in the batch",
			items: func() []*item { return []*item{prep(a, created(7)), prep(a, orderPlaced(9, 11, line(7)))} },
			want:  []string{"", ""},
		},
		{
			name:  "product created later in the batch",
			items: func() []*item { return []*item{prep(a, orderPlaced(9, 11, line(7))), prep(a, created(7))} },
			want:  []string{"is not in the graph yet", ""},
		},
		{
			name:  "product deleted earlier in the batch",
			graph: owners{{"Product", 7}: {tenantA}},
			items: func() []*item {
				return []*item{prep(a, events.ProductDeleted{ID: 7, Version: 2}), prep(a, orderPlaced(9, 11, line(7)))}
			},
			want: []string{"", "product 7 was deleted earlier in this batch"},
		},
		{
			name:  "tombstoned product recreated in the batch stays deleted",
			graph: owners{{"DeletedProduct", 7}: {tenantA}},
			items: func() []*item { return []*item{prep(a, created(7)), prep(a, orderPlaced(9, 11, line(7)))} },
			want:  []string{"", "product 7 was deleted"},
		},
		{
			name:  "line names another tenant's product",
			graph: owners{{"Product", 7}: {tenantB}},
			items: func() []*item { return []*item{prep(a, orderPlaced(9, 11, line(7)))} },
			want:  []string{"lines[0].product_id: product 7 belongs to another tenant"},
			kind:  []error{ErrCrossTenant},
		},
		{
			// A wait for the first line must not hide the second: it
			// would be deferred for ever instead of failing.
			name:  "first line not projected yet, second of another tenant",
			graph: owners{{"Product", 8}: {tenantB}},
			items: func() []*item {
				two := orderPlaced(9, 11, line(7), events.OrderLine{LineNo: 2, ProductID: 8, Quantity: 1, UnitPriceCents: 100})
				return []*item{prep(a, two)}
			},
			want: []string{"lines[1].product_id: product 8 belongs to another tenant"},
			kind: []error{ErrCrossTenant},
		},
		{
			name:  "first line not projected yet, second deleted",
			graph: owners{{"DeletedProduct", 8}: {tenantA}},
			items: func() []*item {
				two := orderPlaced(9, 11, line(7), events.OrderLine{LineNo: 2, ProductID: 8, Quantity: 1, UnitPriceCents: 100})
				return []*item{prep(a, two)}
			},
			want: []string{"lines[1].product_id: product 8 was deleted"},
			kind: []error{ErrNotProjected},
		},
		{
			name:  "customer of another tenant",
			graph: owners{{"Product", 7}: {tenantA}, {"Customer", 11}: {tenantB}},
			items: func() []*item { return []*item{prep(a, orderPlaced(9, 11, line(7)))} },
			want:  []string{"customer.id: customer 11 belongs to another tenant"},
			kind:  []error{ErrCrossTenant},
		},
		{
			name:  "category of another tenant",
			graph: owners{{"Category", 3}: {tenantB}},
			items: func() []*item {
				return []*item{prep(a, events.ProductCreated{ProductState: product(7, 1, "P", 3, "C", 100, "active")})}
			},
			want: []string{"category.id: category 3 belongs to another tenant"},
			kind: []error{ErrCrossTenant},
		},
		{
			name:  "update of another tenant's deleted product",
			graph: owners{{"DeletedProduct", 7}: {tenantB}},
			items: func() []*item { return []*item{prep(a, created(7))} },
			want:  []string{"aggregate_id: product 7 belongs to another tenant"},
		},
		{
			name:  "order id of another tenant",
			graph: owners{{"Order", 9}: {tenantB}},
			items: func() []*item {
				return []*item{prep(a, events.OrderConfirmed{OrderState: orderState(9, 2, events.OrderStatusConfirmed, at(1), nil, nil)})}
			},
			want: []string{"aggregate_id: order 9 belongs to another tenant"},
		},
		{
			name: "two tenants claim one id in the same batch",
			items: func() []*item {
				return []*item{prep(a, created(7)), prep(b, created(7)), prep(b, orderPlaced(9, 11, line(7)))}
			},
			want: []string{"", "product 7 belongs to another tenant", "product 7 belongs to another tenant"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a.outboxID, b.outboxID = 0, 100
			items := tc.items()
			graph := tc.graph
			if graph == nil {
				graph = owners{}
			}
			accepted, rejected := newAdmission(graphmodel.Default, graph).admit(items)
			if len(accepted)+len(rejected) != len(items) {
				t.Fatalf("%d accepted + %d rejected != %d items", len(accepted), len(rejected), len(items))
			}
			for i, it := range items {
				err := rejected[it.msg.ID]
				switch {
				case tc.want[i] == "" && err != nil:
					t.Errorf("item %d rejected: %v", i, err)
				case tc.want[i] != "" && (err == nil || !strings.Contains(err.Error(), tc.want[i])):
					t.Errorf("item %d: error %v, want one containing %q", i, err, tc.want[i])
				case i < len(tc.kind) && tc.kind[i] != nil && !errors.Is(err, tc.kind[i]):
					t.Errorf("item %d: error %v is not %v", i, err, tc.kind[i])
				}
			}
		})
	}
}

// The lookup asks who owns each id and whether its tombstone exists.
func TestOwnersParamsAskTombstones(t *testing.T) {
	a := &ids{tenant: 5}
	p := newTestProjector(t)
	order, err := p.prepare(a.message(t, orderPlaced(9, 11, events.OrderLine{LineNo: 1, ProductID: 7, Quantity: 1})))
	if err != nil {
		t.Fatal(err)
	}
	product, err := p.prepare(a.message(t, events.ProductCreated{ProductState: product(8, 1, "Kettle", 3, "Kitchen", 2500, "active")}))
	if err != nil {
		t.Fatal(err)
	}
	got := ownersParams(graphmodel.Default, []*item{order, product}, nil)
	want := map[string][]any{"ids_Order": {int64(9)}, "ids_Customer": {int64(11)}, "ids_Product": {int64(7), int64(8)},
		"ids_DeletedProduct": {int64(7), int64(8)}, "ids_Category": {int64(3)}, "ids_Tenant": {}}
	for param, ids := range want {
		if !reflect.DeepEqual(got[param], ids) {
			t.Errorf("%s = %v, want %v", param, got[param], ids)
		}
	}
	if len(got) != len(want) {
		t.Errorf("params %v, want exactly the keys of %v", got, want)
	}
}

// Every list the owner lookup reads is one ownersParams fills. A key
// missing from the map parameter is no error in Neo4j (the lookup would
// find nothing and admit a cross-tenant reference), so the two must agree.
func TestOwnersParamsFillEveryListTheLookupReads(t *testing.T) {
	b, err := cypher.NewBuilder(graphmodel.Default)
	if err != nil {
		t.Fatal(err)
	}
	var mapParam string
	for name := range cypher.OwnersParams(nil) {
		mapParam = name
	}
	params := ownersParams(graphmodel.Default, nil, nil)
	read := regexp.MustCompile(`\$`+mapParam+`\.([A-Za-z0-9_]+)`).FindAllStringSubmatch(b.OwnersQuery(), -1)
	if len(read) == 0 {
		t.Fatalf("the owner lookup reads no list of $%s", mapParam)
	}
	for _, m := range read {
		if _, ok := params[m[1]]; !ok {
			t.Errorf("the owner lookup reads $%s.%s, which ownersParams does not fill", mapParam, m[1])
		}
	}
}

// A deferred event names the aggregate it waits for (tenant, type, id), so
// a caller that keeps it (the rebuild's replay) delivers it again only after
// that aggregate's events; a rejection that is no wait names none.
func TestDeferredEventNamesTheAggregateItAwaits(t *testing.T) {
	a, b := &ids{tenant: 5}, &ids{tenant: 6, outboxID: 100}
	p := newTestProjector(t)
	var items []*item
	for _, m := range []outbox.Message{
		a.message(t, orderPlaced(9, 11, events.OrderLine{LineNo: 1, ProductID: 7, Quantity: 1, UnitPriceCents: 100})),
		b.message(t, orderPlaced(9, 11, events.OrderLine{LineNo: 1, ProductID: 8, Quantity: 1, UnitPriceCents: 100})),
	} {
		it, err := p.prepare(m)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, it)
	}
	_, rejected := newAdmission(graphmodel.Default, owners{{"Product", 8}: {5}}).admit(items)
	if got, ok := outbox.AwaitedBy(rejected[items[0].msg.ID]); !ok || got != (outbox.Awaited{TenantID: 5, AggregateType: "Product", AggregateID: 7}) {
		t.Errorf("tenant 5's order waits for %+v (%v), want tenant 5 Product 7: %v", got, ok, rejected[items[0].msg.ID])
	}
	if got, ok := outbox.AwaitedBy(rejected[items[1].msg.ID]); ok || rejected[items[1].msg.ID] == nil {
		t.Errorf("tenant 6's order naming tenant 5's product: awaits %+v (%v), error %v; want a rejection awaiting nothing", got, ok, rejected[items[1].msg.ID])
	}
}
