package cypher

import (
	"fmt"
	"strings"

	"graphsync/graphmodel"
)

// Statement is one parameterised Cypher statement.
type Statement struct {
	Text   string
	Params map[string]any
	// Expect is how many rows the statement must report in its single
	// "applied" column, or -1 when it reports nothing. A shortfall means a
	// node the batch relied on vanished mid-transaction.
	Expect int
}

// Builder turns mutations into statements. Its statement texts are built
// once, in NewBuilder, one per label or relationship type and operation. A
// Builder is safe for concurrent use.
type Builder struct {
	model       graphmodel.Model
	labels      map[string]graphmodel.Label
	rels        map[string]graphmodel.Relationship
	tenantMerge string
	nodeUpsert  map[string]string // by label
	nodeDelete  map[string]string // by label, for labels with a tombstone
	relClear    map[string]string // by type, Single relationships
	relMerge    map[string]string // by type
	owners      string
	batch       batchText
	// embedModel is the embedder's model id, or "" when nothing is
	// embedded (BuilderOptions.EmbeddingModel).
	embedModel string
}

// BuilderOptions are what a Builder writes beyond the model.
type BuilderOptions struct {
	// EmbeddingModel, when set, makes every upsert of the model's embedded
	// label write the hash of (model, masked text) and mark the node pending
	// when it differs from its vector's (ADR 0023). Default: "", which
	// embeds nothing and writes exactly the statements it wrote before
	// embeddings existed.
	EmbeddingModel string
}

// NewBuilder validates m and prepares every statement text it allows.
func NewBuilder(m graphmodel.Model, opts ...BuilderOptions) (*Builder, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("graph model: %w", err)
	}
	var opt BuilderOptions
	for _, o := range opts {
		opt = o
	}
	if m.Embedding == nil {
		opt.EmbeddingModel = ""
	}
	b := &Builder{
		embedModel: opt.EmbeddingModel,
		model:      m,
		labels:     map[string]graphmodel.Label{},
		rels:       map[string]graphmodel.Relationship{},
		nodeUpsert: map[string]string{},
		nodeDelete: map[string]string{},
		relClear:   map[string]string{},
		relMerge:   map[string]string{},
	}
	for _, l := range m.Labels {
		b.labels[l.Name] = l
		switch l.Role {
		case graphmodel.RoleTenant:
			b.tenantMerge = tenantMergeText(l)
		default:
			var embedded *graphmodel.Embedding
			if e, ok := m.EmbeddingOf(l.Name); ok {
				embedded = &e
			}
			b.nodeUpsert[l.Name] = nodeUpsertText(l, m.TenantKeyed(l.Name), embedded, b.embedModel != "")
			if l.Tombstone != "" {
				b.nodeDelete[l.Name] = nodeDeleteText(l)
			}
		}
	}
	for _, r := range m.Relationships {
		b.rels[r.Type] = r
		if r.Single {
			b.relClear[r.Type] = relClearText(r)
		}
		b.relMerge[r.Type] = relMergeText(r)
	}
	b.owners = ownersQueryText(b)
	b.batch = newBatchText(b.Texts())
	return b, nil
}

// embeddingOf is the model's embedding of label when the builder embeds.
func (b *Builder) embeddingOf(label string) *graphmodel.Embedding {
	if e, ok := b.model.EmbeddingOf(label); ok && b.embedModel != "" {
		return &e
	}
	return nil
}

// EmbeddingModel is the model id the builder hashes embedded texts with, ""
// when it embeds nothing.
func (b *Builder) EmbeddingModel() string { return b.embedModel }

// Model returns the model the builder was made from.
func (b *Builder) Model() graphmodel.Model { return b.model }

// Removes says whether text, one of Texts, removes what it matches (a
// tombstoned label's delete, a Single relationship's clear) rather than
// writing it.
func (b *Builder) Removes(text string) bool {
	for _, texts := range []map[string]string{b.nodeDelete, b.relClear} {
		for _, t := range texts {
			if t == text {
				return true
			}
		}
	}
	return false
}

// Texts returns every statement text the builder can emit, in emission order.
func (b *Builder) Texts() []string {
	var texts []string
	for _, l := range b.model.Labels {
		if l.Role == graphmodel.RoleTenant {
			texts = append(texts, b.tenantMerge)
			continue
		}
		if text, ok := b.nodeDelete[l.Name]; ok {
			texts = append(texts, text)
		}
		texts = append(texts, b.nodeUpsert[l.Name])
	}
	for _, r := range b.model.Relationships {
		if text, ok := b.relClear[r.Type]; ok {
			texts = append(texts, text)
		}
		texts = append(texts, b.relMerge[r.Type])
	}
	return texts
}

