package drift

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/cypher"
	"graphsync/graphmodel"
)

func (r *run) query(ctx context.Context, text string, params map[string]any) ([]*neo4j.Record, error) {
	res, err := neo4j.ExecuteQuery(ctx, r.c.driver, text, params, neo4j.EagerResultTransformer, graphRead(r.c.cfg.Database)...)
	if err != nil {
		return nil, err
	}
	return res.Records, nil
}

// checkTombstonesAndTenant checks a tenant's Tenant node and its tombstones:
// a tombstone must have no product row of its id.
func (r *run) checkTombstonesAndTenant(ctx context.Context, tx pgx.Tx, tenant int64, anyRows bool, pending pendingIndex) error {
	tenantNode, props, err := r.tenantNode(ctx, tenant)
	if err != nil {
		return err
	}
	if tenantNode {
		label, _ := r.model.Label(tenantLabel(r.model))
		r.checkProperties(tenant, label, tenant, props)
	}
	if anyRows && !tenantNode {
		r.suspects = append(r.suspects, suspect{tenant, tenantLabel(r.model), tenant})
	}
	tomb := tombstoneLabel(r.model)
	if tomb == "" {
		return nil
	}
	summary := r.report.tenant(tenant)
	counts := summary.label(tomb)
	after := int64(0)
	for {
		recs, err := r.query(ctx, "MATCH (n:"+tomb+") WHERE n.tenant_id = $tenant AND "+integerID("n")+" AND n.id > $after "+
			"AND ((n.id % 1000003) * 7919 + $offset) % 1000 < $share WITH n ORDER BY n.id LIMIT $limit RETURN n.id AS id, properties(n) AS props",
			map[string]any{"tenant": tenant, "after": after, "limit": int64(r.c.cfg.ChunkSize), "offset": r.sample.offset, "share": r.sample.share})
		if err != nil {
			return fmt.Errorf("read tombstones of tenant %d: %w", tenant, err)
		}
		if len(recs) == 0 {
			return nil
		}
		ids := make([]int64, len(recs))
		for i, rec := range recs {
			ids[i], _, _ = neo4j.GetRecordValue[int64](rec, "id")
			props, _, _ := neo4j.GetRecordValue[map[string]any](rec, "props")
			r.checkProperties(tenant, graphmodel.Label{Name: tomb}, ids[i], props)
		}
		counts.Nodes += len(ids)
		after = ids[len(ids)-1]
		rows, err := tx.Query(ctx, "SELECT id FROM products WHERE tenant_id = $1 AND id = ANY($2)", tenant, ids)
		if err != nil {
			return fmt.Errorf("check tombstones of tenant %d: %w", tenant, err)
		}
		alive, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return fmt.Errorf("check tombstones of tenant %d: %w", tenant, err)
		}
		for _, id := range alive {
			if p, ok := pending.explains(tomb, id); ok {
				r.report.explain(tenant, tomb, id, p, nil)
				continue
			}
			r.suspects = append(r.suspects, suspect{tenant, tomb, id})
		}
	}
}

// checkProperties holds the properties of a node no chunk reads (the tenant
// node, a tombstone: they carry graphsync's own keys only) to the allowlist
// and the personal-data rule. Only another writer puts anything else there,
// so what is found is final, without a second look.
func (r *run) checkProperties(tenant int64, label graphmodel.Label, id int64, props map[string]any) {
	propertyFindings(r.model, label, props, func(kind Kind, detail string, repair *repairAction) {
		r.findings = append(r.findings, Finding{Kind: kind, TenantID: tenant, Label: label.Name, ID: id, Count: 1, Detail: detail, repair: repair})
	})
}

// tenantNode reads whether the tenant's node exists, and its properties.
func (r *run) tenantNode(ctx context.Context, tenant int64) (bool, map[string]any, error) {
	recs, err := r.query(ctx, "MATCH (t:"+tenantLabel(r.model)+" {tenant_id: $tenant, id: $tenant}) RETURN properties(t) AS props",
		map[string]any{"tenant": tenant})
	if err != nil {
		return false, nil, fmt.Errorf("read the tenant node of tenant %d: %w", tenant, err)
	}
	if len(recs) == 0 {
		return false, nil, nil
	}
	props, _, _ := neo4j.GetRecordValue[map[string]any](recs[0], "props")
	return true, props, nil
}

