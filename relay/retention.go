package relay

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	gsql "graphsync/sql"
)

// RetentionConfig drives the archive job and the partition maintenance.
type RetentionConfig struct {
	// ArchiveAfter is how long processed rows stay in the outbox. Default: 7 days.
	ArchiveAfter time.Duration
	// ArchiveBatch is the most rows one archive transaction moves. Default: 5000.
	ArchiveBatch int
	// KeepArchive is how long archive partitions are kept. Default: 90 days.
	KeepArchive time.Duration
	// MonthsAhead is how many coming months get a partition. Default: 3.
	MonthsAhead int
}

// Validate refuses settings that would remove what they should keep: a
// negative age moves or drops everything at once, and an archive kept for
// less time than rows stay in the outbox drops history as soon as it is
// archived. Zero means the default. The names are the command's flags.
func (c RetentionConfig) Validate() error {
	switch {
	case c.ArchiveAfter < 0:
		return fmt.Errorf("--archive-after must not be negative, got %s", c.ArchiveAfter)
	case c.KeepArchive < 0:
		return fmt.Errorf("--keep-archive must not be negative, got %s", c.KeepArchive)
	case c.ArchiveBatch < 0:
		return fmt.Errorf("--archive-batch must not be negative, got %d", c.ArchiveBatch)
	case c.MonthsAhead < 0:
		return fmt.Errorf("--months-ahead must not be negative, got %d", c.MonthsAhead)
	}
	if d := c.withDefaults(); d.KeepArchive < d.ArchiveAfter {
		return fmt.Errorf("--keep-archive (%s) must be at least --archive-after (%s): the archive would drop rows as soon as it takes them", d.KeepArchive, d.ArchiveAfter)
	}
	return nil
}

// DefaultRetentionConfig is every default of RetentionConfig, in one place
// (withDefaults and the commands' flags take them from here).
func DefaultRetentionConfig() RetentionConfig {
	return RetentionConfig{ArchiveAfter: 7 * 24 * time.Hour, ArchiveBatch: 5000, KeepArchive: 90 * 24 * time.Hour, MonthsAhead: 3}
}

func (c RetentionConfig) withDefaults() RetentionConfig {
	fillZero(&c, DefaultRetentionConfig())
	return c
}

// RetentionReport says what one retention run did.
type RetentionReport struct {
	Archived          int64
	PartitionsCreated []string
	PartitionsDropped []string
	// LeasesRemoved counts aggregate holds that had run out over
	// StaleLeaseAge ago (their aggregate got no event since).
	LeasesRemoved int64
}

// StaleLeaseAge is how long ago an aggregate lease must have run out for
// the retention job to remove it: far beyond any lease a live relay renews.
const StaleLeaseAge = time.Hour

// Retain runs the retention job once: partitions for the months the outbox
// and the coming months need, the archive move in batches, the drop of
// partitions wholly older than KeepArchive, and the removal of aggregate
// leases that ran out long ago. Each step is idempotent, and one that fails
// does not keep the others from running.
func Retain(ctx context.Context, pool *pgxpool.Pool, cfg RetentionConfig) (RetentionReport, error) {
	var report RetentionReport
	if err := cfg.Validate(); err != nil {
		return report, err
	}
	cfg = cfg.withDefaults()
	// A month whose partition cannot be created (its rows already sit in the
	// default partition, say) must not stop the archiving: rows without a
	// partition land in the default one, and the outbox stays bounded.
	created, partitionErr := ArchivePartitionsEnsure(ctx, pool, time.Now(), cfg.MonthsAhead, cfg.KeepArchive)
	report.PartitionsCreated = created
	var archiveErr error
	for {
		tag, err := pool.Exec(ctx, gsql.Query("OutboxArchiveProcessed"), cfg.ArchiveAfter, cfg.ArchiveBatch)
		if err != nil {
			archiveErr = fmt.Errorf("archive processed outbox rows: %w", err)
			break
		}
		report.Archived += tag.RowsAffected()
		if tag.RowsAffected() < int64(cfg.ArchiveBatch) {
			break
		}
	}
	dropped, dropErr := ArchivePartitionsDrop(ctx, pool, time.Now().Add(-cfg.KeepArchive))
	report.PartitionsDropped = dropped
	tag, pruneErr := pool.Exec(ctx, gsql.Query("OutboxAggregateLeasesPrune"), StaleLeaseAge)
	if pruneErr != nil {
		pruneErr = fmt.Errorf("remove aggregate leases that ran out: %w", pruneErr)
	}
	report.LeasesRemoved = tag.RowsAffected()
	return report, errors.Join(partitionErr, archiveErr, dropErr, pruneErr)
}

var partitionName = regexp.MustCompile(`^outbox_messages_archive_(\d{4})(\d{2})$`)

// partitionDDLLockTimeout bounds how long the retention job's partition DDL
// waits for a lock: a long reader of the archive (a rebuild's replay) must
// not keep the job waiting, with every other archive reader and writer
// queued behind the wait. The next run tries again.
const partitionDDLLockTimeout = "5s"

