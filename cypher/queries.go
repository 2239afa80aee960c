package cypher

import (
	"fmt"
	"strings"

	"graphsync/graphmodel"
)

// OwnersQuery finds which tenant holds given ids, across tenants, for every
// non-tenant label and tombstone label of the model. Its lists are one list
// of ids per label, named by OwnersParam(label), passed in one map parameter
// (OwnersParams). It returns one row per label, (kind, ids, tenant_ids) with
// lists of equal length: kind is the label, ids the nodes found and
// tenant_ids their tenants. (Lists, not a row
// per node: a chunk of 2000 events looks up some 9,000 ids, and a row each
// costs twice the time. A node without a tenant or id counts as held by
// tenant -1, which is nobody's.) Business ids are unique across tenants in
// PostgreSQL, so an id held by another tenant reveals a cross-tenant
// reference.
func (b *Builder) OwnersQuery() string { return b.owners }

func ownersQueryText(b *Builder) string {
	var parts []string
	for _, label := range nodeLabels(b.model) {
		if l, ok := b.labels[label]; ok && l.Role == graphmodel.RoleTenant {
			continue
		}
		parts = append(parts, fmt.Sprintf("UNWIND $%s.%s AS id\nMATCH (n:%s {%s: id})\nRETURN '%s' AS kind, collect(n.%s) AS ids, collect(coalesce(n.%s, -1)) AS tenant_ids",
			ownersMapParam, OwnersParam(label), label, graphmodel.KeyID, label, graphmodel.KeyID, graphmodel.KeyTenantID))
	}
	return strings.Join(parts, "\nUNION ALL\n")
}

// ownersMapParam is OwnersQuery's one parameter.
const ownersMapParam = "owners"

// OwnersParams returns OwnersQuery's parameters for lists keyed by
// OwnersParam. The lists go in one map parameter rather
// than a parameter each: Neo4j caches a plan per size class of every list
// parameter (0, 1, up to 10, 100, 1000, more), so with a parameter per list
// each new combination of sizes in a batch was planned again, some 100 ms
// on the 2-core machine, inside the batch's write transaction. A map's
// lists do not enter the cache key: one plan serves every batch
// (docs/adr/0013).
func OwnersParams(lists map[string]any) map[string]any {
	return map[string]any{ownersMapParam: lists}
}

// OwnersParam is the key of the OwnersQuery list holding the ids looked up for label.
func OwnersParam(label string) string { return "ids_" + label }

// DumpNodesQuery returns every node of label in tenant $tenant_id with its
// properties (label is a model or tombstone label). The id predicate lets the
// (tenant_id, id) key index serve the tenant lookup.
func DumpNodesQuery(label string) string {
	return fmt.Sprintf("MATCH (n:%s)\nWHERE n.%s = $tenant_id AND n.%s IS NOT NULL\nRETURN properties(n) AS props",
		label, graphmodel.KeyTenantID, graphmodel.KeyID)
}

// DumpRelsQuery returns every relationship of r's type with an endpoint in
// tenant $tenant_id, with both endpoints' keys, so that a relationship
// crossing tenants shows up too. Each side is found through the key index.
func DumpRelsQuery(r graphmodel.Relationship) string {
	side := func(anchor string) string {
		return fmt.Sprintf("MATCH (%[1]s:%[2]s)\nWHERE %[1]s.%[3]s = $tenant_id AND %[1]s.%[4]s IS NOT NULL\n"+
			"MATCH (a:%[5]s)-[r:%[6]s]->(b:%[7]s)\n"+
			"RETURN a.%[3]s AS from_tenant, a.%[4]s AS from_id, b.%[3]s AS to_tenant, b.%[4]s AS to_id, properties(r) AS props",
			anchor, map[string]string{"a": r.From, "b": r.To}[anchor], graphmodel.KeyTenantID, graphmodel.KeyID, r.From, r.Type, r.To)
	}
	return side("a") + "\nUNION\n" + side("b")
}

// Labels returns every label the model lets the graph hold, tombstone labels
// included, in model order.
func Labels(m graphmodel.Model) []string { return nodeLabels(m) }
