-- When each latency probe was applied, by its trace id.
SELECT trace_id, processed_at
FROM outbox_messages
WHERE trace_id LIKE $1 AND processed_at IS NOT NULL
