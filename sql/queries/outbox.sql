-- Runtime statements of the relay. Every value is a parameter.
-- Claims are serialised by OutboxClaimLock so that each claim sees the leases
-- of the one before it (see docs/adr/0001-relay-leases.md).

-- name: OutboxClaimLock
-- Also: no sorts in this transaction. The claim must walk the pending-only
-- claim index in id order and stop at the limit; with missing or stale
-- statistics the planner otherwise scans every pending row, runs the
-- aggregate check on each and sorts, a cost that grows with the backlog.
-- And no JIT: stale statistics inflate the estimated cost past jit_above_cost,
-- and compiling the claim then costs more than running it (measured: 9 ms of
-- a 25 ms claim with a million processed rows in the table).
SELECT pg_advisory_xact_lock(7162812450386870896),
       set_config('enable_sort', 'off', true),
       set_config('jit', 'off', true);

-- name: OutboxClaimCandidates
-- $1 batch size. Rows are locked (SKIP LOCKED) until the claim commits.
-- orphaned: the row's last lease ran out unanswered (its relay died);
-- attempts tells a first orphaning from a repeated one.
-- A row is claimable when it is pending, due and not leased, no other row of
-- its aggregate is in flight, and no earlier pending row of its aggregate waits
-- for a retry (block-on-error). An earlier row that is free is claimed first in
-- this same batch (ORDER BY id), so each aggregate flows in order. "Any other
-- row in flight" matters: a lower id whose transaction committed late must not
-- be delivered beside a higher one already in delivery.
WITH claimable AS (
  SELECT o.id, o.locked_until IS NOT NULL AS orphaned, o.attempts
  FROM outbox_messages o
  WHERE o.processed_at IS NULL
    AND o.available_at <= now()
    AND (o.locked_until IS NULL OR o.locked_until < now())
    AND NOT EXISTS (
      SELECT 1
      FROM outbox_messages e
      WHERE e.tenant_id = o.tenant_id
        AND e.aggregate_type = o.aggregate_type
        AND e.aggregate_id = o.aggregate_id
        AND e.id <> o.id
        AND e.processed_at IS NULL
        AND (e.locked_until >= now() OR (e.id < o.id AND e.available_at > now()))
      -- OFFSET 0 keeps this a per-row probe of the pending-only aggregate
      -- index; as an anti-join, stale statistics (taken while a backlog was
      -- pending) make the planner scan the whole table instead.
      OFFSET 0)
  ORDER BY o.id
  LIMIT $1
  FOR UPDATE SKIP LOCKED
)
SELECT id, orphaned, attempts FROM claimable;

-- name: OutboxClaimByIDCandidates
-- The stream mode's claim: the same rules as OutboxClaimCandidates, for the
-- rows the replication stream named ($1). The caller orders them.
WITH claimable AS (
  SELECT o.id, o.locked_until IS NOT NULL AS orphaned, o.attempts
  FROM outbox_messages o
  WHERE o.id = ANY($1::bigint[])
    AND o.processed_at IS NULL
    AND o.available_at <= now()
    AND (o.locked_until IS NULL OR o.locked_until < now())
    AND NOT EXISTS (
      SELECT 1
      FROM outbox_messages e
      WHERE e.tenant_id = o.tenant_id
        AND e.aggregate_type = o.aggregate_type
        AND e.aggregate_id = o.aggregate_id
        AND e.id <> o.id
        AND e.processed_at IS NULL
        -- As OutboxClaim, and an earlier pending row outside this batch blocks too.
        AND (e.locked_until >= now()
             OR (e.id < o.id AND (e.available_at > now() OR NOT (e.id = ANY($1::bigint[])))))
      OFFSET 0)
  FOR UPDATE SKIP LOCKED
)
SELECT id, orphaned, attempts FROM claimable;

-- name: OutboxClaimTake
-- $1 ids chosen from the candidates (still locked by this transaction),
-- $2 relay id, $3 lease. The attempt is counted here, at claim, so a row that
-- crashes its relay still reaches the DLQ after the limit.
UPDATE outbox_messages
SET attempts = attempts + 1,
    locked_by = $2,
    locked_until = now() + $3::interval
WHERE id = ANY($1::bigint[])
RETURNING id, tenant_id, aggregate_type, aggregate_id, event_type,
          event_version, payload, occurred_at, attempts, trace_id,
          -- An event of a tenant PostgreSQL does not have is poison: the
          -- graph must hold no tenant the truth does not.
          EXISTS (SELECT 1 FROM tenants t WHERE t.id = outbox_messages.tenant_id) AS tenant_known,
          -- Kept in the DLQ reason of a row whose last attempt died unanswered.
          last_error;

