-- Ids of every scenario must differ in the shared Neo4j: the projector
-- refuses an event naming a product, order, customer or category id that
-- another tenant owns there, so a fresh database starting its identities at
-- 1 would collide with graphs other databases wrote. Each fresh database
-- starts the identities of every projected table at a random base.
SELECT setval(pg_get_serial_sequence(t, 'id'), $1, false)
FROM unnest(ARRAY['tenants', 'categories', 'customers', 'products', 'sales_orders']) AS t
