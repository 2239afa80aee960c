// Package drift is the boundary review of the projection: it compares what
// PostgreSQL (the truth) implies for the graph, through projector's row
// projection, with what Neo4j holds, per tenant and label, and finds missing,
// orphan and stale nodes, missing, extra and changed relationships,
// relationships that cross tenants, nodes without a tenant, properties outside
// graphmodel's allowlist and values that look like personal data. It reports
// labels and relationship types no projection owns without touching them,
// and the projection lag per tenant.
//
// Both sides are read in key order, a chunk at a time, and merged, so memory
// does not grow with the graph. PostgreSQL is read in one REPEATABLE READ
// snapshot as the relay role. A difference found in the first pass is looked
// at again (fresh reads of both sides) before it is reported, and one on an
// aggregate with pending outbox rows is reported as explained, so a run under
// full sync load reports no false drift. Dead-lettered rows explain nothing:
// no one applies them.
//
// Repair re-projects drifted aggregates and reference nodes from the rows
// under a version guard (it never regresses a newer state live sync wrote
// meanwhile) and removes what no row backs, within the model's labels. It
// never writes to PostgreSQL. What PostgreSQL is told is that a check
// finished (Report.Record: per tenant, when, how clean, counts by kind),
// which its callers write and graph_status reads.
package drift