// ArchivePartitionsEnsure creates a month partition of the archive for every
// month from the oldest row still in the outbox up to monthsAhead months
// after now, but none for a month wholly older than keep (the archive keeps
// nothing that old: ArchivePartitionsDrop would drop it in the same run).
// occurred_at is the producer's value: a row dated in year 1, or at
// infinity, must not make the job create (and drop) a table per month of
// two thousand years. Rows older than that bound land in the default
// partition.
func ArchivePartitionsEnsure(ctx context.Context, pool *pgxpool.Pool, now time.Time, monthsAhead int, keep time.Duration) ([]string, error) {
	existing, err := archivePartitions(ctx, pool)
	if err != nil {
		return nil, err
	}
	var oldest *time.Time
	if err := pool.QueryRow(ctx, gsql.Query("OutboxOldestOccurredAt")).Scan(&oldest); err != nil {
		return nil, fmt.Errorf("find oldest outbox row: %w", err)
	}
	first := monthStart(now)
	if oldest != nil && oldest.Before(first) {
		first = monthStart(*oldest)
	}
	if horizon := monthStart(now.Add(-keep)); first.Before(horizon) {
		first = horizon
	}
	last := monthStart(now).AddDate(0, monthsAhead, 0)
	var created []string
	var errs []error
	for month := first; !month.After(last); month = month.AddDate(0, 1, 0) {
		name := fmt.Sprintf("outbox_messages_archive_%04d%02d", month.Year(), int(month.Month()))
		if existing[name] {
			continue
		}
		// Partition bounds cannot be parameters; they are instants we
		// formatted, in UTC as the months and the drop cutoff are (a bare
		// date would be read in the session's TimeZone).
		ddl := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s PARTITION OF outbox_messages_archive FOR VALUES FROM ('%s') TO ('%s')",
			pgx.Identifier{name}.Sanitize(), month.Format("2006-01-02 15:04:05Z07:00"), month.AddDate(0, 1, 0).Format("2006-01-02 15:04:05Z07:00"))
		// Two processes starting together both find the month missing;
		// CREATE TABLE IF NOT EXISTS is not safe against that race (the
		// loser fails on the catalog's unique index), so creations are
		// serialised and the check is repeated under the lock.
		made := false
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// Another retention run creating a partition is waited for;
			// only the DDL's own locks are bounded.
			if _, err := tx.Exec(ctx, gsql.Query("ArchivePartitionLock")); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, gsql.Query("LockTimeoutSet"), partitionDDLLockTimeout); err != nil {
				return err
			}
			var exists bool
			if err := tx.QueryRow(ctx, gsql.Query("ArchivePartitionExists"), name).Scan(&exists); err != nil || exists {
				return err
			}
			_, err := tx.Exec(ctx, ddl)
			made = err == nil
			return err
		})
		if err != nil {
			// Keep going: one month's problem must not block the others.
			errs = append(errs, fmt.Errorf("create archive partition %s: %w", name, err))
			continue
		}
		if made {
			created = append(created, name)
		}
	}
	return created, errors.Join(errs...)
}

// ArchivePartitionsDrop drops month partitions whose whole month ended before cutoff.
func ArchivePartitionsDrop(ctx context.Context, pool *pgxpool.Pool, cutoff time.Time) ([]string, error) {
	existing, err := archivePartitions(ctx, pool)
	if err != nil {
		return nil, err
	}
	var dropped []string
	for name := range existing {
		match := partitionName.FindStringSubmatch(name)
		if match == nil {
			continue // the default partition, or one we did not name
		}
		month, err := time.Parse("200601", match[1]+match[2])
		if err != nil {
			continue
		}
		if month.AddDate(0, 1, 0).After(cutoff) {
			continue
		}
		if err := dropArchivePartition(ctx, pool, name); err != nil {
			return dropped, fmt.Errorf("drop archive partition %s: %w", name, err)
		}
		dropped = append(dropped, name)
	}
	// Rows dated before every month the archive keeps (back-dated by their
	// producer, or a dead letter retried long after) have no partition of
	// their own (ArchivePartitionsEnsure) and land in the default one: they
	// go as their month's partition would have, recorded the same way.
	if _, err := pool.Exec(ctx, gsql.Query("ArchiveDefaultPrune"), defaultPartition, monthStart(cutoff)); err != nil {
		return dropped, fmt.Errorf("remove rows older than the archive keeps from %s: %w", defaultPartition, err)
	}
	return dropped, nil
}

// defaultPartition is the archive's partition for rows no month partition takes.
const defaultPartition = "outbox_messages_archive_default"

// dropArchivePartition drops one partition and, in the same transaction,
// records per tenant how much history went with it (outbox_history_gaps), so
// that a rebuild knows, not guesses, whether replay can be complete. The
// count reads the whole partition under a SHARE lock, which keeps rows from
// coming or going but lets readers of the archive (the stream's visibility
// check, offset readers, a rebuild's replay) go on; only the DROP itself
// locks them out, for as long as a drop takes.
func dropArchivePartition(ctx context.Context, pool *pgxpool.Pool, name string) error {
	table := pgx.Identifier{name}.Sanitize()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, gsql.Query("LockTimeoutSet"), partitionDDLLockTimeout); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "LOCK TABLE "+table+" IN SHARE MODE"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO outbox_history_gaps (partition_name, tenant_id, rows_dropped, oldest, newest)
			SELECT $1, tenant_id, count(*), min(occurred_at), max(occurred_at)
			FROM `+table+`
			GROUP BY tenant_id
			ON CONFLICT (partition_name, tenant_id) DO UPDATE
			SET rows_dropped = outbox_history_gaps.rows_dropped + EXCLUDED.rows_dropped, dropped_at = now()`, name); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "DROP TABLE "+table)
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return nil // another retention run dropped it first
	}
	return err
}

func archivePartitions(ctx context.Context, pool *pgxpool.Pool) (map[string]bool, error) {
	rows, err := pool.Query(ctx, gsql.Query("ArchivePartitions"))
	if err != nil {
		return nil, fmt.Errorf("list archive partitions: %w", err)
	}
	names := map[string]bool{}
	var name, bound string
	_, err = pgx.ForEachRow(rows, []any{&name, &bound}, func() error {
		names[name] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list archive partitions: %w", err)
	}
	return names, nil
}

func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}
