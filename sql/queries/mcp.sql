-- Runtime statements of `graphsync mcp` (mcpserver/). Every value is a
-- parameter; every read of tenant data is filtered on the caller's tenant.

-- name: MCPTokenCreate
-- $1 tenant, $2 SHA-256 of the token, $3 name.
INSERT INTO mcp_tokens (tenant_id, token_sha256, name) VALUES ($1, $2, $3)
RETURNING id, created_at;

-- name: MCPTokenList
-- $1 tenant (0: every tenant). Never the hash.
SELECT id, tenant_id, name, created_at, revoked_at FROM mcp_tokens
WHERE $1::bigint = 0 OR tenant_id = $1
ORDER BY id;

-- name: MCPTokenRevoke
-- $1 token id, $2 tenant: a token of another tenant is left alone, as one
-- that does not exist. Revoking twice keeps the first time.
UPDATE mcp_tokens SET revoked_at = coalesce(revoked_at, now())
WHERE id = $1 AND tenant_id = $2
RETURNING id;

-- name: MCPTokenResolve
-- $1 SHA-256 of a presented token: its id and tenant, if not revoked.
SELECT id, tenant_id FROM mcp_tokens WHERE token_sha256 = $1 AND revoked_at IS NULL;

-- name: MCPTenantScope
-- Row-level security's tenant for the rest of the transaction (migration
-- 0004): a role under the application policy sees this tenant's rows alone.
SELECT set_config('app.tenant_id', $1::bigint::text, true);

-- name: MCPTenantStatus
-- $1 tenant: pending events, the oldest pending event's age in seconds
-- (NULL when none; events whose occurred_at is not finite are counted but
-- give no age), dead letters.
SELECT
  (SELECT count(*) FROM outbox_messages WHERE tenant_id = $1 AND processed_at IS NULL),
  (SELECT extract(epoch FROM now() - min(occurred_at))::float8 FROM outbox_messages
    WHERE tenant_id = $1 AND processed_at IS NULL AND isfinite(occurred_at)),
  (SELECT count(*) FROM outbox_messages_dlq WHERE tenant_id = $1);

-- name: MCPTenantLastDriftCheck
-- $1 tenant: when the last drift check that covered it finished, whether it
-- found no drift in it, and the share of keys it compared; no row when none
-- is recorded.
SELECT finished_at, clean, sample FROM drift_checks WHERE tenant_id = $1;
