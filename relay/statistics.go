package relay

import (
	"graphsync/redact"

	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	gsql "graphsync/sql"
)

// The outbox is a queue: the share of its rows that are pending swings from
// next to none (a sync that keeps up) to nearly all (a backlog after an
// outage) faster than autovacuum's ANALYZE follows. A plan made with
// statistics that see no pending rows is ruinous for the claim: it walks the
// pending rows of the claim index to find each row's predecessor and matches
// every hold against every row, so a claim of 2,000 rows takes
// seconds instead of tens of milliseconds (docs/adr/0015). The relay
// therefore checks, when a claim finds a backlog, whether the planner knows
// about it, and brings the statistics up to date if not.
const (
	// statisticsCheckEvery is the most often a relay checks.
	statisticsCheckEvery = 30 * time.Second
	// statisticsWarnEvery is the most often a relay warns that it could not
	// bring the statistics up to date.
	statisticsWarnEvery = 10 * time.Minute
	// statisticsCheckTimeout bounds a check and its ANALYZE.
	statisticsCheckTimeout = 2 * time.Minute
	// The statistics are behind when at least statisticsBehindFactor times
	// the pending rows the planner expects, plus statisticsBehindBatches
	// batches, are pending.
	statisticsBehindFactor  = 4
	statisticsBehindBatches = 10
	// statisticsTrusted: a planner that expects this many pending rows
	// gives the claim the plan it needs however many more there are; the
	// check then counts nothing.
	statisticsTrusted = 100_000
)

// statistics keeps the planner's statistics of outbox_messages current
// enough for the claim's plan. One per relay, shared by its workers; a check
// runs beside them, off the claim's path (the claim's lease runs meanwhile).
type statistics struct {
	pool      *pgxpool.Pool
	log       *zap.Logger
	batchSize int // behindAt counts in batches

	mu      sync.Mutex // held by the check in progress, which alone uses:
	checked time.Time  // zero: never, so the first backlog is checked at once
	// notAnalyzed counts the checks in a row that found the statistics
	// behind and no ANALYZE run.
	notAnalyzed                int
	warnedCheck, warnedAnalyze time.Time
	running                    sync.WaitGroup
	// checks counts the checks that ended without an error (for tests).
	checks atomic.Int64
}

func newStatistics(pool *pgxpool.Pool, log *zap.Logger, cfg Config) *statistics {
	return &statistics{pool: pool, log: log, batchSize: cfg.BatchSize}
}

// afterClaim is told whether a claim found a backlog. Then, at most every
// statisticsCheckEvery and never twice at once, a check starts beside the
// workers (see refresh); it stops waiting for PostgreSQL when ctx ends. nil
// (a store built without a relay) does nothing.
func (s *statistics) afterClaim(ctx context.Context, backlog bool) {
	if s == nil || !backlog || !s.mu.TryLock() {
		return
	}
	if !s.checked.IsZero() && time.Since(s.checked) < statisticsCheckEvery {
		s.mu.Unlock()
		return
	}
	s.checked = time.Now()
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		defer s.mu.Unlock()
		checkCtx, cancel := context.WithTimeout(ctx, statisticsCheckTimeout)
		defer cancel()
		err := s.refresh(checkCtx)
		switch {
		case err == nil:
			s.checks.Add(1)
		case ctx.Err() == nil:
			s.warn(&s.warnedCheck, "could not check the planner's statistics of outbox_messages; claims may be slow while a backlog lasts",
				zap.String("error", redact.Text(err.Error())))
		}
	}()
}

// wait returns once no check is in progress.
func (s *statistics) wait() {
	if s != nil {
		s.running.Wait()
	}
}

