package main

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"graphsync/workload"
)

// The workload's shape for the throughput and backlog scenarios: as the
// workload package's own benchmark (about 2.82 events per order with the
// default mix, ProductCreated events of the setup included).
const (
	workloadTenants            = 3
	workloadProductsPerTenant  = 100
	workloadCustomersPerTenant = 200
	eventsPer1000Orders        = 2820
)

// ordersFor is how many orders make about events events.
func ordersFor(events int64) int {
	setupEvents := int64(workloadTenants * workloadProductsPerTenant)
	return int(max(1, (events-setupEvents)*1000/eventsPer1000Orders))
}

func sizedWorkload(events int64, seed int64, writers, ordersPerTx int) workload.Config {
	return workload.Config{
		Seed:               seed,
		Tenants:            workloadTenants,
		ProductsPerTenant:  workloadProductsPerTenant,
		CustomersPerTenant: workloadCustomersPerTenant,
		Orders:             ordersFor(events),
		Writers:            writers,
		OrdersPerTx:        ordersPerTx,
	}
}

// warmUpWorkload is small, in a tenant of its own.
var warmUpWorkload = workload.Config{Seed: 99, Tenants: 1, ProductsPerTenant: 10, CustomersPerTenant: 5, Orders: 40, Writers: 2}

// throughputResult is scenario 1 for one wake mode.
type throughputResult struct {
	Mode   string `json:"mode"`
	Events int64  `json:"events"`
	// Seconds runs from the first measured event's occurred_at (its
	// transaction's start) to the last processed_at.
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	// ProducerEventsPerSec is how fast the workload committed: when the
	// pipeline keeps up, EventsPerSec cannot exceed it.
	ProducerSeconds      float64 `json:"producer_seconds"`
	ProducerEventsPerSec float64 `json:"producer_events_per_sec"`
	// TailLagSeconds is the last processed_at minus the last occurred_at:
	// near zero means sync kept up with the producer (the figure is then
	// bounded by the producer, not by sync).
	TailLagSeconds float64     `json:"tail_lag_seconds"`
	SyncRSS        rssFigures  `json:"sync_rss"`
	SyncTrouble    logTrouble  `json:"sync_log_trouble"`
	SyncMetrics    syncMetrics `json:"sync_metrics"`
	Graph          graphCounts `json:"graph"`
	RatioToCeiling *float64    `json:"ratio_to_ceiling,omitempty"`
	Error          string      `json:"error,omitempty"`
}

// throughputRun is a throughput result and, for the ceiling, the measured
// events and their tenants.
type throughputRun struct {
	result  throughputResult
	events  []outboxRow
	tenants []int64
}

// runThroughput measures sustained events/s from commit to graph: sync runs
// while the workload writes events as fast as it can.
func runThroughput(ctx context.Context, st *stack, cfg benchConfig, mode string, keepEvents bool, log *zap.Logger) (run throughputRun, err error) {
	run.result.Mode = mode
	log = log.With(zap.String("scenario", "throughput"), zap.String("mode", mode))
	sc, err := st.newScenario(ctx, "tput_"+mode, log)
	if err != nil {
		return run, err
	}
	defer func() {
		// A failed clean-up leaves a database or tenants behind: always
		// reported, beside the scenario's own error if it has one.
		if cleanErr := sc.finish(ctx); cleanErr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cleanErr))
		}
	}()
	if err := sc.startSync(ctx, syncSettings{mode: mode, batchSize: cfg.batchSize, backlogBatchSize: cfg.backlogBatchSize, workers: cfg.workers}); err != nil {
		return run, err
	}
	if _, err := sc.warmUp(ctx, warmUpWorkload); err != nil {
		return run, err
	}
	baseline, err := sc.sync.scrape(ctx)
	if err != nil {
		log.Warn("no sync metrics", zap.Error(err))
	}
	afterID, err := sc.maxOutboxID(ctx)
	if err != nil {
		return run, err
	}

	log.Info("writing", zap.Int64("events", cfg.throughputEvents), zap.Int("writers", cfg.writers), zap.Int("orders_per_tx", cfg.ordersPerTx))
	wl := sizedWorkload(cfg.throughputEvents, 1, cfg.writers, cfg.ordersPerTx)
	report, produced, err := sc.runWorkload(ctx, wl, phaseTimeout(cfg.throughputEvents, 50))
	mainTenants := report.TenantIDs
	if err != nil {
		return run, err
	}
	if err := sc.waitApplied(ctx, phaseTimeout(cfg.throughputEvents, 50)); err != nil {
		return run, err
	}
	span, err := sc.span(ctx, afterID)
	if err != nil {
		return run, err
	}
	if span.rows != report.Events || span.processed != span.rows {
		return run, fmt.Errorf("outbox holds %d measured rows (%d processed), the workload reported %d events", span.rows, span.processed, report.Events)
	}
	if final, err := sc.sync.scrape(ctx); err != nil {
		log.Warn("no sync metrics", zap.Error(err))
	} else {
		run.result.SyncMetrics = final.since(baseline)
	}
	if err := sc.sync.stop(); err != nil {
		return run, fmt.Errorf("stop sync: %w", err)
	}
	seconds := span.lastProcessed.Sub(span.firstOccurred).Seconds()
	run.result.Events = span.rows
	run.result.Seconds = seconds
	run.result.EventsPerSec = float64(span.rows) / seconds
	run.result.ProducerSeconds = produced.Seconds()
	run.result.ProducerEventsPerSec = float64(report.Events) / produced.Seconds()
	run.result.TailLagSeconds = span.lastProcessed.Sub(span.lastOccurr).Seconds()
	run.result.SyncRSS = sc.sync.rss()
	run.result.SyncTrouble = sc.sync.trouble()
	if run.result.Graph, err = st.countGraph(ctx, mainTenants); err != nil {
		return run, err
	}
	if keepEvents {
		if run.events, err = sc.loadEvents(ctx, afterID); err != nil {
			return run, err
		}
		run.tenants = mainTenants
	}
	log.Info("measured", zap.Int64("events", span.rows), zap.Float64("events_per_sec", run.result.EventsPerSec),
		zap.Float64("producer_events_per_sec", run.result.ProducerEventsPerSec), zap.Float64("tail_lag_seconds", run.result.TailLagSeconds),
		zap.Stringer("graph", run.result.Graph))
	return run, nil
}
