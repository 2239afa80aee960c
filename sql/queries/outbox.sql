-- Runtime statements of the relay. Every value is a parameter.
-- A claim records the batch it takes in outbox_batches (its ids and its
-- aggregates), one row a batch; claims run one at a time under the claim
-- lock and leave the rows and aggregates of the batches in flight alone
-- (docs/adr/0018). An aggregate lease (outbox_aggregate_leases) whose
-- locked_by is 'held back' is a hold: the aggregate waits for a failed or
-- deferred row's retry, and claims skip its rows until then.

-- name: OutboxClaimSettings
-- Sent with the claim, in its transaction. No sorts: the window must walk the
-- pending-only claim index in id order and stop at the limit; with missing or
-- stale statistics the planner otherwise scans every pending row and sorts, a
-- cost that grows with the backlog (the sorts the claim does need, of the
-- window's few hundred rows, have no alternative and stay). No JIT: stale
-- statistics inflate the estimated cost past jit_above_cost, and compiling
-- the claim then costs more than running it (docs/adr/0001).
-- $1 (milliseconds): the claim holds the claim lock while the relay works
-- its rules out between two round trips; a relay that stalls there (paused,
-- cut off) must not keep every claim of every relay waiting, so PostgreSQL
-- ends its session after $1 idle in the transaction, and the lock with it.
SELECT set_config('enable_sort', 'off', true), set_config('jit', 'off', true),
       set_config('idle_in_transaction_session_timeout', $1::text, true);

-- name: OutboxClaimLock
-- The claim lock, held to the end of the claim's transaction: claims of
-- every worker of every relay run one at a time, so each sees the batches
-- of those before it (docs/adr/0018). A claim is a read and one insert;
-- settles, extensions and failures do not take the lock.
SELECT pg_advisory_xact_lock(hashtextextended('graphsync outbox claim', 0));

-- name: OutboxClaimTakeover
-- Under the claim lock, before the claim: a batch whose lease ran out (its
-- relay died, or lost PostgreSQL for longer than the lease) is taken over.
-- Its row goes, so its settle, if it ever comes, marks nothing; each of its
-- rows still pending has the attempt counted, and keeps the dead batch's
-- identity and lease end as its last lease: an orphan, which the window
-- reads as such (suspect when orphaned before, docs/adr/0006). Costs
-- nothing when no batch ran out.
WITH dead AS (
  DELETE FROM outbox_batches b
  WHERE b.locked_until < now()
  RETURNING b.holder, b.locked_until, b.ids
)
UPDATE outbox_messages m
-- Capped at the column's largest value: a row the DLQ keeps refusing is
-- taken over again every lease, and an overflow would fail every claim.
SET attempts = LEAST(m.attempts, 32766) + 1,
    locked_by = d.holder,
    locked_until = d.locked_until
FROM dead d
WHERE m.id = ANY(d.ids) AND m.processed_at IS NULL;

-- A claim reads one statement: a window (OutboxClaimPollWindow or
-- OutboxClaimByIDWindow) followed by OutboxClaimRead; the relay works the
-- rules out and records the batch (OutboxClaimRecord). Its cost is O(window
-- and the batches in flight): each row costs one backward probe of the
-- pending-only aggregate index (its predecessor), one probe of the holds'
-- index (none while no hold is in place) and the length of its payload
-- (the byte bound), however many events its aggregate has pending and
-- however large the backlog (docs/adr/0012); the batches in flight cost
-- their id range, passed over, and their aggregates' keys, read once into
-- a hash table. It writes one row, the batch's, and no outbox row
-- (docs/adr/0018). The one exception: rows behind a failed event, which the
-- window reads past (one probe of the holds' index each) until the retry.

-- name: OutboxClaimPollWindow
-- $1 batch size: the first due pending rows in id order that no batch in
-- flight holds, of aggregates not held back after a failure (see
-- OutboxRecordFailure), so that rows waiting behind a failed event never
-- fill the window ahead of other aggregates' rows. One probe of the holds'
-- partial index (migration 0009) a row. Rows of aggregates in flight stay
-- in the window (the tail holds them back): skipping them here would walk
-- every pending row of hot aggregates while they are in delivery, and they
-- are due as soon as their batch settles. suspect: the row's last attempt
-- was taken over unanswered, and it was not its first (it may be what kills
-- its relays). A row whose locked_until is still ahead was leased by a
-- relay from before migration 0012 and is left to it.
-- The rows of the batches in flight are left out: with $2 the walk passes
-- over them, over the ids from the lowest to the highest of the batches in
-- flight (bounds); without, one by one (their ids, read once into a hash
-- table). Passing over them, it reads below them what earlier windows left
-- and what committed late, above them the rows no claim has read. A row in
-- between that is in no batch (left by a window, or committed late) then
-- waits, and the rows of its aggregate after it with it (their predecessor
-- is not in the window): the relay walks the whole index, $2 false, at
-- least once a second (relay/store.go), so that wait is bounded however
-- long a batch stays in flight. The same conditions walk the two ranges, below and
-- above; what they find is cut to the batch size in id order (a top-N sort
-- of at most twice the batch size, usually the batch size and a few rows).
-- The holds' probe is a scalar subquery, not a NOT EXISTS, so that it stays
-- one index probe a row whatever the statistics say: PostgreSQL makes a NOT
-- EXISTS an anti-join, and with statistics of outbox_aggregate_leases taken
-- before there were holds (autovacuum analyzes that small table late, if
-- at all) it read every hold once and compared each row of the window with
-- all of them: 0.9 to 1.0 s for 2,000 rows and 5,000 holds, against 38 to
-- 55 ms (docs/adr/0015).
WITH bounds AS (
  SELECT coalesce(min(b.lo), 9223372036854775807) AS lo,
         coalesce(max(b.hi), 9223372036854775807) AS hi
  FROM outbox_batches b
  WHERE $2::bool
), held AS (
  -- Whether any hold is in place: without one (the common case) no row
  -- needs the holds' probe.
  SELECT EXISTS (SELECT 1 FROM outbox_aggregate_leases anyhold WHERE anyhold.locked_until >= now()) AS any
), win AS (
  SELECT w.*
  FROM bounds b,
       LATERAL (VALUES (0::bigint, b.lo), (b.hi, 9223372036854775807)) AS r(after, before),
       LATERAL (
         SELECT o.id, o.tenant_id, o.aggregate_type, o.aggregate_id, o.event_type, o.event_version,
                o.payload::text AS payload, o.occurred_at, o.attempts, o.trace_id, o.last_error,
                o.locked_until IS NOT NULL AND o.attempts >= 2 AS suspect,
                outbox_aggregate_key(o.tenant_id, o.aggregate_type, o.aggregate_id) AS aggregate_key
         FROM outbox_messages o
         WHERE o.processed_at IS NULL
           AND o.id > r.after AND o.id < r.before
           AND ($2::bool OR o.id NOT IN (SELECT unnest(f.ids) FROM outbox_batches f))
           AND o.available_at <= now()
           AND (o.locked_until IS NULL OR o.locked_until < now())
           AND (NOT (SELECT held.any FROM held) OR (SELECT true FROM outbox_aggregate_leases l
                WHERE l.tenant_id = o.tenant_id AND l.aggregate_type = o.aggregate_type
                  AND l.aggregate_id = o.aggregate_id
                  AND l.locked_by = 'held back' AND l.locked_until >= now()
                LIMIT 1) IS NULL)
         ORDER BY o.id
         LIMIT $1) AS w
  ORDER BY w.id
  LIMIT $1
)

-- name: OutboxClaimByIDWindow
-- The stream mode's window: the rows the replication stream named ($1),
-- under the same conditions, but for the batches in flight, whose ids it
-- leaves out one by one. The caller orders what it takes.
WITH busy AS (
  SELECT unnest(b.ids) AS id FROM outbox_batches b
), win AS (
  SELECT o.id, o.tenant_id, o.aggregate_type, o.aggregate_id, o.event_type, o.event_version,
         o.payload::text AS payload, o.occurred_at, o.attempts, o.trace_id, o.last_error,
         o.locked_until IS NOT NULL AND o.attempts >= 2 AS suspect,
         outbox_aggregate_key(o.tenant_id, o.aggregate_type, o.aggregate_id) AS aggregate_key
  FROM outbox_messages o
  WHERE o.id = ANY($1::bigint[])
    AND o.processed_at IS NULL
    AND o.available_at <= now()
    AND (o.locked_until IS NULL OR o.locked_until < now())
    AND (SELECT true FROM outbox_aggregate_leases l
         WHERE l.tenant_id = o.tenant_id AND l.aggregate_type = o.aggregate_type
           AND l.aggregate_id = o.aggregate_id
           AND l.locked_by = 'held back' AND l.locked_until >= now()
         LIMIT 1) IS NULL
    AND o.id NOT IN (SELECT busy.id FROM busy)
)

-- name: OutboxClaimRead
-- After a window: each row with what the rules need, which the relay works
-- out (relay/store.go, pick: order and block-on-error, one batch in flight
-- per aggregate, a suspect orphan alone, the byte bound):
-- * prev_pending, the aggregate's pending row just before it: one backward
--   probe of the pending-only aggregate index, however many events the
--   aggregate has pending (docs/adr/0012);
-- * its aggregate's key, and whether a batch in flight holds the aggregate
--   (the keys of the batches in flight, read once into a hash table);
-- * whether its tenant exists (an event of a tenant PostgreSQL does not
--   have is poison: the graph must hold no tenant the truth does not).
-- attempts comes back as the number of this attempt: the attempts counted
-- before it (failures and takeovers) and this one, which a mark, a failure
-- or a takeover counts for good. last_error is kept in the DLQ reason of a
-- row whose last attempt died unanswered.
SELECT w.id, w.tenant_id, w.aggregate_type, w.aggregate_id, w.event_type,
       w.event_version, w.payload, w.occurred_at, LEAST(w.attempts, 32766) + 1, w.trace_id,
       EXISTS (SELECT 1 FROM tenants t WHERE t.id = w.tenant_id) AS tenant_known,
       w.last_error, w.suspect,
       (SELECT e.id FROM outbox_messages e
        WHERE e.tenant_id = w.tenant_id
          AND e.aggregate_type = w.aggregate_type
          AND e.aggregate_id = w.aggregate_id
          AND e.processed_at IS NULL
          AND e.id < w.id
        ORDER BY e.id DESC
        LIMIT 1) AS prev_pending,
       w.aggregate_key,
       w.aggregate_key IN (SELECT unnest(b.aggregate_keys) FROM outbox_batches b) AS in_flight
FROM win w;

-- name: OutboxClaimRecord
-- The claim's one write, in its transaction and under the claim lock: the
-- batch it takes. $1 its identity, $2 lease (from now, not from the
-- transaction's start: the claim may have waited for the lock), $3/$4 its
-- lowest and highest id, $5 its ids, $6 its aggregates' keys.
INSERT INTO outbox_batches (holder, locked_until, lo, hi, ids, aggregate_keys)
VALUES ($1, clock_timestamp() + $2::interval, $3, $4, $5::bigint[], $6::bigint[]);

-- name: OutboxSettle
-- Ends a batch in one statement, if it is still the claim's ($4, its
-- identity): its row in outbox_batches goes, which fences the rest (a batch
-- taken over has none; the takeover and the settle wait for each other on
-- it). $1 ids applied (marked processed), $2 ids handed back uncounted
-- (released), $3 ids handed back uncounted to wait for another aggregate's
-- events (deferred: valid, so no last_error; later events of their
-- aggregates stay behind them, as their predecessor is not due).
-- A deferred row waits as long as its aggregate has waited since its first
-- deferral (deferred_since, migration 0010), at least $5 and at most $6:
-- the wait doubles while the dependency stays away. An aggregate that had a
-- row applied in this batch made progress: its wait starts again at $5.
-- The aggregates of deferred rows are held back until the rows are due (see
-- OutboxRecordFailure); a hold that has run out stays, with since when its
-- aggregate has waited, until the aggregate makes progress.
-- Returns how many applied rows were marked, and in how many seconds the
-- first deferred row is due (NULL when none was deferred).
WITH batch AS (
  DELETE FROM outbox_batches WHERE holder = $4
  RETURNING holder
), marked AS (
  -- The attempt that applied the row is counted as it is marked: the same
  -- new row version, nothing more written.
  UPDATE outbox_messages
  SET processed_at = now(), attempts = LEAST(attempts, 32766) + 1, locked_by = NULL, locked_until = NULL
  WHERE id = ANY($1::bigint[]) AND processed_at IS NULL AND EXISTS (SELECT 1 FROM batch)
  RETURNING tenant_id, aggregate_type, aggregate_id
), released AS (
  -- Only an orphan's last lease is left to clear: the others wrote nothing.
  UPDATE outbox_messages
  SET locked_by = NULL, locked_until = NULL
  WHERE id = ANY($2::bigint[]) AND processed_at IS NULL AND locked_until IS NOT NULL
    AND EXISTS (SELECT 1 FROM batch)
), deferred AS (
  UPDATE outbox_messages m
  SET locked_by = NULL, locked_until = NULL,
      available_at = now() + LEAST(GREATEST($5::interval, coalesce((
        SELECT now() - l.deferred_since FROM outbox_aggregate_leases l
        WHERE l.tenant_id = m.tenant_id AND l.aggregate_type = m.aggregate_type
          AND l.aggregate_id = m.aggregate_id
          AND NOT EXISTS (
            SELECT 1 FROM marked a
            WHERE a.tenant_id = m.tenant_id AND a.aggregate_type = m.aggregate_type
              AND a.aggregate_id = m.aggregate_id)), '0'::interval)), $6::interval)
  WHERE m.id = ANY($3::bigint[]) AND m.processed_at IS NULL AND EXISTS (SELECT 1 FROM batch)
  RETURNING m.tenant_id, m.aggregate_type, m.aggregate_id, m.available_at
), held AS (
  INSERT INTO outbox_aggregate_leases AS l (tenant_id, aggregate_type, aggregate_id, locked_by, locked_until, deferred_since, deferred_at)
  SELECT d.tenant_id, d.aggregate_type, d.aggregate_id, 'held back', d.until,
         CASE WHEN d.progressed THEN now()
              ELSE coalesce((SELECT w.deferred_since FROM outbox_aggregate_leases w
                             WHERE w.tenant_id = d.tenant_id AND w.aggregate_type = d.aggregate_type
                               AND w.aggregate_id = d.aggregate_id), now()) END,
         now()
  FROM (SELECT d.tenant_id, d.aggregate_type, d.aggregate_id, max(d.available_at) AS until,
               EXISTS (SELECT 1 FROM marked a
                       WHERE a.tenant_id = d.tenant_id AND a.aggregate_type = d.aggregate_type
                         AND a.aggregate_id = d.aggregate_id) AS progressed
        FROM deferred d GROUP BY d.tenant_id, d.aggregate_type, d.aggregate_id) d
  ON CONFLICT (tenant_id, aggregate_type, aggregate_id) DO UPDATE
    SET locked_by = 'held back', locked_until = excluded.locked_until,
        deferred_since = excluded.deferred_since, deferred_at = excluded.deferred_at
    -- A failure's hold still ahead stays as it is (the failed row waits for
    -- its retry, and the deferred one behind it).
    WHERE l.deferred_since IS NOT NULL OR l.locked_until < now()
), progressed AS (
  -- An aggregate that had a row applied made progress: a hold of it that
  -- has run out goes, and with it since when it waited. A hold still
  -- ahead (a failure recorded in this batch) stays.
  DELETE FROM outbox_aggregate_leases l
  USING (SELECT DISTINCT a.tenant_id, a.aggregate_type, a.aggregate_id FROM marked a) a
  WHERE l.tenant_id = a.tenant_id AND l.aggregate_type = a.aggregate_type
    AND l.aggregate_id = a.aggregate_id AND l.locked_until < now()
    AND NOT EXISTS (
      SELECT 1 FROM deferred d
      WHERE d.tenant_id = a.tenant_id AND d.aggregate_type = a.aggregate_type AND d.aggregate_id = a.aggregate_id)
)
SELECT (SELECT count(*) FROM marked),
       (SELECT extract(epoch FROM min(available_at) - now())::float8 FROM deferred);

-- name: OutboxBatchKeep
-- $1 the claim's identity, $2 the ids it keeps in flight (rows whose move
-- to the DLQ failed: they stay out of every claim until the lease runs out
-- and the takeover counts the attempt again), $3 the rest, handed back
-- uncounted (an orphan's last lease cleared, as the settle does).
WITH kept AS (
  UPDATE outbox_batches b
  SET ids = $2::bigint[],
      lo = (SELECT min(x) FROM unnest($2::bigint[]) x),
      hi = (SELECT max(x) FROM unnest($2::bigint[]) x),
      aggregate_keys = (SELECT coalesce(array_agg(outbox_aggregate_key(m.tenant_id, m.aggregate_type, m.aggregate_id)), '{}')
                        FROM outbox_messages m WHERE m.id = ANY($2::bigint[]))
  WHERE b.holder = $1
  RETURNING b.holder
)
UPDATE outbox_messages
SET locked_by = NULL, locked_until = NULL
WHERE id = ANY($3::bigint[]) AND processed_at IS NULL AND locked_until IS NOT NULL
  AND EXISTS (SELECT 1 FROM kept);

-- name: OutboxExtendLease
-- $1 the claim's identity, $2 lease. A batch taken over is not extended.
UPDATE outbox_batches
SET locked_until = now() + $2::interval
WHERE holder = $1;

-- name: OutboxRecordFailure
-- $1 ids, $2 errors (same length), $3 the claim's identity, $4 retry step,
-- $5 max steps. Only while the batch is the claim's (its row, locked here
-- against a takeover). The attempt is counted here, and the batch lets go
-- of the rows (they are no longer in flight: due at their retry).
-- The seed's schedule: LEAST(attempts + 1, 8) * 30s, attempts counting
-- the failures before this one.
-- The aggregate becomes held until the retry (and forgets since when it
-- waited for a dependency): its later rows wait behind the failed one
-- anyway, and the claim's window skips them instead of filling with them
-- (a claim takes the aggregate again once the hold has run out).
WITH batch AS (
  -- The batch lets go of the failed rows: their attempt is counted here, and
  -- a takeover of the batch must not count it again.
  UPDATE outbox_batches b
  SET ids = ARRAY(SELECT x FROM unnest(b.ids) AS x WHERE x <> ALL($1::bigint[]))
  WHERE b.holder = $3
  RETURNING b.holder
), failed AS (
  UPDATE outbox_messages m
  SET last_error = f.error,
      attempts = LEAST(m.attempts, 32766) + 1,
      available_at = now() + LEAST(LEAST(m.attempts, 32766) + 1, $5::int) * $4::interval,
      locked_by = NULL,
      locked_until = NULL
  FROM unnest($1::bigint[], $2::text[]) AS f(id, error)
  WHERE m.id = f.id AND m.processed_at IS NULL AND EXISTS (SELECT 1 FROM batch)
  RETURNING m.tenant_id, m.aggregate_type, m.aggregate_id, m.available_at
)
INSERT INTO outbox_aggregate_leases AS l (tenant_id, aggregate_type, aggregate_id, locked_by, locked_until)
SELECT h.tenant_id, h.aggregate_type, h.aggregate_id, 'held back', h.until
FROM (SELECT tenant_id, aggregate_type, aggregate_id, max(available_at) AS until
      FROM failed GROUP BY tenant_id, aggregate_type, aggregate_id) h
