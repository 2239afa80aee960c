-- A batched transaction that moves on to another tenant re-scopes row-level security.
SELECT set_config('app.tenant_id', $1, true)
