-- A database with a replication slot cannot be dropped: end the walsenders
-- holding the database's slots and drop the idle ones. Returns how many were
-- acted on; run it until it returns 0 (a terminated walsender releases its
-- slot asynchronously).
WITH victims AS (
  SELECT slot_name, active_pid FROM pg_replication_slots WHERE database = $1
), killed AS (
  SELECT pg_terminate_backend(active_pid) FROM victims WHERE active_pid IS NOT NULL
), dropped AS (
  SELECT pg_drop_replication_slot(slot_name) FROM victims WHERE active_pid IS NULL
)
SELECT (SELECT count(*) FROM killed) + (SELECT count(*) FROM dropped)
