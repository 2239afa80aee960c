package cypher

import (
	"cmp"
	"fmt"
	"slices"

	"graphsync/graphmodel"
)

// Statements turns a batch's mutations into statements, in the order they
// must run: per model label (tenant first), tombstones then upserts; then per
// relationship type, stale Single edges removed, then merges. Nodes thus exist
// before the relationships that join them.
//
// Writes to the same node are collapsed to the one with the newest guard, so
// no statement holds two rows for one node and the outcome cannot depend on
// row order or on how Neo4j plans the statement. It fails, writing nothing,
// on a label, type or property key outside the model, on a value of the wrong
// type and on ids that are not positive.
//
// It is Rows then StatementsOf: a caller that has the rows of each event
// ahead of time (the projector makes them before its transaction) only
// groups them.
func (b *Builder) Statements(mut graphmodel.Mutations) ([]Statement, error) {
	rows, err := b.Rows(mut)
	if err != nil {
		return nil, err
	}
	return b.StatementsOf([]*Rows{rows}), nil
}

// Rows is mutations checked against the model and shaped into statement
// rows: the part of Statements that depends neither on the graph nor on the
// other mutations of the batch.
type Rows struct {
	tenants        []int64
	nodes, deletes []nodeRow
	rels           []relRow
}

type nodeRow struct {
	label string
	key   nodeKey
	guard graphmodel.Guard
	row   map[string]any
}

// newNodeRow is a node's key and guard as a statement row.
func newNodeRow(label string, tenantID, id int64, guard graphmodel.Guard) nodeRow {
	return nodeRow{label: label, key: nodeKey{tenantID, id}, guard: guard, row: map[string]any{
		graphmodel.KeyTenantID: tenantID,
		graphmodel.KeyID:       id,
		"version":              guard.Version,
		"outbox_id":            guard.OutboxID,
	}}
}

type relRow struct {
	rel  graphmodel.Relationship
	key  any // singleKey or factKey
	toID int64
	row  map[string]any
}

// Rows checks mut against the model and builds its statement rows. It fails
// on a label, type or property key outside the model, on a value of the
// wrong type and on ids that are not positive.
func (b *Builder) Rows(mut graphmodel.Mutations) (*Rows, error) {
	out := &Rows{}
	for _, n := range mut.Nodes {
		label, ok := b.labels[n.Label]
		if !ok {
			return nil, fmt.Errorf("node upsert: label %.64q is not in the model", n.Label)
		}
		if err := checkIDs(n.Label, n.TenantID, n.ID); err != nil {
			return nil, err
		}
		if label.Role == graphmodel.RoleTenant {
			if n.ID != n.TenantID {
				return nil, fmt.Errorf("node upsert %s: id %d must equal tenant id %d", n.Label, n.ID, n.TenantID)
			}
			out.tenants = append(out.tenants, n.TenantID)
			continue
		}
		props, err := allowedProps("label "+n.Label, label.Properties, nil, n.Props)
		if err != nil {
			return nil, err
		}
		row := newNodeRow(n.Label, n.TenantID, n.ID, n.Guard)
		row.row["props"] = props
		if e := b.embeddingOf(n.Label); e != nil {
			row.row[e.TextHashProperty] = graphmodel.EmbeddingHash(b.embedModel, e.Text(props))
		}
		out.nodes = append(out.nodes, row)
	}
	for _, d := range mut.Deletes {
		label, ok := b.labels[d.Label]
		if !ok || label.Tombstone == "" {
			return nil, fmt.Errorf("node delete: label %.64q is not a deletable label of the model", d.Label)
		}
		if err := checkIDs(d.Label, d.TenantID, d.ID); err != nil {
			return nil, err
		}
		out.deletes = append(out.deletes, newNodeRow(d.Label, d.TenantID, d.ID, d.Guard))
	}
	for _, r := range mut.Rels {
		rel, ok := b.rels[r.Type]
		if !ok {
			return nil, fmt.Errorf("relationship upsert: type %.64q is not in the model", r.Type)
		}
		if err := checkIDs(r.Type, r.TenantID, r.FromID); err != nil {
			return nil, err
		}
		if r.ToID < 0 || (r.ToID == 0 && !rel.Single) {
			return nil, fmt.Errorf("relationship upsert %s: to id must be > 0, got %d", r.Type, r.ToID)
		}
		props, err := allowedProps("relationship "+r.Type, rel.Properties, rel.Key, r.Props)
		if err != nil {
			return nil, err
		}
		row := relRow{rel: rel, toID: r.ToID, row: map[string]any{
			graphmodel.KeyTenantID: r.TenantID,
			"from_id":              r.FromID,
			"to_id":                nilIfZero(r.ToID),
			"outbox_id":            r.OutboxID,
			"props":                props,
		}}
		if rel.Single {
			// Only the row whose outbox id the From node holds acts, so rows
			// of older events can stay; exact repeats are dropped.
			row.key = singleKey{r.TenantID, r.FromID, r.OutboxID}
		} else {
			row.key = factKey{r.TenantID, r.FromID, r.ToID, fmt.Sprint(keyValues(rel.Key, props))}
		}
		out.rels = append(out.rels, row)
	}
	return out, nil
}

