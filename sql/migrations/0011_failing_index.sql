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
-- The build reads the whole table under a lock that holds producers' inserts
-- back (about 0.25 s per million rows); rather than queue every producer
-- behind a long transaction, the migration gives up after 5s of waiting for
-- that lock, and `graphsync migrate` can be run again.
SET LOCAL lock_timeout = '5s';

CREATE INDEX IF NOT EXISTS outbox_messages_failing_idx
  ON outbox_messages (tenant_id, aggregate_type, aggregate_id)
  WHERE processed_at IS NULL AND last_error IS NOT NULL;
