-- The claim's per-aggregate head state (docs/adr/0012): which aggregates
-- have a batch in flight, and until when. The claim reads one row of it per
-- candidate aggregate instead of probing every pending row of the aggregate,
-- and takes an aggregate by inserting its row here, so concurrent claims need
-- no global lock: the primary key decides which one gets the aggregate.
-- A row lives while its batch is in flight; it is deleted when the batch is
-- settled, and a lease that ran out (its relay died) is taken over.
CREATE TABLE outbox_aggregate_leases (
  tenant_id      BIGINT NOT NULL,
  aggregate_type TEXT NOT NULL,
  aggregate_id   BIGINT NOT NULL,
  locked_by      TEXT NOT NULL,
  locked_until   TIMESTAMPTZ NOT NULL,
  PRIMARY KEY (tenant_id, aggregate_type, aggregate_id)
);

-- Aggregates in flight when this migration runs (a relay of an earlier
-- version still delivering) keep their batch's lease.
INSERT INTO outbox_aggregate_leases (tenant_id, aggregate_type, aggregate_id, locked_by, locked_until)
SELECT DISTINCT ON (tenant_id, aggregate_type, aggregate_id)
       tenant_id, aggregate_type, aggregate_id, locked_by, locked_until
FROM outbox_messages
WHERE processed_at IS NULL AND locked_by IS NOT NULL AND locked_until >= now()
ORDER BY tenant_id, aggregate_type, aggregate_id, locked_until DESC;

GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_aggregate_leases TO graphsync_relay;