// StatementsOf groups the rows of a batch's events, in batch order, into
// statements (see Statements).
func (b *Builder) StatementsOf(batch []*Rows) []Statement {
	tenants := map[int64]bool{}
	var tenantRows []any
	upserts := map[string]*rowSet{}
	deletes := map[string]*rowSet{}
	clears := map[string]*rowSet{}
	merges := map[string]*rowSet{}
	// Each kind of row goes to its own sets, so one pass in batch order keeps
	// every set in batch order.
	for _, rows := range batch {
		for _, t := range rows.tenants {
			if !tenants[t] {
				tenants[t] = true
				tenantRows = append(tenantRows, map[string]any{graphmodel.KeyTenantID: t})
			}
		}
		for _, n := range rows.nodes {
			rowSetFor(upserts, n.label).keepNewest(n.key, n.guard, n.row)
		}
		for _, d := range rows.deletes {
			rowSetFor(deletes, d.label).keepNewest(d.key, d.guard, d.row)
		}
		for _, r := range rows.rels {
			switch {
			case !r.rel.Single:
				rowSetFor(merges, r.rel.Type).replace(r.key, r.row)
			default:
				// A Single relationship's stale edges are removed by every
				// row that writes it, under the lock its From node's upsert
				// took: a reading of the graph before that lock could be out
				// of date (another writer may have moved the edge since).
				rowSetFor(clears, r.rel.Type).replace(r.key, r.row)
				if r.toID != 0 {
					rowSetFor(merges, r.rel.Type).replace(r.key, r.row)
				}
			}
		}
	}

	var stmts []Statement
	for _, l := range b.model.Labels {
		if l.Role == graphmodel.RoleTenant {
			if len(tenantRows) > 0 {
				stmts = append(stmts, Statement{Text: b.tenantMerge, Params: map[string]any{"rows": tenantRows}, Expect: -1})
			}
			continue
		}
		// Node rows go in key order: every transaction then takes the locks
		// of one label's nodes in the same order (see lockNode), so two
		// batches writing the same shared nodes wait for each other instead
		// of deadlocking.
		if rows := deletes[l.Name]; rows != nil {
			stmts = append(stmts, Statement{Text: b.nodeDelete[l.Name], Params: rows.byNodeKey().params(), Expect: -1})
		}
		if rows := upserts[l.Name]; rows != nil {
			stmts = append(stmts, Statement{Text: b.nodeUpsert[l.Name], Params: rows.byNodeKey().params(), Expect: -1})
		}
	}
	for _, r := range b.model.Relationships {
		if rows := clears[r.Type]; rows != nil {
			stmts = append(stmts, Statement{Text: b.relClear[r.Type], Params: rows.params(), Expect: -1})
		}
		if rows := merges[r.Type]; rows != nil {
			expect := len(rows.rows)
			if r.Single {
				expect = -1 // rows of superseded events rightly match nothing
			}
			stmts = append(stmts, Statement{Text: b.relMerge[r.Type], Params: rows.params(), Expect: expect})
		}
	}
	return stmts
}

