-- Rows above this id belong to the measured part of a scenario.
SELECT coalesce(max(id), 0) FROM outbox_messages
