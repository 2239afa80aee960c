-- SET LOCAL ROLE and the tenant for row-level security in one round trip:
-- set_config(..., true) is transaction-local, exactly like SET LOCAL.
SELECT set_config('role', $1, true), set_config('app.tenant_id', $2, true)
