-- The notify trigger is installed and a session of this database listens.
SELECT EXISTS (
  SELECT 1 FROM pg_trigger
  WHERE tgname = 'graphsync_outbox_notify' AND tgrelid = 'outbox_messages'::regclass
) AND EXISTS (
  SELECT 1 FROM pg_stat_activity
  WHERE datname = current_database() AND query ILIKE 'LISTEN %'
)
