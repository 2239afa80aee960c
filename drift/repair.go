package drift

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/cypher"
	"graphsync/graphmodel"
)

// repairAction is what fixes one finding.
type repairAction struct {
	// upsert re-projects the node (and, for an aggregate, what it owns)
	// from its rows.
	upsert *node
	// deleteNode removes the node: no row backs it.
	deleteNode bool
	// deleteRel removes one relationship.
	deleteRel *relRef
	// markEmbedding queues the node for the embedding stage.
	markEmbedding *embeddingMark
	// removeProp removes a property outside the allowlist.
	removeProp string
	// removeRelProp removes a relationship property outside the allowlist.
	removeRelProp *relProp
	// upsertTenant creates the tenant node.
	upsertTenant bool
	// deleteTenant removes every node of a tenant PostgreSQL does not have.
	deleteTenant bool
	// deleteUntenanted removes the label's nodes that have no tenant_id.
	deleteUntenanted string
	// deleteWithoutID removes the label's nodes of the finding's tenant
	// whose id is missing or not an integer.
	deleteWithoutID string
	// deleteMisplaced removes a tenant's misplaced edges of a type.
	deleteMisplaced *misplacedIn
	// deleteLinkedIn removes, in a tenant run, the edges of a type from
	// another tenant's owner node to the run's tenant.
	deleteLinkedIn *linkedIn
}

// misplacedIn is the misplaced edges of one tenant (or of none).
type misplacedIn struct {
	misplaced
	tenant   int64
	noTenant bool
}

// relRef names one relationship as drift read it: its element id, and its
// type and ends' keys, which a repair checks too (cypher.MatchRelationshipText):
// Neo4j may give the element id of a relationship deleted meanwhile to a new
// one, of any tenant.
type relRef struct {
	elementID                          string
	typ                                string
	fromTenant, fromID, toTenant, toID int64
	// owner, when set, is the owning end as read: the repair acts only
	// while it still is (cypher.MatchRelationshipText).
	owner *ownerSeen
}

// ownerSeen is a relationship's owner node as drift read it: which end it
// is, and the version and outbox id sync last stamped on it.
type ownerSeen struct {
	from              bool
	version, outboxID int64
}

// guardedBy returns r, acted on only while its owner n (the node drift read
// it from, its From end when out) still carries the stamps it was read
// with. For a relationship the rows do not imply: the owner's next event
// may imply it, and sync then keeps the one it finds.
func (r *relRef) guardedBy(out bool, n *node) *relRef {
	outboxID, _ := n.props[graphmodel.PropOutboxID].(int64)
	r.owner = &ownerSeen{from: out, version: n.version, outboxID: outboxID}
	return r
}

// refOf names r, a relationship of the node (tenant, id).
func refOf(r relation, tenant, id int64) *relRef {
	ref := &relRef{elementID: r.elementID, typ: r.typ, fromTenant: tenant, fromID: id, toTenant: r.otherTenant, toID: r.other}
	if !r.out {
		ref.fromTenant, ref.fromID, ref.toTenant, ref.toID = r.otherTenant, r.other, tenant, id
	}
	return ref
}

// row is the statement row of MatchRelationshipText.
func (r *relRef) row() map[string]any {
	row := map[string]any{"eid": r.elementID, "type": r.typ, "from_tenant": r.fromTenant, "from_id": r.fromID,
		"to_tenant": r.toTenant, "to_id": r.toID, "owner": nil}
	if o := r.owner; o != nil {
		row["owner"] = map[string]any{"from": o.from, "version": o.version, "outbox_id": o.outboxID}
	}
	return row
}

// relProp names one property of one relationship.
type relProp struct {
	rel *relRef
	key string
}

// removeRelPropsText removes one property from each relationship given as
// rows {eid, type, from_tenant, from_id, to_tenant, to_id, key}: the key is a
// parameter, never text.
const removeRelPropsText = cypher.MatchRelationshipText + "SET r[row.key] = null\nRETURN count(*) AS applied"