// lockNode takes the write lock of node v before a guard reads it. Neo4j
// reads committed data without a lock: a guard that read a node while
// another transaction held it (written, not yet committed) would pass on
// the older value, wait for the lock at its SET, then overwrite the newer
// write with an older one: a lost update. Reference nodes are shared by
// many aggregates, so two workers, or a rebuild or repair beside sync,
// write the same node. With the lock taken first, the guard reads what
// the other transaction committed. Setting an empty map takes the lock and
// writes nothing; unlike setting a label or a key again, it plans no Eager.
// Every statement that writes a node under a guard locks it first
// (TestGuardsSeeConcurrentWrites). A Single relationship's clear and merge
// read their From node outside the rule: the same transaction's upsert
// locked it already. A tombstone is read through keyLookup, which waits for
// a delete of the node still open.
func lockNode(v string) string { return "SET " + v + " += {}\n" }

// keyLookup is a MATCH pattern for variable v, the node of label with the
// row's key, read through the key's uniqueness constraint. Every read that
// a lock rests on (a tombstone's, a delete's of its node) uses it: in a
// statement that writes, Neo4j seeks a unique index with a lock on the key
// (taken also when no node has it, and waiting for a transaction that
// writes it), while the index on id alone, which the ownership checks use,
// is read without one. Left to itself, the planner takes either, depending
// on its statistics (ADR 0003, stop 24).
func keyLookup(v, label string) string {
	return fmt.Sprintf("(%s:%s) USING INDEX %s:%s(%s, %s)", v, keyPattern(label), v, label, graphmodel.KeyTenantID, graphmodel.KeyID)
}

// guardAllows is true when row's guard orders after the node's stored one.
func guardAllows(node string) string {
	return fmt.Sprintf("(%[1]s.%[2]s IS NULL OR row.version > %[1]s.%[3]s OR (row.version = %[1]s.%[3]s AND row.outbox_id > %[1]s.%[2]s))",
		node, graphmodel.PropOutboxID, graphmodel.PropVersion)
}

func keyPattern(label string) string {
	return fmt.Sprintf("%s {%s: row.tenant_id, %s: row.id}", label, graphmodel.KeyTenantID, graphmodel.KeyID)
}

// TenantKeyExpr is the Cypher expression of graphmodel.TenantKey for the
// tenant id expression tenantID (TestTenantKeyExprMatchesGo).
func TenantKeyExpr(tenantID string) string { return "'t' + toString(" + tenantID + ")" }

func tenantMergeText(l graphmodel.Label) string {
	return fmt.Sprintf("UNWIND $rows AS row\nMERGE (n:%s {%s: row.tenant_id, %s: row.tenant_id})",
		l.Name, graphmodel.KeyTenantID, graphmodel.KeyID)
}

// nodeUpsertText: the guard is evaluated in the same statement as the write,
// after MERGE and the node's lock, so a stale, duplicate or replayed row
// changes nothing, also beside a concurrent write of the same node. The
// conditional SET sits in a FOREACH rather than behind WHERE: a filter on
// properties the same statement then sets makes Neo4j plan an Eager.
//
// On the embedded label (when the builder embeds), the same guarded SET
// writes the hash of the text it writes and marks the node pending unless
// its vector was computed from that text: the embedding stage's backlog is
// then an index lookup, and no model runs in this transaction (ADR 0023).
// When the builder does not embed (hashes false), a change of the embedded
// text clears the text hash instead: the vector no longer matches it, so
// retrieval passes it over (its seed queries require the two hashes equal)
// until a stage with a model embeds the text again.
func nodeUpsertText(l graphmodel.Label, tenantKeyed bool, e *graphmodel.Embedding, hashes bool) string {
	var sb strings.Builder
	sb.WriteString("UNWIND $rows AS row\n")
	if l.Tombstone != "" {
		// A tombstoned node stays deleted: the row does not even MERGE.
		fmt.Fprintf(&sb, "OPTIONAL MATCH %s\nWITH row, t\nWHERE t IS NULL\n", keyLookup("t", l.Tombstone))
	}
	fmt.Fprintf(&sb, "MERGE (n:%s)\n%sFOREACH (_ IN CASE WHEN %s THEN [1] ELSE [] END |\n", keyPattern(l.Name), lockNode("n"), guardAllows("n"))
	fmt.Fprintf(&sb, "  SET n.%s = row.version, n.%s = row.outbox_id", graphmodel.PropVersion, graphmodel.PropOutboxID)
	if e != nil && !hashes {
		// Before the properties are set: the comparison reads the old text.
		same := make([]string, len(e.Properties))
		for i, p := range e.Properties {
			same[i] = fmt.Sprintf("coalesce(n.%[1]s, '') = coalesce(row.props.%[1]s, '')", p)
		}
		fmt.Fprintf(&sb, ",\n      n.%[1]s = CASE WHEN %[2]s THEN n.%[1]s END", e.TextHashProperty, strings.Join(same, " AND "))
	}
	if tenantKeyed {
		fmt.Fprintf(&sb, ",\n      n.%s = %s", graphmodel.KeyTenantKey, TenantKeyExpr("row.tenant_id"))
	}
	for _, p := range l.Properties {
		fmt.Fprintf(&sb, ",\n      n.%[1]s = row.props.%[1]s", p.Key)
	}
	if e != nil && hashes {
		fmt.Fprintf(&sb, ",\n      n.%[1]s = row.%[1]s,\n      n.%[2]s = CASE WHEN n.%[3]s = row.%[1]s THEN null ELSE coalesce(n.%[2]s, timestamp()) END",
			e.TextHashProperty, e.PendingProperty, e.HashProperty)
	}
	sb.WriteString(")")
	return sb.String()
}

