-- Runtime statements that manage PostgreSQL objects graphsync works with:
-- the replication slot and publication (stream wake mode), the notify
-- trigger, lock timeouts and server settings. Every value is a parameter;
-- DDL that names an object chosen by the user (a publication, a LISTEN
-- channel, an archive partition) builds the identifier in Go with pgx's
-- identifier quoting and stays there.

-- name: LockTimeoutSet
-- Bounds how long the rest of the transaction waits for a lock ($1: a
-- duration such as '5s'), so DDL cannot queue producers behind it for long.
SELECT set_config('lock_timeout', $1, true);

-- name: WALLevelRead
SELECT current_setting('wal_level');

-- name: WALPositionRead
SELECT pg_current_wal_lsn()::text;

-- name: ServerVersionAtLeast14
-- PostgreSQL 14 has CREATE OR REPLACE TRIGGER.
SELECT current_setting('server_version_num')::int >= 140000;

-- name: PublicationExists
SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1);

-- name: ReplicationSlotInspect
-- Slot $1: usable (this database's pgoutput slot), what it is (for the
-- error), whether it is in use, and whether it decodes from before WAL
-- position $2 (NULL: no such position, false).
SELECT coalesce(slot_type = 'logical' AND plugin = 'pgoutput' AND database = current_database(), false),
       slot_type || coalesce(' slot of plugin ' || plugin, '') || coalesce(' in database ' || database, ''), active,
       $2::text IS NOT NULL AND coalesce(confirmed_flush_lsn, '0/0'::pg_lsn) < $2::text::pg_lsn
FROM pg_replication_slots WHERE slot_name = $1;

-- name: ReplicationSlotCreate
SELECT pg_create_logical_replication_slot($1, 'pgoutput');

-- name: ReplicationSlotDrop
SELECT pg_drop_replication_slot($1);

-- name: ReplicationSlotDropIfExists
SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1;

-- name: ReplicationSlotWALStatus
-- '' for a slot that does not report it; 'lost' when its WAL is gone.
SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1;

-- name: NotifyTriggerExists
SELECT EXISTS (SELECT 1 FROM pg_trigger
               WHERE tgrelid = 'outbox_messages'::regclass AND tgname = 'graphsync_outbox_notify');

-- name: NotifyTriggerCurrent
-- Is the notify trigger installed, enabled and notifying channel $1?
SELECT EXISTS (
  SELECT 1 FROM pg_trigger
  WHERE tgrelid = 'outbox_messages'::regclass AND tgname = 'graphsync_outbox_notify'
    AND tgenabled IN ('O', 'A') AND tgargs = convert_to($1, 'UTF8') || '\x00'::bytea);

-- name: NotifyTriggerDrop
DROP TRIGGER IF EXISTS graphsync_outbox_notify ON outbox_messages;
