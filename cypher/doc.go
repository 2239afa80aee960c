// Package cypher builds parameterised Cypher from the graph model and from
// graphmodel mutations: the constraint and index DDL, batched
// `UNWIND $rows AS row ... MERGE` writes with version guards, and the read
// queries the projector needs (ownership lookups, canonical dumps).
//
// Every label, relationship type and property key written into statement text
// comes from a validated graphmodel.Model; every value travels as a
// parameter. No string from an event ever becomes Cypher text. Statement text
// is built once per shape, when the Builder is made, so Neo4j's plan cache
// keeps serving it.
//
// This package must not talk to Neo4j.
package cypher
