-- Holds (docs/adr/0012): an aggregate whose row failed or was deferred keeps
-- its lease row until the row is due again, with locked_by 'held back', and
-- the claim's window skips the aggregate's rows meanwhile. The window probes
-- this index once per row it looks at; holds are few, so the probe of an
-- aggregate that is not held reads one index page and no table row, where
-- the primary key would lead it to the lease of every aggregate in flight.
CREATE INDEX outbox_aggregate_leases_held_idx
  ON outbox_aggregate_leases (tenant_id, aggregate_type, aggregate_id, locked_until)
  WHERE locked_by = 'held back';
