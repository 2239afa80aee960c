package sql

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// ErrMigrationEdited is returned when an applied migration's text no longer
// matches what was applied.
var ErrMigrationEdited = errors.New("applied migration was edited")

// ErrSchemaNewer is returned when the database has a migration this binary
// does not embed: a newer release migrated it.
var ErrSchemaNewer = errors.New("the database schema is newer than this binary")

// Migration is one numbered, embedded SQL file.
type Migration struct {
	Version  int
	Name     string
	SQL      string
	Checksum string
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var migrations []Migration
	for _, entry := range entries {
		name := entry.Name()
		prefix, _, ok := strings.Cut(name, "_")
		version, err := strconv.Atoi(prefix)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %q: name must start with a number and an underscore", name)
		}
		body, err := migrationFiles.ReadFile("migrations/" + name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		sum := sha256.Sum256(body)
		migrations = append(migrations, Migration{Version: version, Name: name, SQL: string(body), Checksum: hex.EncodeToString(sum[:])})
	}
	sort.Slice(migrations, func(i, j int) bool { return migrations[i].Version < migrations[j].Version })
	for i := 1; i < len(migrations); i++ {
		if migrations[i].Version == migrations[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", migrations[i-1].Name, migrations[i].Name, migrations[i].Version)
		}
	}
	return migrations, nil
}

// migrationsLockKey serialises concurrent `graphsync migrate` runs.
const migrationsLockKey = 0x67736d6967726174 // "gsmigrat"

// Migrate applies every embedded migration not yet applied, each in its own
// transaction, and returns the names of those it applied. It checks the
// checksum of every applied migration first, so an edited migration stops it
// before anything changes.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...MigrateOption) ([]string, error) {
	o := migrateOptions{lockTimeout: DefaultLockTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	migrations, err := Migrations()
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()
	if err := takeMigrationLock(ctx, conn.Conn(), o.waiting); err != nil {
		return nil, fmt.Errorf("migrate: take migration lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), Query("MigrationsUnlock"), int64(migrationsLockKey)) //nolint:errcheck // released with the session anyway
	if _, err := conn.Exec(ctx, Query("MigrationsTableCreate")); err != nil {
		return nil, fmt.Errorf("migrate: create graphsync_schema_migrations: %w", err)
	}
	applied, err := appliedChecksums(ctx, conn.Conn())
	if err != nil {
		return nil, err
	}
	if err := checkApplied(migrations, applied); err != nil {
		return nil, err
	}
	var names []string
	for _, m := range migrations {
		if _, done := applied[m.Version]; done {
			continue
		}
		if m.NoTransaction() {
			err = applyOutsideTransaction(ctx, conn.Conn(), m)
		} else {
			err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				// A statement waiting for a table's lock holds every later
				// writer of the table behind it (producers, claims): the wait
				// is bounded, and a migration can set its own.
				if _, err := tx.Exec(ctx, Query("LockTimeoutSet"), fmt.Sprintf("%dms", o.lockTimeout.Milliseconds())); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, m.SQL); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, Query("MigrationRecord"), m.Version, m.Name, m.Checksum)
				return err
			})
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			return names, fmt.Errorf("migrate: apply %s: waited %s for a lock on a table it changes, held by another transaction "+
				"(a long one, or many writers); nothing of it was applied: run graphsync migrate again: %w", m.Name, o.lockTimeout, err)
		}
		if err != nil {
			return names, fmt.Errorf("migrate: apply %s: %w", m.Name, err)
		}
		names = append(names, m.Name)
	}
	return names, nil
}

// noTransactionMarker, as a migration's first line, has it applied outside
// a transaction: a statement such as CREATE INDEX CONCURRENTLY, which builds
// an index on a large table without holding producers' inserts back, cannot
// run in one. Such a migration is one statement (several would run as one
// implicit transaction), written so that running it again after an
// interruption is safe (IF NOT EXISTS).
const noTransactionMarker = "-- graphsync:no-transaction"

// NoTransaction reports whether m is applied outside a transaction.
func (m Migration) NoTransaction() bool {
	return strings.HasPrefix(m.SQL, noTransactionMarker+"\n")
}

// concurrentIndex finds the index a CREATE INDEX CONCURRENTLY statement
// builds, as written (quoted, or qualified by its schema): to_regclass reads
// it the way the statement did.
var concurrentIndex = regexp.MustCompile(`(?is)CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?((?:"[^"]+"|[a-z_][a-z0-9_$]*)(?:\.(?:"[^"]+"|[a-z_][a-z0-9_$]*))?)`)

