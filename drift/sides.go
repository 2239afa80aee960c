package drift

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/cypher"
	"graphsync/events"
	"graphsync/graphmodel"
	"graphsync/projector"
	gsql "graphsync/sql"
)

// node is one node as one side says it should be (expected) or is (graph).
type node struct {
	label   string
	id      int64
	version int64
	props   map[string]any
	// hasVector and vectorLen, on the embedded label's nodes of the graph
	// side: whether the node holds a vector, and how many floats (props
	// holds neither the vector nor its key).
	hasVector bool
	vectorLen int64
	// rels are the relationships this node owns: for an aggregate, those
	// its events write (IN_CATEGORY of a product; PLACED into and CONTAINS
	// out of an order).
	rels []relation
	// required: the graph must hold it (an aggregate row, or a reference
	// row something refers to). A reference row nothing refers to may be in
	// the graph or not.
	required bool
	// mut is the row projection's mutations, for repair (expected side).
	mut graphmodel.Mutations
	// seen, for repair: the newer graph version the repair may overwrite
	// (the graph found ahead of its rows); 0 for none.
	seen int64
	// outboxSeen, for the repair of a reference node: the outbox id read on
	// it, which the node must still hold (cypher.RepairNodeText).
	outboxSeen *int64
	// stampsSeen, for the repair of a reference node whose stamps no event
	// can pass (ReferenceStampAhead): the stamps as drift read them, of
	// whatever type; the repair writes the node only while it still holds
	// them, and puts its outbox id back to 0.
	stampsSeen *stampsSeen
}

// stampsSeen are a node's sync_version and sync_outbox_id as read.
type stampsSeen struct{ version, outboxID any }

// relation is one relationship seen from its owner node.
type relation struct {
	typ string
	// other is the other end's id; out is true when the owner is the From end.
	other int64
	out   bool
	props map[string]any
	// Graph side only: the relationship's and the other end's tenants, the
	// other end's labels, and the relationship's element id, for repair.
	tenant, otherTenant int64
	otherLabels         []string
	elementID           string
}

// key tells relationships of an owner apart: type, direction, other end and
// the relationship's key properties (an order line's line_no).
func (r relation) key(model graphmodel.Model) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%v/%d", r.typ, r.out, r.other)
	if rt, ok := model.Relationship(r.typ); ok {
		for _, p := range rt.Key {
			fmt.Fprintf(&b, "/%s=%v", p.Key, r.props[p.Key])
		}
	}
	return b.String()
}

// ownedBy says which end of a relationship type owns it: the From end when
// it is an aggregate, else the To end.
func ownedBy(model graphmodel.Model, rt graphmodel.Relationship) (label string, out bool) {
	if from, _ := model.Label(rt.From); from.Role == graphmodel.RoleAggregate {
		return rt.From, true
	}
	return rt.To, false
}

// chunkQuery reads one chunk of the rows behind a label.
var chunkQuery = map[string]string{
	graphmodel.LabelProduct:  "DriftProducts",
	graphmodel.LabelOrder:    "DriftOrders",
	graphmodel.LabelCategory: "DriftCategories",
	graphmodel.LabelCustomer: "DriftCustomers",
}

// sample is the share of keys both sides read: ((id % 1000003) * 7919 +
// offset) % 1000 < share, the same on both sides and spread over
// consecutive ids (a plain id % 1000 would keep or drop whole runs). ids,
// when set, keeps only those keys.
type sample struct {
	offset, share int64
	ids           []int64
}