// nodeDeleteText: the first delete writes the tombstone's guard; replays find
// the tombstone and no node.
func nodeDeleteText(l graphmodel.Label) string {
	return fmt.Sprintf("UNWIND $rows AS row\nMERGE (t:%s)\nON CREATE SET t.%s = row.version, t.%s = row.outbox_id\nWITH row\nOPTIONAL MATCH %s\nDETACH DELETE n",
		keyPattern(l.Tombstone), graphmodel.PropVersion, graphmodel.PropOutboxID, keyLookup("n", l.Name))
}

func endpoint(label, idField string) string {
	return fmt.Sprintf("%s {%s: row.tenant_id, %s: row.%s}", label, graphmodel.KeyTenantID, graphmodel.KeyID, idField)
}

// endpointLookup is a MATCH pattern for variable v, a relationship's end of
// label whose id is the row's idField, sought in the index on id alone,
// without a lock: the lock comes after the read, the relationship MERGE's
// or a repair clear's on its node (ADR 0003, stop 24). The seek is named
// because the planner, left to statistics taken while a rebuild filled an
// emptied graph (an index sampled empty beside a label count of tens of
// thousands), scanned an index for every row instead (USING INDEX alone
// did not prevent it: the scan used the named index), and the batch keeps
// its cached plan (replan=skip): replay chunks of a second took 10 to 37 s
// (ADR 0030).
func endpointLookup(v, label, idField string) string {
	return fmt.Sprintf("(%s:%s) %s", v, endpoint(label, idField), idSeekHint(v, label))
}

// idSeekHint asks for a seek of the index on id alone for variable v of
// label.
func idSeekHint(v, label string) string {
	return fmt.Sprintf("USING INDEX SEEK %s:%s(%s)", v, label, graphmodel.KeyID)
}

// relClearText removes a Single relationship's stale edges, but only where the
// From node was just written by the row's event. It is a statement of its own
// so that no statement both deletes and merges the same type (an Eager plan).
func relClearText(r graphmodel.Relationship) string {
	return fmt.Sprintf("UNWIND $rows AS row\nMATCH (a:%s)-[r:%s]->(b:%s) %s\nWHERE a.%s = row.outbox_id AND (row.to_id IS NULL OR b.%s <> row.to_id)\nDELETE r",
		endpoint(r.From, "from_id"), r.Type, r.To, idSeekHint("a", r.From), graphmodel.PropOutboxID, graphmodel.KeyID)
}

// relMergeText merges a relationship from the row's event. A Single one is
// merged only where the event won its From node's guard. Any other is
// merged for every row (an event that lost still adds an edge the graph
// lacks), but its properties are set on an edge that exists already only
// where the event won: an OrderPlaced retried from the DLQ after a newer
// one, or replayed beside sync, must not put an order line's older quantity
// and price back (TestStaleEventLeavesRelationshipPropertiesAlone).
func relMergeText(r graphmodel.Relationship) string {
	var sb strings.Builder
	sb.WriteString("UNWIND $rows AS row\n")
	fmt.Fprintf(&sb, "MATCH %s\n", endpointLookup("a", r.From, "from_id"))
	if r.Single {
		fmt.Fprintf(&sb, "WHERE a.%s = row.outbox_id\n", graphmodel.PropOutboxID)
	}
	fmt.Fprintf(&sb, "MATCH %s\n", endpointLookup("b", r.To, "to_id"))
	key := []string{fmt.Sprintf("%[1]s: row.%[1]s", graphmodel.KeyTenantID)}
	for _, p := range r.Key {
		key = append(key, fmt.Sprintf("%[1]s: row.props.%[1]s", p.Key))
	}
	fmt.Fprintf(&sb, "MERGE (a)-[r:%s {%s}]->(b)", r.Type, strings.Join(key, ", "))
	if len(r.Properties) > 0 {
		// sets writes the row's values; kept writes them only where the
		// row's event won the From node's guard, else keeps the edge's.
		sets := make([]string, len(r.Properties))
		kept := make([]string, len(r.Properties))
		for i, p := range r.Properties {
			sets[i] = fmt.Sprintf("r.%[1]s = row.props.%[1]s", p.Key)
			kept[i] = fmt.Sprintf("r.%[1]s = CASE WHEN a.%[2]s = row.outbox_id THEN row.props.%[1]s ELSE r.%[1]s END",
				p.Key, graphmodel.PropOutboxID)
		}
		if r.Single {
			fmt.Fprintf(&sb, "\nSET %s", strings.Join(sets, ",\n    "))
		} else {
			fmt.Fprintf(&sb, "\nON CREATE SET %s\nON MATCH SET %s", strings.Join(sets, ",\n    "), strings.Join(kept, ",\n    "))
		}
	}
	if !r.Single {
		sb.WriteString("\nRETURN count(*) AS applied")
	}
	return sb.String()
}