ON CONFLICT (tenant_id, aggregate_type, aggregate_id) DO UPDATE
  SET locked_by = 'held back', locked_until = excluded.locked_until, deferred_since = NULL;

-- name: OutboxMoveToDLQ
-- $1 ids, $2 errors (same length), $3 the claim's identity (NULL: any
-- holder, for admin use). A relay's move counts the attempt that failed
-- (or found the row out of attempts): attempts is then what the relay
-- logged, as in the DLQ reason.
WITH batch AS (
  -- Locked against a takeover, which deletes it: moved only while the
  -- batch is the claim's.
  SELECT b.holder FROM outbox_batches b WHERE b.holder = $3 FOR SHARE
), failed AS (
  SELECT * FROM unnest($1::bigint[], $2::text[]) AS f(id, error)
), moved AS (
  DELETE FROM outbox_messages m
  USING failed f
  WHERE m.id = f.id
    AND ($3::text IS NULL OR EXISTS (SELECT 1 FROM batch))
  RETURNING m.*, f.error
)
INSERT INTO outbox_messages_dlq (
  id, tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload,
  occurred_at, available_at, processed_at, attempts, last_error, trace_id,
  locked_by, locked_until, created_xid)
SELECT id, tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload,
       occurred_at, available_at, NULL,
       LEAST(attempts, 32766) + CASE WHEN $3::text IS NULL THEN 0 ELSE 1 END, error, trace_id,
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
-- Back to pending with a fresh start: attempt count 0 and no last_error (a
-- pending row with one counts as failing: its aggregate as blocked, and
-- sync --until-caught-up would stop before the retry was applied; the DLQ
-- listing showed the error, and a new failure records a new one). Keeps id
-- and payload. created_xid is this transaction's: offset readers that passed
-- the row's old position must see it again. $2 a tenant id, 0 for any: the
-- rows of other tenants are left alone.
WITH moved AS (
  DELETE FROM outbox_messages_dlq
  WHERE id = ANY($1::bigint[]) AND ($2::bigint = 0 OR tenant_id = $2::bigint)
  RETURNING *
)
INSERT INTO outbox_messages (
  id, tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload,
  occurred_at, available_at, processed_at, attempts, last_error, trace_id)
