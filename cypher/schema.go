package cypher

import (
	"fmt"
	"strings"

	"graphsync/graphmodel"
)

// SchemaStatements returns the DDL that makes Neo4j enforce the model: a
// (tenant_id, id) uniqueness constraint on every label and tombstone label
// (composite uniqueness works in Community edition), a range index on id alone
// for cross-tenant ownership checks, and the fulltext indexes. Every
// statement is idempotent (IF NOT EXISTS). The model must be valid.
func SchemaStatements(m graphmodel.Model) []string {
	var stmts []string
	for _, label := range nodeLabels(m) {
		lower := strings.ToLower(label)
		stmts = append(stmts,
			fmt.Sprintf("CREATE CONSTRAINT %s_key IF NOT EXISTS FOR (n:%s) REQUIRE (n.%s, n.%s) IS UNIQUE",
				lower, label, graphmodel.KeyTenantID, graphmodel.KeyID),
			fmt.Sprintf("CREATE INDEX %s_by_id IF NOT EXISTS FOR (n:%s) ON (n.%s)", lower, label, graphmodel.KeyID),
		)
	}
	for _, f := range m.Fulltext {
		fields := make([]string, len(f.IndexedProperties()))
		for i, key := range f.IndexedProperties() {
			fields[i] = "n." + key
		}
		stmt := fmt.Sprintf("CREATE FULLTEXT INDEX %s IF NOT EXISTS FOR (n:%s) ON EACH [%s]",
			f.Name, f.Label, strings.Join(fields, ", "))
		if f.Analyzer != "" {
			// Validate allows only [a-z0-9_-] in an analyzer name.
			stmt += fmt.Sprintf(" OPTIONS {indexConfig: {`fulltext.analyzer`: '%s'}}", f.Analyzer)
		}
		stmts = append(stmts, stmt)
	}
	return append(stmts, embeddingSchemaStatements(m)...)
}

// nodeLabels lists every label the graph may hold: the model's labels, each
// followed by its tombstone label.
func nodeLabels(m graphmodel.Model) []string {
	var labels []string
	for _, l := range m.Labels {
		labels = append(labels, l.Name)
		if l.Tombstone != "" {
			labels = append(labels, l.Tombstone)
		}
	}
	return labels
}

// DefaultFulltextAnalyzer is the analyzer Neo4j gives a fulltext index
// created without one.
const DefaultFulltextAnalyzer = "standard-no-stop-words"

// FulltextIndexesQuery lists the fulltext indexes with what decides whether
// one is still the index the model declares.
const FulltextIndexesQuery = "SHOW FULLTEXT INDEXES YIELD name, labelsOrTypes, properties, options " +
	"RETURN name, labelsOrTypes AS labels, properties, options.indexConfig['fulltext.analyzer'] AS analyzer"
