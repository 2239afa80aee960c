package cypher

import (
	"fmt"
	"strings"

	"graphsync/graphmodel"
)

// Repair statements, for `graphsync drift --repair` and rebuild: they write
// the state the business rows imply. Unlike the event statements they take
// the rows' version as the guard and allow an equal one (the rows are the
// truth for that version), and they never touch a node whose version is
// newer: live sync may have applied a later event meanwhile. Every value is
// a parameter; labels, types and keys come from the validated model.

// RepairNodeText upserts nodes of label from rows {tenant_id, id, version,
// props, seen, outbox_seen}. A node tombstoned meanwhile is left alone. A
// node newer than the row is left alone too, unless its version is the
// row's seen: drift found it ahead of rows read after it, a state no event
// wrote, and a repair overwrites exactly that state (seen is absent from
// other rows). A reference node has no version (its rows' is 0): with
// outbox_seen, the outbox id drift read on it, it is written only while it
// still holds that id, so a rename sync applied meanwhile is not undone.
func RepairNodeText(m graphmodel.Model, label string) (string, error) {
	l, ok := m.Label(label)
	if !ok || l.Role == graphmodel.RoleTenant {
		return "", fmt.Errorf("repair: %q is not a node label of the model", label)
	}
	var b strings.Builder
	b.WriteString("UNWIND $rows AS row\n")
	if l.Tombstone != "" {
		fmt.Fprintf(&b, "OPTIONAL MATCH %s\nWITH row, t\nWHERE t IS NULL\n", keyLookup("t", l.Tombstone))
	}
	fmt.Fprintf(&b, "MERGE (n:%s {%s: row.tenant_id, %s: row.id})\n", l.Name, graphmodel.KeyTenantID, graphmodel.KeyID)
	fmt.Fprintf(&b, "ON CREATE SET n.%s = row.version, n.%s = 0\n", graphmodel.PropVersion, graphmodel.PropOutboxID)
	b.WriteString(lockNode("n"))
	fmt.Fprintf(&b, "WITH n, row\nWHERE (coalesce(n.%[1]s, 0) <= row.version OR n.%[1]s = row.seen)\n"+
		"  AND (row.outbox_seen IS NULL OR coalesce(n.%[2]s, 0) = row.outbox_seen)\n", graphmodel.PropVersion, graphmodel.PropOutboxID)
	var sets []string
	if l.Role == graphmodel.RoleAggregate {
		// A state of another version than the node's is the rows', not an
		// event's: no event's outbox id may claim it. A Single
		// relationship's statements act only for the event whose outbox id
		// the node holds, so a replay of the event that wrote the node
		// before would otherwise move the edge back. At the same version the
		// rows and that event say the same, and the node keeps its id. (A
		// reference node always keeps its outbox id: its guard is that id.)
		// Listed first: it reads the version the next item sets.
		sets = append(sets, fmt.Sprintf("n.%[1]s = CASE WHEN coalesce(n.%[2]s, 0) <> row.version THEN 0 ELSE n.%[1]s END",
			graphmodel.PropOutboxID, graphmodel.PropVersion))
	}
	if l.Role == graphmodel.RoleReference {
		// reset_stamp: drift found an outbox id no event can pass (above
		// the outbox sequence, PostgreSQL restored from a backup): it goes
		// back to 0, so every later event that writes the node applies.
		sets = append(sets, fmt.Sprintf("n.%[1]s = CASE WHEN row.reset_stamp THEN 0 ELSE n.%[1]s END", graphmodel.PropOutboxID))
	}
	sets = append(sets, fmt.Sprintf("n.%s = row.version", graphmodel.PropVersion))
	if m.TenantKeyed(l.Name) {
		sets = append(sets, fmt.Sprintf("n.%s = %s", graphmodel.KeyTenantKey, TenantKeyExpr("row.tenant_id")))
	}
	for _, p := range l.Properties {
		sets = append(sets, fmt.Sprintf("n.%s = row.props.%s", p.Key, p.Key))
	}
	fmt.Fprintf(&b, "SET %s\nRETURN count(n) AS applied", strings.Join(sets, ",\n    "))
	return b.String(), nil
}

