// Package relay moves committed rows of outbox_messages to a Sink: it claims
// them under a lease, keeps each aggregate's events in order and never in two
// deliveries at once, marks them processed only after the sink succeeded,
// retries failures on the seed's schedule, dead-letters what keeps failing,
// archives processed rows and keeps the archive's partitions. Three wake modes
// (poll, notify, stream) decide when it looks for work.
//
// It knows nothing of Neo4j or of event payloads: it hands batches of
// outbox.Message to an outbox.Sink and records what the sink said.
package relay
