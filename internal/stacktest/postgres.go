package stacktest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	graphsql "graphsync/sql"
)

const (
	// templateLockKey serialises building the migrated template database
	// across every test process sharing the cluster. Advisory locks are per
	// database, so it is always taken in maintenanceDatabase.
	templateLockKey = 0x6773746d706c6174 // "gstmplat"

	maintenanceDatabase = "postgres"
	templatePrefix      = "graphsync_tmpl_"
	testDatabasePrefix  = "gs_t_"

	// Tenant ids of different tests must not collide in the shared Neo4j,
	// so every fresh database's business identities restart at a random
	// base in [tenantIDMin, tenantIDMax).
	tenantIDMin = 1_000_000
	tenantIDMax = 1_000_000_000_000

	connectTimeout = 15 * time.Second
	// adminTimeout bounds template builds and CREATE/DROP DATABASE, which
	// checkpoint and can queue behind each other in parallel test packages.
	adminTimeout = 3 * time.Minute

	// EnvKeepDatabases keeps FreshDatabase's databases after the test, for
	// debugging, when set to 1.
	EnvKeepDatabases = "GRAPHSYNC_KEEP_TEST_DB"
)

// PostgresURL returns the superuser URL of the shared PostgreSQL cluster
// after checking that it accepts connections.
func PostgresURL(t testing.TB) string {
	t.Helper()
	adminURL := requireEnv(t, EnvPostgresURL)
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatalf("stacktest: PostgreSQL at %s is not reachable: %v; %s", Redact(adminURL), err, startHint)
	}
	conn.Close(ctx)
	return adminURL
}

// FreshDatabase creates a brand-new database for this test from a template
// with every graphsync migration applied, and returns its URL and a pool
// connected to it as the superuser. Every business identity starts at a random
// base so tenant ids never collide between tests in the shared Neo4j. The
// pool is closed and the database dropped (WITH (FORCE), its replication slots
// first) when the test ends, unless GRAPHSYNC_KEEP_TEST_DB=1.
func FreshDatabase(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	adminURL := PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()

	template, err := ensureTemplate(ctx, adminURL)
	if err != nil {
		t.Fatalf("stacktest: prepare migrated template database on %s: %v", Redact(adminURL), err)
	}
	name := testDatabaseName(t.Name())
	if err := withMaintenanceConn(ctx, adminURL, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{template}.Sanitize())
		return err
	}); err != nil {
		t.Fatalf("stacktest: create database %s from %s on %s: %v", name, template, Redact(adminURL), err)
	}
	keep := os.Getenv(EnvKeepDatabases) == "1"
	t.Cleanup(func() {
		if keep {
			t.Logf("stacktest: kept database %s (%s=1)", name, EnvKeepDatabases)
			return
		}
		dropCtx, dropCancel := context.WithTimeout(context.Background(), adminTimeout)
		defer dropCancel()
		if err := dropDatabase(dropCtx, adminURL, name); err != nil {
			t.Errorf("stacktest: drop test database %s: %v", name, err)
		}
	})

	dbURL, err := withDatabase(adminURL, name)
	if err != nil {
		t.Fatalf("stacktest: %v", err)
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatalf("stacktest: connect to test database %s: %v", Redact(dbURL), err)
	}
	t.Cleanup(pool.Close) // runs before the drop: cleanups run last-in first-out
	tenantBase, err := rand.Int(rand.Reader, big.NewInt(tenantIDMax-tenantIDMin))
	if err != nil {
		t.Fatalf("stacktest: random tenant id base: %v", err)
	}
	// Business ids are globally unique within one PostgreSQL database, and
	// the projector relies on it (an id seen under another tenant is refused).
	// Tests share one Neo4j across many databases, so every business identity
	// starts at the same random base, not only the tenants'.
	for _, table := range []string{"tenants", "customers", "categories", "products", "sales_orders"} {
		restart := fmt.Sprintf("ALTER TABLE %s ALTER COLUMN id RESTART WITH %d", table, tenantBase.Int64()+tenantIDMin)
		if _, err := pool.Exec(ctx, restart); err != nil {
			t.Fatalf("stacktest: %s in %s: %v", restart, name, err)
		}
	}
	return dbURL, pool
}

// templateName names the template by the migrations' checksums, so an added
// or edited migration gets a new template instead of a stale one.
func templateName() (string, error) {
	migrations, err := graphsql.Migrations()
	if err != nil {
		return "", fmt.Errorf("list embedded migrations: %w", err)
	}
	hash := sha256.New()
	for _, m := range migrations {
		fmt.Fprintf(hash, "%d %s %s\n", m.Version, m.Name, m.Checksum)
	}
	return templatePrefix + hex.EncodeToString(hash.Sum(nil))[:16], nil
}

