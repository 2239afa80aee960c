package drift

import (
	"fmt"
	"testing"

	"graphsync/graphmodel"
)

// The re-projection writes each label's rows in key order, as sync does, so
// that a rebuild chunk or a repair and sync lock shared nodes (the
// categories of many products) in one order and wait for each other
// instead of deadlocking.
func TestProjectionStatementsInKeyOrder(t *testing.T) {
	var nodes []*node
	for i, category := range []int64{9, 2, 7} {
		id := int64(100 + i)
		nodes = append(nodes, &node{label: graphmodel.LabelProduct, id: id, version: 1, mut: graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{
			{Label: graphmodel.LabelProduct, TenantID: 1, ID: id, Guard: graphmodel.Guard{Version: 1}, Props: map[string]any{"name": "p"}},
			{Label: graphmodel.LabelCategory, TenantID: 1, ID: category, Props: map[string]any{"name": "c"}},
		}}})
	}
	stmts, err := projectionStatements(graphmodel.Default, nodes, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stmts {
		if st.what != "re-projected Category nodes from their rows" {
			continue
		}
		var got []int64
		for _, row := range st.params["rows"].([]map[string]any) {
			got = append(got, row["id"].(int64))
		}
		if fmt.Sprint(got) != "[2 7 9]" {
			t.Errorf("category rows in order %v, want [2 7 9]", got)
		}
		return
	}
	t.Fatalf("no Category statement among %d", len(stmts))
}

// A repair writes a reference node an aggregate's rows name only where no
// event wrote it (outbox id 0), and a reference node that is a finding of
// its own under the outbox id drift read on it, whichever comes first: a
// customer's segment sync changed after the second look is not put back
// by the repair of an older order.
func TestRepairWritesNamedReferenceNodesOnlyWhereNoEventDid(t *testing.T) {
	order := func(id, customer int64) *node {
		return &node{label: graphmodel.LabelOrder, id: id, version: 1, mut: graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{
			{Label: graphmodel.LabelOrder, TenantID: 1, ID: id, Guard: graphmodel.Guard{Version: 1}, Props: map[string]any{"status": "placed"}},
			{Label: graphmodel.LabelCustomer, TenantID: 1, ID: customer, Props: map[string]any{"segment": "retail"}},
		}}}
	}
	seenOn := int64(40)
	staleCustomer := &node{label: graphmodel.LabelCustomer, id: 7, outboxSeen: &seenOn, mut: graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{
		{Label: graphmodel.LabelCustomer, TenantID: 1, ID: 7, Props: map[string]any{"segment": "gold"}},
	}}}
	for name, nodes := range map[string][]*node{
		"the order first":    {order(3, 7), order(4, 8), staleCustomer},
		"the customer first": {staleCustomer, order(3, 7), order(4, 8)},
	} {
		stmts, err := projectionStatements(graphmodel.Default, nodes, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, st := range stmts {
			if st.what != "re-projected Customer nodes from their rows" {
				continue
			}
			for _, row := range st.params["rows"].([]map[string]any) {
				got = append(got, fmt.Sprintf("%v %v %v", row["id"], row["outbox_seen"], row["props"]))
			}
		}
		if want := "[7 40 map[segment:gold] 8 0 map[segment:retail]]"; fmt.Sprint(got) != want {
			t.Errorf("%s: customer rows %v, want %s", name, got, want)
		}
	}
}
