-- Rows the relay gave up on, and the first error of a row still pending (a
-- failed row waits 30s or more before its retry, which would wreck any
-- figure). The error search walks the pending rows, so it runs less often
-- than the pending check.
SELECT
  (SELECT count(*) FROM outbox_messages_dlq) AS dead_lettered,
  (SELECT last_error FROM outbox_messages
   WHERE processed_at IS NULL AND last_error IS NOT NULL LIMIT 1) AS failed
