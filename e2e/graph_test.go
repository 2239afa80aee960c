package e2e

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/graphmodel"
)

// The graph the tests expect, derived from PostgreSQL by the tests' own SQL.
// It spells out the mapping rather than calling the projector; the pure test
// TestExpectedMappingMatchesGraphModel keeps it in step with graphmodel.
//
//   - (:Tenant {tenant_id, id = tenant_id}) for every tenant with an applied
//     event (every event merges its tenant's node).
//   - (:Category) for every category a product names, or a Product event
//     named (a deleted product's category stays); (:Customer) for every
//     customer with an order (only OrderPlaced names customers). Both are
//     reference nodes: sync_version 0, sync_outbox_id "the highest event that
//     named it", which is checked to be set but not compared.
//   - (:Product) for every product row, with its version and the outbox id of
//     its last event; (:DeletedProduct) tombstones, with no properties but the
//     key and guard, for every ProductDeleted event.
//   - (:Order) for every sales order, timestamps as datetimes.
//   - IN_CATEGORY, PLACED and CONTAINS (keyed by line_no) from products,
//     sales_orders and order_lines; every relationship carries tenant_id.
//
// Personal columns (customers' email, full_name, phone, address; orders'
// shipping_address) are never selected.

// expectedNodeProps lists, per label, the properties the graph may hold
// beyond tenant_id, id and the sync guard (sync_version, sync_outbox_id).
var expectedNodeProps = map[string][]string{
	"Tenant":         nil,
	"Category":       {"name"},
	"Customer":       {"segment", "country_code"},
	"Product":        {"sku", "name", "description", "price_cents", "currency", "status"},
	"DeletedProduct": nil,
	"Order":          {"status", "currency", "total_cents", "placed_at", "confirmed_at", "shipped_at", "cancelled_at"},
}

// referenceLabels have a sync_outbox_id that the comparison checks is set
// but does not compare (it names whichever event mentioned them last).
var referenceLabels = []string{"Category", "Customer"}

// expectedRel describes a relationship type: its end labels, the properties
// that tell two relationships between the same nodes apart, and the others
// (tenant_id aside).
type expectedRel struct {
	from, to string
	key      []string
	props    []string
}

var expectedRels = map[string]expectedRel{
	"IN_CATEGORY": {from: "Product", to: "Category"},
	"PLACED":      {from: "Customer", to: "Order"},
	"CONTAINS":    {from: "Order", to: "Product", key: []string{"line_no"}, props: []string{"quantity", "unit_price_cents"}},
}

// appliedCTE is every outbox row the graph has taken in: processed rows,
// including archived ones.
const appliedCTE = `WITH applied AS (
  SELECT id, tenant_id, aggregate_type, aggregate_id, event_type, payload
  FROM outbox_messages WHERE processed_at IS NOT NULL
  UNION ALL
  SELECT id, tenant_id, aggregate_type, aggregate_id, event_type, payload
  FROM outbox_messages_archive)
`

// latestCTE follows appliedCTE: the latest applied row of each aggregate
// of the type, read once (a subquery per node read the outbox once per
// node, and took more than the 30 s query bound on a loaded machine).
func latestCTE(aggregateType string) string {
	return `, latest AS (
  SELECT tenant_id, aggregate_id, max(id) AS id FROM applied
  WHERE aggregate_type = '` + aggregateType + `' GROUP BY tenant_id, aggregate_id)
`
}

