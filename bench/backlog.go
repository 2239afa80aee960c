package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// backlogOrdersPerTx writes the backlog fast: 500 changes per transaction.
const backlogOrdersPerTx = 500

// backlogResult is scenario 3 for one wake mode and backlog size.
type backlogResult struct {
	Mode         string  `json:"mode"`
	TargetEvents int64   `json:"target_events"`
	Events       int64   `json:"events"`
	WriteSeconds float64 `json:"write_seconds"`
	// Processed is how many events sync applied (all of them unless it
	// ran out of time; the memory figures then cover that part).
	Processed int64 `json:"processed"`
	// UntilCaughtUp: sync ran with --until-caught-up and exited by itself;
	// otherwise bench stopped it once the outbox was drained.
	UntilCaughtUp bool `json:"until_caught_up"`
	// SyncSeconds is sync's wall time from start until it exited
	// (--until-caught-up) or until bench saw the outbox drained.
	SyncSeconds      float64    `json:"sync_seconds"`
	SyncEventsPerSec float64    `json:"sync_events_per_sec"`
	SyncRSS          rssFigures `json:"sync_rss"`
	// SyncStages is where sync's time went (claim, Neo4j apply, mark), from
	// the totals it logs as it stops.
	SyncStages  *syncMetrics `json:"sync_stages,omitempty"`
	Graph       graphCounts  `json:"graph"`
	SyncTrouble logTrouble   `json:"sync_log_trouble"`
	Error       string       `json:"error,omitempty"`
}

// runBacklog writes a backlog with sync stopped, then runs sync
// --until-caught-up over it (or plain sync, stopped once bench sees the
// outbox drained) and records the process's peak memory.
func runBacklog(ctx context.Context, st *stack, cfg benchConfig, mode string, events int64, log *zap.Logger) (result backlogResult, err error) {
	result = backlogResult{Mode: mode, TargetEvents: events}
	log = log.With(zap.String("scenario", "backlog"), zap.String("mode", mode), zap.Int64("target_events", events))
	sc, err := st.newScenario(ctx, fmt.Sprintf("backlog_%s_%d", mode, events), log)
	if err != nil {
		return result, err
	}
	defer func() {
		// A failed clean-up leaves a database or tenants behind: always
		// reported, beside the scenario's own error if it has one.
		if cleanErr := sc.finish(ctx); cleanErr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cleanErr))
		}
	}()
	log.Info("writing backlog", zap.Int("orders_per_tx", backlogOrdersPerTx))
	report, written, err := sc.runWorkload(ctx, sizedWorkload(events, 3, cfg.writers, backlogOrdersPerTx), phaseTimeout(events, 300))
	if err != nil {
		return result, err
	}
	result.Events = report.Events
	result.WriteSeconds = written.Seconds()
	log.Info("backlog written; syncing until caught up", zap.Int64("events", report.Events), zap.Duration("took", written))

	result.UntilCaughtUp = cfg.backlogUntilCaughtUp
	if err := sc.startSync(ctx, syncSettings{mode: mode, batchSize: cfg.batchSize, backlogBatchSize: cfg.backlogBatchSize, workers: cfg.workers, untilCaughtUp: cfg.backlogUntilCaughtUp}); err != nil {
		return result, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, phaseTimeout(events, 150))
	defer cancel()
	var waitErr error
	var drained time.Time
	if cfg.backlogUntilCaughtUp {
		waitErr = sc.sync.waitExit(waitCtx)
		drained = sc.sync.ended
	} else {
		waitErr = sc.waitApplied(waitCtx, phaseTimeout(events, 150))
		drained = time.Now()
		waitErr = errors.Join(waitErr, sc.sync.stop())
	}
	// sync has exited (or was stopped): its memory and progress are known
	// even when it ran out of time.
	result.SyncSeconds = drained.Sub(sc.sync.started).Seconds()
	result.SyncRSS = sc.sync.rss()
	result.SyncTrouble = sc.sync.trouble()
	if stages, err := sc.sync.stoppedStages(); err != nil {
		log.Warn("no stage totals from sync", zap.Error(err))
	} else {
		result.SyncStages = &stages
	}
	spanCtx, spanCancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer spanCancel()
	span, err := sc.span(spanCtx, 0)
	result.Processed = span.processed
	result.SyncEventsPerSec = float64(span.processed) / result.SyncSeconds
	if waitErr != nil {
		return result, fmt.Errorf("%w (%d of %d events applied; peak RSS so far %d bytes)", waitErr, span.processed, report.Events, result.SyncRSS.PeakBytes)
	}
	if err != nil {
		return result, err
	}
	if span.rows != report.Events || span.processed != span.rows {
		return result, fmt.Errorf("sync exited caught up with %d of %d rows processed (workload reported %d)", span.processed, span.rows, report.Events)
	}
	if result.Graph, err = st.countGraph(ctx, report.TenantIDs); err != nil {
		return result, err
	}
	log.Info("measured", zap.Duration("sync", time.Duration(result.SyncSeconds*float64(time.Second))),
		zap.Int64("peak_rss_bytes", result.SyncRSS.PeakBytes), zap.Int64("max_sampled_vmrss_bytes", result.SyncRSS.MaxSampledBytes))
	return result, nil
}