// withoutComments is sql without its -- comment lines.
func withoutComments(sql string) string {
	var lines []string
	for _, line := range strings.Split(sql, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}

// applyOutsideTransaction runs m's one statement on its own, then records
// it, unless the index it builds concurrently is invalid: a build that
// failed or was interrupted leaves one behind, which IF NOT EXISTS would
// then pass over for good. Such an index is named, for the operator to drop,
// and the migration stays pending.
func applyOutsideTransaction(ctx context.Context, conn *pgx.Conn, m Migration) error {
	// No arguments: the simple protocol, one statement outside any
	// transaction block.
	if _, err := conn.Exec(ctx, m.SQL); err != nil {
		return err
	}
	statement := withoutComments(m.SQL)
	if match := concurrentIndex.FindStringSubmatch(statement); match != nil {
		name := match[1]
		var valid *bool
		if err := conn.QueryRow(ctx, Query("IndexValid"), name).Scan(&valid); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("check index %s: %w", name, err)
		}
		if valid == nil || !*valid {
			return fmt.Errorf("index %s is invalid or missing (a concurrent build failed or was interrupted): DROP INDEX CONCURRENTLY IF EXISTS %s, then run graphsync migrate again",
				name, name)
		}
	} else if strings.Contains(strings.ToUpper(statement), "CONCURRENTLY") {
		return fmt.Errorf("%s builds concurrently, but the runner cannot tell which index to check", m.Name)
	}
	_, err := conn.Exec(ctx, Query("MigrationRecord"), m.Version, m.Name, m.Checksum)
	return err
}

// DefaultLockTimeout bounds how long a transactional migration waits for a
// table's lock (lock_timeout), unless WithLockTimeout says otherwise.
const DefaultLockTimeout = 5 * time.Second

// waitNotice is how often a run waiting for another's migration lock says so.
const waitNotice = 10 * time.Second

// MigrateOption changes how Migrate reports.
type MigrateOption func(*migrateOptions)

type migrateOptions struct {
	waiting     func(holderPID int64)
	lockTimeout time.Duration
}

// WithLockTimeout sets how long a transactional migration waits for a
// table's lock before it fails, applying nothing of itself.
func WithLockTimeout(d time.Duration) MigrateOption {
	return func(o *migrateOptions) { o.lockTimeout = d }
}

// WhileWaiting has Migrate call fn when it finds another run holding the
// migration lock, and every ten seconds while it waits, with the PostgreSQL
// backend pid of the holder (0 when it cannot be read).
func WhileWaiting(fn func(holderPID int64)) MigrateOption {
	return func(o *migrateOptions) { o.waiting = fn }
}

// takeMigrationLock takes the session lock that serialises migrate runs,
// asking again every lockPoll instead of waiting inside
// pg_advisory_lock: a statement waiting there holds a snapshot, and a
// CREATE INDEX CONCURRENTLY in the run that holds the lock waits for every
// such snapshot to end, while the waiter waits for the lock: a deadlock,
// which PostgreSQL breaks by failing the index build.
func takeMigrationLock(ctx context.Context, conn *pgx.Conn, waiting func(holderPID int64)) error {
	var toldAt time.Time
	for {
		var taken bool
		if err := conn.QueryRow(ctx, Query("MigrationsLockTry"), int64(migrationsLockKey)).Scan(&taken); err != nil {
			return err
		}
		if taken {
			return nil
		}
		if waiting != nil && time.Since(toldAt) >= waitNotice {
			// Who holds it: an advisory lock of a bigint key is kept as its
			// high and low 32 bits.
			var holder int64
			_ = conn.QueryRow(ctx, Query("MigrationsLockHolder"), int64(migrationsLockKey)).Scan(&holder)
			waiting(holder)
			toldAt = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(lockPoll):
		}
	}
}

// lockPoll is how often a migrate run waiting for another asks for the lock.
const lockPoll = 200 * time.Millisecond

// Pending returns the names of embedded migrations not yet applied, and an
// error if an applied one was edited. Readiness checks call it.
func Pending(ctx context.Context, db querier) ([]string, error) {
	migrations, err := Migrations()
	if err != nil {
		return nil, err
	}
	var exists bool
	if err := db.QueryRow(ctx, Query("MigrationsTableExists")).Scan(&exists); err != nil {
		return nil, fmt.Errorf("check migrations table: %w", err)
	}
	applied := map[int]string{}
	if exists {
		if applied, err = appliedChecksums(ctx, db); err != nil {
			return nil, err
		}
	}
	if err := checkApplied(migrations, applied); err != nil {
		return nil, err
	}
	var pending []string
	for _, m := range migrations {
		if _, done := applied[m.Version]; !done {
			pending = append(pending, m.Name)
		}
	}
	return pending, nil
}

// querier is what Pending needs: a pool, a connection or a transaction.
type querier interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}

func appliedChecksums(ctx context.Context, db querier) (map[int]string, error) {
	rows, err := db.Query(ctx, Query("MigrationsApplied"))
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	applied := map[int]string{}
	var version int
	var checksum string
	_, err = pgx.ForEachRow(rows, []any{&version, &checksum}, func() error {
		applied[version] = checksum
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	return applied, nil
}

func checkApplied(migrations []Migration, applied map[int]string) error {
	known := map[int]bool{}
	for _, m := range migrations {
		known[m.Version] = true
		if sum, ok := applied[m.Version]; ok && sum != m.Checksum {
			return fmt.Errorf("%w: %s (applied checksum %.12s, embedded %.12s); add a new migration instead of editing it",
				ErrMigrationEdited, m.Name, sum, m.Checksum)
		}
	}
	for version := range applied {
		if !known[version] {
			return fmt.Errorf("%w: it has migration %d, which this binary does not know; run the release that applied it", ErrSchemaNewer, version)
		}
	}
	return nil
}
