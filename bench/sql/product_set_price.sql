-- Optimistic locking, as the workload re-prices: no row when the product is
-- no longer at version $2. $4, when not null, is a new description (a text
-- change, for the embedding stage).
WITH p AS (
  UPDATE products SET price_cents = $3, description = coalesce($4::text, description), version = version + 1, updated_at = now()
  WHERE id = $1 AND version = $2
  RETURNING tenant_id, id, version, sku, name, description, category_id, price_cents, currency, status
)
SELECT p.id, p.version, p.sku, p.name, p.description, p.category_id, c.name, p.price_cents, p.currency, p.status
FROM p LEFT JOIN categories c ON c.tenant_id = p.tenant_id AND c.id = p.category_id
