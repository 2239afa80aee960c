package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"graphsync/internal/stacktest"
)

// A role that row-level security keeps from every tenant's rows (the
// tables' owner that is not a superuser, say, as README's setup once
// suggested for sync) reads an empty outbox without an error. sync, dlq,
// retention and summary refuse it (exit 2), naming the role and the grant
// it lacks, instead of relaying nothing while every gauge reads zero. The
// same role granted graphsync_relay is served.
func TestCommandsRefuseARoleThatCannotSeeEveryTenant(t *testing.T) {
	ctx := context.Background()
	pgURL, pool := stacktest.FreshDatabase(t)
	var tenant int64
	if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('rls') RETURNING id`).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO outbox_messages_dlq (id, tenant_id, aggregate_type, aggregate_id, event_type, payload, attempts, last_error)
		VALUES (1, $1, 'Order', 1, 'OrderPlaced', '{}', 5, 'refused')`, tenant); err != nil {
		t.Fatal(err)
	}
	role := fmt.Sprintf("gs_test_owner_%d", time.Now().UnixNano())
	for _, stmt := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT ALL ON ALL TABLES IN SCHEMA public TO ` + role,
		`GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO ` + role,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// The role is the cluster's, not the test database's.
		_, _ = pool.Exec(context.Background(), `REASSIGN OWNED BY `+role+` TO CURRENT_USER`)
		_, _ = pool.Exec(context.Background(), `DROP OWNED BY `+role)
		if _, err := pool.Exec(context.Background(), `DROP ROLE `+role); err != nil {
			t.Logf("drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	roleURL := u.String()
	neo4jURI := stacktest.Neo4jURI(t)

	for name, args := range map[string][]string{
		// --until-caught-up: without the check, sync finds nothing pending
		// and exits 0 rather than running on.
		"sync":      {"sync", "--pg-url", roleURL, "--neo4j-uri", neo4jURI, "--wake", "poll", "--http-addr", "", "--until-caught-up"},
		"dlq list":  {"dlq", "list", "--pg-url", roleURL},
		"dlq retry": {"dlq", "retry", "1", "--pg-url", roleURL}, // flags may follow the ids
		"retention": {"retention", "--pg-url", roleURL},
		"summary":   {"summary", "--pg-url", roleURL, "--neo4j-uri", neo4jURI},
	} {
		t.Run(name, func(t *testing.T) {
			code, stderr := runCapturingStderr(t, append(args, "--log-level", "error"))
			if code != 2 || !strings.Contains(stderr, `role "`+role+`" cannot read every tenant's rows`) ||
				!strings.Contains(stderr, `GRANT graphsync_relay TO "`+role+`"`) {
				t.Errorf("exit %d, want 2 naming the role and the grant; stderr:\n%s", code, stderr)
			}
		})
	}
	var left int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_messages_dlq`).Scan(&left); err != nil || left != 1 {
		t.Errorf("%d dead letters after the refused commands (%v), want the 1 planted", left, err)
	}

	// Served: the owner of the tables once FORCE is off (row-level
	// security then passes the owner by), and a member of graphsync_relay.
	for _, step := range []struct{ name, sql string }{
		{"as the owner, FORCE off", `ALTER TABLE outbox_messages OWNER TO ` + role + `; ALTER TABLE outbox_messages NO FORCE ROW LEVEL SECURITY;
			ALTER TABLE outbox_messages_dlq OWNER TO ` + role + `; ALTER TABLE outbox_messages_dlq NO FORCE ROW LEVEL SECURITY;
			ALTER TABLE tenants OWNER TO ` + role + `; ALTER TABLE tenants NO FORCE ROW LEVEL SECURITY`},
		{"as a member of graphsync_relay", `ALTER TABLE outbox_messages FORCE ROW LEVEL SECURITY; ALTER TABLE outbox_messages_dlq FORCE ROW LEVEL SECURITY;
			ALTER TABLE tenants FORCE ROW LEVEL SECURITY; GRANT graphsync_relay TO ` + role},
	} {
		if _, err := pool.Exec(ctx, step.sql); err != nil {
			t.Fatal(err)
		}
		code, stdout := runCapturingStdout(t, []string{"dlq", "list", "--pg-url", roleURL, "--log-level", "error"})
		if code != 0 || !strings.Contains(stdout, "refused") {
			t.Errorf("dlq list %s: exit %d, want 0 with the dead letter; stdout:\n%s", step.name, code, stdout)
		}
	}
}
