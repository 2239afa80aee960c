-- SET LOCAL ROLE and the tenant for row-level security, as an application
-- transaction scopes itself.
SELECT set_config('role', $1, true), set_config('app.tenant_id', $2, true)
