-- Optimistic locking: no row when someone else changed the order since we read version $2.
UPDATE sales_orders SET status = 'shipped', shipped_at = now(), version = version + 1
WHERE id = $1 AND version = $2
RETURNING id, version, status, currency, total_cents, placed_at, confirmed_at, shipped_at, cancelled_at
