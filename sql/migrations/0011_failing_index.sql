-- graphsync:no-transaction
-- The failing rows, by aggregate (docs/adr/0014, "The failing rows'
-- index"). outbox_blocked_aggregates counts the aggregates whose pending
-- events wait behind a failing one, at every scrape, and without this index
-- it read every pending row to find the few that carry a last_error: 0.2 s
-- of a PostgreSQL core per scrape at a 1M-event backlog, exactly when the
-- gauges are watched. A row enters the index only when the relay records
-- its failure (that update was never HOT: it moves available_at) and
-- leaves it when it is applied or dead-lettered; producers' inserts, the
-- claim's lease update (still HOT) and the mark of a row that never failed
-- do not touch it.
--
-- The build reads the whole table, which holds the processed rows of the
-- retention window too (7 days by default): built CONCURRENTLY, outside a
-- transaction (the marker above), it lets producers insert and the relay
-- claim and mark while it reads. An interrupted build leaves an invalid
-- index behind, which `graphsync migrate` names and asks to drop.
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_messages_failing_idx
  ON outbox_messages (tenant_id, aggregate_type, aggregate_id)
  WHERE processed_at IS NULL AND last_error IS NOT NULL
