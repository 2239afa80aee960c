package retrieve

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/graphmodel"
)

// ErrNotFound is returned by Lookup for a key naming no node of the tenant:
// a node of another tenant is not found in exactly the same way as one that
// does not exist.
var ErrNotFound = errors.New("no node with this key in the tenant's graph")

// ErrBadKey is returned by Lookup for a key that is not Label:id with a label
// that may be looked up.
var ErrBadKey = errors.New("bad node key")

// lookupRelated bounds the neighbours a lookup lists by name (a category's
// products, an order's products); the rest are counted.
const lookupRelated = 20

// LookupResult is one node of a tenant's graph: its allowlisted properties
// and what lies around it, aggregated.
type LookupResult struct {
	Key   string
	Label string
	ID    int64
	// Props are the node's allowlisted properties; text is masked as in a
	// context.
	Props map[string]any
	// Lines describe the neighbourhood, each with the keys it cites.
	Lines []Line
}

// LookupLabels are the labels Lookup accepts. Customers are only ever
// counted, never shown one by one, and the tenant node holds nothing.
func LookupLabels(m *graphmodel.Model) []string {
	var names []string
	for _, l := range m.Labels {
		switch {
		case l.Role == graphmodel.RoleTenant:
			continue // one per tenant, holding nothing
		case l.Role == graphmodel.RoleReference && len(l.Personal) > 0:
			continue // a person (a customer): only ever counted
		}
		names = append(names, l.Name)
	}
	return names
}

// ParseNodeKey splits a key "Label:id" as NodeKey writes it; the label must
// be one LookupLabels accepts, and is returned as the model spells it.
func ParseNodeKey(m *graphmodel.Model, key string) (graphmodel.Label, int64, error) {
	name, idText, ok := strings.Cut(strings.TrimSpace(key), ":")
	if !ok {
		return graphmodel.Label{}, 0, fmt.Errorf("%w: want Label:id, such as %s", ErrBadKey, NodeKey(graphmodel.LabelProduct, 15))
	}
	id, err := strconv.ParseInt(idText, 10, 64)
	if err != nil || id <= 0 {
		return graphmodel.Label{}, 0, fmt.Errorf("%w: the id after the colon must be a positive whole number", ErrBadKey)
	}
	allowed := LookupLabels(m)
	for _, l := range allowed {
		if l == name {
			label, _ := m.Label(l)
			return label, id, nil
		}
	}
	return graphmodel.Label{}, 0, fmt.Errorf("%w: the label must be one of %s", ErrBadKey, strings.Join(allowed, ", "))
}

// Lookup returns the node key names in tenantID's graph. key comes from a
// context's citations ("Product:15"); a key of another tenant is ErrNotFound,
// as a key of no node is.
func (r *Retriever) Lookup(ctx context.Context, tenantID int64, key string) (*LookupResult, error) {
	label, id, err := ParseNodeKey(r.cfg.Model, key)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	res := &LookupResult{Key: NodeKey(label.Name, id), Label: label.Name, ID: id}
	session := r.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeRead, DatabaseName: r.cfg.Database})
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = session.Close(closeCtx)
	}()
	_, err = session.ExecuteRead(ctx, func(tx neo4j.ManagedTransaction) (any, error) {
		res.Props, res.Lines = nil, nil
		// label.Name is the model's own identifier (checked by Validate),
		// never the caller's text.
		result, err := tx.Run(ctx, "MATCH (n:"+label.Name+" {tenant_id: $tenant, id: $id}) RETURN properties(n) AS props",
			map[string]any{"tenant": tenantID, "id": id})
		if err != nil {
			return nil, err
		}
		records, err := result.Collect(ctx)
		if err != nil {
			return nil, err
		}
		if len(records) == 0 {
			return nil, ErrNotFound
		}
		props, _, _ := neo4j.GetRecordValue[map[string]any](records[0], "props")
		res.Props = allowlisted(label, props)
		return nil, r.neighbourhood(ctx, tx, tenantID, res)
	})
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%s: %w", res.Key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read the graph: %w", err)
	}
	for k, v := range res.Props {
		if s, ok := v.(string); ok {
			res.Props[k] = lineText(s)
		}
	}
	return res, nil
}

// neighbourhood fills res.Lines, by label.
func (r *Retriever) neighbourhood(ctx context.Context, tx neo4j.ManagedTransaction, tenantID int64, res *LookupResult) error {
	name := refText(Ref{Label: res.Label, ID: res.ID, Name: propString(res.Props, "name")})
	switch res.Label {
	case graphmodel.LabelProduct:
		// The product's own expansion, as a context shows a seed at two hops.
		with := *r
		with.cfg.Hops = MaxHops
		seed := Seed{Label: res.Label, ID: res.ID, Props: res.Props}
		seeds := []Seed{seed}
		if err := with.expand(ctx, tx, tenantID, seeds); err != nil {
			return err
		}
		res.Lines = seedLines(&seeds[0], MaxHops)[1:]
	case graphmodel.LabelCategory:
		rec, err := single(ctx, tx, categoryQuery, tenantID, res.ID)
		if err != nil {
			return err
		}
		total, refs := productRefs(rec, "byStatus", "products")
		if total == 0 {
			res.Lines = append(res.Lines, Line{Section: SectionFacts, Text: fmt.Sprintf("%s holds no product.", name), Keys: []string{res.Key}})
			break
		}
		res.Lines = append(res.Lines, Line{Section: SectionFacts,
			Text: fmt.Sprintf("%s holds %s (%s).", name, plural(total, "product"), countsText(statusCounts(rec))), Keys: []string{res.Key}})
		res.Lines = append(res.Lines, refsLine(name, "holds", refs, total, res.Key))
	case graphmodel.LabelOrder:
		rec, err := single(ctx, tx, orderQuery, tenantID, res.ID)
		if err != nil {
			return err
		}
		lines, _, _ := neo4j.GetRecordValue[int64](rec, "lines")
		units, _, _ := neo4j.GetRecordValue[int64](rec, "units")
		products, _, _ := neo4j.GetRecordValue[int64](rec, "productCount")
		res.Lines = append(res.Lines, Line{Section: SectionFacts,
			Text: fmt.Sprintf("%s has %s: %s of %s.", name, plural(lines, "line"), plural(units, "unit"), plural(products, "product")),
			Keys: []string{res.Key}})
		if products > 0 {
			_, refs := productRefs(rec, "", "products")
			res.Lines = append(res.Lines, refsLine(name, "contains", refs, products, res.Key))
		}
	}
	for i := range res.Lines {
		res.Lines[i].Text = lineText(res.Lines[i].Text)
	}
	return nil
}

