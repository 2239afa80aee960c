// Package stacktest connects tests to the real PostgreSQL and Neo4j that
// `make services-up` (scripts/services.sh) starts: a fresh migrated database
// per test, a Neo4j driver, graph cleanup by tenant, and the outage controls
// (stop and start Neo4j, restart PostgreSQL) the e2e tests use.
//
// It reads GRAPHSYNC_PG_URL, GRAPHSYNC_NEO4J_URI, GRAPHSYNC_NEO4J_USER and
// GRAPHSYNC_NEO4J_PASSWORD from the environment and, when the URLs are unset,
// from .local/services.env at the repository root. A service it cannot reach
// fails the test with a message naming the (redacted) URL: it never skips.
//
// It must not be imported by non-test code, and it never mocks a database.
package stacktest