-- name: OutboxMarkProcessed
-- Only rows still leased by this relay: a row whose lease was taken over is
-- left to its new holder (the graph effect is idempotent either way).
UPDATE outbox_messages
SET processed_at = now(), locked_by = NULL, locked_until = NULL
WHERE id = ANY($1::bigint[]) AND locked_by = $2;

-- name: OutboxExtendLease
UPDATE outbox_messages
SET locked_until = now() + $3::interval
WHERE id = ANY($1::bigint[]) AND locked_by = $2 AND processed_at IS NULL;

-- name: OutboxDefer
-- $1 ids, $2 relay id, $3 wait. The events are valid but wait for another
-- aggregate's events: handed back uncounted, without last_error, due again
-- after $3. Later events of their aggregates stay behind them (the claim's
-- block-on-error rule sees available_at in the future).
UPDATE outbox_messages
SET attempts = GREATEST(attempts - 1, 0), locked_by = NULL, locked_until = NULL,
    available_at = now() + $3::interval
WHERE id = ANY($1::bigint[]) AND locked_by = $2;

-- name: OutboxRelease
-- The sink could not take the batch at all (its store is down) or the relay is
-- stopping: hand the rows back without counting the attempt.
UPDATE outbox_messages
SET attempts = GREATEST(attempts - 1, 0), locked_by = NULL, locked_until = NULL
WHERE id = ANY($1::bigint[]) AND locked_by = $2;

-- name: OutboxRecordFailure
-- $1 ids, $2 errors (same length), $3 relay id, $4 retry step, $5 max steps.
-- The seed's schedule: LEAST(attempts + 1, 8) * 30s, where attempts counted
-- failures; here attempts was already counted at claim, hence LEAST(attempts, 8).
UPDATE outbox_messages m
SET last_error = f.error,
    available_at = now() + LEAST(m.attempts, $5::int) * $4::interval,
    locked_by = NULL,
    locked_until = NULL
FROM unnest($1::bigint[], $2::text[]) AS f(id, error)
WHERE m.id = f.id AND m.locked_by = $3;

-- name: OutboxMoveToDLQ
-- $1 ids, $2 errors (same length), $3 relay id (NULL: any holder, for admin use).
WITH failed AS (
  SELECT * FROM unnest($1::bigint[], $2::text[]) AS f(id, error)
), moved AS (
  DELETE FROM outbox_messages m
  USING failed f
  WHERE m.id = f.id AND ($3::text IS NULL OR m.locked_by = $3)
  RETURNING m.*, f.error
)
INSERT INTO outbox_messages_dlq (
  id, tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload,
  occurred_at, available_at, processed_at, attempts, last_error, trace_id,
  locked_by, locked_until, created_xid)
SELECT id, tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload,
       occurred_at, available_at, NULL, attempts, error, trace_id,
       NULL, NULL, created_xid
FROM moved
RETURNING id;

-- name: DLQList
SELECT id, tenant_id, aggregate_type, aggregate_id, event_type, event_version,
       attempts, coalesce(last_error, ''), coalesce(trace_id, ''), occurred_at, dead_lettered_at
FROM outbox_messages_dlq
WHERE ($1::bigint IS NULL OR tenant_id = $1)
ORDER BY id
LIMIT $2;

-- name: DLQRetry
-- Back to pending with a fresh attempt count, keeping id, payload and
-- last_error. created_xid is this transaction's: offset readers that passed
-- the row's old position must see it again.
WITH moved AS (
  DELETE FROM outbox_messages_dlq WHERE id = ANY($1::bigint[]) RETURNING *
)
INSERT INTO outbox_messages (
  id, tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload,
  occurred_at, available_at, processed_at, attempts, last_error, trace_id)
OVERRIDING SYSTEM VALUE
SELECT id, tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload,
       occurred_at, now(), NULL, 0, last_error, trace_id
FROM moved
RETURNING id;

-- name: DLQDiscard
DELETE FROM outbox_messages_dlq WHERE id = ANY($1::bigint[]) RETURNING id;

-- name: OutboxArchiveProcessed
-- $1 age, $2 batch size. Idempotent: a row is either still in the outbox or
-- already in the archive, never both (one statement, one transaction).
WITH moved AS (
  DELETE FROM outbox_messages
  WHERE id IN (
    SELECT id FROM outbox_messages
    WHERE processed_at IS NOT NULL AND processed_at < now() - $1::interval
    ORDER BY processed_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED)
  RETURNING *
)
INSERT INTO outbox_messages_archive SELECT * FROM moved;

