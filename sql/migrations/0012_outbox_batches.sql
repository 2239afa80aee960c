-- Batches in flight, one row each (docs/adr/0018). A claim records the
-- batch it took here (its ids and its aggregates) instead of writing a
-- lease into every row and every aggregate: one write per batch, not two
-- per event. Claims run one at a time under a transaction-level advisory
-- lock, read the batches in flight and leave their rows and aggregates
-- alone; a batch whose lease ran out (its relay died) is taken over by the
-- next claim, which counts an attempt for each of its rows still pending.
-- The settle deletes the batch's row, which fences it: a settle whose batch
-- was taken over finds no row and marks nothing.
--
-- An aggregate is recorded as a 64-bit hash of its tenant, type and id
-- (outbox_aggregate_key): a claim holds back the rows of every aggregate
-- whose hash a batch in flight holds. Two aggregates with one hash only
-- hold a row back until a batch settles; a hash keeps the batch's row
-- small (16 bytes an event with its id) and the claim's lookup one
-- hashed bigint.
CREATE FUNCTION outbox_aggregate_key(tenant_id BIGINT, aggregate_type TEXT, aggregate_id BIGINT)
RETURNS BIGINT LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN hashtextextended(tenant_id::text || ':' || aggregate_type || ':' || aggregate_id::text, 0);

-- lo and hi are the lowest and highest of ids: a claim's walk passes
-- over the ids between the lowest and the highest of the batches in flight.
CREATE TABLE outbox_batches (
  holder          TEXT PRIMARY KEY,
  locked_until    TIMESTAMPTZ NOT NULL,
  lo              BIGINT NOT NULL,
  hi              BIGINT NOT NULL,
  ids             BIGINT[] NOT NULL,
  aggregate_keys  BIGINT[] NOT NULL
);

GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_batches TO graphsync_relay;

-- outbox_aggregate_leases keeps only holds from here on ('held back': an
-- aggregate waiting for a failed or deferred row's retry). The aggregate
-- leases of batches in flight under the claim before this migration go
-- (their rows keep their own lease, which claims still honour until it runs
-- out), and the check refuses new ones: a relay of an earlier version, still
-- running beside this one, can no longer claim (its claim fails on the
-- check and it backs off) and so never takes rows of a batch recorded here.
-- The table is locked first, so that no claim of an earlier relay adds a
-- lease between the delete and the check. Stop the earlier relays before
-- migrating (docs/adr/0018, "Versions side by side").
LOCK TABLE outbox_aggregate_leases IN SHARE ROW EXCLUSIVE MODE;
DELETE FROM outbox_aggregate_leases WHERE locked_by <> 'held back';
ALTER TABLE outbox_aggregate_leases
  ADD CONSTRAINT outbox_aggregate_leases_holds_only CHECK (locked_by = 'held back');
