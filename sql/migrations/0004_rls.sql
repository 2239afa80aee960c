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

GRANT SELECT ON tenants TO graphsync_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON customers, categories, products, sales_orders, order_lines
  TO graphsync_app;
-- Producers write events; they never read or rewrite relay state.
GRANT INSERT ON outbox_messages TO graphsync_app;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO graphsync_app;

GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO graphsync_relay;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO graphsync_relay;
