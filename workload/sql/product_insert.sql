WITH p AS (
  INSERT INTO products (tenant_id, sku, name, description, category_id, price_cents, currency)
  VALUES ($1, $2, $3, $4, $5, $6, $7)
  RETURNING tenant_id, id, version, sku, name, description, category_id, price_cents, currency, status
)
SELECT p.id, p.version, p.sku, p.name, p.description, p.category_id, c.name, p.price_cents, p.currency, p.status
FROM p LEFT JOIN categories c ON c.tenant_id = p.tenant_id AND c.id = p.category_id
