-- graphsync rebuild (docs/adr/0011): what history is gone, and where an
-- unfinished rebuild stands.

-- Outbox history that retention dropped: one row per dropped archive
-- partition and tenant that had rows in it, written in the transaction that
-- drops the partition. A rebuild replays a tenant's history only when it has
-- no row here; otherwise `--source auto` takes a snapshot.
CREATE TABLE outbox_history_gaps (
  partition_name TEXT NOT NULL,
  tenant_id      BIGINT NOT NULL,
  rows_dropped   BIGINT NOT NULL,
  oldest         TIMESTAMPTZ,
  newest         TIMESTAMPTZ,
  dropped_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (partition_name, tenant_id)
);
CREATE INDEX outbox_history_gaps_tenant_idx ON outbox_history_gaps (tenant_id);

-- One row per rebuild scope (0: every tenant). A rebuild stores its position
-- after each chunk it wrote, so one killed resumes there; finished_at is set
-- when it ends, and the next rebuild of the scope starts afresh.
CREATE TABLE rebuild_checkpoints (
  scope_tenant_id BIGINT PRIMARY KEY,
  source          TEXT NOT NULL CHECK (source IN ('replay', 'snapshot')),
  phase           TEXT NOT NULL CHECK (phase IN ('base', 'sweep', 'done')),
  -- snapshot: the tenant, label and last key written
  tenant_id       BIGINT NOT NULL DEFAULT 0,
  label           TEXT NOT NULL DEFAULT '',
  after_id        BIGINT NOT NULL DEFAULT 0,
  -- replay: the offset position (created_xid, id) of the last event applied
  replay_xid      xid8 NOT NULL DEFAULT '0',
  replay_id       BIGINT NOT NULL DEFAULT 0,
  done            BIGINT NOT NULL DEFAULT 0,
  chunks          BIGINT NOT NULL DEFAULT 0,
  started_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
  finished_at     TIMESTAMPTZ
);

GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_history_gaps, rebuild_checkpoints TO graphsync_relay;