// RemoveTombstonedText deletes nodes of label given as rows {tenant_id, id}
// that have a tombstone: run after RepairNodeText in the same transaction.
// RepairNodeText reads the tombstone under its key's lock (keyLookup), so it
// waits for a delete of the node still open and then leaves the node alone;
// this statement is the second line behind that read, on the same locking
// lookups: whatever node of a tombstoned key the repair made, it removes.
// A statement of its own: a delete in RepairNodeText's statement makes
// Neo4j plan another Eager over every row (ADR 0003).
func RemoveTombstonedText(m graphmodel.Model, label string) (string, error) {
	l, ok := m.Label(label)
	if !ok || l.Tombstone == "" {
		return "", fmt.Errorf("repair: %q is not a deletable label of the model", label)
	}
	return fmt.Sprintf("UNWIND $rows AS row\nMATCH %s\nMATCH %s\nDETACH DELETE n\nRETURN count(*) AS applied",
		keyLookup("t", l.Tombstone), keyLookup("n", l.Name)), nil
}

// RepairRelClearText removes, for a Single type, the From node's edges of
// the type to any other node than the row's To end, under the same guard as
// RepairRelText, from the same rows. Run before RepairRelText in its
// transaction, it moves the edge in one write (a reader never sees a
// product in two categories; a snapshot rebuild deletes nothing else until
// its sweep); a statement of its own, as sync's clear (relClearText), since
// one that deletes and merges the same type plans an Eager.
func RepairRelClearText(m graphmodel.Model, typ string) (string, error) {
	rt, ok := m.Relationship(typ)
	if !ok || !rt.Single {
		return "", fmt.Errorf("repair: %q is not a Single relationship type of the model", typ)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "UNWIND $rows AS row\nMATCH %s\n", endpointLookup("a", rt.From, "from_id"))
	b.WriteString(lockNode("a"))
	fmt.Fprintf(&b, "WITH a, row\nWHERE coalesce(a.%s, 0) <= row.version\n", graphmodel.PropVersion)
	fmt.Fprintf(&b, "MATCH (a)-[r:%s]->(b)\nWHERE NOT (b:%s AND b.%s = row.tenant_id AND b.%s = row.to_id)\n",
		rt.Type, rt.To, graphmodel.KeyTenantID, graphmodel.KeyID)
	b.WriteString("DELETE r\nRETURN count(*) AS applied")
	return b.String(), nil
}

// RepairRelText merges relationships of type typ from rows {tenant_id,
// from_id, to_id, version, props}: only where the owning aggregate (the From
// end when it is an aggregate, else the To end) is not newer than version.
func RepairRelText(m graphmodel.Model, typ string) (string, error) {
	rt, ok := m.Relationship(typ)
	if !ok {
		return "", fmt.Errorf("repair: %q is not a relationship type of the model", typ)
	}
	owner := "b"
	if from, _ := m.Label(rt.From); from.Role == graphmodel.RoleAggregate {
		owner = "a"
	}
	keys := []string{fmt.Sprintf("%s: row.tenant_id", graphmodel.KeyTenantID)}
	for _, p := range rt.Key {
		keys = append(keys, fmt.Sprintf("%s: row.props.%s", p.Key, p.Key))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "UNWIND $rows AS row\nMATCH %s\nMATCH %s\n", endpointLookup("a", rt.From, "from_id"), endpointLookup("b", rt.To, "to_id"))
	b.WriteString(lockNode(owner))
	fmt.Fprintf(&b, "WITH a, b, row\nWHERE coalesce(%s.%s, 0) <= row.version\n", owner, graphmodel.PropVersion)
	fmt.Fprintf(&b, "MERGE (a)-[r:%s {%s}]->(b)\n", rt.Type, strings.Join(keys, ", "))
	if len(rt.Properties) > 0 {
		var sets []string
		for _, p := range rt.Properties {
			sets = append(sets, fmt.Sprintf("r.%s = row.props.%s", p.Key, p.Key))
		}
		fmt.Fprintf(&b, "SET %s\n", strings.Join(sets, ", "))
	}
	b.WriteString("RETURN count(r) AS applied")
	return b.String(), nil
}

