package main

import (
	"context"
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
	// SyncSeconds is sync --until-caught-up's wall time, start to exit.
	SyncSeconds      float64     `json:"sync_seconds"`
	SyncEventsPerSec float64     `json:"sync_events_per_sec"`
	SyncRSS          rssFigures  `json:"sync_rss"`
	Graph            graphCounts `json:"graph"`
	SyncTrouble      logTrouble  `json:"sync_log_trouble"`
	Error            string      `json:"error,omitempty"`
}

// runBacklog writes a backlog with sync stopped, then runs sync
// --until-caught-up over it and records the process's peak memory.
func runBacklog(ctx context.Context, st *stack, cfg benchConfig, mode string, events int64, log *zap.Logger) (result backlogResult, err error) {
	result = backlogResult{Mode: mode, TargetEvents: events}
	log = log.With(zap.String("scenario", "backlog"), zap.String("mode", mode), zap.Int64("target_events", events))
	sc, err := st.newScenario(ctx, fmt.Sprintf("backlog_%s_%d", mode, events), log)
	if err != nil {
		return result, err
	}
	defer func() {
		if cleanErr := sc.finish(ctx); cleanErr != nil && err == nil {
			err = cleanErr
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

	if err := sc.startSync(ctx, syncSettings{mode: mode, batchSize: cfg.batchSize, workers: cfg.workers, untilCaughtUp: true}); err != nil {
		return result, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, phaseTimeout(events, 150))
	defer cancel()
	if err := sc.sync.waitExit(waitCtx); err != nil {
		return result, err
	}
	result.SyncSeconds = sc.sync.ended.Sub(sc.sync.started).Seconds()
	result.SyncEventsPerSec = float64(report.Events) / result.SyncSeconds
	result.SyncRSS = sc.sync.rss()
	result.SyncTrouble = sc.sync.trouble()

	span, err := sc.span(ctx, 0)
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
