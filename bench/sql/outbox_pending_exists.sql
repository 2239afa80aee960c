-- Is any row still pending? O(1) on the pending-only claim index, however
-- large the backlog: a count(*) of a large backlog every tick would itself
-- load the database under test.
SELECT EXISTS (SELECT 1 FROM outbox_messages WHERE processed_at IS NULL)
