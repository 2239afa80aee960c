-- Runtime statements of the relay. Every value is a parameter.
-- A claim takes whole aggregates through outbox_aggregate_leases, so claims
-- run concurrently without a global lock (docs/adr/0001, 0012). A lease
-- whose locked_by is 'held back' is a hold: the aggregate waits for a
-- failed or deferred row's retry, and claims skip its rows until then.

-- name: OutboxClaimSettings
-- Sent with the claim, in its transaction. No sorts: the window must walk the
-- pending-only claim index in id order and stop at the limit; with missing or
-- stale statistics the planner otherwise scans every pending row and sorts, a
-- cost that grows with the backlog (the sorts the claim does need, of the
-- window's few hundred rows, have no alternative and stay). No JIT: stale
-- statistics inflate the estimated cost past jit_above_cost, and compiling
-- the claim then costs more than running it (docs/adr/0001).
SELECT set_config('enable_sort', 'off', true), set_config('jit', 'off', true);

-- A claim is one statement: a window (OutboxClaimPollWindow or
-- OutboxClaimByIDWindow) followed by OutboxClaimTail. Its cost is O(window):
-- each row costs one backward probe of the pending-only aggregate index (its
-- predecessor), one probe of the holds' index, the length of its payload
-- (the byte bound) and one primary-key probe of outbox_aggregate_leases, however
-- many events its aggregate has pending and however large the backlog
-- (docs/adr/0012). The one exception: rows behind a failed event, which the
-- window reads past (one probe of the holds' index each) until the retry.

-- name: OutboxClaimPollWindow
-- $1 batch size: the first due, unleased pending rows in id order, locked
-- (SKIP LOCKED) until the claim commits, of aggregates not held back after
-- a failure (see OutboxRecordFailure), so that rows waiting behind a failed
-- event never fill the window ahead of other aggregates' rows. One probe
-- of the holds' partial index (migration 0009) a row. Rows of aggregates
-- in flight stay in the window (the tail holds them back): skipping them
-- here would walk every pending row of hot aggregates while they are in
-- delivery, and they are due as soon as their batch settles. suspect: the
-- row's last lease ran out unanswered more than once (it may be what kills
-- its relays).
-- The holds' probe is a scalar subquery, not a NOT EXISTS, so that it stays
-- one index probe a row whatever the statistics say: PostgreSQL makes a NOT
-- EXISTS an anti-join, and with statistics of outbox_aggregate_leases taken
-- before there were holds (autovacuum analyzes that small table late, if
-- at all) it read every hold once and compared each row of the window with
-- all of them: 0.9 to 1.0 s for 2,000 rows and 5,000 holds, against 38 to
-- 55 ms (docs/adr/0015).
WITH win AS (
  SELECT o.id, o.tenant_id, o.aggregate_type, o.aggregate_id,
         o.locked_until IS NOT NULL AND o.attempts >= 2 AS suspect,
         octet_length(o.payload::text) AS bytes
  FROM outbox_messages o
  WHERE o.processed_at IS NULL
    AND o.available_at <= now()
    AND (o.locked_until IS NULL OR o.locked_until < now())
    AND (SELECT true FROM outbox_aggregate_leases l
         WHERE l.tenant_id = o.tenant_id AND l.aggregate_type = o.aggregate_type
           AND l.aggregate_id = o.aggregate_id
           AND l.locked_by = 'held back' AND l.locked_until >= now()
         LIMIT 1) IS NULL
  ORDER BY o.id
  LIMIT $1
  FOR UPDATE SKIP LOCKED
)

-- name: OutboxClaimByIDWindow
-- The stream mode's window: the rows the replication stream named ($1),
-- under the same conditions. The caller orders what it takes.
WITH win AS (
  SELECT o.id, o.tenant_id, o.aggregate_type, o.aggregate_id,
         o.locked_until IS NOT NULL AND o.attempts >= 2 AS suspect,
         octet_length(o.payload::text) AS bytes
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
  FOR UPDATE SKIP LOCKED
)

-- name: OutboxClaimTail
-- $2 the claim's lease identity (relay id/worker#claim), $3 lease, $4 the
-- most payload bytes a claim takes.
-- The rules, per aggregate:
-- * Order and block-on-error: a row is taken only with its predecessor (the
--   aggregate's pending row just before it). A predecessor that is not in
--   this window (in flight, waiting for a retry or a dependency, not due
--   yet, or named by no stream batch) holds the row back, and with it every
--   later row of the aggregate (broken). One backward index probe a row.
-- * One batch in flight per aggregate: the claim takes an aggregate by
--   inserting its row in outbox_aggregate_leases; a live lease of another
--   claim keeps it (a lower id whose transaction committed late must not be
--   delivered beside a higher one already in delivery). Keys are inserted in
--   order, so concurrent claims wait on each other's keys without deadlock.
-- * A suspect orphan is taken alone, so a row that crashes relays only burns
--   its own attempts; rows after it wait for the next claim.
-- * At most $4 bytes of payload (as text, as the relay receives them), and
--   at least one row: rows are cut in id order, so each aggregate keeps a
--   prefix of its chain and the rest waits behind it.
-- The attempt is counted here, at claim, so a row that crashes its relay
-- still reaches the DLQ after the limit.
, chained AS (
  SELECT w.*,
         lag(w.id) OVER agg AS prev_in_window,
         (SELECT e.id FROM outbox_messages e
          WHERE e.tenant_id = w.tenant_id
            AND e.aggregate_type = w.aggregate_type
            AND e.aggregate_id = w.aggregate_id
            AND e.processed_at IS NULL
            AND e.id < w.id
          ORDER BY e.id DESC
          LIMIT 1) AS prev_pending
  FROM win w
  WINDOW agg AS (PARTITION BY w.tenant_id, w.aggregate_type, w.aggregate_id ORDER BY w.id)
), unbroken AS (
  SELECT c.*
  FROM (
    SELECT c.*, bool_or(c.prev_pending IS DISTINCT FROM c.prev_in_window)
                  OVER (PARTITION BY c.tenant_id, c.aggregate_type, c.aggregate_id ORDER BY c.id) AS broken
    FROM chained c) c
  WHERE NOT c.broken
), picked AS (
  SELECT u.id, u.tenant_id, u.aggregate_type, u.aggregate_id
  FROM (
    SELECT u.*, min(u.id) OVER () AS first_id,
           min(u.id) FILTER (WHERE u.suspect) OVER () AS first_suspect,
           sum(u.bytes) OVER (ORDER BY u.id) AS bytes_through
    FROM unbroken u) u
  WHERE (u.first_suspect IS NULL OR u.id < u.first_suspect
         OR (u.id = u.first_suspect AND u.first_id = u.first_suspect))
    AND (u.bytes_through <= $4 OR u.id = u.first_id)
), leased AS (
  INSERT INTO outbox_aggregate_leases AS l (tenant_id, aggregate_type, aggregate_id, locked_by, locked_until)
  SELECT DISTINCT p.tenant_id, p.aggregate_type, p.aggregate_id, $2::text, now() + $3::interval
  FROM picked p
  ORDER BY 1, 2, 3
  ON CONFLICT (tenant_id, aggregate_type, aggregate_id) DO UPDATE
    SET locked_by = excluded.locked_by, locked_until = excluded.locked_until
    WHERE l.locked_until < now()
  RETURNING l.tenant_id, l.aggregate_type, l.aggregate_id
)
UPDATE outbox_messages m
-- Capped at the column's largest value: a row the DLQ keeps refusing is
-- claimed again every lease, and an overflow would fail every claim.
SET attempts = LEAST(m.attempts, 32766) + 1,
    locked_by = $2::text,
    locked_until = now() + $3::interval
FROM picked p
JOIN leased l ON l.tenant_id = p.tenant_id AND l.aggregate_type = p.aggregate_type AND l.aggregate_id = p.aggregate_id
WHERE m.id = p.id
RETURNING m.id, m.tenant_id, m.aggregate_type, m.aggregate_id, m.event_type,
          m.event_version, m.payload, m.occurred_at, m.attempts, m.trace_id,
          -- An event of a tenant PostgreSQL does not have is poison: the
          -- graph must hold no tenant the truth does not.
          EXISTS (SELECT 1 FROM tenants t WHERE t.id = m.tenant_id) AS tenant_known,
          -- Kept in the DLQ reason of a row whose last attempt died unanswered.
          m.last_error,
          -- How many rows the window held: a full window is a backlog, even
          -- when rows of aggregates in flight left the batch short.
          (SELECT count(*) FROM win) AS window_rows;

-- name: OutboxSettle
-- Ends a batch in one statement: $1 ids applied (marked processed), $2 ids
-- handed back uncounted (released), $3 ids handed back uncounted to wait for
-- another aggregate's events (deferred: valid, so no last_error; later
-- events of their aggregates stay behind them, as their predecessor is not
-- due), all only while the batch's claim ($4, its lease identity) still
-- holds them: a row whose lease was taken over is left to its new holder.
-- A deferred row waits as long as its aggregate has waited since its first
-- deferral (deferred_since, migration 0010), at least $5 and at most $9:
-- the wait doubles while the dependency stays away. An aggregate that had a
-- row applied in this batch made progress: its wait starts again at $5.
-- $6/$7/$8 the batch's aggregates
-- (tenant ids, types, ids), whose aggregate leases end here, except those
-- of deferred rows: their leases become holds until the rows are due (see
-- OutboxRecordFailure), and those of aggregates that wait for another
-- aggregate's events and had nothing applied: they keep deferred_since.
-- Returns how many applied rows were marked, and in how many seconds the
-- first deferred row is due (NULL when none was deferred).
WITH marked AS (
  UPDATE outbox_messages
  SET processed_at = now(), locked_by = NULL, locked_until = NULL
  WHERE id = ANY($1::bigint[]) AND locked_by = $4
  RETURNING tenant_id, aggregate_type, aggregate_id
), released AS (
  UPDATE outbox_messages
  SET attempts = GREATEST(attempts - 1, 0), locked_by = NULL, locked_until = NULL
  WHERE id = ANY($2::bigint[]) AND locked_by = $4
), deferred AS (
  UPDATE outbox_messages m
  SET attempts = GREATEST(m.attempts - 1, 0), locked_by = NULL, locked_until = NULL,
      available_at = now() + LEAST(GREATEST($5::interval, coalesce((
        SELECT now() - l.deferred_since FROM outbox_aggregate_leases l
        WHERE l.tenant_id = m.tenant_id AND l.aggregate_type = m.aggregate_type
          AND l.aggregate_id = m.aggregate_id AND l.locked_by = $4
          AND NOT EXISTS (
            SELECT 1 FROM marked a
            WHERE a.tenant_id = m.tenant_id AND a.aggregate_type = m.aggregate_type
              AND a.aggregate_id = m.aggregate_id)), '0'::interval)), $9::interval)
  WHERE m.id = ANY($3::bigint[]) AND m.locked_by = $4
  RETURNING m.tenant_id, m.aggregate_type, m.aggregate_id, m.available_at
), held AS (
  UPDATE outbox_aggregate_leases l
  SET locked_by = 'held back', locked_until = d.until,
      deferred_since = CASE WHEN d.progressed THEN now() ELSE coalesce(l.deferred_since, now()) END,
      deferred_at = now()
  FROM (SELECT d.tenant_id, d.aggregate_type, d.aggregate_id, max(d.available_at) AS until,
               EXISTS (SELECT 1 FROM marked a
                       WHERE a.tenant_id = d.tenant_id AND a.aggregate_type = d.aggregate_type
                         AND a.aggregate_id = d.aggregate_id) AS progressed
        FROM deferred d GROUP BY d.tenant_id, d.aggregate_type, d.aggregate_id) d
  WHERE l.tenant_id = d.tenant_id AND l.aggregate_type = d.aggregate_type
    AND l.aggregate_id = d.aggregate_id AND l.locked_by = $4
), unleased AS (
  DELETE FROM outbox_aggregate_leases l
  USING unnest($6::bigint[], $7::text[], $8::bigint[]) AS a(tenant_id, aggregate_type, aggregate_id)
  WHERE l.tenant_id = a.tenant_id AND l.aggregate_type = a.aggregate_type
    AND l.aggregate_id = a.aggregate_id AND l.locked_by = $4
    AND NOT EXISTS (
      SELECT 1 FROM deferred d
      WHERE d.tenant_id = a.tenant_id AND d.aggregate_type = a.aggregate_type AND d.aggregate_id = a.aggregate_id)
    AND (l.deferred_since IS NULL OR EXISTS (
      SELECT 1 FROM marked m
      WHERE m.tenant_id = a.tenant_id AND m.aggregate_type = a.aggregate_type AND m.aggregate_id = a.aggregate_id))
), still_waiting AS (
  -- A waiting aggregate whose batch was handed back (Neo4j unavailable, a
  -- split-down, a claim ahead given up) keeps how long it has waited: its
  -- lease becomes a hold that has already run out.
  -- The claim's leases are those it holds; the waiting ones are found
  -- through their own small index (migration 0010), not by a probe per
  -- aggregate of the batch, and kept to the batch's aggregates: two
  -- processes given one --relay-id number their claims alike, and one's
  -- settle must not end the other's waiting leases.
  UPDATE outbox_aggregate_leases l
  SET locked_by = 'held back', locked_until = now()
  WHERE l.locked_by = $4 AND l.deferred_since IS NOT NULL
    AND (l.tenant_id, l.aggregate_type, l.aggregate_id) IN (
      SELECT * FROM unnest($6::bigint[], $7::text[], $8::bigint[]))
    AND NOT EXISTS (
      SELECT 1 FROM deferred d
      WHERE d.tenant_id = l.tenant_id AND d.aggregate_type = l.aggregate_type AND d.aggregate_id = l.aggregate_id)
    AND NOT EXISTS (
      SELECT 1 FROM marked m
      WHERE m.tenant_id = l.tenant_id AND m.aggregate_type = l.aggregate_type AND m.aggregate_id = l.aggregate_id)
)
SELECT (SELECT count(*) FROM marked),
       (SELECT extract(epoch FROM min(available_at) - now())::float8 FROM deferred);

-- name: OutboxExtendLease
-- $1 ids of the batch, $2 its claim's lease identity, $3 lease, $4/$5/$6 its aggregates.
WITH aggregates AS (
  UPDATE outbox_aggregate_leases l
  SET locked_until = now() + $3::interval
  FROM unnest($4::bigint[], $5::text[], $6::bigint[]) AS a(tenant_id, aggregate_type, aggregate_id)
  WHERE l.tenant_id = a.tenant_id AND l.aggregate_type = a.aggregate_type
    AND l.aggregate_id = a.aggregate_id AND l.locked_by = $2
)
UPDATE outbox_messages
SET locked_until = now() + $3::interval
WHERE id = ANY($1::bigint[]) AND locked_by = $2 AND processed_at IS NULL;

-- name: OutboxRecordFailure
-- $1 ids, $2 errors (same length), $3 the claim's lease identity, $4 retry step, $5 max steps.
-- The seed's schedule: LEAST(attempts + 1, 8) * 30s, where attempts counted
-- failures; here attempts was already counted at claim, hence LEAST(attempts, 8).
-- The aggregate's lease becomes a hold until the retry (and forgets since
-- when the aggregate waited for a dependency): its later rows wait
-- behind the failed one anyway, and the claim's window skips them instead
-- of filling with them (the settle leaves a hold in place; a claim takes
-- the aggregate again once the hold has run out).
WITH failed AS (
  UPDATE outbox_messages m
  SET last_error = f.error,
      available_at = now() + LEAST(m.attempts, $5::int) * $4::interval,
      locked_by = NULL,
      locked_until = NULL
  FROM unnest($1::bigint[], $2::text[]) AS f(id, error)
  WHERE m.id = f.id AND m.locked_by = $3
  RETURNING m.tenant_id, m.aggregate_type, m.aggregate_id, m.available_at
)
UPDATE outbox_aggregate_leases l
SET locked_by = 'held back', locked_until = h.until, deferred_since = NULL
FROM (SELECT tenant_id, aggregate_type, aggregate_id, max(available_at) AS until
      FROM failed GROUP BY tenant_id, aggregate_type, aggregate_id) h
WHERE l.tenant_id = h.tenant_id AND l.aggregate_type = h.aggregate_type
  AND l.aggregate_id = h.aggregate_id AND l.locked_by = $3;

-- name: OutboxMoveToDLQ
-- $1 ids, $2 errors (same length), $3 the claim's lease identity (NULL: any holder, for admin use).
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
-- $1 age. An aggregate lease that ran out is no lease (the next claim of the
-- aggregate takes it over), but one whose relay died and whose aggregate
-- gets no more events would stay forever. Those that ran out longer ago
-- than $1 are removed, except the hold of an aggregate that waits for
-- another aggregate's events (deferred_since) and still has an event
-- pending: it keeps since when the aggregate has waited, for the deferral
-- backoff and outbox_longest_wait_seconds, across an outage of the relays
-- longer than $1 (the next claim takes it over with those columns).
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
  -- only aggregates in flight or held back: a few rows.
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
