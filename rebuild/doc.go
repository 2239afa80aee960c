// Package rebuild is `graphsync rebuild`: it brings the graph, or one
// tenant's part of it, back to what PostgreSQL says, from PostgreSQL alone,
// while sync keeps running (docs/adr/0011).
//
// A rebuild has three phases, each checkpointed in rebuild_checkpoints so a
// killed rebuild resumes where it stopped:
//
//  1. base: the graph state written from one of two sources.
//     replay re-applies the scope's processed outbox history (archive and
//     live outbox) through the projector, in (created_xid, id) order below
//     the oldest running transaction, so no late commit is skipped; at the
//     end it waits for the transactions that began before it (one left
//     open holds it there, and the log says so), then reads on.
//     snapshot writes the row projection of the business tables, chunk by
//     chunk in key order, under guards that never overwrite a newer state
//     live sync applied meanwhile (drift.Checker.ReprojectChunk). Events
//     committed after a chunk's read reach the graph through sync, as
//     always; applying both changes nothing.
//     auto replays when retention dropped none of the scope's history
//     (outbox_history_gaps) and takes a snapshot otherwise.
//  2. sweep: the boundary review with repair on the scope: it re-projects
//     what the guards kept stale (a node edited by hand keeps its version)
//     and removes what no row backs.
//  3. check: the boundary review again; drift left over is the result.
//
// Both phases write in place, under guards, and delete only what no row
// backs: a reader sees each aggregate in its old or its new state, never
// missing and never older.
package rebuild