// rowsChunk reads up to limit rows of label after id `after`, in id order,
// and projects them.
func rowsChunk(ctx context.Context, q pgxQuerier, model graphmodel.Model, label string, tenant, after int64, limit int, s sample) ([]node, error) {
	name, ok := chunkQuery[label]
	if !ok {
		return nil, fmt.Errorf("no row reader for label %s", label)
	}
	rows, err := q.Query(ctx, gsql.Query(name), tenant, after, limit, s.offset, s.share, s.ids)
	if err != nil {
		return nil, fmt.Errorf("read %s rows of tenant %d: %w", label, tenant, err)
	}
	defer rows.Close()
	var out []node
	for rows.Next() {
		n, err := scanRow(model, label, tenant, rows)
		if err != nil {
			return nil, fmt.Errorf("read %s rows of tenant %d: %w", label, tenant, err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s rows of tenant %d: %w", label, tenant, err)
	}
	return out, nil
}

type pgxQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func scanRow(model graphmodel.Model, label string, tenant int64, rows pgx.Rows) (node, error) {
	switch label {
	case graphmodel.LabelProduct:
		var r projector.ProductRow
		if err := rows.Scan(&r.ID, &r.Version, &r.SKU, &r.Name, &r.Description, &r.CategoryID, &r.CategoryName,
			&r.PriceCents, &r.Currency, &r.Status); err != nil {
			return node{}, err
		}
		mut, err := projector.ProjectProductRow(tenant, r)
		if err != nil {
			return node{}, err
		}
		return fromMutations(model, label, r.ID, mut), nil
	case graphmodel.LabelOrder:
		var r projector.OrderRow
		var lineNos, quantities []int32
		var productIDs, prices []int64
		if err := rows.Scan(&r.ID, &r.Version, &r.Status, &r.Currency, &r.TotalCents, &r.PlacedAt, &r.ConfirmedAt,
			&r.ShippedAt, &r.CancelledAt, &r.CustomerID, &r.CustomerSegment, &r.CustomerCountry,
			&lineNos, &productIDs, &quantities, &prices); err != nil {
			return node{}, err
		}
		for i := range lineNos {
			r.Lines = append(r.Lines, events.OrderLine{LineNo: lineNos[i], ProductID: productIDs[i], Quantity: quantities[i], UnitPriceCents: prices[i]})
		}
		mut, err := projector.ProjectOrderRow(tenant, r)
		if err != nil {
			return node{}, err
		}
		return fromMutations(model, label, r.ID, mut), nil
	case graphmodel.LabelCategory:
		var id int64
		var name string
		var referenced bool
		if err := rows.Scan(&id, &name, &referenced); err != nil {
			return node{}, err
		}
		up := projector.ProjectCategoryRow(tenant, id, name)
		return node{label: label, id: id, props: canonicalProps(up.Props), required: referenced,
			mut: graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{up}}}, nil
	case graphmodel.LabelCustomer:
		var id int64
		var segment, country string
		var referenced bool
		if err := rows.Scan(&id, &segment, &country, &referenced); err != nil {
			return node{}, err
		}
		up := projector.ProjectCustomerRow(tenant, id, segment, country)
		return node{label: label, id: id, props: canonicalProps(up.Props), required: referenced,
			mut: graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{up}}}, nil
	}
	return node{}, fmt.Errorf("no row reader for label %s", label)
}

// fromMutations turns a row projection into the expected node and the
// relationships it owns.
func fromMutations(model graphmodel.Model, label string, id int64, mut graphmodel.Mutations) node {
	n := node{label: label, id: id, required: true, mut: mut}
	for _, up := range mut.Nodes {
		if up.Label == label && up.ID == id {
			n.version = up.Guard.Version
			n.props = canonicalProps(up.Props)
		}
	}
	for _, r := range mut.Rels {
		rt, _ := model.Relationship(r.Type)
		owner, out := ownedBy(model, rt)
		if owner != label {
			continue
		}
		rel := relation{typ: r.Type, out: out, props: canonicalProps(r.Props)}
		if out {
			if r.FromID != id || r.ToID == 0 {
				continue // no category: no edge
			}
			rel.other = r.ToID
		} else {
			if r.ToID != id {
				continue
			}
			rel.other = r.FromID
		}
		n.rels = append(n.rels, rel)
	}
	return n
}

// canonicalProps drops null values (a null property is an absent one) and
// brings times to UTC.
func canonicalProps(props map[string]any) map[string]any {
	out := make(map[string]any, len(props))
	for k, v := range props {
		switch x := v.(type) {
		case nil:
			continue
		case time.Time:
			out[k] = x.UTC()
		case *time.Time:
			if x == nil {
				continue
			}
			out[k] = x.UTC()
		case int:
			out[k] = int64(x)
		case int32:
			out[k] = int64(x)
		default:
			out[k] = v
		}
	}
	return out
}

// graphChunkQuery reads one chunk of a label's nodes of a tenant in id
// order, with the relationships they own. Labels and types come from the
// validated model; every value is a parameter.
func graphChunkQuery(model graphmodel.Model, label string) string {
	var outs, ins []string
	for _, rt := range model.Relationships {
		owner, out := ownedBy(model, rt)
		if owner != label {
			continue
		}
		if out {
			outs = append(outs, rt.Type)
		} else {
			ins = append(ins, rt.Type)
		}
	}
	relList := func(types []string, pattern string) string {
		if len(types) == 0 {
			return "[]"
		}
		return fmt.Sprintf("[%s WHERE type(r) IN [%s] | {type: type(r), other: m.id, other_tenant: m.tenant_id, "+
			"other_labels: labels(m), props: properties(r), eid: elementId(r)}]", pattern, quoteList(types))
	}
	// The embedded label's vector comes as its length (-1: a value that is
	// not a list of floats, which another writer may have left, and on
	// which size() would fail the read): drift checks no float of it.
	// Reading 20,000 products took about as long either way (1.3 s): the
	// gain is in what drift holds and decodes, not in time.
	props := "properties(n)"
	if e, ok := model.EmbeddingOf(label); ok {
		props = fmt.Sprintf("n {.*, %[1]s: CASE WHEN n.%[1]s IS NULL THEN null ELSE coalesce(%[2]s, -1) END}", e.VectorProperty, cypher.VectorSize("n", e))
	}
	return fmt.Sprintf(`MATCH (n:%s)
WHERE n.tenant_id = $tenant AND `+integerID("n")+` AND n.id > $after AND ((n.id %% 1000003) * 7919 + $offset) %% 1000 < $share
  AND ($ids IS NULL OR n.id IN $ids)
WITH n ORDER BY n.id LIMIT $limit
RETURN n.id AS id, %s AS props, %s AS outs, %s AS ins`,
		label, props, relList(outs, "(n)-[r]->(m)"), relList(ins, "(m)-[r]->(n)"))
}

