-- The platform's canonical outbox (shared/seeds/000), column for column.
-- Producers that insert rows exactly as that document shows are served.
CREATE TABLE outbox_messages (
  id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id      BIGINT NOT NULL,
  aggregate_type TEXT NOT NULL,     -- 'Order', 'Product'
  aggregate_id   BIGINT NOT NULL,   -- the affected row
  event_type     TEXT NOT NULL,     -- 'OrderConfirmed'
  event_version  SMALLINT NOT NULL DEFAULT 1,
  payload        JSONB NOT NULL,
  occurred_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
  available_at   TIMESTAMPTZ NOT NULL DEFAULT now(), -- for delayed/retry
  processed_at   TIMESTAMPTZ,
  attempts       SMALLINT NOT NULL DEFAULT 0,
  last_error     TEXT,
  trace_id       TEXT
);

-- Cheap polling: partial index on the pending set.
CREATE INDEX outbox_messages_pending_idx
  ON outbox_messages (available_at, id)
  WHERE processed_at IS NULL;

-- Tenant-aware lookup for debugging.
CREATE INDEX outbox_messages_tenant_aggregate_idx
  ON outbox_messages (tenant_id, aggregate_type, aggregate_id);

CREATE TABLE consumer_offsets (
  consumer_name     TEXT NOT NULL,
  partition_key     TEXT NOT NULL DEFAULT '',
  last_processed_id BIGINT NOT NULL,
  last_processed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer_name, partition_key)
);
