-- The order and its lines in one statement; total_cents is the sum of the lines ($4).
WITH o AS (
  INSERT INTO sales_orders (tenant_id, customer_id, currency, total_cents, shipping_address)
  VALUES ($1, $2, $3, $4, $5)
  RETURNING id, version, status, currency, total_cents, placed_at
), l AS (
  INSERT INTO order_lines (tenant_id, order_id, line_no, product_id, quantity, unit_price_cents)
  SELECT $1, o.id, x.line_no, x.product_id, x.quantity, x.unit_price_cents
  FROM o, unnest($6::int[], $7::bigint[], $8::int[], $9::bigint[])
       AS x (line_no, product_id, quantity, unit_price_cents)
)
SELECT id, version, status, currency, total_cents, placed_at FROM o
