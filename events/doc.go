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
// Catalog (event_type, current event_version, payload):
//
//	Product aggregate (aggregate_id = products.id)
//	  ProductCreated      v2  ProductState             (v1: price "19.99", flat category_id/category_name; upcast)
//	  ProductUpdated      v1  ProductState
//	  ProductPriceChanged v1  ProductState + old_price_cents (informational)
//	  ProductDiscontinued v1  ProductState, status "discontinued"
//	  ProductDeleted      v1  {version}                (only products without order lines)
//	Order aggregate (aggregate_id = sales_orders.id)
//	  OrderPlaced         v1  OrderState + customer {id, segment, country_code} + lines [{line_no, product_id, quantity, unit_price_cents}]
//	  OrderConfirmed      v1  OrderState, status "confirmed", confirmed_at set
//	  OrderShipped        v1  OrderState, status "shipped", shipped_at set
//	  OrderCancelled      v1  OrderState, status "cancelled", cancelled_at set
//
// ProductState is {id, version, sku, name, description, category {id, name}
// or null, price_cents, currency, status}; OrderState is {id, version,
// status, currency, total_cents, placed_at, confirmed_at, shipped_at,
// cancelled_at}. "id" may be left out (aggregate_id is authoritative).
//
// A new event type is one registration in registry.go (kindOf: its Go type,
// required keys, id field, older versions and a sample); decoding, Current
// and Kinds derive from it. The projector's translation, its coverage check
// and the bench ceiling follow Kinds, and their tests fail for a kind they
// do not handle.
//
// Plain-SQL producers insert rows shaped as the seed shows; event_version then
// defaults to 1, so they must write the v1 shape of the event (see each type).
//
// This package must not know about Neo4j or the graph model: what reaches the
// graph is decided by graphmodel's allowlist, not by what a payload carries.
// Unknown payload keys (a customer's email, say) are ignored on decode.
package events