// repair applies the repair of every final finding: removals first, then
// re-projections, each kind in one statement per label or type. It writes
// only to Neo4j, and only the model's labels and types.
func (r *run) repair(ctx context.Context) ([]string, error) {
	var relRows []map[string]any
	removeProps := map[string][]map[string]any{}
	var removeRelProps []map[string]any
	deletes := map[string][]map[string]any{}
	upserts := map[nodeKey]*node{}
	var tenants []int64
	var untenanted []string
	var withoutID []Finding
	var misplacedEdges []*misplacedIn
	var linkedEdges []*linkedIn
	var deleteTenants []int64
	var marks []map[string]any
	for _, f := range r.findings {
		a := f.repair
		switch {
		case a == nil:
		case a.markEmbedding != nil:
			marks = append(marks, map[string]any{"tenant_id": f.TenantID, "id": f.ID, "outbox_id": a.markEmbedding.outboxID, "hash": a.markEmbedding.hash})
		case a.deleteRel != nil:
			relRows = append(relRows, a.deleteRel.row())
		case a.removeRelProp != nil:
			row := a.removeRelProp.rel.row()
			row["key"] = a.removeRelProp.key
			removeRelProps = append(removeRelProps, row)
		case a.removeProp != "":
			removeProps[f.Label] = append(removeProps[f.Label], map[string]any{"tenant_id": f.TenantID, "id": f.ID, "key": a.removeProp})
		case a.deleteNode:
			deletes[f.Label] = append(deletes[f.Label], map[string]any{"tenant_id": f.TenantID, "id": f.ID})
		case a.upsert != nil:
			upserts[nodeKey{f.TenantID, f.Label, f.ID}] = a.upsert
		case a.upsertTenant:
			tenants = append(tenants, f.TenantID)
		case a.deleteTenant:
			deleteTenants = append(deleteTenants, f.TenantID)
		case a.deleteUntenanted != "":
			untenanted = append(untenanted, a.deleteUntenanted)
		case a.deleteWithoutID != "":
			withoutID = append(withoutID, f)
		case a.deleteMisplaced != nil:
			misplacedEdges = append(misplacedEdges, a.deleteMisplaced)
		case a.deleteLinkedIn != nil:
			linkedEdges = append(linkedEdges, a.deleteLinkedIn)
		}
	}
	var changes []string
	// writeAll runs texts (a statement, or a clear and its merge) in one
	// transaction per chunk of rows, and counts what the last one applied: a
	// graph that lost most of a tenant has a finding per row (up to
	// MaxSuspects), and one transaction of them all would outgrow Neo4j's
	// transaction memory on every run. Each statement is idempotent and
	// guarded, so the chunks applied before a failure stand, and are
	// reported. write is writeAll of one statement.
	writeAll := func(what string, texts []string, params map[string]any) error {
		rows, _ := params["rows"].([]map[string]any)
		total, transactions := int64(0), 0
		for start := 0; start == 0 || start < len(rows); start += r.c.cfg.ChunkSize {
			transactions++
			chunkParams := params
			if len(rows) > r.c.cfg.ChunkSize {
				chunkParams = maps.Clone(params)
				chunkParams["rows"] = rows[start:min(start+r.c.cfg.ChunkSize, len(rows))]
			}
			n, err := r.writeTransaction(ctx, texts, chunkParams)
			if err != nil {
				if start > 0 {
					changes = append(changes, fmt.Sprintf("%s: %d, then stopped", what, total))
				}
				return fmt.Errorf("repair: %s: %w", what, err)
			}
			total += n
		}
		if transactions > 1 {
			changes = append(changes, fmt.Sprintf("%s: %d, in %d transactions", what, total, transactions))
		} else {
			changes = append(changes, fmt.Sprintf("%s: %d", what, total))
		}
		return nil
	}
	write := func(what, text string, params map[string]any) error { return writeAll(what, []string{text}, params) }
	if len(relRows) > 0 {
		if err := write("removed extra and cross-tenant relationships", cypher.DeleteRelationshipsText, map[string]any{"rows": relRows}); err != nil {
			return changes, err
		}
	}
	if len(removeRelProps) > 0 {
		if err := write("removed properties outside the allowlist from relationships", removeRelPropsText,
			map[string]any{"rows": removeRelProps}); err != nil {
			return changes, err
		}
	}
	for _, label := range sortedKeys(removeProps) {
		if err := write("removed properties outside the allowlist from "+label+" nodes", cypher.RemovePropertyText(label),
			map[string]any{"rows": removeProps[label]}); err != nil {
			return changes, err
		}
	}
	for _, label := range sortedKeys(deletes) {
		if err := write("deleted orphan "+label+" nodes", cypher.DeleteNodesText(label), map[string]any{"rows": deletes[label]}); err != nil {
			return changes, err
		}
	}
	for _, tenant := range deleteTenants {
		// Only the projection's nodes: other data of the tenant (labels no
		// projection owns, such as GraphRAG chunks) is never repaired.
		if err := r.deleteInBatches(ctx, fmt.Sprintf("deleted nodes of tenant %d, which PostgreSQL does not have", tenant),
			"MATCH (n) WHERE n.tenant_id = $tenant AND any(l IN labels(n) WHERE l IN $owned) WITH n LIMIT 10000 DETACH DELETE n RETURN count(*) AS applied",
			map[string]any{"tenant": tenant, "owned": cypher.Labels(r.model)}, &changes); err != nil {
			return changes, err
		}
	}
	slices.Sort(untenanted)
	for _, label := range slices.Compact(untenanted) {
		if err := r.deleteInBatches(ctx, "deleted "+label+" nodes without an integer tenant_id",
			"MATCH (n:"+label+") WHERE "+withoutIntegerTenant("n")+" WITH n LIMIT 10000 DETACH DELETE n RETURN count(*) AS applied",
			nil, &changes); err != nil {
			return changes, err
		}
	}
	for _, m := range misplacedEdges {
		scope := "coalesce(r.tenant_id, a.tenant_id, b.tenant_id) = $tenant"
		if m.noTenant {
			scope = "coalesce(r.tenant_id, a.tenant_id, b.tenant_id) IS NULL"
		}
		if err := r.deleteInBatches(ctx, fmt.Sprintf("deleted misplaced %s relationships of tenant %d", m.typ, m.tenant),
			"MATCH (a)-[r:"+m.typ+"]->(b) WHERE "+m.condition(true)+" AND "+scope+
				" WITH r LIMIT 10000 DELETE r RETURN count(*) AS applied",
			map[string]any{"tenant": m.tenant, "owned": cypher.Labels(r.model)}, &changes); err != nil {
			return changes, err
		}
	}
	for _, l := range linkedEdges {
		if err := r.deleteInBatches(ctx, fmt.Sprintf("deleted %s relationships from other tenants to tenant %d", l.typ, l.tenant),
			l.match(true)+"\nWITH r LIMIT 10000 DELETE r RETURN count(*) AS applied",
			map[string]any{"tenant": l.tenant, "owned": cypher.Labels(r.model)}, &changes); err != nil {
			return changes, err
		}
	}
	for _, f := range withoutID {
		label := f.repair.deleteWithoutID
		if err := r.deleteInBatches(ctx, fmt.Sprintf("deleted %s nodes of tenant %d without a positive integer id", label, f.TenantID),
			"MATCH (n:"+label+") WHERE n.tenant_id = $tenant AND NOT "+integerID("n")+" WITH n LIMIT 10000 DETACH DELETE n RETURN count(*) AS applied",
			map[string]any{"tenant": f.TenantID}, &changes); err != nil {
			return changes, err
		}
	}
	if len(tenants) > 0 {
		rows := make([]map[string]any, len(tenants))
		for i, t := range tenants {
			rows[i] = map[string]any{"tenant_id": t}
		}
		if err := write("created tenant nodes", "UNWIND $rows AS row\nMERGE (t:"+tenantLabel(r.model)+
			" {tenant_id: row.tenant_id, id: row.tenant_id})\nRETURN count(t) AS applied", map[string]any{"rows": rows}); err != nil {
			return changes, err
		}
	}
	if len(marks) > 0 && r.c.cfg.Vectors != nil && r.model.Embedding != nil {
		e := *r.model.Embedding
		slices.SortFunc(marks, cypher.CompareNodeRows)
		if err := write("queued "+e.Label+" nodes for the embedding stage", cypher.EmbeddingMarkText(e),
			map[string]any{"rows": marks, "model": r.c.cfg.Vectors.Model, "dimension": int64(r.c.cfg.Vectors.Dimension)}); err != nil {
			return changes, err
		}
	}
	if len(upserts) > 0 {
		if err := r.reproject(upserts, writeAll); err != nil {
			return changes, err
		}
	}
	return changes, nil
}

