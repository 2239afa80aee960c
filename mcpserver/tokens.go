package mcpserver

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	gsql "graphsync/sql"
)

// tokenPrefix starts every token, so that a secret scanner (and a person)
// can tell one apart.
const tokenPrefix = "gsmcp_"

// maxTokenLen bounds what is hashed of a presented token: a real one is 49
// characters.
const maxTokenLen = 128

// ErrUnknownToken is returned for a token that is missing, unknown or revoked.
var ErrUnknownToken = errors.New("unknown token")

// ErrNoSuchToken is returned by Revoke for an id the tenant has no token of.
var ErrNoSuchToken = errors.New("the tenant has no token with this id")

// Token is one row of mcp_tokens, never with its secret.
type Token struct {
	ID        int64
	TenantID  int64
	Name      string
	CreatedAt time.Time
	RevokedAt *time.Time
}

// TokenStore keeps the bearer tokens of the HTTP transport in PostgreSQL,
// as SHA-256 hashes.
type TokenStore struct{ pool *pgxpool.Pool }

// NewTokenStore returns a store on pool.
func NewTokenStore(pool *pgxpool.Pool) *TokenStore { return &TokenStore{pool: pool} }

// hashToken is the one way a token becomes what is stored and looked up.
func hashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// Create makes a token for tenantID and returns it with its row: the token
// itself is shown this once and stored nowhere.
func (s *TokenStore) Create(ctx context.Context, tenantID int64, name string) (string, Token, error) {
	if tenantID <= 0 {
		return "", Token{}, fmt.Errorf("tenant id must be positive, got %d", tenantID)
	}
	if len(name) > 200 {
		return "", Token{}, fmt.Errorf("token name is %d bytes; at most 200", len(name))
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", Token{}, fmt.Errorf("draw a token: %w", err)
	}
	token := tokenPrefix + base64.RawURLEncoding.EncodeToString(secret)
	t := Token{TenantID: tenantID, Name: name}
	err := s.pool.QueryRow(ctx, gsql.Query("MCPTokenCreate"), tenantID, hashToken(token), name).Scan(&t.ID, &t.CreatedAt)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" {
		return "", Token{}, fmt.Errorf("tenant %d does not exist", tenantID)
	}
	if err != nil {
		return "", Token{}, fmt.Errorf("store the token: %w", err)
	}
	return token, t, nil
}

// List returns the tokens of tenantID (0: every tenant), revoked ones too.
func (s *TokenStore) List(ctx context.Context, tenantID int64) ([]Token, error) {
	rows, err := s.pool.Query(ctx, gsql.Query("MCPTokenList"), tenantID)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	tokens, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Token, error) {
		var t Token
		err := row.Scan(&t.ID, &t.TenantID, &t.Name, &t.CreatedAt, &t.RevokedAt)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return tokens, nil
}

// Revoke revokes tenantID's token id; the next request carrying it is
// refused. Revoking a revoked token is not an error.
func (s *TokenStore) Revoke(ctx context.Context, tenantID, id int64) error {
	var got int64
	err := s.pool.QueryRow(ctx, gsql.Query("MCPTokenRevoke"), id, tenantID).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("token %d: %w %d", id, ErrNoSuchToken, tenantID)
	}
	if err != nil {
		return fmt.Errorf("revoke token %d: %w", id, err)
	}
	return nil
}

// Resolve returns the caller a presented token stands for, or
// ErrUnknownToken for one that is malformed, unknown or revoked.
func (s *TokenStore) Resolve(ctx context.Context, token string) (Caller, error) {
	if !strings.HasPrefix(token, tokenPrefix) || len(token) > maxTokenLen {
		return Caller{}, ErrUnknownToken
	}
	var id, tenant int64
	err := s.pool.QueryRow(ctx, gsql.Query("MCPTokenResolve"), hashToken(token)).Scan(&id, &tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return Caller{}, ErrUnknownToken
	}
	if err != nil {
		return Caller{}, fmt.Errorf("look the token up: %w", err)
	}
	return Caller{TokenID: TokenID(id), TenantID: tenant}, nil
}

// TokenID is how logs and metrics name a token: its row id, never the
// token.
func TokenID(id int64) string { return "tok-" + strconv.FormatInt(id, 10) }