OVERRIDING SYSTEM VALUE
SELECT id, tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload,
       occurred_at, now(), NULL, 0, NULL, trace_id
FROM moved
RETURNING id;

-- name: DLQDiscard
-- $2 a tenant id, 0 for any, as for DLQRetry.
DELETE FROM outbox_messages_dlq
WHERE id = ANY($1::bigint[]) AND ($2::bigint = 0 OR tenant_id = $2::bigint)
RETURNING id;

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

-- name: OutboxAggregateLeasesPrune
-- $1 age. A hold that ran out holds nothing, and stays until its aggregate
-- makes progress (the settle removes it); one whose aggregate gets no more
-- events would stay forever. Those that ran out longer ago than $1 are
-- removed, except the hold of an aggregate that waits for another
-- aggregate's events (deferred_since) and still has an event pending: it
-- keeps since when the aggregate has waited, for the deferral backoff and
-- outbox_longest_wait_seconds, across an outage of the relays longer than
-- $1.
DELETE FROM outbox_aggregate_leases l
WHERE l.locked_until < now() - $1::interval
  AND (l.deferred_since IS NULL OR NOT EXISTS (
    SELECT 1 FROM outbox_messages m
    WHERE m.tenant_id = l.tenant_id AND m.aggregate_type = l.aggregate_type
      AND m.aggregate_id = l.aggregate_id AND m.processed_at IS NULL));