var categoryQuery = fmt.Sprintf(`MATCH (c:%[1]s {tenant_id: $tenant, id: $id})
CALL (c) {
  OPTIONAL MATCH (p:%[2]s {tenant_id: $tenant})-[:%[3]s {tenant_id: $tenant}]->(c)
  WITH p WHERE p IS NOT NULL
  WITH p.status AS status, count(*) AS n
  RETURN collect({value: status, n: n}) AS byStatus
}
CALL (c) {
  OPTIONAL MATCH (p:%[2]s {tenant_id: $tenant})-[:%[3]s {tenant_id: $tenant}]->(c)
  WITH p WHERE p IS NOT NULL
  ORDER BY p.id LIMIT $related
  RETURN collect({id: p.id, name: p.name}) AS products
}
RETURN byStatus, products`, graphmodel.LabelCategory, graphmodel.LabelProduct, graphmodel.RelInCategory)

var orderQuery = fmt.Sprintf(`MATCH (o:%[1]s {tenant_id: $tenant, id: $id})
CALL (o) {
  OPTIONAL MATCH (o)-[l:%[3]s {tenant_id: $tenant}]->(p:%[2]s {tenant_id: $tenant})
  RETURN count(l) AS lines, coalesce(sum(l.quantity), 0) AS units, count(DISTINCT p) AS productCount
}
CALL (o) {
  OPTIONAL MATCH (o)-[:%[3]s {tenant_id: $tenant}]->(p:%[2]s {tenant_id: $tenant})
  WITH DISTINCT p WHERE p IS NOT NULL
  ORDER BY p.id LIMIT $related
  RETURN collect({id: p.id, name: p.name}) AS products
}
RETURN lines, units, productCount, products`, graphmodel.LabelOrder, graphmodel.LabelProduct, graphmodel.RelContains)

func single(ctx context.Context, tx neo4j.ManagedTransaction, query string, tenantID, id int64) (*neo4j.Record, error) {
	result, err := tx.Run(ctx, query, map[string]any{"tenant": tenantID, "id": id, "related": int64(lookupRelated)})
	if err != nil {
		return nil, err
	}
	return result.Single(ctx)
}

func statusCounts(rec *neo4j.Record) []Count {
	byStatus, _, _ := neo4j.GetRecordValue[[]any](rec, "byStatus")
	var out []Count
	for _, v := range byStatus {
		m, _ := v.(map[string]any)
		out = append(out, Count{Value: asString(m["value"]), N: asInt(m["n"])})
	}
	sortCounts(out)
	return out
}

// productRefs reads a list of {id, name} and, when countsKey is set, the
// total its counts add up to.
func productRefs(rec *neo4j.Record, countsKey, listKey string) (int64, []Ref) {
	var total int64
	if countsKey != "" {
		for _, c := range statusCounts(rec) {
			total += c.N
		}
	}
	list, _, _ := neo4j.GetRecordValue[[]any](rec, listKey)
	var refs []Ref
	for _, v := range list {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		refs = append(refs, Ref{Label: graphmodel.LabelProduct, ID: asInt(m["id"]), Name: name})
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].ID < refs[j].ID })
	return total, refs
}

func refsLine(name, verb string, refs []Ref, total int64, key string) Line {
	parts := make([]string, len(refs))
	keys := []string{key}
	for i, ref := range refs {
		parts[i] = refText(ref)
		keys = append(keys, NodeKey(ref.Label, ref.ID))
	}
	text := fmt.Sprintf("%s %s %s", name, verb, strings.Join(parts, ", "))
	if more := total - int64(len(refs)); more > 0 {
		text += fmt.Sprintf(" and %d more", more)
	}
	return Line{Section: SectionRelationships, Text: text + ".", Keys: keys}
}

// Markdown renders a lookup for an LLM: the properties, then the
// neighbourhood, each line ending with the keys it cites.
func (lr *LookupResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n## Properties\n\n", lr.Key)
	keys := make([]string, 0, len(lr.Props))
	for k := range lr.Props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		b.WriteString("(none)\n")
	}
	for _, k := range keys {
		fmt.Fprintf(&b, "- %s: %v\n", k, lr.Props[k])
	}
	if len(lr.Lines) > 0 {
		b.WriteString("\n## Neighbourhood\n\n")
		for _, l := range lr.Lines {
			fmt.Fprintf(&b, "- %s [%s]\n", l.Text, strings.Join(l.Keys, ", "))
		}
	}
	return b.String()
}