// expectedNodeQueries select, per label, tenant_id, id and the node's
// properties by name; a NULL column is an absent property.
var expectedNodeQueries = map[string]string{
	"Tenant": appliedCTE + `SELECT DISTINCT tenant_id, tenant_id AS id FROM applied`,
	"Category": appliedCTE + `
		SELECT c.tenant_id, c.id, c.name, 0::bigint AS sync_version
		FROM categories c
		WHERE EXISTS (SELECT 1 FROM products p WHERE p.tenant_id = c.tenant_id AND p.category_id = c.id)
		   OR EXISTS (SELECT 1 FROM applied e
		              WHERE e.tenant_id = c.tenant_id AND e.aggregate_type = 'Product'
		                AND jsonb_typeof(e.payload->'category'->'id') = 'number'
		                AND (e.payload->'category'->>'id')::bigint = c.id)`,
	"Customer": `
		SELECT c.tenant_id, c.id, c.segment, NULLIF(c.country_code, '') AS country_code, 0::bigint AS sync_version
		FROM customers c
		WHERE EXISTS (SELECT 1 FROM sales_orders o WHERE o.tenant_id = c.tenant_id AND o.customer_id = c.id)`,
	"Product": appliedCTE + latestCTE("Product") + `
		SELECT p.tenant_id, p.id, p.sku, p.name, p.description, p.price_cents, p.currency, p.status,
		       p.version::bigint AS sync_version,
		       latest.id AS sync_outbox_id
		FROM products p
		LEFT JOIN latest ON latest.tenant_id = p.tenant_id AND latest.aggregate_id = p.id`,
	"DeletedProduct": appliedCTE + `
		SELECT e.tenant_id, e.aggregate_id AS id, (e.payload->>'version')::bigint AS sync_version, e.id AS sync_outbox_id
		FROM applied e
		WHERE e.aggregate_type = 'Product' AND e.event_type = 'ProductDeleted'`,
	"Order": appliedCTE + latestCTE("Order") + `
		SELECT o.tenant_id, o.id, o.status, o.currency, o.total_cents,
		       o.placed_at, o.confirmed_at, o.shipped_at, o.cancelled_at,
		       o.version::bigint AS sync_version,
		       latest.id AS sync_outbox_id
		FROM sales_orders o
		LEFT JOIN latest ON latest.tenant_id = o.tenant_id AND latest.aggregate_id = o.id`,
}

// expectedRelQueries select tenant_id, from_id, to_id and the properties.
var expectedRelQueries = map[string]string{
	"IN_CATEGORY": `SELECT tenant_id, id AS from_id, category_id AS to_id FROM products WHERE category_id IS NOT NULL`,
	"PLACED":      `SELECT tenant_id, customer_id AS from_id, id AS to_id FROM sales_orders`,
	"CONTAINS": `SELECT tenant_id, order_id AS from_id, product_id AS to_id, line_no, quantity, unit_price_cents
		FROM order_lines`,
}

// canonGraph is a graph in canonical form: identity -> rendered properties.
type canonGraph struct {
	nodes map[string]string
	rels  map[string]string
	// problems found while reading (malformed keys, missing guards).
	problems []string
}

func newCanonGraph() *canonGraph {
	return &canonGraph{nodes: map[string]string{}, rels: map[string]string{}}
}

func nodeKey(label string, tenantID, id any) string {
	return fmt.Sprintf("(:%s {tenant_id: %s, id: %s})", label, renderValue(tenantID), renderValue(id))
}

func relKey(typ, fromLabel string, fromTenant, fromID any, toLabel string, toTenant, toID any, keyProps map[string]any) string {
	var key []string
	for _, k := range sortedKeys(keyProps) {
		key = append(key, k+": "+renderValue(keyProps[k]))
	}
	return fmt.Sprintf("%s-[:%s {%s}]->%s", nodeKey(fromLabel, fromTenant, fromID), typ, strings.Join(key, ", "),
		nodeKey(toLabel, toTenant, toID))
}

