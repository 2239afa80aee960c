// Package retrieve is the read side of the projection: given a tenant and a
// question, it finds seed nodes through the model's fulltext indexes, expands
// them through the graph (category, orders, products bought together,
// customer segments and countries, all aggregated), ranks and trims the
// result to a budget, and renders it as context an LLM can use: Markdown, or
// JSON shaped like neo4j-graphrag's RetrieverResult.
//
// It must never return another tenant's data or personal data. Every node a
// query touches is matched on the tenant's id, the tenant filter runs before
// any limit (a top-k taken first and filtered after silently returns too
// little), only graphmodel's allowlisted properties are read, customers are
// only ever counted, and the question reaches Neo4j as a parameter holding an
// escaped Lucene query, never as Cypher text. It only reads the graph.
package retrieve