-- name: ArchivePartitions
-- Monthly partitions of the archive with their bounds.
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'outbox_messages_archive'::regclass
ORDER BY c.relname;

-- name: OutboxOldestOccurredAt
-- occurred_at is the producer's: a row at -infinity (which the relay
-- dead-letters) must not make the retention job fail.
SELECT min(occurred_at) FROM outbox_messages WHERE isfinite(occurred_at);

-- name: OutboxStats
-- For the gauges: lag of the oldest pending row (the claim index gives the
-- lowest pending id cheaply), DLQ depth, aggregates blocked by a failing row
-- (read through outbox_messages_failing_idx, migration 0011: the failing
-- rows only, not the backlog), and aggregates waiting for another
-- aggregate's events.
-- A pending row at infinity (the relay dead-letters it) is passed over: now()
-- minus it is an error, which would blank every gauge, and the rows behind
-- it still count.
SELECT
  coalesce(extract(epoch FROM now() - (
    SELECT occurred_at FROM outbox_messages
    WHERE processed_at IS NULL AND isfinite(occurred_at) ORDER BY id LIMIT 1)), 0)::float8,
  (SELECT count(*) FROM outbox_messages_dlq),
  (SELECT count(*) FROM (
     SELECT DISTINCT tenant_id, aggregate_type, aggregate_id
     FROM outbox_messages
     WHERE processed_at IS NULL AND last_error IS NOT NULL) blocked),
  -- Aggregates waiting for another aggregate's events (deferred, migration
  -- 0010), and for how long the longest has waited. The lease table holds
  -- only holds (migration 0012): a few rows.
  (SELECT count(*) FROM outbox_aggregate_leases WHERE deferred_since IS NOT NULL),
  coalesce(extract(epoch FROM now() - (SELECT min(deferred_since) FROM outbox_aggregate_leases)), 0)::float8;

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
-- aggregate, nor of an aggregate that has waited for another aggregate's
-- events for longer than $1 (deferred_since, migration 0010: an order whose
-- product's event is in the DLQ) and was deferred again after the last row
-- anything applied (deferred_at): an event applied since may be what it
-- waits for. false means the relay has caught up with everything it can.
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
      OFFSET 0)
    AND NOT EXISTS (
      SELECT 1 FROM outbox_aggregate_leases l
      WHERE l.tenant_id = o.tenant_id
        AND l.aggregate_type = o.aggregate_type
        AND l.aggregate_id = o.aggregate_id
        AND l.deferred_since < now() - $1::interval
        AND l.deferred_at > coalesce((SELECT max(processed_at) FROM outbox_messages), '-infinity')));

