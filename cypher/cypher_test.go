package cypher

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"graphsync/graphmodel"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cypher -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("%s differs from the golden file (go test ./cypher -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func newBuilder(t testing.TB) *Builder {
	t.Helper()
	b, err := NewBuilder(graphmodel.Default)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSchemaStatementsGolden(t *testing.T) {
	golden(t, "schema", strings.Join(SchemaStatements(graphmodel.Default), ";\n")+";\n")
}

func TestStatementTextsGolden(t *testing.T) {
	b := newBuilder(t)
	texts := append(b.Texts(), b.OwnersQuery())
	for _, label := range Labels(graphmodel.Default) {
		texts = append(texts, DumpNodesQuery(label))
	}
	for _, r := range graphmodel.Default.Relationships {
		texts = append(texts, DumpRelsQuery(r))
	}
	golden(t, "statements", strings.Join(texts, ";\n\n")+";\n")
}

var at = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func sampleMutations() graphmodel.Mutations {
	return graphmodel.Mutations{
		Nodes: []graphmodel.NodeUpsert{
			{Label: graphmodel.LabelTenant, TenantID: 1, ID: 1},
			{Label: graphmodel.LabelTenant, TenantID: 1, ID: 1},
			{Label: graphmodel.LabelCategory, TenantID: 1, ID: 3, Guard: graphmodel.Guard{OutboxID: 10}, Props: map[string]any{"name": "Kitchen"}},
			{Label: graphmodel.LabelProduct, TenantID: 1, ID: 7, Guard: graphmodel.Guard{Version: 2, OutboxID: 11},
				Props: map[string]any{"sku": "SKU-7", "name": "Mug v2", "description": "", "price_cents": int64(1999), "currency": "EUR", "status": "active"}},
			// Older write of the same node, later in the batch: collapsed away.
			{Label: graphmodel.LabelProduct, TenantID: 1, ID: 7, Guard: graphmodel.Guard{Version: 1, OutboxID: 10},
				Props: map[string]any{"sku": "SKU-7", "name": "Mug v1"}},
			{Label: graphmodel.LabelCustomer, TenantID: 1, ID: 11, Guard: graphmodel.Guard{OutboxID: 12}, Props: map[string]any{"segment": "retail"}},
			{Label: graphmodel.LabelOrder, TenantID: 1, ID: 9, Guard: graphmodel.Guard{Version: 1, OutboxID: 12},
				Props: map[string]any{"status": "placed", "currency": "EUR", "total_cents": int64(3998), "placed_at": at}},
		},
		Deletes: []graphmodel.NodeDelete{{Label: graphmodel.LabelProduct, TenantID: 1, ID: 8, Guard: graphmodel.Guard{Version: 4, OutboxID: 13}}},
		Rels: []graphmodel.RelUpsert{
			{Type: graphmodel.RelInCategory, TenantID: 1, FromID: 7, ToID: 3, OutboxID: 11},
			{Type: graphmodel.RelPlaced, TenantID: 1, FromID: 11, ToID: 9, OutboxID: 12},
			{Type: graphmodel.RelContains, TenantID: 1, FromID: 9, ToID: 7, OutboxID: 12, Props: map[string]any{"line_no": int64(1), "quantity": int64(2), "unit_price_cents": int64(1999)}},
			{Type: graphmodel.RelContains, TenantID: 1, FromID: 9, ToID: 7, OutboxID: 12, Props: map[string]any{"line_no": int64(1), "quantity": int64(2), "unit_price_cents": int64(1999)}},
		},
	}
}

func TestStatementsGolden(t *testing.T) {
	stmts, err := newBuilder(t).Statements(sampleMutations())
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for _, s := range stmts {
		params, err := json.MarshalIndent(s.Params, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		sb.WriteString("// expect " + jsonString(s.Expect) + "\n" + s.Text + "\n// params\n" + string(params) + "\n\n")
	}
	golden(t, "batch", sb.String())
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The projector makes each event's rows on its own and groups them in the
// transaction: grouping rows event by event must give the statements the
// whole batch's mutations give, collapsing included.
func TestStatementsOfEventsEqualsStatementsOfTheBatch(t *testing.T) {
	b := newBuilder(t)
	mut := sampleMutations()
	whole, err := b.Statements(mut)
	if err != nil {
		t.Fatal(err)
	}
	var perEvent []*Rows
	for _, n := range mut.Nodes {
		rows, err := b.Rows(graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{n}})
		if err != nil {
			t.Fatal(err)
		}
		perEvent = append(perEvent, rows)
	}
	for _, d := range mut.Deletes {
		rows, err := b.Rows(graphmodel.Mutations{Deletes: []graphmodel.NodeDelete{d}})
		if err != nil {
			t.Fatal(err)
		}
		perEvent = append(perEvent, rows)
	}
	for _, r := range mut.Rels {
		rows, err := b.Rows(graphmodel.Mutations{Rels: []graphmodel.RelUpsert{r}})
		if err != nil {
			t.Fatal(err)
		}
		perEvent = append(perEvent, rows)
	}
	if got := b.StatementsOf(perEvent); !reflect.DeepEqual(got, whole) {
		t.Fatalf("statements of per-event rows differ from the batch's:\n%v\nwant\n%v", got, whole)
	}
}

func TestStatementsReuseText(t *testing.T) {
	b := newBuilder(t)
	first, err := b.Statements(sampleMutations())
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]bool{}
	for _, text := range b.Texts() {
		texts[text] = true
	}
	for _, s := range first {
		if !texts[s.Text] {
			t.Fatalf("statement text was not prepared by NewBuilder:\n%s", s.Text)
		}
	}
}

func TestStatementsRejectOutsideModel(t *testing.T) {
	tests := []struct {
		name string
		mut  graphmodel.Mutations
		want string
	}{
		{"unknown label", graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{{Label: "Admin", TenantID: 1, ID: 1}}}, `label "Admin" is not in the model`},
		{"personal property", graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{{Label: graphmodel.LabelCustomer, TenantID: 1, ID: 1, Props: map[string]any{"email": "a@b.c"}}}}, `property "email" is not in the model's allowlist`},
		{"wrong type", graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{{Label: graphmodel.LabelProduct, TenantID: 1, ID: 1, Props: map[string]any{"price_cents": "12"}}}}, `property price_cents: value of type string is not a int`},
		{"tenant id", graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{{Label: graphmodel.LabelProduct, TenantID: 0, ID: 1}}}, `tenant id must be > 0`},
		{"tenant node id", graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{{Label: graphmodel.LabelTenant, TenantID: 1, ID: 2}}}, `must equal tenant id`},
		{"undeletable", graphmodel.Mutations{Deletes: []graphmodel.NodeDelete{{Label: graphmodel.LabelOrder, TenantID: 1, ID: 1}}}, `not a deletable label`},
		{"unknown type", graphmodel.Mutations{Rels: []graphmodel.RelUpsert{{Type: "KNOWS", TenantID: 1, FromID: 1, ToID: 2}}}, `type "KNOWS" is not in the model`},
		{"missing rel key", graphmodel.Mutations{Rels: []graphmodel.RelUpsert{{Type: graphmodel.RelContains, TenantID: 1, FromID: 1, ToID: 2}}}, `key property line_no must be set`},
		{"fact without target", graphmodel.Mutations{Rels: []graphmodel.RelUpsert{{Type: graphmodel.RelPlaced, TenantID: 1, FromID: 1}}}, `to id must be > 0`},
	}
	b := newBuilder(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.Statements(tc.mut)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestNewBuilderRejectsBadModel(t *testing.T) {
	bad := graphmodel.Model{Labels: []graphmodel.Label{
		{Name: "Tenant", Role: graphmodel.RoleTenant},
		{Name: "Product`) DETACH DELETE (x", Role: graphmodel.RoleReference},
	}}
	if _, err := NewBuilder(bad); err == nil {
		t.Fatal("NewBuilder accepted a label that is not a plain identifier")
	}
}

// The owner lookup takes its lists in one map parameter: Neo4j caches a plan
// per size class of every list parameter, so a parameter per list made each
// new combination of list sizes a new plan in the middle of a batch.
func TestOwnersQueryTakesOneParameter(t *testing.T) {
	b := newBuilder(t)
	params := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$([A-Za-z_][A-Za-z0-9_]*)`).FindAllStringSubmatch(b.OwnersQuery(), -1) {
		params[m[1]] = true
	}
	if len(params) != 1 || !params[ownersMapParam] {
		t.Fatalf("OwnersQuery's parameters are %v, want only $%s", params, ownersMapParam)
	}
	lists := map[string]any{OwnersParam(graphmodel.LabelProduct): []any{int64(7)}}
	got := OwnersParams(lists)
	if len(got) != 1 || got[ownersMapParam] == nil {
		t.Fatalf("OwnersParams = %v, want one %q entry holding the lists", got, ownersMapParam)
	}
}

// Removes names the removal statements of the default model, and only
// those: a tombstoned Product's delete and the stale IN_CATEGORY edge's
// clear (the warm-up runs them last; their plans may hold an Eager).
func TestRemovesNamesTheRemovalStatements(t *testing.T) {
	b, err := NewBuilder(graphmodel.Default)
	if err != nil {
		t.Fatal(err)
	}
	var removals []string
	for _, text := range b.Texts() {
		if b.Removes(text) {
			removals = append(removals, text)
		}
	}
	if len(removals) != 2 || !strings.Contains(removals[0], "DETACH DELETE n") || !strings.HasSuffix(removals[1], "DELETE r") {
		t.Fatalf("removal statements:\n%s", strings.Join(removals, "\n---\n"))
	}
	if b.Removes("MATCH (n) DETACH DELETE n") {
		t.Error("a text the builder does not emit counts as a removal")
	}
}

// Node rows go out in key order, whatever the batch order: concurrent
// transactions then lock shared nodes in one order.
func TestNodeRowsInKeyOrder(t *testing.T) {
	var mut graphmodel.Mutations
	for _, k := range [][2]int64{{2, 5}, {1, 9}, {2, 3}, {1, 4}} {
		mut.Nodes = append(mut.Nodes, graphmodel.NodeUpsert{Label: graphmodel.LabelCategory, TenantID: k[0], ID: k[1],
			Guard: graphmodel.Guard{OutboxID: 10}, Props: map[string]any{"name": "c"}})
		mut.Deletes = append(mut.Deletes, graphmodel.NodeDelete{Label: graphmodel.LabelProduct, TenantID: k[0], ID: k[1] + 100,
			Guard: graphmodel.Guard{Version: 2, OutboxID: 10}})
	}
	stmts, err := newBuilder(t).Statements(mut)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, s := range stmts {
		rows := s.Params["rows"].([]any)
		if len(rows) != 4 {
			continue
		}
		var got []string
		for _, r := range rows {
			m := r.(map[string]any)
			got = append(got, fmt.Sprintf("%d/%d", m["tenant_id"], m["id"].(int64)%100))
		}
		if strings.Join(got, " ") != "1/4 1/9 2/3 2/5" {
			t.Errorf("rows of %q in order %v, want by (tenant, id)", strings.SplitN(s.Text, "\n", 3)[1], got)
		}
		checked++
	}
	if checked != 2 {
		t.Fatalf("%d statements with the four rows, want 2 (category upsert, product delete)", checked)
	}
}
