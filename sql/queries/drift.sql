-- Statements of `graphsync drift` (the last one records a finished check):
-- reads of the business tables in
-- key order, a chunk at a time (keyset pagination), in one REPEATABLE READ
-- snapshot opened by the caller. $1 tenant, $2 last id of the previous
-- chunk, $3 chunk size, $4 sample offset, $5 sample share in 1/1000 of
-- ((id % 1000003) * 7919 + $4) % 1000, which spreads consecutive ids
-- (1000: every key), $6 only these ids (NULL: every id; the second look
-- reads its suspects of a label at once).

-- name: DriftTenants
SELECT id FROM tenants WHERE ($1::bigint IS NULL OR id = $1) ORDER BY id;

-- name: DriftProducts
SELECT p.id, p.version, p.sku, p.name, p.description, p.category_id, coalesce(c.name, ''),
       p.price_cents, p.currency, p.status
FROM products p
LEFT JOIN categories c ON c.tenant_id = p.tenant_id AND c.id = p.category_id
WHERE p.tenant_id = $1 AND p.id > $2 AND ((p.id % 1000003) * 7919 + $4) % 1000 < $5
  AND ($6::bigint[] IS NULL OR p.id = ANY($6::bigint[]))
ORDER BY p.id
LIMIT $3;

-- name: DriftOrders
SELECT o.id, o.version, o.status, o.currency, o.total_cents, o.placed_at, o.confirmed_at, o.shipped_at,
       o.cancelled_at, o.customer_id, cu.segment, coalesce(cu.country_code, ''),
       coalesce(l.line_nos, '{}'), coalesce(l.product_ids, '{}'), coalesce(l.quantities, '{}'), coalesce(l.unit_prices, '{}')
FROM sales_orders o
JOIN customers cu ON cu.tenant_id = o.tenant_id AND cu.id = o.customer_id
LEFT JOIN LATERAL (
  SELECT array_agg(line_no ORDER BY line_no) AS line_nos, array_agg(product_id ORDER BY line_no) AS product_ids,
         array_agg(quantity ORDER BY line_no) AS quantities, array_agg(unit_price_cents ORDER BY line_no) AS unit_prices
  FROM order_lines
  WHERE tenant_id = o.tenant_id AND order_id = o.id) l ON true
WHERE o.tenant_id = $1 AND o.id > $2 AND ((o.id % 1000003) * 7919 + $4) % 1000 < $5
  AND ($6::bigint[] IS NULL OR o.id = ANY($6::bigint[]))
ORDER BY o.id
LIMIT $3;

-- name: DriftCategories
-- referenced: some product is in it now, so the graph must hold it.
SELECT c.id, c.name,
       EXISTS (SELECT 1 FROM products p WHERE p.tenant_id = c.tenant_id AND p.category_id = c.id) AS referenced
FROM categories c
WHERE c.tenant_id = $1 AND c.id > $2 AND ((c.id % 1000003) * 7919 + $4) % 1000 < $5
  AND ($6::bigint[] IS NULL OR c.id = ANY($6::bigint[]))
ORDER BY c.id
LIMIT $3;

-- name: DriftCustomers
-- referenced: the customer placed an order, so the graph must hold it.
SELECT cu.id, cu.segment, coalesce(cu.country_code, ''),
       EXISTS (SELECT 1 FROM sales_orders o WHERE o.tenant_id = cu.tenant_id AND o.customer_id = cu.id) AS referenced
FROM customers cu
WHERE cu.tenant_id = $1 AND cu.id > $2 AND ((cu.id % 1000003) * 7919 + $4) % 1000 < $5
  AND ($6::bigint[] IS NULL OR cu.id = ANY($6::bigint[]))
ORDER BY cu.id
LIMIT $3;

-- name: DriftProductExists
-- Is there a product row of this id (a tombstone must have none)?
SELECT EXISTS (SELECT 1 FROM products WHERE tenant_id = $1 AND id = $2);

-- name: DriftOutboxPending
-- Aggregates with pending or dead-lettered events, per tenant. Pending ones
-- explain a difference (sync has not applied them yet); dead-lettered ones
-- do not (no one is applying them) and are only counted for the report.
-- Bounded by the backlog and the DLQ.
SELECT aggregate_type, aggregate_id, count(*) AS pending, 0::bigint AS dead
FROM outbox_messages
WHERE tenant_id = $1 AND processed_at IS NULL
GROUP BY aggregate_type, aggregate_id
UNION ALL
SELECT aggregate_type, aggregate_id, 0::bigint, count(*)
FROM outbox_messages_dlq
WHERE tenant_id = $1
GROUP BY aggregate_type, aggregate_id;

-- name: DriftOutboxPendingEvents
-- A tenant's pending events, for the reference nodes they will write (drift
-- decodes them as sync does); read only while there are at most $2.
SELECT id, aggregate_type, aggregate_id, event_type, event_version, payload::text
FROM outbox_messages
WHERE tenant_id = $1 AND processed_at IS NULL
ORDER BY id
LIMIT $2;

-- name: DriftLag
-- Projection lag of one tenant: pending rows, the oldest pending age, DLQ rows.
SELECT (SELECT count(*) FROM outbox_messages WHERE tenant_id = $1 AND processed_at IS NULL),
       coalesce((SELECT extract(epoch FROM now() - min(occurred_at)) FROM outbox_messages
                 WHERE tenant_id = $1 AND processed_at IS NULL), 0)::float8,
       (SELECT count(*) FROM outbox_messages_dlq WHERE tenant_id = $1);

-- name: DriftProductsAlive
-- Which of the ids $2 of tenant $1 still have a product row (a tombstone
-- must have none)?
SELECT id FROM products WHERE tenant_id = $1 AND id = ANY($2);

-- name: DriftTenantExists
SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1);

-- name: DriftCheckRecord
-- A finished check, one row per tenant it covered (migration 0015): $1
-- tenants, $2 their drift totals, $3 their counts by kind (JSON objects as text),
-- in the same order; $4 when the check finished, $5 its sample share, $6
-- 'drift' or 'sync'. A row is replaced only by a check that finished later,
-- so two checks finishing out of order leave the later one. A tenant
-- removed since the check has nothing to record.
INSERT INTO drift_checks (tenant_id, finished_at, sample, counts, drift_total, source)
SELECT t.tenant_id, $4, $5, t.counts::jsonb, t.drift_total, $6
FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS t(tenant_id, drift_total, counts)
WHERE EXISTS (SELECT 1 FROM tenants WHERE id = t.tenant_id)
ON CONFLICT (tenant_id) DO UPDATE
  SET finished_at = EXCLUDED.finished_at, sample = EXCLUDED.sample, counts = EXCLUDED.counts,
      drift_total = EXCLUDED.drift_total, source = EXCLUDED.source
  WHERE drift_checks.finished_at <= EXCLUDED.finished_at;
