package stacktest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	graphsql "graphsync/sql"
)

func TestFreshDatabaseIsMigratedAndIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	firstURL, first := FreshDatabase(t)
	secondURL, second := FreshDatabase(t)
	if firstURL == secondURL {
		t.Fatalf("two fresh databases share the URL %s", firstURL)
	}
	for _, pool := range []interface {
		Query(context.Context, string, ...any) (pgx.Rows, error)
		QueryRow(context.Context, string, ...any) pgx.Row
	}{first, second} {
		pending, err := graphsql.Pending(ctx, pool)
		if err != nil {
			t.Fatalf("pending migrations: %v", err)
		}
		if len(pending) != 0 {
			t.Fatalf("fresh database has pending migrations %v", pending)
		}
	}

	var tenantID int64
	if err := first.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('acme') RETURNING id`).Scan(&tenantID); err != nil {
		t.Fatalf("insert tenant: %v", err)
	}
	if tenantID < tenantIDMin {
		t.Errorf("tenant id %d: want the identity restarted at or above %d", tenantID, tenantIDMin)
	}
	var seen int
	if err := second.QueryRow(ctx, `SELECT count(*) FROM tenants`).Scan(&seen); err != nil {
		t.Fatalf("count tenants: %v", err)
	}
	if seen != 0 {
		t.Errorf("second database sees %d tenants inserted into the first", seen)
	}
}

func TestFreshDatabaseIsDroppedWithItsReplicationSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var name string
	t.Run("inner", func(t *testing.T) {
		dbURL, pool := FreshDatabase(t)
		if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&name); err != nil {
			t.Fatalf("current_database: %v", err)
		}
		if !strings.Contains(dbURL, name) {
			t.Errorf("URL %s does not name database %s", Redact(dbURL), name)
		}
		if _, err := pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, name); err != nil {
			t.Fatalf("create replication slot: %v", err)
		}
	})
	conn, err := pgx.Connect(ctx, PostgresURL(t))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var databases, slots int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_database WHERE datname = $1),
		(SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1)`, name).Scan(&databases, &slots); err != nil {
		t.Fatalf("look up database: %v", err)
	}
	if databases != 0 || slots != 0 {
		t.Errorf("after cleanup: %d databases and %d slots named %s, want none", databases, slots, name)
	}
}

func TestNeo4jAnswersAndCleanGraphDeletesOnlyThoseTenants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	driver := Neo4j(t)
	result, err := neo4j.ExecuteQuery(ctx, driver, `RETURN 1 AS one`, nil, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatalf("RETURN 1: %v", err)
	}
	if one, _, _ := neo4j.GetRecordValue[int64](result.Records[0], "one"); one != 1 {
		t.Fatalf("RETURN 1 gave %d", one)
	}

	// Tenant ids far above FreshDatabase's range, so no other test owns them.
	cleaned, kept := int64(9_000_000_000_001), int64(9_000_000_000_002)
	t.Cleanup(func() { CleanGraph(t, driver, cleaned, kept) })
	if _, err := neo4j.ExecuteQuery(ctx, driver, `
		UNWIND range(1, 12000) AS i
		CREATE (:TeststackProbe {tenant_id: $cleaned, id: i})-[:NEXT]->(:TeststackProbe {tenant_id: $cleaned, id: -i})
		WITH count(*) AS ignored
		CREATE (:TeststackProbe {tenant_id: $kept, id: 1})`,
		map[string]any{"cleaned": cleaned, "kept": kept}, neo4j.EagerResultTransformer); err != nil {
		t.Fatalf("create probe nodes: %v", err)
	}
	CleanGraph(t, driver, cleaned)
	result, err = neo4j.ExecuteQuery(ctx, driver, `
		MATCH (n:TeststackProbe) WHERE n.tenant_id IN [$cleaned, $kept]
		RETURN n.tenant_id AS tenant, count(*) AS nodes ORDER BY tenant`,
		map[string]any{"cleaned": cleaned, "kept": kept}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatalf("count probe nodes: %v", err)
	}
	if len(result.Records) != 1 {
		t.Fatalf("want only tenant %d's node left, got %d tenant groups", kept, len(result.Records))
	}
	tenant, _, _ := neo4j.GetRecordValue[int64](result.Records[0], "tenant")
	nodes, _, _ := neo4j.GetRecordValue[int64](result.Records[0], "nodes")
	if tenant != kept || nodes != 1 {
		t.Errorf("left: tenant %d with %d nodes, want tenant %d with 1", tenant, nodes, kept)
	}
}

func TestParseEnvFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "services.env")
	body := "# comment\nexport GRAPHSYNC_PG_URL='postgres://u:secret@127.0.0.1:5/db?sslmode=disable'\n" +
		"export GRAPHSYNC_NEO4J_USER=\nexport GRAPHSYNC_NEO4J_URI=\"bolt://127.0.0.1:7\"\nPLAIN=x=y\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	values, err := parseEnvFile(path)
	if err != nil {
		t.Fatalf("parseEnvFile: %v", err)
	}
	want := map[string]string{
		"GRAPHSYNC_PG_URL":     "postgres://u:secret@127.0.0.1:5/db?sslmode=disable",
		"GRAPHSYNC_NEO4J_USER": "",
		"GRAPHSYNC_NEO4J_URI":  "bolt://127.0.0.1:7",
		"PLAIN":                "x=y",
	}
	for name, value := range want {
		if got, ok := values[name]; !ok || got != value {
			t.Errorf("%s = %q (present %v), want %q", name, got, ok, value)
		}
	}
}

func TestRedactHidesPassword(t *testing.T) {
	t.Parallel()
	got := Redact("postgres://graphsync:hunter2@127.0.0.1:5432/graphsync?sslmode=disable")
	if strings.Contains(got, "hunter2") || !strings.Contains(got, "127.0.0.1:5432") {
		t.Errorf("Redact gave %q", got)
	}
}

func TestTestDatabaseNameFitsPostgres(t *testing.T) {
	t.Parallel()
	name := testDatabaseName("TestSomething/with a very long subtest name that goes on and on #01")
	if len(name) > 63 || !strings.HasPrefix(name, testDatabasePrefix) || strings.ContainsAny(name, "/ #") {
		t.Errorf("testDatabaseName gave %q (%d bytes)", name, len(name))
	}
}
