// Package projector is the relay's Sink into Neo4j. For each batch it decodes
// and upcasts events (events.Decode), translates each into graphmodel
// mutations (pure), admits or rejects each against the graph's tenant
// ownership of the ids it names, builds statements (cypher) and applies them
// in one Neo4j write transaction. A caller that writes batches back to back
// (the rebuild's replay) prepares the next batch (Prepare) and reads its
// owner lookup (LookAhead) while the current one is written; the write then
// reads again only the nodes the batch before it touched. It also applies
// the schema (EnsureSchema) and dumps a tenant's graph canonically
// (DumpGraph).
//
// Effects are idempotent and ordered per aggregate by version guards stored on
// the nodes themselves (sync_version, sync_outbox_id): see
// docs/adr/0003-projection-offsets.md.
//
// Only neo4j.go talks to Neo4j. The projector must not write anything the
// graph model does not allowlist, and never turns payload text into Cypher.
package projector