// DeleteNodesText deletes nodes of label given as rows {tenant_id, id}, with
// their relationships.
func DeleteNodesText(label string) string {
	return fmt.Sprintf("UNWIND $rows AS row\nMATCH (n:%s {%s: row.tenant_id, %s: row.id})\nDETACH DELETE n\nRETURN count(*) AS applied",
		label, graphmodel.KeyTenantID, graphmodel.KeyID)
}

// RemovePropertyText removes one property from nodes of label given as rows
// {tenant_id, id, key}: the key is a parameter, never text.
func RemovePropertyText(label string) string {
	return fmt.Sprintf("UNWIND $rows AS row\nMATCH (n:%s {%s: row.tenant_id, %s: row.id})\nSET n[row.key] = null\nRETURN count(*) AS applied",
		label, graphmodel.KeyTenantID, graphmodel.KeyID)
}

// MatchRelationshipText finds the relationships of rows {eid, type,
// from_tenant, from_id, to_tenant, to_id, owner} as r: by element id, which
// Neo4j may give a new relationship once the one read was deleted, and only
// when the type and both ends' keys are still the ones read. owner, when not
// null, is {from, version, outbox_id}: the owning end (the From end when
// from is true) must still carry the version and outbox id it was read
// with, so a relationship the owner's next event made right meanwhile is
// left alone (sync writes one or the other with every event it applies).
const MatchRelationshipText = "UNWIND $rows AS row\nMATCH (a)-[r]->(b)\nWHERE elementId(r) = row.eid AND type(r) = row.type\n" +
	"  AND a.tenant_id = row.from_tenant AND a.id = row.from_id AND b.tenant_id = row.to_tenant AND b.id = row.to_id\n" +
	"  AND (row.owner IS NULL OR (CASE WHEN row.owner.from THEN [coalesce(a." + graphmodel.PropVersion + ", 0), coalesce(a." + graphmodel.PropOutboxID + ", 0)]" +
	" ELSE [coalesce(b." + graphmodel.PropVersion + ", 0), coalesce(b." + graphmodel.PropOutboxID + ", 0)] END) = [row.owner.version, row.owner.outbox_id])\n"

// DeleteRelationshipsText deletes the relationships of MatchRelationshipText's rows.
const DeleteRelationshipsText = MatchRelationshipText + "DELETE r\nRETURN count(*) AS applied"

// RebuildReferenceText upserts reference nodes of label (a Category, a
// Customer) for graphsync rebuild from rows {tenant_id, id, props, below}.
// Reference nodes follow outbox ids, not versions (ADR 0003), so a snapshot
// read of their rows has no version to compare. below is the lowest outbox
// id an event committed after the read can carry: a node some such event
// already wrote is left alone (the read would be older), any other is
// written and stamped below-1, so every such event still applies after it.
// below = 1 creates a missing node and changes no existing one (it still
// locks it until the chunk commits, as every guarded write does).
func RebuildReferenceText(m graphmodel.Model, label string) (string, error) {
	l, ok := m.Label(label)
	if !ok || l.Role != graphmodel.RoleReference {
		return "", fmt.Errorf("rebuild: %q is not a reference label of the model", label)
	}
	var b strings.Builder
	b.WriteString("UNWIND $rows AS row\n")
	fmt.Fprintf(&b, "MERGE (n:%s {%s: row.tenant_id, %s: row.id})\n", l.Name, graphmodel.KeyTenantID, graphmodel.KeyID)
	fmt.Fprintf(&b, "ON CREATE SET n.%s = 0, n.%s = 0\n", graphmodel.PropVersion, graphmodel.PropOutboxID)
	b.WriteString(lockNode("n"))
	fmt.Fprintf(&b, "WITH n, row\nWHERE coalesce(n.%s, 0) < row.below\n", graphmodel.PropOutboxID)
	// Reference nodes are written at version 0 (ADR 0003): a version set
	// by hand would make sync's guard drop every event that writes them.
	sets := []string{fmt.Sprintf("n.%s = row.below - 1", graphmodel.PropOutboxID), fmt.Sprintf("n.%s = 0", graphmodel.PropVersion)}
	for _, p := range l.Properties {
		sets = append(sets, fmt.Sprintf("n.%s = row.props.%s", p.Key, p.Key))
	}
	fmt.Fprintf(&b, "SET %s\nRETURN count(n) AS applied", strings.Join(sets, ",\n    "))
	return b.String(), nil
}