-- name: OutboxNextHoldEnds
-- In how many seconds the first hold runs out (NULL: none in place). The
-- holds' partial index holds only holds: a few rows.
SELECT extract(epoch FROM min(locked_until) - now())::float8
FROM outbox_aggregate_leases
WHERE locked_by = 'held back' AND locked_until >= now();

-- name: OutboxPendingPlanned
-- How many pending rows the planner expects, from the outbox's statistics
-- (the plan's "Plan Rows"): what the claim's plan is made for.
-- docs/adr/0015.
EXPLAIN (FORMAT JSON) SELECT 1 FROM outbox_messages WHERE processed_at IS NULL;

-- name: OutboxPendingUpTo
-- $1 a number of rows: how many rows are pending, counted up to it.
SELECT count(*) FROM (
  SELECT 1 FROM outbox_messages WHERE processed_at IS NULL LIMIT $1) pending;

-- name: OutboxAnalyzeCount
-- How many times the outbox was analyzed, by hand or by autovacuum. The
-- CTE drops the session's cached statistics first (before PostgreSQL 15 a
-- session reads a statistics file up to half a second old).
WITH fresh AS (SELECT pg_stat_clear_snapshot())
SELECT pg_stat_get_analyze_count('outbox_messages'::regclass)
     + pg_stat_get_autoanalyze_count('outbox_messages'::regclass)
