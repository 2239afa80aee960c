// Package events is the catalog of domain events graphsync understands: one
// documented Go struct per event type and version, the producer API that
// writes an event into outbox_messages inside the caller's transaction
// (Enqueue), and Decode, which turns a stored row back into the current
// version of its event (upcasting older versions) and validates it.
//
// Contract for every payload:
//   - aggregate_type is "Product" or "Order" and aggregate_id is the row id;
//   - the payload carries "version": products.version or sales_orders.version
//     after the change;
//   - the payload carries the aggregate's whole non-personal state after the
//     change (event-carried state), so the newest event alone decides what the
//     graph shows and late or shuffled deliveries cannot leave it half-updated.
//
// Plain-SQL producers insert rows shaped as the seed shows; event_version then
// defaults to 1, so they must write the v1 shape of the event (see each type).
//
// This package must not know about Neo4j or the graph model: what reaches the
// graph is decided by graphmodel's allowlist, not by what a payload carries.
// Unknown payload keys (a customer's email, say) are ignored on decode.
package events
