// Package sql owns graphsync's PostgreSQL schema: the business tables, the
// outbox and its DLQ, archive and offsets, row-level security and the relay's
// additive columns. The migrations are embedded into the binary and applied in
// order by Migrate; an applied migration whose text changed is an error, never
// re-applied.
//
// It must not hold runtime queries of other packages: those live beside the
// code that runs them.
package sql