// ensureTemplate builds the migrated template database once per cluster and
// migration set. The build happens under an advisory lock in a scratch
// database that is renamed when complete, so a crash mid-build never leaves a
// half-migrated template behind.
func ensureTemplate(ctx context.Context, adminURL string) (string, error) {
	template, err := templateName()
	if err != nil {
		return "", err
	}
	err = withMaintenanceConn(ctx, adminURL, func(conn *pgx.Conn) error {
		exists, err := databaseExists(ctx, conn, template)
		if err != nil || exists {
			return err
		}
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(templateLockKey)); err != nil {
			return fmt.Errorf("take template lock: %w", err)
		}
		defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(templateLockKey)) //nolint:errcheck // released with the session anyway
		if exists, err := databaseExists(ctx, conn, template); err != nil || exists {
			return err // another process built it while we waited
		}
		return buildTemplate(ctx, conn, adminURL, template)
	})
	if err != nil {
		return "", err
	}
	return template, nil
}

func buildTemplate(ctx context.Context, conn *pgx.Conn, adminURL, template string) error {
	scratch := template + "_build"
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{scratch}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop leftover %s: %w", scratch, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{scratch}.Sanitize()); err != nil {
		return fmt.Errorf("create %s: %w", scratch, err)
	}
	scratchURL, err := withDatabase(adminURL, scratch)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, scratchURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", scratch, err)
	}
	_, err = graphsql.Migrate(ctx, pool)
	pool.Close()
	if err != nil {
		return fmt.Errorf("migrate %s: %w", scratch, err)
	}
	for _, statement := range []string{
		"ALTER DATABASE " + pgx.Identifier{scratch}.Sanitize() + " RENAME TO " + pgx.Identifier{template}.Sanitize(),
		"ALTER DATABASE " + pgx.Identifier{template}.Sanitize() + " WITH IS_TEMPLATE true",
	} {
		if _, err := conn.Exec(ctx, statement); err != nil {
			return fmt.Errorf("%s: %w", statement, err)
		}
	}
	dropStaleTemplates(ctx, conn, template)
	return nil
}

// dropStaleTemplates removes templates of older migration sets. Best effort:
// one still in use by an older test binary stays until the next build.
func dropStaleTemplates(ctx context.Context, conn *pgx.Conn, keep string) {
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE $1 AND datname <> $2 AND datname NOT LIKE '%\_build'`,
		templatePrefix+"%", keep)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range names {
		conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH IS_TEMPLATE false") //nolint:errcheck // best effort
		conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize())                  //nolint:errcheck // best effort
	}
}

// dropDatabase drops a test database and, first, any logical replication
// slot in it: PostgreSQL refuses to drop a database that has one, and leaked
// slots would exhaust max_replication_slots.
func dropDatabase(ctx context.Context, adminURL, name string) error {
	return withMaintenanceConn(ctx, adminURL, func(conn *pgx.Conn) error {
		for {
			var remaining int
			err := conn.QueryRow(ctx, `
				WITH victims AS (
				  SELECT slot_name, active_pid FROM pg_replication_slots WHERE database = $1
				), killed AS (
				  SELECT pg_terminate_backend(active_pid) FROM victims WHERE active_pid IS NOT NULL
				), dropped AS (
				  SELECT pg_drop_replication_slot(slot_name) FROM victims WHERE active_pid IS NULL
				)
				SELECT (SELECT count(*) FROM killed) + (SELECT count(*) FROM dropped)`, name).Scan(&remaining)
			if err != nil {
				return fmt.Errorf("drop replication slots: %w", err)
			}
			if remaining == 0 {
				break
			}
			// A terminated walsender releases its slot asynchronously: go
			// round again until no slot is left, bounded by ctx.
			select {
			case <-ctx.Done():
				return fmt.Errorf("drop replication slots: %w", ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
		_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		return err
	})
}

func databaseExists(ctx context.Context, conn *pgx.Conn, name string) (bool, error) {
	var exists bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists)
	if err != nil {
		return false, fmt.Errorf("look up database %s: %w", name, err)
	}
	return exists, nil
}

func withMaintenanceConn(ctx context.Context, adminURL string, fn func(*pgx.Conn) error) error {
	maintenanceURL, err := withDatabase(adminURL, maintenanceDatabase)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, maintenanceURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", Redact(maintenanceURL), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return fn(conn)
}

// withDatabase returns rawURL pointing at database name instead.
func withDatabase(rawURL, name string) (string, error) {
	parsed, err := url.Parse(rawURL)
	if err != nil || (parsed.Scheme != "postgres" && parsed.Scheme != "postgresql") {
		return "", errors.New("stacktest: " + EnvPostgresURL + " must be a postgres:// URL")
	}
	parsed.Path = "/" + name
	parsed.RawPath = ""
	return parsed.String(), nil
}

var nonIdentifier = regexp.MustCompile(`[^a-z0-9]+`)

// testDatabaseName is gs_t_<test name, shortened>_<random>, within
// PostgreSQL's 63-byte identifier limit, so a kept or leaked database says
// which test made it.
func testDatabaseName(testName string) string {
	slug := strings.Trim(nonIdentifier.ReplaceAllString(strings.ToLower(testName), "_"), "_")
	if len(slug) > 40 {
		slug = slug[len(slug)-40:]
	}
	var random [5]byte
	_, _ = rand.Read(random[:])
	return testDatabasePrefix + slug + "_" + hex.EncodeToString(random[:])
}
