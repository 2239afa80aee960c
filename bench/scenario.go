package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"graphsync/workload"
)

const (
	// progressPollEvery is how often bench checks whether sync has applied
	// everything; the figures come from timestamps in the rows, not from
	// when the check noticed.
	progressPollEvery = 100 * time.Millisecond
	// readyTimeout bounds how long a starting sync may take to connect.
	readyTimeout = time.Minute
	// cleanupTimeout bounds one scenario's clean-up, which runs even after
	// bench's own deadline.
	cleanupTimeout = 15 * time.Minute
)

// phaseTimeout gives a phase that handles events rows a deadline: two
// minutes plus the time at a rate (events/s) well below anything expected.
func phaseTimeout(events int64, floorRate float64) time.Duration {
	return 2*time.Minute + time.Duration(float64(events)/floorRate*float64(time.Second))
}

// scenario is one fresh database with its graph, cleaned up by finish.
type scenario struct {
	st      *stack
	log     *zap.Logger
	db      *scenarioDB
	sync    *syncProcess
	tenants []int64
}

func (s *stack) newScenario(ctx context.Context, name string, log *zap.Logger) (*scenario, error) {
	db, err := s.createDatabase(ctx, name)
	sc := &scenario{st: s, log: log, db: db}
	if err != nil {
		return nil, errors.Join(err, sc.finish(ctx))
	}
	return sc, nil
}

// finish stops sync, drops the database and removes the scenario's tenants
// from Neo4j. It runs on its own deadline: the caller's may have passed.
func (sc *scenario) finish(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var errs []error
	if sc.sync != nil {
		if err := sc.sync.stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop sync: %w", err))
		}
	}
	if err := sc.st.dropDatabase(ctx, sc.db); err != nil {
		errs = append(errs, err)
	}
	if err := sc.st.cleanGraph(ctx, sc.tenants); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// startSync starts sync on the scenario's database and, unless it runs
// until caught up, waits until its wake path is established.
func (sc *scenario) startSync(ctx context.Context, settings syncSettings) error {
	proc, err := sc.st.startSync(sc.db, settings)
	if err != nil {
		return err
	}
	sc.sync = proc
	if settings.untilCaughtUp {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var statement string
	var args []any
	switch settings.mode {
	case "stream":
		statement, args = query("ready_stream"), []any{sc.db.slot}
	case "notify":
		statement = query("ready_notify")
	default:
		statement, args = query("ready_poll"), []any{benchAppName}
	}
	return pollUntil(ctx, progressPollEvery, "sync ("+settings.mode+") to be ready", func(ctx context.Context) (bool, error) {
		if err := proc.alive(); err != nil {
			return false, err
		}
		var ready bool
		if err := sc.db.pool.QueryRow(ctx, statement, args...).Scan(&ready); err != nil {
			return false, fmt.Errorf("check sync readiness: %w", err)
		}
		return ready, nil
	})
}

// runWorkload writes a workload and remembers its tenants for clean-up.
func (sc *scenario) runWorkload(ctx context.Context, cfg workload.Config, timeout time.Duration) (workload.Report, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	started := time.Now()
	report, err := workload.Run(ctx, sc.db.pool, cfg, sc.log.Named("workload"))
	elapsed := time.Since(started)
	sc.tenants = append(sc.tenants, report.TenantIDs...)
	if err != nil {
		return report, elapsed, fmt.Errorf("workload: %w", err)
	}
	return report, elapsed, nil
}

// warmUp writes a small workload and waits until sync applied it: the
// pipeline is then proven end to end, connections are open and Neo4j has
// planned every statement once.
func (sc *scenario) warmUp(ctx context.Context, cfg workload.Config) (workload.Report, error) {
	report, _, err := sc.runWorkload(ctx, cfg, 2*time.Minute)
	if err != nil {
		return report, fmt.Errorf("warm-up: %w", err)
	}
	return report, sc.waitApplied(ctx, 2*time.Minute)
}

// failureCheckEvery is how many pending checks go by between two searches
// for failed rows.
const failureCheckEvery = 10

// waitApplied waits until no outbox row is pending. A failed or
// dead-lettered row fails the scenario at once: the projector rejected an
// event bench wrote, or the row waits for a retry that would wreck the
// figures.
func (sc *scenario) waitApplied(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	checks := 0
	return pollUntil(ctx, progressPollEvery, "sync to apply every outbox row", func(ctx context.Context) (bool, error) {
		var pending bool
		if err := sc.db.pool.QueryRow(ctx, query("outbox_pending_exists")).Scan(&pending); err != nil {
			return false, fmt.Errorf("read outbox progress: %w", err)
		}
		if checks%failureCheckEvery == 0 || !pending {
			var deadLettered int64
			var failed *string
			if err := sc.db.pool.QueryRow(ctx, query("outbox_failures")).Scan(&deadLettered, &failed); err != nil {
				return false, fmt.Errorf("read outbox failures: %w", err)
			}
			if deadLettered > 0 {
				return false, fmt.Errorf("%d outbox rows were dead-lettered (see %s and outbox_messages_dlq)", deadLettered, sc.sync.logPath)
			}
			if failed != nil {
				return false, fmt.Errorf("sync failed to apply an outbox row (log %s): %s", sc.sync.logPath, *failed)
			}
		}
		checks++
		if !pending {
			return true, nil
		}
		return false, sc.sync.alive()
	})
}

func (sc *scenario) maxOutboxID(ctx context.Context) (int64, error) {
	var id int64
	if err := sc.db.pool.QueryRow(ctx, query("outbox_max_id")).Scan(&id); err != nil {
		return 0, fmt.Errorf("read max outbox id: %w", err)
	}
	return id, nil
}

// outboxSpan is what the rows above an id say about their own journey.
type outboxSpan struct {
	rows, processed           int64
	firstOccurred, lastOccurr time.Time
	lastProcessed             time.Time
}

func (sc *scenario) span(ctx context.Context, afterID int64) (outboxSpan, error) {
	var s outboxSpan
	var first, last, processed *time.Time
	if err := sc.db.pool.QueryRow(ctx, query("outbox_span"), afterID).Scan(&s.rows, &s.processed, &first, &last, &processed); err != nil {
		return s, fmt.Errorf("read outbox span: %w", err)
	}
	if first == nil || last == nil || processed == nil {
		return s, fmt.Errorf("no processed outbox rows above id %d", afterID)
	}
	s.firstOccurred, s.lastOccurr, s.lastProcessed = *first, *last, *processed
	return s, nil
}

// outboxRow is one stored event, for the ceiling.
type outboxRow struct {
	id            int64
	tenantID      int64
	aggregateType string
	aggregateID   int64
	eventType     string
	eventVersion  int16
	payload       []byte
}

func (sc *scenario) loadEvents(ctx context.Context, afterID int64) ([]outboxRow, error) {
	rows, err := sc.db.pool.Query(ctx, query("outbox_events"), afterID)
	if err != nil {
		return nil, fmt.Errorf("read outbox events: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxRow, error) {
		var r outboxRow
		err := row.Scan(&r.id, &r.tenantID, &r.aggregateType, &r.aggregateID, &r.eventType, &r.eventVersion, &r.payload)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("read outbox events: %w", err)
	}
	return events, nil
}
