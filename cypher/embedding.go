package cypher

import (
	"fmt"
	"strings"

	"graphsync/graphmodel"
)

// The embedding stage's statements (ADR 0023). Every name in them comes
// from the validated graphmodel.Embedding; every value is a parameter.

// pendingIndexName is the range index on the embedded label's pending
// mark: the stage's backlog is read from it, oldest first.
func pendingIndexName(e graphmodel.Embedding) string { return e.Index + "_pending" }

// embeddingSchemaStatements is the pending mark's range index: present
// whatever the embedder (it costs nothing on nodes without the mark).
func embeddingSchemaStatements(m graphmodel.Model) []string {
	if m.Embedding == nil {
		return nil
	}
	e := *m.Embedding
	return []string{fmt.Sprintf("CREATE INDEX %s IF NOT EXISTS FOR (n:%s) ON (n.%s)", pendingIndexName(e), e.Label, e.PendingProperty)}
}

// VectorIndexText creates e's vector index, cosine, of dimension floats.
func VectorIndexText(e graphmodel.Embedding, dimension int) string {
	return fmt.Sprintf("CREATE VECTOR INDEX %s IF NOT EXISTS FOR (n:%s) ON (n.%s) "+
		"OPTIONS {indexConfig: {`vector.dimensions`: %d, `vector.similarity_function`: 'cosine'}}",
		e.Index, e.Label, e.VectorProperty, dimension)
}

// VectorIndexQuery reads the vector index named $name: its label,
// property, dimension and similarity function.
const VectorIndexQuery = "SHOW INDEXES YIELD name, type, labelsOrTypes, properties, options WHERE name = $name " +
	"RETURN type, labelsOrTypes AS labels, properties, options.indexConfig['vector.dimensions'] AS dimensions, " +
	"options.indexConfig['vector.similarity_function'] AS similarity"

// VectorSize is the length of node's vector (its e.VectorProperty) where
// it is a list of floats, and null otherwise: absent, or another writer's
// value of another type. size() and vector.similarity.cosine fail on such
// a value, so every statement that reads a vector's length or scores it
// compares this with the dimension first: drift's read, the mark's current
// test, retrieval's exact scan.
func VectorSize(node string, e graphmodel.Embedding) string {
	v := node + "." + e.VectorProperty
	return "CASE WHEN " + v + " IS :: LIST<FLOAT NOT NULL> THEN size(" + v + ") END"
}

// EmbeddingPendingText reads up to $limit pending nodes (of the $tenants
// when not null), oldest mark first,
// with the properties their text is made of and the hash the projector
// wrote with that text.
func EmbeddingPendingText(e graphmodel.Embedding) string {
	props := make([]string, len(e.Properties))
	for i, p := range e.Properties {
		props[i] = fmt.Sprintf("%[1]s: n.%[1]s", p)
	}
	return fmt.Sprintf("MATCH (n:%[1]s) WHERE n.%[2]s IS NOT NULL AND ($tenants IS NULL OR n.%[3]s IN $tenants)\n"+
		"WITH n ORDER BY n.%[2]s LIMIT $limit\n"+
		"RETURN n.%[3]s AS tenant_id, n.%[4]s AS id, n.%[2]s AS pending_since, n.%[5]s AS text_hash, n.%[6]s AS outbox_id, {%[7]s} AS props",
		e.Label, e.PendingProperty, graphmodel.KeyTenantID, graphmodel.KeyID, e.TextHashProperty, graphmodel.PropOutboxID, strings.Join(props, ", "))
}

// EmbeddingBacklogText counts the pending nodes (of the $tenants when not
// null) and reads the oldest mark.
func EmbeddingBacklogText(e graphmodel.Embedding) string {
	return fmt.Sprintf("MATCH (n:%[1]s) WHERE n.%[2]s IS NOT NULL AND ($tenants IS NULL OR n.%[3]s IN $tenants) "+
		"RETURN count(n) AS pending, min(n.%[2]s) AS oldest", e.Label, e.PendingProperty, graphmodel.KeyTenantID)
}

// EmbeddingWriteText writes each row's vector, under the guard: only where
// the node, locked first (lockNode), still holds the text the vector was
// computed from (its text hash equals the row's). A vector of an older
// text is dropped; the node stays pending for its newer text. The applied
// count says how many were written.
func EmbeddingWriteText(e graphmodel.Embedding) string {
	return fmt.Sprintf("UNWIND $rows AS row\nMATCH %[1]s\n%[2]s"+
		"WITH n, row, n.%[3]s = row.hash AS current\n"+
		"FOREACH (_ IN CASE WHEN current THEN [1] ELSE [] END |\n"+
		"  SET n.%[4]s = row.vector, n.%[5]s = row.hash, n.%[6]s = $model, n.%[7]s = null, n.%[8]s = null)\n"+
		"RETURN sum(CASE WHEN current THEN 1 ELSE 0 END) AS applied",
		keyLookup("n", e.Label), lockNode("n"), e.TextHashProperty, e.VectorProperty, e.HashProperty, e.ModelProperty, e.PendingProperty, e.RefusedProperty)
}

// EmbeddingMarkText sets each row's text hash and marks its node pending
// unless its vector is of that hash, where the node still holds the state
// the hash was computed from (its outbox id, the sync guard's): drift's
// repair, the rebuild and the stage's start-up sweep use it for nodes the
// projector wrote without an embedder, or with another model. A vector
// property that is not a list of floats (another writer's) is not of the
// dimension (VectorSize).
func EmbeddingMarkText(e graphmodel.Embedding) string {
	return fmt.Sprintf("UNWIND $rows AS row\nMATCH %[1]s\n%[2]s"+
		"WITH n, row WHERE n.%[3]s = row.outbox_id\n"+
		"SET n.%[4]s = row.hash, n.%[5]s = CASE WHEN n.%[6]s = row.hash AND n.%[7]s = $model AND %[8]s = $dimension THEN null ELSE coalesce(n.%[5]s, timestamp()) END\n"+
		"RETURN count(*) AS applied",
		keyLookup("n", e.Label), lockNode("n"), graphmodel.PropOutboxID, e.TextHashProperty, e.PendingProperty, e.HashProperty, e.ModelProperty, VectorSize("n", e))
}

// EmbeddingRequeueText moves each row's node to the back of the backlog (a
// fresh pending mark) where it is still pending, and records the refused
// text's hash where the node still holds that text: a text the embedder
// refused must not hold up the nodes behind it, and drift reports it.
func EmbeddingRequeueText(e graphmodel.Embedding) string {
	return fmt.Sprintf("UNWIND $rows AS row\nMATCH %[1]s\nWHERE n.%[2]s IS NOT NULL\n"+
		"SET n.%[2]s = timestamp(), n.%[3]s = CASE WHEN n.%[4]s = row.hash THEN row.hash ELSE n.%[3]s END\nRETURN count(*) AS applied",
		keyLookup("n", e.Label), e.PendingProperty, e.RefusedProperty, e.TextHashProperty)
}
