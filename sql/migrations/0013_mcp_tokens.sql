-- Bearer tokens of `graphsync mcp --http` (docs/mcp.md, docs/adr/0025).
-- A token is bound to exactly one tenant; only its SHA-256 is stored (the
-- token is 256 random bits, so a plain hash cannot be reversed by guessing),
-- and it is shown once, when created. Revoking sets revoked_at: the server
-- looks the hash up on every HTTP request, so a revoked token is refused
-- from the next request on. Rows are kept after revocation, for the audit
-- trail of which token id served which calls.
CREATE TABLE mcp_tokens (
  id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id    BIGINT NOT NULL REFERENCES tenants (id),
  token_sha256 BYTEA NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
  name         TEXT NOT NULL DEFAULT '' CHECK (length(name) <= 200),
  created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
  revoked_at   TIMESTAMPTZ
);

CREATE INDEX mcp_tokens_tenant_idx ON mcp_tokens (tenant_id, id);

GRANT SELECT, INSERT, UPDATE ON mcp_tokens TO graphsync_relay;
