-- The last drift check of each tenant (docs/drift.md, docs/adr/0029):
-- `graphsync drift` and sync's drift watch write a row per tenant a
-- finished check covered, and graph_status (docs/mcp.md) reads the caller's
-- tenant's row alone. One row per tenant, replaced by a later check, so the
-- table holds as many rows as there are tenants. A row holds counts by kind
-- of drift, never a key or a value; a tenant removed takes its row along.
CREATE TABLE drift_checks (
  tenant_id   BIGINT PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
  finished_at TIMESTAMPTZ NOT NULL,
  -- Share of keys compared, in (0, 1]: 1 is every key.
  sample      DOUBLE PRECISION NOT NULL CHECK (sample > 0 AND sample <= 1),
  -- Differences found in this tenant, by kind ({"orphan_node": 2}): what
  -- the report counts as drift (explained differences are not).
  counts      JSONB NOT NULL CHECK (jsonb_typeof(counts) = 'object'),
  drift_total BIGINT NOT NULL CHECK (drift_total >= 0),
  clean       BOOLEAN GENERATED ALWAYS AS (drift_total = 0) STORED,
  -- Which check: 'drift' (the command) or 'sync' (its drift watch).
  source      TEXT NOT NULL CHECK (source IN ('drift', 'sync'))
);

ALTER TABLE drift_checks ENABLE ROW LEVEL SECURITY;
ALTER TABLE drift_checks FORCE ROW LEVEL SECURITY;
CREATE POLICY drift_checks_tenant_isolation ON drift_checks FOR SELECT TO graphsync_app
  USING (tenant_id = NULLIF(current_setting('app.tenant_id', true), '')::bigint);
CREATE POLICY drift_checks_relay_all ON drift_checks FOR ALL TO graphsync_relay USING (true) WITH CHECK (true);

GRANT SELECT ON drift_checks TO graphsync_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON drift_checks TO graphsync_relay;
