package cypher

import (
	"fmt"
	"strings"

	"graphsync/graphmodel"
)

// OwnersQuery finds which tenant holds given ids, across tenants, for every
// non-tenant label and tombstone label of the model, and where the Single
// relationships of those nodes point now. Its parameters are one list of ids
// per label, named by OwnersParam(label). It returns rows (kind, id,
// tenant_id, target): kind is a label and target null, or kind is a Single
// relationship type, id its From node and target its To node's id. Business
// ids are unique across tenants in PostgreSQL, so an id held by another tenant
// reveals a cross-tenant reference.
func (b *Builder) OwnersQuery() string {
	var parts []string
	for _, label := range nodeLabels(b.model) {
		if l, ok := b.labels[label]; ok && l.Role == graphmodel.RoleTenant {
			continue
		}
		parts = append(parts, fmt.Sprintf("UNWIND $%s AS id\nMATCH (n:%s {%s: id})\nRETURN '%s' AS kind, n.%s AS id, n.%s AS tenant_id, null AS target",
			OwnersParam(label), label, graphmodel.KeyID, label, graphmodel.KeyID, graphmodel.KeyTenantID))
	}
	for _, r := range b.model.Relationships {
		if !r.Single {
			continue
		}
		parts = append(parts, fmt.Sprintf("UNWIND $%s AS id\nMATCH (n:%s {%s: id})-[:%s]->(m:%s)\nRETURN '%s' AS kind, n.%s AS id, n.%s AS tenant_id, m.%s AS target",
			OwnersParam(r.From), r.From, graphmodel.KeyID, r.Type, r.To, r.Type, graphmodel.KeyID, graphmodel.KeyTenantID, graphmodel.KeyID))
	}
	return strings.Join(parts, "\nUNION ALL\n")
}

// OwnersParam is the OwnersQuery parameter holding the ids looked up for label.
func OwnersParam(label string) string { return "ids_" + label }

// DumpNodesQuery returns every node of label in tenant $tenant_id with its
// properties (label is a model or tombstone label).
func DumpNodesQuery(label string) string {
	return fmt.Sprintf("MATCH (n:%s)\nWHERE n.%s = $tenant_id\nRETURN properties(n) AS props",
		label, graphmodel.KeyTenantID)
}

// DumpRelsQuery returns every relationship of r's type touching tenant
// $tenant_id on either end or by its own tenant_id, with both endpoints'
// keys, so a relationship across tenants shows up too.
func DumpRelsQuery(r graphmodel.Relationship) string {
	return fmt.Sprintf("MATCH (a:%[1]s)-[r:%[2]s]->(b:%[3]s)\nWHERE a.%[4]s = $tenant_id OR b.%[4]s = $tenant_id OR r.%[4]s = $tenant_id\n"+
		"RETURN a.%[4]s AS from_tenant, a.%[5]s AS from_id, b.%[4]s AS to_tenant, b.%[5]s AS to_id, properties(r) AS props",
		r.From, r.Type, r.To, graphmodel.KeyTenantID, graphmodel.KeyID)
}

// DeleteTenantQuery removes every node of tenant $tenant_id with label, and
// its relationships (for rebuilds and test cleanup).
func DeleteTenantQuery(label string) string {
	return fmt.Sprintf("MATCH (n:%s)\nWHERE n.%s = $tenant_id\nDETACH DELETE n", label, graphmodel.KeyTenantID)
}

// Labels returns every label the model lets the graph hold, tombstone labels
// included, in model order.
func Labels(m graphmodel.Model) []string { return nodeLabels(m) }
