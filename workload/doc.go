// Package workload writes a realistic multi-tenant commerce workload into
// PostgreSQL for the demo, the e2e tests and the benchmarks: tenants,
// categories, customers (with fake personal data) and products, then
// concurrent writers placing, confirming, shipping and cancelling orders and
// re-pricing, re-describing, discontinuing and deleting products.
//
// Every business change is written the way a well-behaved producer writes it:
// in one transaction, as the application role under row-level security, the
// row is changed with optimistic locking and its event is enqueued with
// events.Enqueue carrying the row's state as the database returned it. So the
// outbox holds exactly one event per committed change, and an event's payload
// equals the business row it describes.
//
// PlantPoison is the opposite: outbox rows a buggy plain-SQL producer could
// write, which the projector must reject.
//
// The package must not read the outbox back, talk to Neo4j or know about the
// relay or projector: it produces, others consume.
package workload
