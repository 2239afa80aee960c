package sql_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"graphsync/internal/stacktest"
	gsql "graphsync/sql"
)

func TestMigrateTwiceChangesNothing(t *testing.T) {
	_, pool := stacktest.FreshDatabase(t) // already migrated from the template
	ctx := context.Background()
	applied, err := gsql.Migrate(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 0 {
		t.Fatalf("second migrate applied %v", applied)
	}
	pending, err := gsql.Pending(ctx, pool)
	if err != nil || len(pending) != 0 {
		t.Fatalf("pending %v, %v", pending, err)
	}
}

func TestEditedMigrationIsAnError(t *testing.T) {
	_, pool := stacktest.FreshDatabase(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `UPDATE graphsync_schema_migrations SET checksum = 'edited' WHERE version = 2`); err != nil {
		t.Fatal(err)
	}
	_, err := gsql.Migrate(ctx, pool)
	if !errors.Is(err, gsql.ErrMigrationEdited) || !strings.Contains(err.Error(), "0002_outbox.sql") {
		t.Fatalf("migrate over an edited migration: %v", err)
	}
	if _, err := gsql.Pending(ctx, pool); !errors.Is(err, gsql.ErrMigrationEdited) {
		t.Fatalf("pending over an edited migration: %v", err)
	}
}

// outbox_messages keeps the canonical outbox's columns, types, defaults and
// partial index (shared/seeds/000); the relay's additions come after them.
func TestOutboxMatchesTheSeed(t *testing.T) {
	_, pool := stacktest.FreshDatabase(t)
	ctx := context.Background()
	type column struct{ name, typ, nullable, def string }
	seed := []column{
		{"id", "bigint", "NO", ""},
		{"tenant_id", "bigint", "NO", ""},
		{"aggregate_type", "text", "NO", ""},
		{"aggregate_id", "bigint", "NO", ""},
		{"event_type", "text", "NO", ""},
		{"event_version", "smallint", "NO", "1"},
		{"payload", "jsonb", "NO", ""},
		{"occurred_at", "timestamp with time zone", "NO", "now()"},
		{"available_at", "timestamp with time zone", "NO", "now()"},
		{"processed_at", "timestamp with time zone", "YES", ""},
		{"attempts", "smallint", "NO", "0"},
		{"last_error", "text", "YES", ""},
		{"trace_id", "text", "YES", ""},
	}
	rows, err := pool.Query(ctx, `SELECT column_name, data_type, is_nullable, coalesce(column_default, ''), is_identity, coalesce(identity_generation, '')
		FROM information_schema.columns WHERE table_name = 'outbox_messages' ORDER BY ordinal_position`)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		column
		identity, generation string
	}
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (got, error) {
		var g got
		return g, r.Scan(&g.name, &g.typ, &g.nullable, &g.def, &g.identity, &g.generation)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(cols) < len(seed) {
		t.Fatalf("outbox_messages has %d columns, the seed %d", len(cols), len(seed))
	}
	for i, want := range seed {
		c := cols[i]
		def := strings.TrimSuffix(c.def, "::smallint")
		if c.name != want.name || c.typ != want.typ || c.nullable != want.nullable || def != want.def {
			t.Errorf("column %d: got %s %s nullable=%s default=%q, want %s %s nullable=%s default=%q",
				i+1, c.name, c.typ, c.nullable, c.def, want.name, want.typ, want.nullable, want.def)
		}
	}
	if cols[0].identity != "YES" || cols[0].generation != "ALWAYS" {
		t.Errorf("id is not GENERATED ALWAYS AS IDENTITY")
	}
	for _, extra := range cols[len(seed):] {
		if extra.nullable == "NO" && extra.def == "" {
			t.Errorf("added column %s is NOT NULL without a default: seed-style producers would fail", extra.name)
		}
	}
	var indexDef string
	if err := pool.QueryRow(ctx, `SELECT indexdef FROM pg_indexes WHERE indexname = 'outbox_messages_pending_idx'`).Scan(&indexDef); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(indexDef, "(available_at, id) WHERE (processed_at IS NULL)") {
		t.Errorf("pending index is %s", indexDef)
	}
	// Every index of the outbox costs each producer's insert, and those a
	// row enters when it is marked processed cost every mark: the set is a
	// decision (docs/adr/0014), not an accident.
	var indexes []string
	if err := pool.QueryRow(ctx, `SELECT array_agg(indexname ORDER BY indexname) FROM pg_indexes
		WHERE tablename = 'outbox_messages'`).Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	wantIndexes := []string{
		"outbox_messages_aggregate_pending_idx", "outbox_messages_claim_idx", "outbox_messages_created_xid_idx",
		"outbox_messages_failing_idx", "outbox_messages_pending_idx", "outbox_messages_pkey", "outbox_messages_processed_idx",
	}
	if strings.Join(indexes, ",") != strings.Join(wantIndexes, ",") {
		t.Errorf("outbox_messages has indexes %v, want %v", indexes, wantIndexes)
	}
	// A producer inserting exactly as the seed shows is served.
	if _, err := pool.Exec(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload, trace_id)
		VALUES ($1, 'Order', $2, 'OrderConfirmed', $3::jsonb, $4)`, 1, 2, `{"status":"confirmed"}`, "trace-1"); err != nil {
		t.Fatalf("seed-style insert: %v", err)
	}
}

// The application role, for tenant A, reads no row of tenant B and cannot
// write into B; the relay role reads both.
func TestRowLevelSecurityKeepsTenantsApart(t *testing.T) {
	_, pool := stacktest.FreshDatabase(t)
	ctx := context.Background()
	var a, b int64
	if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('a') RETURNING id`).Scan(&a); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('b') RETURNING id`).Scan(&b); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []int64{a, b} {
		if _, err := pool.Exec(ctx, `WITH c AS (INSERT INTO categories (tenant_id, name) VALUES ($1, 'c') RETURNING id)
			INSERT INTO products (tenant_id, sku, name, category_id, price_cents) SELECT $1, 'sku', 'p', id, 100 FROM c`, tenant); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO customers (tenant_id, email, full_name) VALUES ($1, 'x@example.com', 'X')`, tenant); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'Order', 1, 'OrderPlaced', '{}')`, tenant); err != nil {
			t.Fatal(err)
		}
	}
	asRole := func(role string, tenant int64, fn func(pgx.Tx) error) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('role', $1, true), set_config('app.tenant_id', $2, true)`, role, tenantText(tenant)); err != nil {
				return err
			}
			return fn(tx)
		})
	}
	for _, table := range []string{"tenants", "customers", "categories", "products"} {
		err := asRole("graphsync_app", a, func(tx pgx.Tx) error {
			column := "tenant_id"
			if table == "tenants" {
				column = "id"
			}
			var foreign, own int64
			if err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE `+column+` <> $1), count(*) FILTER (WHERE `+column+` = $1) FROM `+table, a).Scan(&foreign, &own); err != nil {
				return err
			}
			if foreign != 0 || own == 0 {
				t.Errorf("%s as tenant %d: %d foreign rows, %d own rows", table, a, foreign, own)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", table, err)
		}
	}
	err := asRole("graphsync_app", a, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO customers (tenant_id, email, full_name) VALUES ($1, 'y@example.com', 'Y')`, b)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "row-level security") {
		t.Errorf("tenant %d wrote a customer of tenant %d: %v", a, b, err)
	}
	// The application role cannot choose ids or write the relay's columns.
	for name, insert := range map[string]string{
		"an outbox id":        `INSERT INTO outbox_messages (id, tenant_id, aggregate_type, aggregate_id, event_type, payload) OVERRIDING SYSTEM VALUE VALUES (999999, $1, 'Order', 1, 'X', '{}')`,
		"processed_at":        `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload, processed_at) VALUES ($1, 'Order', 1, 'X', '{}', now())`,
		"created_xid":         `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload, created_xid) VALUES ($1, 'Order', 1, 'X', '{}', '0')`,
		"a product id":        `INSERT INTO products (id, tenant_id, sku, name, price_cents) VALUES (999999, $1, 's', 'n', 1)`,
		"a seed-style event ": `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload, trace_id) VALUES ($1, 'Order', 1, 'OrderConfirmed', '{}', 't')`,
	} {
		err := asRole("graphsync_app", a, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, insert, a)
			return err
		})
		allowed := strings.HasPrefix(name, "a seed-style")
		if allowed && err != nil {
			t.Errorf("the application role could not insert %s: %v", name, err)
		}
		if !allowed && (err == nil || !strings.Contains(err.Error(), "permission denied")) {
			t.Errorf("the application role set %s: %v", name, err)
		}
	}
	err = asRole("graphsync_app", 0, func(tx pgx.Tx) error {
		var n int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM products`).Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			t.Errorf("the app role without app.tenant_id sees %d products", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = asRole("graphsync_relay", 0, func(tx pgx.Tx) error {
		var n int64
		if err := tx.QueryRow(ctx, `SELECT count(DISTINCT tenant_id) FROM outbox_messages`).Scan(&n); err != nil {
			return err
		}
		if n != 2 {
			t.Errorf("the relay role sees %d tenants' events, want 2", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func tenantText(id int64) string {
	if id == 0 {
		return ""
	}
	return strconv.FormatInt(id, 10)
}

// Migration 0011 builds its index CONCURRENTLY, outside a transaction, so
// that producers go on inserting while it reads the outbox. A build that
// failed leaves an invalid index of the name behind, which IF NOT EXISTS
// would pass over for good: migrate names it and leaves the migration
// pending; once it is dropped, migrate builds the index valid and records
// the migration.
func TestNoTransactionMigrationRefusesAnInvalidIndex(t *testing.T) {
	_, pool := stacktest.FreshDatabase(t)
	ctx := context.Background()
	unapplyFailingIndex(t, pool, 2)
	// A unique build over two rows of one tenant fails, as an interrupted
	// build would, and leaves its index invalid.
	if _, err := pool.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY outbox_messages_failing_idx ON outbox_messages (tenant_id)`); err == nil {
		t.Fatal("the unique build over duplicate tenant ids succeeded")
	}
	_, err := gsql.Migrate(ctx, pool)
	if err == nil || !strings.Contains(err.Error(), "outbox_messages_failing_idx is invalid") {
		t.Fatalf("migrate over an invalid index: %v", err)
	}
	if pending, err := gsql.Pending(ctx, pool); err != nil || len(pending) != 1 || pending[0] != "0011_failing_index.sql" {
		t.Fatalf("pending %v (%v), want 0011 alone", pending, err)
	}

	if _, err := pool.Exec(ctx, `DROP INDEX outbox_messages_failing_idx`); err != nil {
		t.Fatal(err)
	}
	applied, err := gsql.Migrate(ctx, pool)
	if err != nil || len(applied) != 1 || applied[0] != "0011_failing_index.sql" {
		t.Fatalf("migrate after the drop: applied %v, %v", applied, err)
	}
	requireFailingIndexValid(t, pool)
}