// renderProps renders properties sorted by key; nil values are absent.
func renderProps(props map[string]any) string {
	var parts []string
	for _, k := range sortedKeys(props) {
		if props[k] == nil {
			continue
		}
		parts = append(parts, k+": "+renderValue(props[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// renderValue gives one form to equal values whatever side they came from:
// PostgreSQL's int4 and int8 and Neo4j's integers alike, times in UTC.
func renderValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case int:
		return strconv.Itoa(x)
	case time.Time:
		return "datetime(" + x.UTC().Format(time.RFC3339Nano) + ")"
	default:
		return fmt.Sprintf("%T(%v)", v, v)
	}
}

// rowMaps runs query and returns each row as column name -> value.
func (s *stack) rowMaps(query string) ([]map[string]any, error) {
	ctx, cancel := queryCtx()
	defer cancel()
	rows, err := s.pool.Query(ctx, query)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToMap)
}

// expectedGraph derives the graph the test database should produce.
func (s *stack) expectedGraph() (*canonGraph, error) {
	g := newCanonGraph()
	for label, query := range expectedNodeQueries {
		rows, err := s.rowMaps(query)
		if err != nil {
			return nil, fmt.Errorf("expected %s nodes: %w", label, err)
		}
		if len(rows) > 0 {
			if err := checkColumns(rows[0], expectedNodeProps[label], "tenant_id", "id", "sync_version", "sync_outbox_id"); err != nil {
				return nil, fmt.Errorf("expected %s nodes: %w", label, err)
			}
		}
		for _, row := range rows {
			key := nodeKey(label, row["tenant_id"], row["id"])
			delete(row, "tenant_id")
			delete(row, "id")
			if slices.Contains(referenceLabels, label) {
				row["sync_outbox_id"] = nil // set, not compared: see referenceLabels
			}
			g.nodes[key] = renderProps(row)
		}
	}
	for typ, query := range expectedRelQueries {
		rel := expectedRels[typ]
		rows, err := s.rowMaps(query)
		if err != nil {
			return nil, fmt.Errorf("expected %s relationships: %w", typ, err)
		}
		if len(rows) > 0 {
			if err := checkColumns(rows[0], slices.Concat(rel.key, rel.props), "tenant_id", "from_id", "to_id"); err != nil {
				return nil, fmt.Errorf("expected %s relationships: %w", typ, err)
			}
		}
		for _, row := range rows {
			keyProps := map[string]any{}
			for _, k := range rel.key {
				keyProps[k] = row[k]
				delete(row, k)
			}
			key := relKey(typ, rel.from, row["tenant_id"], row["from_id"], rel.to, row["tenant_id"], row["to_id"], keyProps)
			delete(row, "from_id")
			delete(row, "to_id")
			g.rels[key] = renderProps(row)
		}
	}
	return g, nil
}

// checkColumns checks a query selects the allowlisted properties and
// nothing else but the given bookkeeping columns, so that the SQL cannot
// drift from expectedNodeProps and expectedRels.
func checkColumns(row map[string]any, props []string, bookkeeping ...string) error {
	for column := range row {
		if !slices.Contains(props, column) && !slices.Contains(bookkeeping, column) {
			return fmt.Errorf("query selects %s, which is not an expected property", column)
		}
	}
	for _, prop := range props {
		if _, ok := row[prop]; !ok {
			return fmt.Errorf("query does not select property %s", prop)
		}
	}
	return nil
}

// graphNode and graphRel are what the tests read back from Neo4j.
type graphNode struct {
	labels []string
	props  map[string]any
}

type graphRel struct {
	typ                  string
	fromLabels, toLabels []string
	fromTenant, fromID   any
	toTenant, toID       any
	props                map[string]any
}

// readGraph reads every node of tenants, and every relationship touching
// one, from Neo4j.
func (s *stack) readGraph(tenants []int64) ([]graphNode, []graphRel, error) {
	ctx, cancel := queryCtx()
	defer cancel()
	result, err := neo4j.ExecuteQuery(ctx, s.neo4j,
		`MATCH (n) WHERE n.tenant_id IN $tenants RETURN labels(n) AS labels, properties(n) AS props`,
		map[string]any{"tenants": tenants}, neo4j.EagerResultTransformer)
	if err != nil {
		return nil, nil, fmt.Errorf("read nodes: %w", err)
	}
	var nodes []graphNode
	for _, rec := range result.Records {
		m := rec.AsMap()
		nodes = append(nodes, graphNode{labels: toStrings(m["labels"]), props: toMap(m["props"])})
	}
	result, err = neo4j.ExecuteQuery(ctx, s.neo4j, `
		MATCH (a)-[r]->(b) WHERE a.tenant_id IN $tenants OR b.tenant_id IN $tenants
		RETURN type(r) AS type, labels(a) AS fromLabels, a.tenant_id AS fromTenant, a.id AS fromID,
		       labels(b) AS toLabels, b.tenant_id AS toTenant, b.id AS toID, properties(r) AS props`,
		map[string]any{"tenants": tenants}, neo4j.EagerResultTransformer)
	if err != nil {
		return nil, nil, fmt.Errorf("read relationships: %w", err)
	}
	var rels []graphRel
	for _, rec := range result.Records {
		m := rec.AsMap()
		rels = append(rels, graphRel{
			typ: fmt.Sprint(m["type"]), fromLabels: toStrings(m["fromLabels"]), toLabels: toStrings(m["toLabels"]),
			fromTenant: m["fromTenant"], fromID: m["fromID"], toTenant: m["toTenant"], toID: m["toID"],
			props: toMap(m["props"]),
		})
	}
	return nodes, rels, nil
}

func toStrings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, item := range list {
		out = append(out, fmt.Sprint(item))
	}
	sort.Strings(out)
	return out
}

func toMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	if m == nil {
		return map[string]any{}
	}
	return m
}

