-- Reads and writes of `graphsync rebuild` (rebuild/, drift/reproject.go,
-- docs/adr/0011). Every value is a parameter.

-- name: RebuildOutboxLastID
-- The highest outbox id drawn so far, committed or not: every row inserted
-- after this read has a larger id.
SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('outbox_messages', 'id')::regclass), 0);

-- name: RebuildOutboxSequenceCache
-- How many ids of the outbox id sequence a session draws at once (CACHE):
-- RebuildOutboxLastID's promise holds only with 1.
SELECT seqcache FROM pg_sequence
WHERE seqrelid = pg_get_serial_sequence('outbox_messages', 'id')::regclass;

-- name: RebuildSnapshot
-- The snapshot of the REPEATABLE READ transaction the rows are read in.
SELECT pg_current_snapshot()::text;

-- name: RebuildXactID
-- A fresh transaction id, assigned after a snapshot was taken: every
-- transaction that wrote before the snapshot has a lower one.
SELECT pg_current_xact_id()::text;

-- name: RebuildXactsEnded
-- Have all transactions below xid $1 ended?
SELECT pg_snapshot_xmin(pg_current_snapshot()) >= $1::text::xid8;

-- name: RebuildLowestInFlight
-- The lowest outbox id whose transaction snapshot $1 does not see and that
-- was written before the read (0 when none): by a transaction below xid $2
-- (assigned after the read; call once those have ended), or, whatever its
-- xid, with an id drawn before the read ($3 was the highest). Its event may
-- be newer than the rows read in that snapshot.
SELECT coalesce(min(id), 0) FROM (
  SELECT id, created_xid FROM outbox_messages WHERE created_xid >= pg_snapshot_xmin($1::text::pg_snapshot)
  UNION ALL
  SELECT id, created_xid FROM outbox_messages_archive WHERE created_xid >= pg_snapshot_xmin($1::text::pg_snapshot)
  UNION ALL
  SELECT id, created_xid FROM outbox_messages_dlq WHERE created_xid >= pg_snapshot_xmin($1::text::pg_snapshot)
) r
WHERE NOT pg_visible_in_snapshot(created_xid, $1::text::pg_snapshot)
  AND (created_xid < $2::text::xid8 OR id <= $3);

-- name: RebuildHistoryGaps
-- History retention dropped, for one tenant ($1) or all (NULL).
SELECT count(*), coalesce(sum(rows_dropped), 0)::bigint
FROM outbox_history_gaps
WHERE $1::bigint IS NULL OR tenant_id = $1;

-- name: RebuildReplayCount
-- How many processed events a replay of the scope ($1 tenant or NULL) reads.
SELECT (SELECT count(*) FROM outbox_messages WHERE processed_at IS NOT NULL AND ($1::bigint IS NULL OR tenant_id = $1))
     + (SELECT count(*) FROM outbox_messages_archive WHERE $1::bigint IS NULL OR tenant_id = $1);

-- name: RebuildSnapshotCount
-- How many rows a snapshot of the scope ($1 tenant or NULL) reads.
SELECT (SELECT count(*) FROM products WHERE $1::bigint IS NULL OR tenant_id = $1)
     + (SELECT count(*) FROM sales_orders WHERE $1::bigint IS NULL OR tenant_id = $1)
     + (SELECT count(*) FROM categories WHERE $1::bigint IS NULL OR tenant_id = $1)
     + (SELECT count(*) FROM customers WHERE $1::bigint IS NULL OR tenant_id = $1);

-- name: RebuildCheckpointLoad
SELECT source, phase, tenant_id, label, after_id, replay_xid::text, replay_id, done, chunks, started_at
FROM rebuild_checkpoints
WHERE scope_tenant_id = $1 AND finished_at IS NULL;

-- name: RebuildCheckpointStart
INSERT INTO rebuild_checkpoints (scope_tenant_id, source, phase)
VALUES ($1, $2, 'base')
ON CONFLICT (scope_tenant_id) DO UPDATE
SET source = EXCLUDED.source, phase = 'base', tenant_id = 0, label = '', after_id = 0,
    replay_xid = '0', replay_id = 0, done = 0, chunks = 0,
    started_at = now(), updated_at = now(), finished_at = NULL;

-- name: RebuildCheckpointStore
UPDATE rebuild_checkpoints
SET phase = $2, tenant_id = $3, label = $4, after_id = $5, replay_xid = $6::text::xid8, replay_id = $7,
    done = $8, chunks = $9, updated_at = now(),
    finished_at = CASE WHEN $2 = 'done' THEN now() END
WHERE scope_tenant_id = $1;
