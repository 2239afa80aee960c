-- Written the way a buggy plain-SQL producer would: straight into the outbox, no validation.
INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload, trace_id)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7)
RETURNING id
