-- Every active product with its category, as the workload left them: the
-- latency probe re-prices them.
SELECT p.tenant_id, p.id, p.version, p.sku, p.name, p.description, p.category_id, c.name,
       p.price_cents, p.currency, p.status
FROM products p
LEFT JOIN categories c ON c.tenant_id = p.tenant_id AND c.id = p.category_id
WHERE p.status = 'active'
ORDER BY p.tenant_id, p.id
