-- The measured events in claim order, for the ceiling.
SELECT id, tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload
FROM outbox_messages
WHERE id > $1
ORDER BY id