// embeddingMark is the text hash a node's vector must have, and the
// outbox id the node held when it was read (the mark's guard).
type embeddingMark struct {
	outboxID int64
	hash     string
}

type nodeKey struct {
	tenant int64
	label  string
	id     int64
}

// reproject writes the row projection of the given nodes under the repair
// guard.
func (r *run) reproject(upserts map[nodeKey]*node, write func(what string, texts []string, params map[string]any) error) error {
	keys := make([]nodeKey, 0, len(upserts))
	for k := range upserts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].id < keys[j].id })
	nodes := make([]*node, len(keys))
	for i, k := range keys {
		nodes[i] = upserts[k]
	}
	stmts, err := projectionStatements(r.model, nodes, 0)
	if err != nil {
		return err
	}
	for _, st := range stmts {
		if err := write(st.what, st.texts(), st.params); err != nil {
			return err
		}
	}
	return nil
}

// writeTransaction runs texts, in order, in one write transaction with the
// same parameters, and returns what the last one applied.
func (r *run) writeTransaction(ctx context.Context, texts []string, params map[string]any) (int64, error) {
	// The driver's bookmarks, as ExecuteQuery keeps them: drift's later reads
	// (ExecuteQuery, on a cluster perhaps a follower) see these writes.
	session := r.c.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite, DatabaseName: r.c.cfg.Database,
		BookmarkManager: r.c.driver.ExecuteQueryBookmarkManager()})
	defer session.Close(context.WithoutCancel(ctx))
	return neo4j.ExecuteWrite(ctx, session, func(tx neo4j.ManagedTransaction) (int64, error) {
		return runTexts(ctx, tx, texts, params)
	})
}