-- name: ArchivePartitions
-- Monthly partitions of the archive with their bounds.
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'outbox_messages_archive'::regclass
ORDER BY c.relname;

-- name: OutboxOldestOccurredAt
SELECT min(occurred_at) FROM outbox_messages;

-- name: OutboxStats
-- For the gauges: lag of the oldest pending row (the claim index gives the
-- lowest pending id cheaply), DLQ depth, and aggregates blocked by a failing row.
SELECT
  coalesce(extract(epoch FROM now() - (
    SELECT occurred_at FROM outbox_messages WHERE processed_at IS NULL ORDER BY id LIMIT 1)), 0)::float8,
  (SELECT count(*) FROM outbox_messages_dlq),
  (SELECT count(*) FROM (
     SELECT DISTINCT tenant_id, aggregate_type, aggregate_id
     FROM outbox_messages
     WHERE processed_at IS NULL AND last_error IS NOT NULL) blocked);

-- name: OffsetRead
-- Gap-free offset reader (relay/offsets.go) and graphsync rebuild's replay.
-- Only rows of transactions that have all ended (created_xid below the
-- oldest running xid) are read, so no row can later appear behind the
-- cursor. The archive is read too: a reader more than a week behind must not
-- lose what the retention job moved. $1/$2 cursor, $3 limit, $4 one tenant
-- or NULL for all.
WITH horizon AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin)
SELECT id, tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload,
       occurred_at, attempts, trace_id, created_xid::text, processed
FROM (
  (SELECT id, tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload,
          occurred_at, attempts, trace_id, created_xid, processed_at IS NOT NULL AS processed
   FROM outbox_messages, horizon
   WHERE (created_xid, id) > ($1::text::xid8, $2::bigint) AND created_xid < horizon.xmin
     AND ($4::bigint IS NULL OR tenant_id = $4)
   ORDER BY created_xid, id
   LIMIT $3)
  UNION ALL
  (SELECT id, tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload,
          occurred_at, attempts, trace_id, created_xid, true
   FROM outbox_messages_archive, horizon
   WHERE (created_xid, id) > ($1::text::xid8, $2::bigint) AND created_xid < horizon.xmin
     AND ($4::bigint IS NULL OR tenant_id = $4)
   ORDER BY created_xid, id
   LIMIT $3)
) rows
ORDER BY created_xid, id
LIMIT $3;

-- name: OffsetLoad
SELECT last_processed_xid::text, last_processed_id
FROM consumer_offsets
WHERE consumer_name = $1 AND partition_key = $2;

-- name: OffsetStore
INSERT INTO consumer_offsets (consumer_name, partition_key, last_processed_id, last_processed_xid, last_processed_at)
VALUES ($1, $2, $4, $3::text::xid8, now())
ON CONFLICT (consumer_name, partition_key)
DO UPDATE SET last_processed_id = EXCLUDED.last_processed_id,
              last_processed_xid = EXCLUDED.last_processed_xid,
              last_processed_at = now();

-- name: OutboxPendingFlowing
-- Is any pending row neither failing nor waiting behind a failing row of its
-- aggregate? false means the relay has caught up with everything it can.
-- EXISTS stops at the first such row: a count would read a whole backlog.
SELECT EXISTS (
  SELECT 1
  FROM outbox_messages o
  WHERE o.processed_at IS NULL
    AND NOT EXISTS (
      SELECT 1 FROM outbox_messages e
      WHERE e.tenant_id = o.tenant_id
        AND e.aggregate_type = o.aggregate_type
        AND e.aggregate_id = o.aggregate_id
        AND e.processed_at IS NULL
        AND e.last_error IS NOT NULL
      OFFSET 0));

-- name: OutboxNotVisible
-- Of the ids a replication stream named, those this snapshot cannot see yet:
-- logical decoding may hand over a commit a moment before it is visible.
-- Rows already dead-lettered or archived (a slot replaying old WAL) count as seen.
SELECT coalesce(array_agg(x), '{}')
FROM unnest($1::bigint[]) AS x
WHERE NOT EXISTS (SELECT 1 FROM outbox_messages m WHERE m.id = x)
  AND NOT EXISTS (SELECT 1 FROM outbox_messages_dlq d WHERE d.id = x)
  AND NOT EXISTS (SELECT 1 FROM outbox_messages_archive a WHERE a.id = x);

-- name: ArchivePartitionLock
-- Serialises archive partition creation between processes.
SELECT pg_advisory_xact_lock(7162812450386870897);

-- name: ArchivePartitionExists
SELECT EXISTS (SELECT 1 FROM pg_class WHERE relname = $1 AND relkind IN ('r', 'p'));