FROM fresh;

-- name: OutboxAnalyze
-- Brings the planner's statistics of the outbox up to date from a sample of
-- rows (up to 30,000 at the default statistics target, however large the
-- table). SKIP_LOCKED: a VACUUM or ANALYZE already running (autovacuum's)
-- makes it a no-op, with a warning, rather than a wait.
ANALYZE (SKIP_LOCKED) outbox_messages;

-- name: OutboxNotVisible
-- Of the ids a replication stream named, those this snapshot cannot see yet:
-- logical decoding may hand over a commit a moment before it is visible.
-- Rows already dead-lettered or archived (a slot replaying old WAL) count as seen.
SELECT coalesce(array_agg(x), '{}')
FROM unnest($1::bigint[]) AS x
WHERE NOT EXISTS (SELECT 1 FROM outbox_messages m WHERE m.id = x)
  AND NOT EXISTS (SELECT 1 FROM outbox_messages_dlq d WHERE d.id = x)
  AND NOT EXISTS (SELECT 1 FROM outbox_messages_archive a WHERE a.id = x);

-- name: ArchiveDefaultPrune
-- $1 the default partition's name, $2 the start of the oldest month the
-- archive keeps. Removes the default partition's rows dated before it and
-- records per tenant what went (outbox_history_gaps), as a dropped month
-- partition does.
WITH gone AS (
  DELETE FROM outbox_messages_archive_default WHERE occurred_at < $2
  RETURNING tenant_id, occurred_at
)
INSERT INTO outbox_history_gaps (partition_name, tenant_id, rows_dropped, oldest, newest)
SELECT $1, tenant_id, count(*), min(occurred_at), max(occurred_at)
FROM gone
GROUP BY tenant_id
ON CONFLICT (partition_name, tenant_id) DO UPDATE
SET rows_dropped = outbox_history_gaps.rows_dropped + EXCLUDED.rows_dropped,
    oldest = LEAST(outbox_history_gaps.oldest, EXCLUDED.oldest),
    newest = GREATEST(outbox_history_gaps.newest, EXCLUDED.newest),
    dropped_at = now();

-- name: ArchivePartitionLock
-- Serialises archive partition creation between processes.
SELECT pg_advisory_xact_lock(7162812450386870897);

-- name: ArchivePartitionExists
SELECT EXISTS (SELECT 1 FROM pg_class WHERE relname = $1 AND relkind IN ('r', 'p'));

-- name: RoleSeesEveryTenant
-- Whether row-level security (migration 0004) lets this role read every
-- tenant's rows: it does not apply to the role (a superuser, a role with
-- BYPASSRLS, the tables' owner where FORCE was turned off), or the role has
-- graphsync_relay's privileges (USAGE: a NOINHERIT member has not). Any
-- other role, the tables' owner included while RLS is forced, sees one
-- tenant or none (gsql.CheckRoleSeesEveryTenant).
SELECT NOT (row_security_active('outbox_messages') OR row_security_active('tenants'))
       OR pg_has_role(current_user, 'graphsync_relay', 'USAGE'),
       current_user::text;

-- name: OutboxEnqueue
-- The producer's insert (events.Enqueue), in the caller's transaction. No
-- RETURNING: the application role may insert into the outbox but not read it.
INSERT INTO outbox_messages
  (tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload, trace_id)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7);