// integerID is the Cypher condition that a node's id is a positive integer,
// as every id PostgreSQL gives is: the chunks page by id from 0, so an id of
// another type (a float compares with integers) would be read as no id and
// the same chunk read for ever, and an id of 0 or below would never be read.
// Nodes of the model's labels that fail it are reported by scanForeign.
// (Written out: Neo4j 5.26 answered NOT n.id IS :: INTEGER NOT NULL with
// false for a node without an id when the match used the tenant's index.)
func integerID(node string) string {
	return "(" + node + ".id IS NOT NULL AND " + node + ".id IS :: INTEGER AND " + node + ".id > 0)"
}

// withoutIntegerTenant is the Cypher condition that a node's tenant_id is
// missing or not an integer: a node no tenant's run reads (scanForeign
// reports them).
func withoutIntegerTenant(node string) string {
	return "(" + node + ".tenant_id IS NULL OR NOT " + node + ".tenant_id IS :: INTEGER)"
}

func quoteList(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = "'" + n + "'" // model identifiers: [A-Za-z0-9_] only
	}
	return strings.Join(quoted, ", ")
}

// graphRead is how drift reads the graph: from the cluster's leader
// (writers routing), with the driver's bookmarks. The second look is sound
// only if the graph read shows every write sync committed before it marked
// its outbox rows processed (ADR 0009). Sync runs in another process, so
// its bookmarks cannot travel with drift's reads, and a follower may not
// yet have applied what the leader committed: a read there would find the
// node older than the outbox says and report false drift. The leader has
// applied every transaction it acknowledged. The cost is that drift's
// reads load the leader rather than a follower; on one server (Community
// Edition) nothing changes (ADR 0020).
func graphRead(database string) []neo4j.ExecuteQueryConfigurationOption {
	return []neo4j.ExecuteQueryConfigurationOption{neo4j.ExecuteQueryWithDatabase(database), neo4j.ExecuteQueryWithWritersRouting()}
}

// graphChunk reads one chunk of a label's nodes.
func graphChunk(ctx context.Context, driver neo4j.DriverWithContext, database string, model graphmodel.Model, label string,
	tenant, after int64, limit int, s sample) ([]node, error) {
	params := map[string]any{"tenant": tenant, "after": after, "limit": int64(limit), "offset": s.offset, "share": s.share, "ids": nil}
	if s.ids != nil {
		params["ids"] = s.ids // a nil slice would go as an empty list, not null
	}
	res, err := neo4j.ExecuteQuery(ctx, driver, graphChunkQuery(model, label), params, neo4j.EagerResultTransformer, graphRead(database)...)
	if err != nil {
		return nil, fmt.Errorf("read %s nodes of tenant %d: %w", label, tenant, err)
	}
	out := make([]node, 0, len(res.Records))
	for _, rec := range res.Records {
		id, _, _ := neo4j.GetRecordValue[int64](rec, "id")
		props, _, _ := neo4j.GetRecordValue[map[string]any](rec, "props")
		n := node{label: label, id: id, props: props}
		n.version, _ = props[graphmodel.PropVersion].(int64)
		if e, ok := model.EmbeddingOf(label); ok {
			size, present := props[e.VectorProperty]
			n.hasVector = present && size != nil
			n.vectorLen, _ = size.(int64)
			delete(props, e.VectorProperty)
		}
		for _, dir := range []string{"outs", "ins"} {
			list, _, _ := neo4j.GetRecordValue[[]any](rec, dir)
			for _, v := range list {
				m, _ := v.(map[string]any)
				r := relation{out: dir == "outs"}
				r.typ, _ = m["type"].(string)
				r.other, _ = m["other"].(int64)
				r.otherTenant, _ = m["other_tenant"].(int64)
				r.elementID, _ = m["eid"].(string)
				labels, _ := m["other_labels"].([]any)
				for _, l := range labels {
					if name, ok := l.(string); ok {
						r.otherLabels = append(r.otherLabels, name)
					}
				}
				r.props, _ = m["props"].(map[string]any)
				r.tenant, _ = r.props[graphmodel.KeyTenantID].(int64)
				r.props = canonicalProps(r.props)
				delete(r.props, graphmodel.KeyTenantID)
				n.rels = append(n.rels, r)
			}
		}
		sort.Slice(n.rels, func(i, j int) bool { return n.rels[i].key(model) < n.rels[j].key(model) })
		out = append(out, n)
	}
	return out, nil
}
