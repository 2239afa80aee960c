package sql

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RoleError says that the connected PostgreSQL role cannot read every
// tenant's rows: row-level security is forced on every tenant table
// (migration 0004), and only graphsync_relay's policy shows them all. Such a
// role (the tables' owner too, while security is forced) sees one tenant or
// none, without an error: sync would claim nothing, the DLQ and the gauges
// would look empty, and drift would call the whole graph orphaned.
type RoleError struct{ Role string }

func (e *RoleError) Error() string {
	return fmt.Sprintf("PostgreSQL role %q cannot read every tenant's rows (row-level security): "+
		"run as a member of graphsync_relay (GRANT graphsync_relay TO %s, with INHERIT), a role with BYPASSRLS, or a superuser",
		e.Role, pgx.Identifier{e.Role}.Sanitize())
}

// CheckRoleSeesEveryTenant returns a *RoleError when the connected role
// cannot read every tenant's rows. Every command that reads the outbox or
// the business tables for all tenants checks it before anything else.
func CheckRoleSeesEveryTenant(ctx context.Context, db querier) error {
	var seesAll bool
	var role string
	if err := db.QueryRow(ctx, Query("RoleSeesEveryTenant")).Scan(&seesAll, &role); err != nil {
		return fmt.Errorf("check the PostgreSQL role: %w", err)
	}
	if !seesAll {
		return &RoleError{Role: role}
	}
	return nil
}
