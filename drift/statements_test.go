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
