-- Row-level security: the application role sees only the rows of
-- current_setting('app.tenant_id'); the relay role reads across tenants,
-- because it must carry every tenant's events into the graph.
-- Any other role (including a table owner without BYPASSRLS) sees nothing.

DO $$
DECLARE
  t TEXT;
BEGIN
  FOREACH t IN ARRAY ARRAY['customers', 'categories', 'products', 'sales_orders',
                           'order_lines', 'outbox_messages', 'outbox_messages_dlq',
                           'outbox_messages_archive']
  LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
    EXECUTE format(
      'CREATE POLICY %I ON %I FOR ALL TO graphsync_app
         USING (tenant_id = NULLIF(current_setting(''app.tenant_id'', true), '''')::bigint)
         WITH CHECK (tenant_id = NULLIF(current_setting(''app.tenant_id'', true), '''')::bigint)',
      t || '_tenant_isolation', t);
    EXECUTE format('CREATE POLICY %I ON %I FOR ALL TO graphsync_relay USING (true) WITH CHECK (true)',
      t || '_relay_all', t);
  END LOOP;
END
$$;

ALTER TABLE tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenants FORCE ROW LEVEL SECURITY;
CREATE POLICY tenants_own ON tenants FOR SELECT TO graphsync_app
  USING (id = NULLIF(current_setting('app.tenant_id', true), '')::bigint);
CREATE POLICY tenants_relay_all ON tenants FOR ALL TO graphsync_relay USING (true) WITH CHECK (true);

-- The application role writes business columns only: never an id (ids are
-- drawn from the identities, so a tenant cannot squat on ids another tenant
-- will be given) and never the relay's state.
GRANT SELECT ON tenants TO graphsync_app;
GRANT SELECT, DELETE ON customers, categories, products, sales_orders, order_lines TO graphsync_app;
GRANT INSERT (tenant_id, email, full_name, phone, address, segment, country_code),
      UPDATE (email, full_name, phone, address, segment, country_code) ON customers TO graphsync_app;
GRANT INSERT (tenant_id, name), UPDATE (name) ON categories TO graphsync_app;
GRANT INSERT (tenant_id, sku, name, description, category_id, price_cents, currency, status),
      UPDATE (sku, name, description, category_id, price_cents, currency, status, version, updated_at)
  ON products TO graphsync_app;
GRANT INSERT (tenant_id, customer_id, status, currency, total_cents, shipping_address),
      UPDATE (status, currency, total_cents, version, shipping_address, confirmed_at, shipped_at, cancelled_at)
  ON sales_orders TO graphsync_app;
GRANT INSERT (tenant_id, order_id, line_no, product_id, quantity, unit_price_cents),
      UPDATE (quantity, unit_price_cents) ON order_lines TO graphsync_app;
-- Producers write events with the columns the seed's INSERT names (plus
-- event_version); they never read or rewrite relay state, ids or occurred_at
-- (which places a row in its archive partition).
GRANT INSERT (tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload, trace_id)
  ON outbox_messages TO graphsync_app;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO graphsync_app;

GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO graphsync_relay;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO graphsync_relay;
