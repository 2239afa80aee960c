-- Deferral backoff (docs/adr/0006): since when an aggregate has waited for
-- another aggregate's events without being applied (deferred_since), and
-- when its last deferral was (deferred_at). Set by the settle that defers
-- one of its rows, kept while the claim takes the hold over (its ON
-- CONFLICT update leaves the columns alone) and while a batch of the
-- aggregate is handed back, gone with the lease row once a row of the
-- aggregate is applied. Each deferral waits about as long as the aggregate
-- has waited so far, so the wait doubles from --dependency-wait up to
-- --dependency-wait-max: an order whose product never comes costs one try a
-- minute, not one a second.
ALTER TABLE outbox_aggregate_leases ADD COLUMN deferred_since TIMESTAMPTZ;
ALTER TABLE outbox_aggregate_leases ADD COLUMN deferred_at TIMESTAMPTZ;

-- The waiting aggregates, by holder: the settle finds its claim's waiting
-- aggregates here, and the gauges count them. Only waiting aggregates are in
-- it, a few rows; the other leases never enter it.
CREATE INDEX outbox_aggregate_leases_waiting_idx
  ON outbox_aggregate_leases (locked_by)
  WHERE deferred_since IS NOT NULL;
