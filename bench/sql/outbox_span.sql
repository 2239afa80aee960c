-- The measured rows: how many, how many applied, the first event's
-- occurred_at (its transaction's start), the last one's, and the last
-- processed_at (set by the transaction that begins after the Neo4j commit).
SELECT count(*), count(processed_at), min(occurred_at), max(occurred_at), max(processed_at)
FROM outbox_messages
WHERE id > $1
