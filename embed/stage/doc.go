// Package stage keeps the graph's vectors current, off sync's write path
// (ADR 0023). The projector writes, in its own guarded SET, the hash of
// the (masked) text a node now holds and a pending mark when that hash is
// not its vector's; this stage reads the pending nodes oldest first, takes
// their vectors from the PostgreSQL cache (migration 0014) or the embedder,
// and writes each vector only where the node still holds the text it was
// computed from.
//
// It must not run inside the projector's transaction, block the event
// stream, or embed anything but graphmodel's declared, masked text. It
// knows nothing of outbox rows or events.
package stage