// Two migrate runs at once serialise, also over 0011's concurrent build: a
// run waiting for the other's lock inside pg_advisory_lock held a snapshot
// the build waited for, while it waited for the lock, and PostgreSQL broke
// the deadlock by failing the build (leaving its index invalid).
func TestConcurrentMigrateRunsWaitForEachOther(t *testing.T) {
	_, pool := stacktest.FreshDatabase(t)
	ctx := context.Background()
	// Rows enough that the build lasts while the other run asks for the lock.
	unapplyFailingIndex(t, pool, 100000)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := gsql.Migrate(ctx, pool)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("migrate beside another: %v", err)
		}
	}
	requireFailingIndexValid(t, pool)
	if pending, err := gsql.Pending(ctx, pool); err != nil || len(pending) != 0 {
		t.Fatalf("pending %v, %v", pending, err)
	}
}

// unapplyFailingIndex takes migration 0011 back (its index and its record)
// and gives the outbox rows pending rows of a new tenant.
func unapplyFailingIndex(t *testing.T, pool *pgxpool.Pool, rows int) {
	t.Helper()
	ctx := context.Background()
	var tenant int64
	if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('0011') RETURNING id`).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []struct {
		sql  string
		args []any
	}{
		{`DELETE FROM graphsync_schema_migrations WHERE version = 11`, nil},
		{`DROP INDEX outbox_messages_failing_idx`, nil},
		{`INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
			SELECT $1, 'Order', g, 'OrderPlaced', '{}' FROM generate_series(1, $2) g`, []any{tenant, rows}},
	} {
		if _, err := pool.Exec(ctx, stmt.sql, stmt.args...); err != nil {
			t.Fatal(err)
		}
	}
}

// requireFailingIndexValid fails the test unless 0011's index is there and valid.
func requireFailingIndexValid(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var valid bool
	if err := pool.QueryRow(context.Background(), `SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE c.relname = 'outbox_messages_failing_idx'`).Scan(&valid); err != nil || !valid {
		t.Fatalf("the failing rows' index: valid %v, %v", valid, err)
	}
}

// A transactional migration that cannot have a table's lock (a long
// transaction reads the table) fails after the lock timeout, naming what to
// do, instead of queueing every later writer of the table behind it;
// nothing of it is applied, and the next run applies it.
func TestTransactionalMigrationWaitsForALockBounded(t *testing.T) {
	_, pool := stacktest.FreshDatabase(t)
	ctx := context.Background()
	for _, stmt := range []string{
		`DELETE FROM graphsync_schema_migrations WHERE version = 10`,
		`DROP INDEX outbox_aggregate_leases_waiting_idx`,
		`ALTER TABLE outbox_aggregate_leases DROP COLUMN deferred_since, DROP COLUMN deferred_at`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx) //nolint:errcheck
	if _, err := holder.Exec(ctx, `LOCK TABLE outbox_aggregate_leases IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	_, err = gsql.Migrate(ctx, pool, gsql.WithLockTimeout(300*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "0010") || !strings.Contains(err.Error(), "run graphsync migrate again") {
		t.Fatalf("migrate beside a transaction holding the table: %v, want a lock timeout naming 0010", err)
	}
	if pending, err := gsql.Pending(ctx, pool); err != nil || len(pending) != 1 {
		t.Fatalf("pending %v, %v; want 0010 alone", pending, err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if applied, err := gsql.Migrate(ctx, pool); err != nil || len(applied) != 1 {
		t.Fatalf("migrate once the table is free: %v, %v", applied, err)
	}
}

// A run that waits for another's migration lock says so, naming the
// backend that holds it, and goes on once it is free.
func TestMigrateSaysWhoHoldsTheLock(t *testing.T) {
	_, pool := stacktest.FreshDatabase(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var holderPID int64
	if err := conn.QueryRow(ctx, `SELECT pg_advisory_lock(x'67736d6967726174'::bigint), pg_backend_pid()`).Scan(nil, &holderPID); err != nil {
		t.Fatal(err)
	}
	told := make(chan int64, 10)
	done := make(chan error, 1)
	go func() {
		_, err := gsql.Migrate(ctx, pool, gsql.WhileWaiting(func(pid int64) { told <- pid }))
		done <- err
	}()
	select {
	case pid := <-told:
		if pid != holderPID {
			t.Errorf("told holder pid %d, want %d", pid, holderPID)
		}
	case err := <-done:
		t.Fatalf("migrate returned while another held the lock: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("migrate did not say it waits")
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(x'67736d6967726174'::bigint)`); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("migrate still waits after the lock was released")
	}
}