func checkIDs(owner string, tenantID, id int64) error {
	if tenantID <= 0 {
		return fmt.Errorf("%s: tenant id must be > 0, got %d", owner, tenantID)
	}
	if id <= 0 {
		return fmt.Errorf("%s: id must be > 0, got %d", owner, id)
	}
	return nil
}

// allowedProps copies props into a fresh map holding exactly the allowlisted
// keys (absent ones as nil, which removes the property), refusing any other
// key and any value of the wrong type. Key properties must not be nil.
func allowedProps(owner string, allowed, key []graphmodel.Property, props map[string]any) (map[string]any, error) {
	out := make(map[string]any, len(allowed)+len(key))
	known := 0
	for _, group := range [][]graphmodel.Property{key, allowed} {
		for _, p := range group {
			v, present := props[p.Key]
			if present {
				known++
			}
			if err := graphmodel.CheckValue(p.Type, v); err != nil {
				return nil, fmt.Errorf("%s: property %s: %w", owner, p.Key, err)
			}
			out[p.Key] = v
		}
	}
	for _, p := range key {
		if out[p.Key] == nil {
			return nil, fmt.Errorf("%s: key property %s must be set", owner, p.Key)
		}
	}
	if known != len(props) {
		for k := range props {
			if _, ok := out[k]; !ok {
				return nil, fmt.Errorf("%s: property %.64q is not in the model's allowlist", owner, k)
			}
		}
	}
	return out, nil
}

func keyValues(key []graphmodel.Property, props map[string]any) []any {
	values := make([]any, len(key))
	for i, p := range key {
		values[i] = props[p.Key]
	}
	return values
}

func nilIfZero(id int64) any {
	if id == 0 {
		return nil
	}
	return id
}

type nodeKey struct{ tenantID, id int64 }

type singleKey struct{ tenantID, fromID, outboxID int64 }

type factKey struct {
	tenantID, fromID, toID int64
	key                    string
}

// rowSet keeps rows in first-seen order, one per key.
type rowSet struct {
	rows   []any
	index  map[any]int
	guards []graphmodel.Guard
}

func newRowSet() *rowSet { return &rowSet{index: map[any]int{}} }

func rowSetFor(sets map[string]*rowSet, name string) *rowSet {
	set := sets[name]
	if set == nil {
		set = newRowSet()
		sets[name] = set
	}
	return set
}

// keepNewest keeps, per key, the row with the newest guard (the later one on a tie).
func (s *rowSet) keepNewest(key any, guard graphmodel.Guard, row map[string]any) {
	if i, seen := s.index[key]; seen {
		if !s.guards[i].Newer(guard) {
			s.rows[i], s.guards[i] = row, guard
		}
		return
	}
	s.index[key] = len(s.rows)
	s.rows = append(s.rows, row)
	s.guards = append(s.guards, guard)
}

// replace keeps, per key, the last row given.
func (s *rowSet) replace(key any, row map[string]any) {
	if i, seen := s.index[key]; seen {
		s.rows[i] = row
		return
	}
	s.index[key] = len(s.rows)
	s.rows = append(s.rows, row)
	s.guards = append(s.guards, graphmodel.Guard{})
}

func (s *rowSet) params() map[string]any { return map[string]any{"rows": s.rows} }

// byNodeKey sorts a set of node rows in key order (CompareNodeRows). The
// set's index is not kept: call it once the set is complete.
func (s *rowSet) byNodeKey() *rowSet {
	slices.SortFunc(s.rows, func(a, b any) int { return CompareNodeRows(a.(map[string]any), b.(map[string]any)) })
	s.index, s.guards = nil, nil
	return s
}

// CompareNodeRows orders statement rows of one label's nodes by their key
// (tenant id, id). Every writer of the graph (sync, drift's repair, the
// rebuild) sends node rows in this order, so all transactions lock shared
// nodes in one order and wait for each other instead of deadlocking (see
// lockNode).
func CompareNodeRows(a, b map[string]any) int {
	return cmp.Or(cmp.Compare(a[graphmodel.KeyTenantID].(int64), b[graphmodel.KeyTenantID].(int64)),
		cmp.Compare(a[graphmodel.KeyID].(int64), b[graphmodel.KeyID].(int64)))
}
