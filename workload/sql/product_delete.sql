-- Optimistic locking as for updates; order_lines' foreign key refuses products that were ordered.
DELETE FROM products WHERE id = $1 AND version = $2 RETURNING id, version
