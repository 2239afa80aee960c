-- Runtime statements of the migration runner (sql/migrate.go). Every value
-- is a parameter; the migrations themselves are in sql/migrations/.

-- name: MigrationsTableCreate
CREATE TABLE IF NOT EXISTS graphsync_schema_migrations (
  version    INTEGER PRIMARY KEY,
  name       TEXT NOT NULL,
  checksum   TEXT NOT NULL,
  applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- name: MigrationsTableExists
SELECT to_regclass('graphsync_schema_migrations') IS NOT NULL;

-- name: MigrationsApplied
SELECT version, checksum FROM graphsync_schema_migrations;

-- name: MigrationRecord
INSERT INTO graphsync_schema_migrations (version, name, checksum) VALUES ($1, $2, $3);

-- name: MigrationsLockTry
-- Serialises concurrent `graphsync migrate` runs ($1: the lock key).
SELECT pg_try_advisory_lock($1);

-- name: MigrationsUnlock
SELECT pg_advisory_unlock($1);

-- name: MigrationsLockHolder
-- Who holds the migrations lock $1: an advisory lock of a bigint key is
-- kept as its high and low 32 bits. 0: nobody.
SELECT coalesce(min(pid), 0) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
  AND (classid::bigint << 32 | objid::bigint) = $1;

-- name: IndexValid
-- Whether index $1 (a CREATE INDEX CONCURRENTLY's) is valid; no row: none.
SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass($1);
