-- The notify trigger notifies the channel it was installed with (the relay's
-- NotifyChannel, passed as the trigger's argument by `graphsync notify
-- enable --notify-channel`), so a changed channel still wakes the relay. A
-- trigger installed before this migration passes no argument and keeps the
-- old channel.
CREATE OR REPLACE FUNCTION graphsync_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify(coalesce(TG_ARGV[0], 'graphsync_outbox'), '');
  RETURN NULL;
END
$$;
