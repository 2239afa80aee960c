// Package e2e holds graphsync's end-to-end tests: the built graphsync binary
// runs as child processes (migrate, sync) against the real PostgreSQL and
// Neo4j that `make services-up` starts, while the workload generator writes,
// through SIGKILLs, two relays at once, a Neo4j outage, a PostgreSQL restart,
// poison events, graceful and hard shutdown, and bad configuration.
//
// Each test gets a fresh PostgreSQL database (its tenant ids are random) and
// removes its tenants from the shared Neo4j when it ends. The graph is
// compared with PostgreSQL through the tests' own SQL and Cypher, never
// through the projector's code: graphsync's answer is checked, not reused.
//
// The tests stop and restart the shared services, so the package runs alone
// (make test-e2e), never beside other packages' tests, and its tests never
// run in parallel. A service it cannot reach fails the test; nothing skips.
// The package has no code outside its tests.
package e2e
