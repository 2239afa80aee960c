// Package mcpserver serves one tenant's graph to LLM agents over the Model
// Context Protocol (the official Go SDK): the tools graph_context,
// graph_lookup and graph_status, and a resource describing the graph model.
//
// The tenant is never an argument. Over stdio it is the server's setting;
// over streamable HTTP it is the tenant of the bearer token the request
// carries, looked up by its SHA-256 in PostgreSQL (mcp_tokens) on every
// request, so that a revoked token is refused from the next request on. No
// tool takes Cypher or a label outside the model: the question reaches Neo4j
// only as an escaped Lucene query in a parameter (package retrieve), a node
// key only as a model label and an integer parameter.
//
// Every call is bounded (question length, top-k, hops, budget, a per-call
// timeout, concurrent calls per token), counted and timed per tool on
// /metrics, and logged on one line with the token's id, never the token,
// and no question text unless asked for.
package mcpserver