// refresh compares the pending rows with what the planner expects and runs
// ANALYZE when the statistics are behind. ANALYZE may do nothing, and
// PostgreSQL then says why only in a notice the driver drops: SKIP_LOCKED
// passes over a table that a VACUUM or ANALYZE holds (another relay's, right
// after an outage, or autovacuum's), and a role that is neither the table's
// nor the database's owner may not analyze it. Whether one ran is read from
// the table's analyze counts; a relay warns only when two checks in a row
// found the statistics behind and no ANALYZE ran.
func (s *statistics) refresh(ctx context.Context) error {
	planned, err := s.plannedPending(ctx)
	if err != nil || planned >= statisticsTrusted {
		return err
	}
	var pending int64
	if err := s.pool.QueryRow(ctx, gsql.Query("OutboxPendingUpTo"), s.behindAt(planned)).Scan(&pending); err != nil {
		return err
	}
	if pending < s.behindAt(planned) {
		s.notAnalyzed = 0
		return nil
	}
	before, err := s.analyzeCount(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	if _, err := s.pool.Exec(ctx, gsql.Query("OutboxAnalyze")); err != nil {
		return err
	}
	after, err := s.analyzeCountAfter(ctx, before)
	if err != nil {
		return err
	}
	fields := []zap.Field{zap.Float64("planned_pending_rows", planned), zap.Int64("pending_rows_at_least", pending),
		zap.Duration("took", time.Since(start))}
	if after == before {
		if s.notAnalyzed++; s.notAnalyzed >= 2 {
			s.warn(&s.warnedAnalyze, "PostgreSQL's statistics of outbox_messages do not know of the backlog, so claims are slow, and ANALYZE did not run: a VACUUM of the table is running, or this role may not analyze it (run graphsync sync as the owner of the table or of the database)", fields...)
		}
		return nil
	}
	s.notAnalyzed = 0
	s.log.Info("PostgreSQL's statistics of outbox_messages did not know of the backlog; analyzed the table", fields...)
	return nil
}

// analyzeCount is how many times outbox_messages was analyzed (by anyone).
func (s *statistics) analyzeCount(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, gsql.Query("OutboxAnalyzeCount")).Scan(&n)
	return n, err
}

// analyzeCountAfter reads the analyze count until it has moved past before,
// for up to a second: PostgreSQL 15 and later count an ANALYZE at once, 13
// and 14 through their statistics collector, a moment later.
func (s *statistics) analyzeCountAfter(ctx context.Context, before int64) (int64, error) {
	deadline := time.Now().Add(time.Second)
	for {
		n, err := s.analyzeCount(ctx)
		if err != nil || n != before || time.Now().After(deadline) {
			return n, err
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return n, ctx.Err()
		}
	}
}

// behindAt is the number of pending rows at which statistics that expect
// planned pending rows are behind.
func (s *statistics) behindAt(planned float64) int64 {
	return int64(statisticsBehindFactor*planned) + int64(statisticsBehindBatches*s.batchSize)
}

// plannedPending is how many pending rows the planner expects: its estimate
// for a scan of them, the share of pending rows ANALYZE last saw times the
// table's current size (a VACUUM updates the size, never the share).
func (s *statistics) plannedPending(ctx context.Context) (float64, error) {
	var doc []byte
	if err := s.pool.QueryRow(ctx, gsql.Query("OutboxPendingPlanned")).Scan(&doc); err != nil {
		return 0, err
	}
	var plans []struct {
		Plan struct {
			Rows *float64 `json:"Plan Rows"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal(doc, &plans); err != nil || len(plans) != 1 || plans[0].Plan.Rows == nil {
		return 0, fmt.Errorf("read the planner's estimate of pending rows from %.200q: no plan rows", doc)
	}
	return *plans[0].Plan.Rows, nil
}

// warn logs at most every statisticsWarnEvery for each kind of warning
// (last is when it was last logged); s.mu is held.
func (s *statistics) warn(last *time.Time, msg string, fields ...zap.Field) {
	if !last.IsZero() && time.Since(*last) < statisticsWarnEvery {
		return
	}
	*last = time.Now()
	s.log.Warn(msg, fields...)
}