// runTexts runs texts, in order, in tx with the same parameters, and
// returns the count the last one reports as applied.
//
// A statement's rows are sent at most cypher.StatementRows at a time (the
// texts run for each chunk in turn, in one transaction), so a repair or a
// snapshot chunk holding a 50,000-line order writes within the statement
// bound sync's batches keep (cypher.Batches, ADR 0026); the counts of the
// chunks add up.
func runTexts(ctx context.Context, tx neo4j.ManagedTransaction, texts []string, params map[string]any) (int64, error) {
	rows, ok := params["rows"].([]map[string]any)
	if !ok || len(rows) <= statementRows {
		return runTextsOnce(ctx, tx, texts, params)
	}
	var total int64
	for _, chunk := range cypher.RowChunks(rows, statementRows) {
		chunkParams := maps.Clone(params)
		chunkParams["rows"] = chunk
		applied, err := runTextsOnce(ctx, tx, texts, chunkParams)
		if err != nil {
			return 0, err
		}
		total += applied
	}
	return total, nil
}

// statementRows is cypher.StatementRows; a test lowers it to split small
// orders as the bound splits large ones.
var statementRows = cypher.StatementRows

// txRun runs one statement of the row path: tx.Run (a test records what
// it sends through it).
var txRun = func(ctx context.Context, tx neo4j.ManagedTransaction, text string, params map[string]any) (neo4j.ResultWithContext, error) {
	return tx.Run(ctx, text, params)
}

