-- Runtime statements of the demo command. Every value is a parameter.

-- name: DemoTenantSummary
-- Per tenant of $1 (all tenants when empty): products, customers, orders,
-- events (outbox, archive and DLQ), pending events and dead letters. The
-- outbox has no index by tenant that holds processed rows (ADR 0014): its
-- events, and the pending ones, are counted in one pass for every tenant.
WITH outbox AS (
  SELECT tenant_id, count(*) AS events, count(*) FILTER (WHERE processed_at IS NULL) AS pending
  FROM outbox_messages
  WHERE coalesce(cardinality($1::bigint[]), 0) = 0 OR tenant_id = ANY($1::bigint[])
  GROUP BY tenant_id)
SELECT t.id,
  (SELECT count(*) FROM products p WHERE p.tenant_id = t.id),
  (SELECT count(*) FROM customers c WHERE c.tenant_id = t.id),
  (SELECT count(*) FROM sales_orders o WHERE o.tenant_id = t.id),
  coalesce((SELECT events FROM outbox m WHERE m.tenant_id = t.id), 0)
    + (SELECT count(*) FROM outbox_messages_archive a WHERE a.tenant_id = t.id)
    + (SELECT count(*) FROM outbox_messages_dlq d WHERE d.tenant_id = t.id),
  coalesce((SELECT pending FROM outbox m WHERE m.tenant_id = t.id), 0),
  (SELECT count(*) FROM outbox_messages_dlq d WHERE d.tenant_id = t.id)
FROM tenants t
WHERE coalesce(cardinality($1::bigint[]), 0) = 0 OR t.id = ANY($1::bigint[])
ORDER BY t.id;