// canonicalize puts what Neo4j holds in the form expectedGraph builds.
func canonicalize(nodes []graphNode, rels []graphRel) *canonGraph {
	g := newCanonGraph()
	for _, n := range nodes {
		label := strings.Join(n.labels, ":")
		props := maps(n.props)
		key := nodeKey(label, props["tenant_id"], props["id"])
		tenantID := props["tenant_id"]
		delete(props, "tenant_id")
		delete(props, "id")
		// The tenant key is derived from tenant_id, not from a row: check
		// it is that, then compare the rest with the rows.
		if graphmodel.Default.TenantKeyed(label) {
			tid, _ := tenantID.(int64)
			if got, want := props[graphmodel.KeyTenantKey], graphmodel.TenantKey(tid); got != want {
				g.problems = append(g.problems, fmt.Sprintf("%s has %s %s, want %q", key, graphmodel.KeyTenantKey, renderValue(got), want))
			}
			delete(props, graphmodel.KeyTenantKey)
		}
		if slices.Contains(referenceLabels, label) {
			if id, ok := props["sync_outbox_id"].(int64); !ok || id <= 0 {
				g.problems = append(g.problems, fmt.Sprintf("%s has no positive sync_outbox_id: %s", key, renderValue(props["sync_outbox_id"])))
			}
			delete(props, "sync_outbox_id")
		}
		if _, dup := g.nodes[key]; dup {
			g.problems = append(g.problems, "two nodes with the key "+key)
		}
		g.nodes[key] = renderProps(props)
	}
	for _, r := range rels {
		props := maps(r.props)
		keyProps := map[string]any{}
		for _, k := range expectedRels[r.typ].key {
			keyProps[k] = props[k]
			delete(props, k)
		}
		key := relKey(r.typ, strings.Join(r.fromLabels, ":"), r.fromTenant, r.fromID,
			strings.Join(r.toLabels, ":"), r.toTenant, r.toID, keyProps)
		if _, dup := g.rels[key]; dup {
			g.problems = append(g.problems, "two relationships "+key)
		}
		g.rels[key] = renderProps(props)
	}
	return g
}

func maps(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// diffSection compares one kind of entry and describes the differences,
// at most limit of each sort.
func diffSection(what string, want, got map[string]string, limit int) (string, int) {
	var missing, unexpected, changed []string
	for key, wantProps := range want {
		gotProps, ok := got[key]
		switch {
		case !ok:
			missing = append(missing, "  - "+key+" "+wantProps)
		case gotProps != wantProps:
			changed = append(changed, "  ~ "+key+"\n      want "+wantProps+"\n      got  "+gotProps)
		}
	}
	for key, gotProps := range got {
		if _, ok := want[key]; !ok {
			unexpected = append(unexpected, "  + "+key+" "+gotProps)
		}
	}
	total := len(missing) + len(unexpected) + len(changed)
	if total == 0 {
		return "", 0
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d expected, %d in the graph; %d missing from the graph (-), %d unexpected (+), %d different (~)\n",
		what, len(want), len(got), len(missing), len(unexpected), len(changed))
	for _, list := range [][]string{missing, unexpected, changed} {
		sort.Strings(list)
		for i, line := range list {
			if i == limit {
				fmt.Fprintf(&b, "  ... and %d more\n", len(list)-limit)
				break
			}
			b.WriteString(line + "\n")
		}
	}
	return b.String(), total
}

// graphSnapshot is the graph of the test's tenants, read once for the
// final checks.
type graphSnapshot struct {
	tenants []int64
	nodes   []graphNode
	rels    []graphRel
}

func (s *stack) snapshotGraph() graphSnapshot {
	s.t.Helper()
	tenants, err := s.tenantIDs()
	if err != nil {
		s.t.Fatalf("list tenants: %v", err)
	}
	nodes, rels, err := s.readGraph(tenants)
	if err != nil {
		s.t.Fatalf("read the graph: %v", err)
	}
	return graphSnapshot{tenants: tenants, nodes: nodes, rels: rels}
}

// checkGraphMatchesPostgres compares the whole graph of the test's tenants
// with what PostgreSQL says it must be, and fails the test with a readable
// diff if they differ.
func (s *stack) checkGraphMatchesPostgres(g graphSnapshot) {
	s.t.Helper()
	want, err := s.expectedGraph()
	if err != nil {
		s.t.Fatalf("derive the expected graph from PostgreSQL: %v", err)
	}
	got := canonicalize(g.nodes, g.rels)
	nodeDiff, nodeCount := diffSection("nodes", want.nodes, got.nodes, 20)
	relDiff, relCount := diffSection("relationships", want.rels, got.rels, 20)
	if nodeCount+relCount+len(got.problems) > 0 {
		s.t.Errorf("the graph does not match PostgreSQL (%d tenants):\n%s%s%s", len(g.tenants), nodeDiff, relDiff,
			strings.Join(got.problems, "\n"))
		return
	}
	s.logf("graph matches PostgreSQL: %d nodes, %d relationships over %d tenants", len(got.nodes), len(got.rels), len(g.tenants))
}
