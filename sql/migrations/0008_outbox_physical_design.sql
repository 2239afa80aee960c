-- The outbox's physical design for the relay's hot path (docs/adr/0014).
--
-- Dropping the index locks the table against producers for a moment, once
-- every transaction that wrote to it has ended; rather than queue every
-- producer behind a long transaction, the migration gives up after 5s and
-- `graphsync migrate` can be run again.
SET LOCAL lock_timeout = '5s';

-- Room for the claim's lease update on the row's own page. The claim
-- updates columns no index holds (attempts, locked_by, locked_until), which
-- PostgreSQL can do as a HOT update, without touching any index, only if
-- the new row version fits on the same page. A batch takes consecutive
-- ids, so it updates most rows of each page it touches at once; at 80 the
-- room ran out after about a quarter of them, and every other claim update
-- wrote a new entry into each of the table's indexes. The setting applies
-- to every page filled from now on.
ALTER TABLE outbox_messages SET (fillfactor = 50);

-- The seed's "tenant-aware lookup for debugging" index. Marking a row
-- processed cannot be a HOT update (processed_at decides which partial
-- indexes hold the row), so every mark wrote an entry into this wide
-- three-column index too, for lookups no runtime statement makes: pending
-- rows of an aggregate are found through outbox_messages_aggregate_pending_idx
-- (tenant_id, aggregate_type, aggregate_id, id), dead letters through the
-- DLQ's and archived rows through the archive's index of the same columns.
DROP INDEX IF EXISTS outbox_messages_tenant_aggregate_idx;