// recheckSpecial is the second look at a Tenant node or a tombstone.
func (r *run) recheckSpecial(ctx context.Context, s suspect) ([]Finding, error) {
	if s.label == tenantLabel(r.model) {
		exists, _, err := r.tenantNode(ctx, s.tenant)
		if err != nil || exists {
			return nil, err
		}
		return []Finding{{Kind: MissingNode, TenantID: s.tenant, Label: s.label, ID: s.tenant, Count: 1,
			Detail: "the tenant has rows but no tenant node", repair: &repairAction{upsertTenant: true}}}, nil
	}
	recs, err := r.query(ctx, "MATCH (n:"+s.label+" {tenant_id: $tenant, id: $id}) RETURN count(n) AS n",
		map[string]any{"tenant": s.tenant, "id": s.id})
	if err != nil {
		return nil, fmt.Errorf("re-read tombstone %d: %w", s.id, err)
	}
	if n, _, _ := neo4j.GetRecordValue[int64](recs[0], "n"); n == 0 {
		return nil, nil
	}
	var alive bool
	if err := r.c.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM products WHERE tenant_id = $1 AND id = $2)", s.tenant, s.id).Scan(&alive); err != nil {
		return nil, fmt.Errorf("re-read product %d: %w", s.id, err)
	}
	if !alive {
		return nil, nil
	}
	return []Finding{{Kind: OrphanNode, TenantID: s.tenant, Label: s.label, ID: s.id, Count: 1,
		Detail: "a tombstone, but the product row exists", repair: &repairAction{deleteNode: true}}}, nil
}

