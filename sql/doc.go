// Package sql owns graphsync's PostgreSQL schema: the business tables, the
// outbox and its DLQ, archive and offsets, row-level security and the relay's
// additive columns. The migrations are embedded into the binary and applied in
// order by Migrate; an applied migration whose text changed is an error, never
// re-applied.
//
// Runtime statements live in queries/*.sql, each under a `-- name: X` line,
// and are looked up with Query; every one is parameterised. This package runs
// none of them itself: the relay and the commands do.
package sql
