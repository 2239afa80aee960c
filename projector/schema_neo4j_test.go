package projector

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/cypher"
	"graphsync/events"
	"graphsync/graphmodel"
)

func TestEnsureSchemaIsIdempotent(t *testing.T) {
	_, driver := liveProjector(t)
	ctx := context.Background()
	if err := EnsureSchema(ctx, driver); err != nil {
		t.Fatalf("second EnsureSchema: %v", err)
	}
	result, err := neo4j.ExecuteQuery(ctx, driver, "SHOW CONSTRAINTS YIELD name RETURN collect(name) AS names", nil, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	names, _, _ := neo4j.GetRecordValue[[]any](result.Records[0], "names")
	for _, want := range []string{"tenant_key", "category_key", "customer_key", "product_key", "deletedproduct_key", "order_key"} {
		if !containsAny(names, want) {
			t.Errorf("constraint %s missing from %v", want, names)
		}
	}
}

func containsAny(list []any, want string) bool {
	for _, v := range list {
		if v == want {
			return true
		}
	}
	return false
}

// The fulltext index serves GraphRAG lookups by product name or description,
// filtered to one tenant.
func TestFulltextIndexFindsProducts(t *testing.T) {
	p, driver := liveProjector(t)
	i := newIDs(t, driver)
	word := "zyx" + itoa(i.tenant) // unique to this test
	s := product(i.id(1), 1, "Mug", 0, "", 1999, "active")
	s.Description = "A stoneware " + word + " mug"
	deliverAll(t, p, i.message(t, events.ProductCreated{ProductState: s}),
		i.message(t, events.ProductCreated{ProductState: product(i.id(2), 1, "Plate", 0, "", 999, "active")}))
	result, err := neo4j.ExecuteQuery(context.Background(), driver,
		"CALL db.index.fulltext.queryNodes($index, $query) YIELD node WHERE node.tenant_id = $tenant_id RETURN collect(node.id) AS ids",
		map[string]any{"index": graphmodel.FulltextProductText, "query": word, "tenant_id": i.tenant}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	ids, _, _ := neo4j.GetRecordValue[[]any](result.Records[0], "ids")
	if len(ids) != 1 || ids[0] != i.id(1) {
		t.Fatalf("fulltext search for %q found %v, want [%d]", word, ids, i.id(1))
	}
}

// No statement on the hot path plans an Eager operator (which materialises
// every row of a batch before writing). The two removal statements (a
// product's tombstone, a stale IN_CATEGORY edge) cannot avoid one: Neo4j
// plans an Eager before any DELETE whose entities a later row could read.
// They run only when a product is deleted or changes category (see
// cypher's TestStatementsSkipUnchangedSingleEdges), and their plans are
// checked to hold nothing else Eager.
func TestWriteStatementsPlanWithoutEager(t *testing.T) {
	_, driver := liveProjector(t)
	b, err := cypher.NewBuilder(graphmodel.Default)
	if err != nil {
		t.Fatal(err)
	}
	texts := append(b.Texts(), b.OwnersQuery())
	clears := map[string]bool{}
	removes := func(text string) bool { return clears[text] || b.Removes(text) }
	// A repair's and a snapshot rebuild's relationship statements too: a
	// Single type's clear runs beside its merge, as sync's does.
	for _, rt := range graphmodel.Default.Relationships {
		text, err := cypher.RepairRelText(graphmodel.Default, rt.Type)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, text)
		if rt.Single {
			clear, err := cypher.RepairRelClearText(graphmodel.Default, rt.Type)
			if err != nil {
				t.Fatal(err)
			}
			texts = append(texts, clear)
			clears[clear] = true
		}
	}
	for _, text := range texts {
		result, err := neo4j.ExecuteQuery(context.Background(), driver, "EXPLAIN "+text, explainParams(), neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatalf("EXPLAIN %s: %v", text, err)
		}
		ops := planOperators(result.Summary.Plan())
		eager := 0
		for _, op := range ops {
			if op == "Eager@neo4j" {
				eager++
			}
		}
		if at := slices.Index(ops, "Eager@neo4j"); removes(text) && eager == 1 && at == 3 && strings.HasSuffix(ops[2], "Delete@neo4j") {
			// ProduceResults, EmptyResult or the count, (Detach)Delete, then
			// the one Eager: what a delete of what it has just read plans.
			continue
		}
		if eager > 0 {
			t.Errorf("plan has an Eager operator %v for:\n%s", ops, text)
		}
	}
}

func explainParams() map[string]any {
	params := cypher.OwnersParams(ownersParams(graphmodel.Default, nil, nil))
	params["rows"] = []any{}
	return params
}

// An installation whose fulltext index was created with another analyzer
// (or other fields) gets the model's index on the next migrate: an index
// analysed one way and queried another finds too little.
func TestEnsureSchemaRecreatesAChangedFulltextIndex(t *testing.T) {
	_, driver := liveProjector(t)
	ctx := context.Background()
	model := graphmodel.Default
	name := "ft_changed_" + itoa(newIDs(t, driver).tenant)
	model.Fulltext = []graphmodel.Fulltext{{Name: name, Label: graphmodel.LabelProduct, Properties: []string{"name"}}}
	t.Cleanup(func() {
		_, _ = neo4j.ExecuteQuery(context.Background(), driver, "DROP INDEX "+name+" IF EXISTS", nil, neo4j.EagerResultTransformer)
	})
	analyzer := func() (string, []any) {
		t.Helper()
		result, err := neo4j.ExecuteQuery(ctx, driver, cypher.FulltextIndexesQuery, nil, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range result.Records {
			if got, _, _ := neo4j.GetRecordValue[string](rec, "name"); got == name {
				a, _, _ := neo4j.GetRecordValue[string](rec, "analyzer")
				props, _, _ := neo4j.GetRecordValue[[]any](rec, "properties")
				return a, props
			}
		}
		t.Fatalf("fulltext index %s missing", name)
		return "", nil
	}
	if err := EnsureModelSchema(ctx, driver, model, ""); err != nil {
		t.Fatal(err)
	}
	if got, _ := analyzer(); got != cypher.DefaultFulltextAnalyzer {
		t.Fatalf("analyzer %q, want the default", got)
	}
	model.Fulltext[0].Analyzer = "english"
	// Not name and description: product_text covers those, and Neo4j
	// creates no second index on the same schema.
	model.Fulltext[0].Properties = []string{"name", "sku"}
	if err := EnsureModelSchema(ctx, driver, model, ""); err != nil {
		t.Fatal(err)
	}
	if got, props := analyzer(); got != "english" || len(props) != 3 {
		t.Fatalf("after the model changed: analyzer %q, properties %v; want english on name, sku, tenant_key", got, props)
	}
	if err := EnsureModelSchema(ctx, driver, model, ""); err != nil {
		t.Fatalf("third EnsureModelSchema: %v", err)
	}
}

// A node synced before the tenant key existed gets it from
// BackfillTenantKeys, and is then found by its tenant's fulltext query.
func TestBackfillTenantKeys(t *testing.T) {
	_, driver := liveProjector(t)
	ctx := context.Background()
	ids := newIDs(t, driver)
	if _, err := neo4j.ExecuteQuery(ctx, driver, "CREATE (:Product {tenant_id: $t, id: $id, name: 'Old Kettle'})",
		map[string]any{"t": ids.tenant, "id": ids.tenant + 1}, neo4j.EagerResultTransformer); err != nil {
		t.Fatal(err)
	}
	written, err := BackfillTenantKeys(ctx, driver, graphmodel.Default, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := neo4j.ExecuteQuery(ctx, driver, "MATCH (p:Product {tenant_id: $t}) RETURN p.tenant_key AS key",
		map[string]any{"t": ids.tenant}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	key, _, _ := neo4j.GetRecordValue[string](res.Records[0], "key")
	if written < 1 || key != graphmodel.TenantKey(ids.tenant) {
		t.Fatalf("backfill wrote %d keys; the node's is %q, want %q", written, key, graphmodel.TenantKey(ids.tenant))
	}
	if again, err := BackfillTenantKeys(ctx, driver, graphmodel.Default, ""); err != nil || again != 0 {
		t.Fatalf("a second backfill wrote %d keys (err %v), want 0", again, err)
	}
}