// scanForeign reads the whole graph once for what no per-tenant merge sees:
// labels and relationship types no projection owns (reported, never
// repaired), nodes of the model's labels without a tenant_id, and nodes of
// tenants PostgreSQL does not have.
func (r *run) scanForeign(ctx context.Context, tenants []int64) error {
	owned := cypher.Labels(r.model)
	recs, err := r.query(ctx, `MATCH (n)
WITH n, [l IN labels(n) WHERE NOT l IN $owned] AS foreign, [l IN labels(n) WHERE l IN $owned] AS mine
WHERE size(foreign) > 0 OR n.tenant_id IS NULL OR size(mine) > 0
RETURN n.tenant_id AS tenant, foreign, mine, count(*) AS nodes, min(n.id) AS example,
       count(CASE WHEN NOT `+integerID("n")+` THEN 1 END) AS without_id`, map[string]any{"owned": owned})
	if err != nil {
		return fmt.Errorf("scan the graph for labels and tenants: %w", err)
	}
	known := map[int64]bool{}
	for _, t := range tenants {
		known[t] = true
	}
	unknownTenants := map[int64]int{}
	for _, rec := range recs {
		// A tenant_id that is not an integer (a string, a float, set by
		// another writer) is no tenant's, as a missing one is: reported as
		// such, not as the zero value of an integer (tenant 0, which no
		// repair would match).
		rawTenant, _ := rec.Get("tenant")
		tenant, integerTenant := rawTenant.(int64)
		noTenant := !integerTenant
		foreign, _, _ := neo4j.GetRecordValue[[]any](rec, "foreign")
		mine, _, _ := neo4j.GetRecordValue[[]any](rec, "mine")
		count, _, _ := neo4j.GetRecordValue[int64](rec, "nodes")
		example, _, _ := neo4j.GetRecordValue[int64](rec, "example")
		withoutID, _, _ := neo4j.GetRecordValue[int64](rec, "without_id")
		// A one-tenant run still reports nodes without a tenant (they
		// belong to no tenant, so no other run but a whole-graph one
		// would), but only a whole-graph run repairs them: a repair of one
		// tenant changes nothing outside it.
		if r.c.cfg.TenantID != 0 && !noTenant && tenant != r.c.cfg.TenantID {
			continue
		}
		for _, l := range foreign {
			name, _ := l.(string)
			r.report.foreign(ForeignLabel, name, tenant, noTenant, count)
		}
		if len(mine) == 0 {
			continue
		}
		label, _ := mine[0].(string)
		switch {
		case noTenant:
			detail := fmt.Sprintf("%d %s nodes have no tenant_id", count, label)
			if rawTenant != nil {
				detail = fmt.Sprintf("%d %s nodes have a tenant_id that is not an integer (%s)", count, label, valueKind(rawTenant))
			}
			f := Finding{Kind: NodeWithoutTenant, Label: label, ID: example, Count: int(count), Detail: detail}
			if r.c.cfg.TenantID == 0 {
				f.repair = &repairAction{deleteUntenanted: label}
			}
			r.findings = append(r.findings, f)
		case !known[tenant] && r.c.cfg.TenantID == 0:
			unknownTenants[tenant] += int(count)
		case withoutID > 0:
			r.findings = append(r.findings, Finding{Kind: NodeWithoutID, TenantID: tenant, Label: label, Count: int(withoutID),
				Detail: fmt.Sprintf("%d %s nodes have no positive integer id", withoutID, label), repair: &repairAction{deleteWithoutID: label}})
		}
	}
	for tenant, count := range unknownTenants {
		// Read after the graph: a tenant created meanwhile is in PostgreSQL now.
		var exists bool
		if err := r.c.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1)", tenant).Scan(&exists); err != nil {
			return fmt.Errorf("check tenant %d: %w", tenant, err)
		}
		if !exists {
			r.findings = append(r.findings, Finding{Kind: OrphanNode, TenantID: tenant, Label: tenantLabel(r.model), ID: tenant, Count: count,
				Detail: fmt.Sprintf("tenant %d is not in PostgreSQL; the graph holds %d nodes of it", tenant, count),
				repair: &repairAction{deleteTenant: true}})
		}
	}
	if err := r.scanMisplaced(ctx); err != nil {
		return err
	}
	if err := r.scanLinkedFromOtherTenants(ctx); err != nil {
		return err
	}
	var types []string
	for _, rt := range r.model.Relationships {
		types = append(types, rt.Type)
	}
	recs, err = r.query(ctx, `MATCH ()-[r]->() WHERE NOT type(r) IN $types
RETURN type(r) AS type, r.tenant_id AS tenant, count(*) AS n`, map[string]any{"types": types})
	if err != nil {
		return fmt.Errorf("scan the graph for relationship types: %w", err)
	}
	for _, rec := range recs {
		typ, _, _ := neo4j.GetRecordValue[string](rec, "type")
		tenant, noTenant, _ := neo4j.GetRecordValue[int64](rec, "tenant")
		n, _, _ := neo4j.GetRecordValue[int64](rec, "n")
		if r.c.cfg.TenantID != 0 && (noTenant || tenant != r.c.cfg.TenantID) {
			continue
		}
		r.report.foreign(ForeignRelType, typ, tenant, noTenant, n)
	}
	return nil
}

// misplaced is a relationship type's edges that do not start (out) or end
// (!out) at a node of its owner label: the projection writes each type from
// its owner, in the model's direction, and the chunks read only that side,
// so no chunk compares them.
type misplaced struct {
	typ, owner string
	out        bool
}

// condition is the Cypher condition an edge r from a to b of the type meets
// when it is misplaced; with repairable, only those whose ends are both
// nodes of projected labels ($owned; an edge touching data no projection
// owns, a GraphRAG chunk say, is reported, never repaired). Labels and types
// come from the validated model.
func (m misplaced) condition(repairable bool) string {
	end := "a"
	if !m.out {
		end = "b"
	}
	text := "NOT " + end + ":" + m.owner
	if repairable {
		text += " AND any(l IN labels(a) WHERE l IN $owned) AND any(l IN labels(b) WHERE l IN $owned)"
	}
	return text
}

// linkedIn is a relationship type's edges, in a tenant run, from another
// tenant's owner node (or one without a tenant) to a node of the run's
// tenant: the chunks read each edge from its owner, so only a whole-graph
// run would see them, from the other tenant's side.
type linkedIn struct {
	typ, from, to string
	out           bool // the owner is the From end
	tenant        int64
}

