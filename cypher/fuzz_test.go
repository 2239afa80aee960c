package cypher

import (
	"strings"
	"testing"

	"graphsync/graphmodel"
)

// FuzzStatements feeds payload-like strings into every place a mutation can
// carry one (values, property keys, labels, relationship types) and checks
// that statement text never contains them: every emitted text must be one the
// Builder prepared from the model, and anything outside the model is refused.
func FuzzStatements(f *testing.F) {
	f.Add("Mug", "A mug", "name", "Product", "CONTAINS", int64(1), int64(7))
	f.Add("x' }) DETACH DELETE n //", "`) MATCH (m) DETACH DELETE m", "name`: 1})-[:X]->(", "Product:Admin", "IN_CATEGORY]->(x) DELETE x //", int64(2), int64(3))
	f.Add("$rows", "row.props.name", "props", "Tenant", "PLACED", int64(1), int64(1))
	f.Add("", "\x00\xff", "email", "Customer", "", int64(-1), int64(0))
	b := newBuilder(f)
	prepared := map[string]bool{}
	for _, text := range b.Texts() {
		prepared[text] = true
	}
	f.Fuzz(func(t *testing.T, value, description, key, label, relType string, tenantID, id int64) {
		mut := graphmodel.Mutations{
			Nodes: []graphmodel.NodeUpsert{
				{Label: graphmodel.LabelProduct, TenantID: tenantID, ID: id, Guard: graphmodel.Guard{Version: 1, OutboxID: 1},
					Props: map[string]any{"name": value, "description": description, "sku": value}},
				{Label: graphmodel.LabelCategory, TenantID: tenantID, ID: id, Props: map[string]any{"name": description}},
				{Label: label, TenantID: tenantID, ID: id, Props: map[string]any{key: value}},
			},
			Rels: []graphmodel.RelUpsert{
				{Type: relType, TenantID: tenantID, FromID: id, ToID: id, Props: map[string]any{key: value}},
			},
		}
		stmts, err := b.Statements(mut)
		if err != nil {
			return // refused as a whole: nothing to run
		}
		for _, s := range stmts {
			if !prepared[s.Text] {
				t.Fatalf("statement text was not prepared from the model:\n%s", s.Text)
			}
			for _, payload := range []string{value, description, key, label, relType} {
				if len(payload) >= 6 && strings.Contains(s.Text, payload) && !inModel(payload) {
					t.Fatalf("payload text %q appears in statement:\n%s", payload, s.Text)
				}
			}
		}
	})
}

// inModel reports whether s is a name of the model, which may legitimately
// appear in statement text.
func inModel(s string) bool {
	for _, text := range newBuilderTexts {
		if strings.Contains(text, s) {
			return true
		}
	}
	return false
}

var newBuilderTexts = func() []string {
	b, err := NewBuilder(graphmodel.Default)
	if err != nil {
		panic(err)
	}
	return b.Texts()
}()
