-- Additive changes to the seed outbox for the relay (docs/adr/0001, 0002).
-- Every added column is nullable or has a default, so seed-style producers are unaffected.

ALTER TABLE outbox_messages
  -- Lease: which relay holds the row and until when (NULL when nobody does).
  ADD COLUMN locked_by    TEXT,
  ADD COLUMN locked_until TIMESTAMPTZ,
  -- The inserting transaction, for gap-free offset readers (relay/offsets.go).
  ADD COLUMN created_xid  xid8 NOT NULL DEFAULT pg_current_xact_id();

-- Room on each page so that claims and lease renewals (which change no
-- indexed column) are HOT updates, without index writes.
ALTER TABLE outbox_messages SET (fillfactor = 80);

-- The claim walks pending rows in id order; this index holds only pending rows,
-- so its cost does not grow with the processed history kept for 7 days.
CREATE INDEX outbox_messages_claim_idx
  ON outbox_messages (id)
  WHERE processed_at IS NULL;

-- Head-of-aggregate check: is there an earlier pending row of the same aggregate?
CREATE INDEX outbox_messages_aggregate_pending_idx
  ON outbox_messages (tenant_id, aggregate_type, aggregate_id, id)
  WHERE processed_at IS NULL;

-- Archival of processed rows (prune index, after shared/seeds/001).
CREATE INDEX outbox_messages_processed_idx
  ON outbox_messages (processed_at)
  WHERE processed_at IS NOT NULL;

-- Offset readers walk by inserting transaction.
CREATE INDEX outbox_messages_created_xid_idx
  ON outbox_messages (created_xid, id);

-- Dead letters: same columns as the outbox, plus when the row was moved.
CREATE TABLE outbox_messages_dlq (
  LIKE outbox_messages INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
  dead_lettered_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (id)
);
CREATE INDEX outbox_messages_dlq_tenant_aggregate_idx
  ON outbox_messages_dlq (tenant_id, aggregate_type, aggregate_id);

-- Archive of processed rows, partitioned by month on occurred_at.
CREATE TABLE outbox_messages_archive (
  LIKE outbox_messages INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
  PRIMARY KEY (id, occurred_at)
) PARTITION BY RANGE (occurred_at);
-- Rows whose month has no partition yet land here rather than failing the archive job.
CREATE TABLE outbox_messages_archive_default PARTITION OF outbox_messages_archive DEFAULT;
CREATE INDEX outbox_messages_archive_aggregate_idx
  ON outbox_messages_archive (tenant_id, aggregate_type, aggregate_id, id);
CREATE INDEX outbox_messages_archive_created_xid_idx
  ON outbox_messages_archive (created_xid, id);

-- Wake-up hint for the notify mode. The trigger itself is optional and is
-- installed by `graphsync notify enable` (NOTIFY serialises committing transactions).
CREATE FUNCTION graphsync_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('graphsync_outbox', '');
  RETURN NULL;
END
$$;

-- Offset readers keep the transaction position beside the id (relay/offsets.go).
ALTER TABLE consumer_offsets ADD COLUMN last_processed_xid xid8 NOT NULL DEFAULT '0';
