package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"graphsync/internal/stacktest"
)

// migrate on a database that already has a table its migrations create
// (an outbox made from the platform's DDL) fails saying so, and names the
// migrations it applied before it.
func TestMigrateNamesWhatItAppliedBeforeAnExistingTable(t *testing.T) {
	admin := stacktest.PostgresURL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("gs_test_existing_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`) })
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	existing, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	_, err = existing.Exec(ctx, `CREATE TABLE outbox_messages (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload JSONB)`)
	existing.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	code, stderr := runCapturingStderr(t, []string{"migrate", "--skip-neo4j", "--pg-url", u.String()})
	if code == 0 || !strings.Contains(stderr, "does not adopt existing tables") || !strings.Contains(stderr, "applied before it: 0001") {
		t.Errorf("migrate over an existing outbox_messages: exit %d,\n%s", code, stderr)
	}
}