func runTextsOnce(ctx context.Context, tx neo4j.ManagedTransaction, texts []string, params map[string]any) (int64, error) {
	var applied int64
	for _, text := range texts {
		res, err := txRun(ctx, tx, text, params)
		if err != nil {
			return 0, err
		}
		rec, err := res.Single(ctx)
		if err != nil {
			return 0, err
		}
		applied, _, _ = neo4j.GetRecordValue[int64](rec, "applied")
	}
	return applied, nil
}

// statement is one Cypher statement of a re-projection, and the statement
// that runs before it in its transaction, from the same rows (clear: a
// Single relationship's other edges, cypher.RepairRelClearText), if any.
type statement struct {
	what   string
	text   string
	params map[string]any
	clear  string
}

// texts are the statement's texts in the order they run.
func (st statement) texts() []string {
	if st.clear == "" {
		return []string{st.text}
	}
	return []string{st.clear, st.text}
}

// projectionStatements writes the row projection of nodes: the nodes their
// mutations name (an aggregate and its reference nodes), then the
// relationships they own. Aggregate nodes and relationships are guarded by
// the row's version (never regress a newer state). Reference nodes take the
// repair guard when rebuildBelow is 0: a reference node re-projected for a
// finding of its own must still hold the outbox id drift read on it, one
// that an aggregate's rows name is created when missing and otherwise
// written only while no event has written it (outbox id 0). For a rebuild
// they take the outbox-id watermark (cypher.RebuildReferenceText):
// rebuildBelow for a chunk of reference rows, 1 (create when missing) for
// those an aggregate names.
func projectionStatements(model graphmodel.Model, nodes []*node, rebuildBelow int64) ([]statement, error) {
	nodeRows := map[string][]map[string]any{}
	relRows := map[string][]map[string]any{}
	tenants := map[int64]bool{}
	// where a node's row is in nodeRows, and whether it is the node's own
	// (the node re-projected, not one its rows name): a node's own row
	// replaces one another node's rows named it with.
	type placed struct {
		at  int
		own bool
	}
	seen := map[nodeKey]placed{}
	for _, n := range nodes {
		owner, _ := model.Label(n.label)
		for _, up := range n.mut.Nodes {
			if up.Label == tenantLabel(model) {
				tenants[up.TenantID] = true
				continue
			}
			own := up.Label == n.label && up.ID == n.id
			nk := nodeKey{up.TenantID, up.Label, up.ID}
			before, dup := seen[nk]
			if dup && (before.own || !own) {
				continue
			}
			row := map[string]any{"tenant_id": up.TenantID, "id": up.ID, "version": up.Guard.Version, "props": up.Props}
			if n.seen > 0 && own {
				row["seen"] = n.seen // the aggregate found ahead of its rows
			}
			l, _ := model.Label(up.Label)
			switch {
			case n.stampsSeen != nil && own:
				// Stamps no event can pass, as drift read them (a string
				// set by hand, say): written only while it holds them, and
				// its outbox id put back to 0.
				row["seen"], row["outbox_seen"], row["reset_stamp"] = n.stampsSeen.version, n.stampsSeen.outboxID, true
			case n.outboxSeen != nil && own:
				row["outbox_seen"] = *n.outboxSeen // the reference node as drift read it
			case rebuildBelow == 0 && l.Role == graphmodel.RoleReference && !own:
				// A reference node an aggregate's rows name (its category,
				// its customer) carries no version: written as the rows
				// say, it would undo what a later event of another
				// aggregate wrote to it. It is created when missing and
				// left alone once an event wrote it (outbox id 0: no event
				// has); when it is stale, it is a finding of its own.
				row["outbox_seen"] = int64(0)
			}
			if rebuildBelow > 0 && l.Role == graphmodel.RoleReference {
				row["below"] = int64(1)
				if owner.Role == graphmodel.RoleReference {
					row["below"] = rebuildBelow
				}
			}
			if dup {
				nodeRows[up.Label][before.at] = row
				seen[nk] = placed{before.at, own}
				continue
			}
			seen[nk] = placed{len(nodeRows[up.Label]), own}
			nodeRows[up.Label] = append(nodeRows[up.Label], row)
		}
		for _, rel := range n.mut.Rels {
			if rel.ToID == 0 {
				continue
			}
			relRows[rel.Type] = append(relRows[rel.Type], map[string]any{"tenant_id": rel.TenantID, "from_id": rel.FromID,
				"to_id": rel.ToID, "version": n.version, "props": rel.Props})
		}
	}
	var out []statement
	if len(tenants) > 0 {
		rows := make([]map[string]any, 0, len(tenants))
		for t := range tenants {
			rows = append(rows, map[string]any{"tenant_id": t})
		}
		sort.Slice(rows, func(i, j int) bool { return rows[i]["tenant_id"].(int64) < rows[j]["tenant_id"].(int64) })
		out = append(out, statement{what: "ensured tenant nodes", text: "UNWIND $rows AS row\nMERGE (t:" + tenantLabel(model) +
			" {tenant_id: row.tenant_id, id: row.tenant_id})\nRETURN count(t) AS applied", params: map[string]any{"rows": rows}})
	}
	// Labels in model order: reference nodes before the aggregates that
	// point at them, all nodes before any relationship. Each label's rows in
	// key order, as sync's (cypher.CompareNodeRows): every writer locks shared
	// nodes in one order, and a chunk waits for sync instead of deadlocking.
	for _, l := range model.Labels {
		rows := nodeRows[l.Name]
		if len(rows) == 0 {
			continue
		}
		slices.SortFunc(rows, cypher.CompareNodeRows)
		text, err := cypher.RepairNodeText(model, l.Name)
		if rebuildBelow > 0 && l.Role == graphmodel.RoleReference {
			text, err = cypher.RebuildReferenceText(model, l.Name)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, statement{what: "re-projected " + l.Name + " nodes from their rows", text: text, params: map[string]any{"rows": rows}})
		if l.Tombstone != "" {
			text, err := cypher.RemoveTombstonedText(model, l.Name)
			if err != nil {
				return nil, err
			}
			out = append(out, statement{what: "removed " + l.Name + " nodes deleted while they were re-projected", text: text, params: map[string]any{"rows": rows}})
		}
	}
	for _, rt := range model.Relationships {
		rows := relRows[rt.Type]
		if len(rows) == 0 {
			continue
		}
		text, err := cypher.RepairRelText(model, rt.Type)
		if err != nil {
			return nil, err
		}
		st := statement{what: "re-projected " + rt.Type + " relationships from their rows", text: text, params: map[string]any{"rows": rows}}
		if rt.Single {
			if st.clear, err = cypher.RepairRelClearText(model, rt.Type); err != nil {
				return nil, err
			}
		}
		out = append(out, st)
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (r *run) deleteInBatches(ctx context.Context, what, text string, params map[string]any, changes *[]string) error {
	total := int64(0)
	for {
		res, err := neo4j.ExecuteQuery(ctx, r.c.driver, text, params, neo4j.EagerResultTransformer,
			neo4j.ExecuteQueryWithDatabase(r.c.cfg.Database))
		if err != nil {
			if total > 0 { // the batches before this one were applied
				*changes = append(*changes, fmt.Sprintf("%s: %d, then stopped", what, total))
			}
			return fmt.Errorf("repair: %s: %w", what, err)
		}
		n, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "applied")
		total += n
		if n < 10000 {
			*changes = append(*changes, fmt.Sprintf("%s: %d", what, total))
			return nil
		}
	}
}
