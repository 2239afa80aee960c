-- The sync process has a connection to this database (bench's own pool
-- carries application_name $1).
SELECT EXISTS (
  SELECT 1 FROM pg_stat_activity
  WHERE datname = current_database() AND backend_type = 'client backend'
    AND application_name <> $1 AND pid <> pg_backend_pid()
)