// match is the Cypher pattern and condition of those edges, r from a to b:
// from the run's tenant's ($tenant) nodes of the other end's label (a
// label scan of one label, not of every edge of the type), to an owner of
// another tenant or of none; the edge's own tenant_id is not trusted. With
// repairable, only edges whose owner is a node of a projected label
// ($owned). Labels and types come from the validated model.
func (l linkedIn) match(repairable bool) string {
	text := "MATCH (b:" + l.to + ") WHERE b.tenant_id = $tenant\nMATCH (a)-[r:" + l.typ + "]->(b) WHERE coalesce(a.tenant_id <> $tenant, true)"
	owner := "a"
	if !l.out {
		text = "MATCH (a:" + l.from + ") WHERE a.tenant_id = $tenant\nMATCH (a)-[r:" + l.typ + "]->(b) WHERE coalesce(b.tenant_id <> $tenant, true)"
		owner = "b"
	}
	if repairable {
		text += " AND any(l IN labels(" + owner + ") WHERE l IN $owned)"
	}
	return text
}

// scanLinkedFromOtherTenants reads, in a tenant run, each relationship type
// of the model for edges another tenant's node owns that end at (or start
// from) one of the run's tenant (see linkedIn).
func (r *run) scanLinkedFromOtherTenants(ctx context.Context) error {
	tenant := r.c.cfg.TenantID
	if tenant == 0 {
		return nil // a whole-graph run reads them from their owner's tenant
	}
	for _, rt := range r.model.Relationships {
		owner, out := ownedBy(r.model, rt)
		l := linkedIn{typ: rt.Type, from: rt.From, to: rt.To, out: out, tenant: tenant}
		recs, err := r.query(ctx, l.match(false)+"\nRETURN count(*) AS n",
			map[string]any{"tenant": tenant})
		if err != nil {
			return fmt.Errorf("scan the graph for %s relationships from other tenants: %w", rt.Type, err)
		}
		n, _, _ := neo4j.GetRecordValue[int64](recs[0], "n")
		if n == 0 {
			continue
		}
		r.findings = append(r.findings, Finding{Kind: CrossTenant, TenantID: tenant, Label: owner, Count: int(n),
			Detail: fmt.Sprintf("%d %s relationships link this tenant's nodes to %s nodes of another tenant (or of none)", n, rt.Type, owner),
			repair: &repairAction{deleteLinkedIn: &l}})
	}
	return nil
}

// scanMisplaced reads the graph once per relationship type of the model for
// misplaced edges (see misplaced), per tenant (the edge's, else either
// end's).
func (r *run) scanMisplaced(ctx context.Context) error {
	for _, rt := range r.model.Relationships {
		owner, out := ownedBy(r.model, rt)
		m := misplaced{typ: rt.Type, owner: owner, out: out}
		recs, err := r.query(ctx, "MATCH (a)-[r:"+rt.Type+"]->(b) WHERE "+m.condition(false)+
			"\nRETURN coalesce(r.tenant_id, a.tenant_id, b.tenant_id) AS tenant, count(*) AS n", nil)
		if err != nil {
			return fmt.Errorf("scan the graph for misplaced %s relationships: %w", rt.Type, err)
		}
		way := "from"
		if !out {
			way = "to"
		}
		for _, rec := range recs {
			tenant, noTenant, _ := neo4j.GetRecordValue[int64](rec, "tenant")
			n, _, _ := neo4j.GetRecordValue[int64](rec, "n")
			if r.c.cfg.TenantID != 0 && (noTenant || tenant != r.c.cfg.TenantID) {
				continue
			}
			r.findings = append(r.findings, Finding{Kind: ExtraRelationship, TenantID: tenant, Label: owner, Count: int(n),
				Detail: fmt.Sprintf("%d %s relationships not %s a %s node: the projection writes none", n, rt.Type, way, owner),
				repair: &repairAction{deleteMisplaced: &misplacedIn{m, tenant, noTenant}}})
		}
	}
	return nil
}
