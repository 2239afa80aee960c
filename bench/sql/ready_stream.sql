-- The stream mode's slot exists and a walsender is streaming from it.
SELECT coalesce((SELECT active FROM pg_replication_slots WHERE slot_name = $1), false)
