package main

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"graphsync/drift"
	"graphsync/redact"
)

// driftWatch runs a sampled drift check every interval inside sync and
// exports what it found, so an alert fires before a person looks.
type driftWatch struct {
	drift     *prometheus.GaugeVec
	total     prometheus.Gauge
	explained prometheus.Gauge
	lastCheck prometheus.Gauge
}

func newDriftWatch() *driftWatch {
	return &driftWatch{
		drift: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "graphsync_drift", Help: "Differences between PostgreSQL and the graph found by the last sampled drift check, by tenant, label and kind.",
		}, []string{"tenant_id", "label", "kind"}),
		total: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "graphsync_drift_total", Help: "All differences found by the last sampled drift check (drift_total).",
		}),
		explained: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "graphsync_drift_explained", Help: "Differences the last drift check found explained by outbox rows not applied yet.",
		}),
		lastCheck: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "graphsync_drift_last_check_timestamp_seconds", Help: "When the last sampled drift check finished (Unix time; 0: none yet).",
		}),
	}
}

func (w *driftWatch) collectors() []prometheus.Collector {
	return []prometheus.Collector{w.drift, w.total, w.explained, w.lastCheck}
}

// run checks every interval until ctx is done; a finished check is recorded
// in PostgreSQL per tenant (graph_status reads it) and exported; a failed
// check is logged and leaves the gauges and the records as they were (the
// timestamp shows its age).
func (w *driftWatch) run(ctx context.Context, pool *pgxpool.Pool, driver neo4j.DriverWithContext, every time.Duration, share float64, log *zap.Logger) {
	// Only a setting can make New fail, and sync checked them at start:
	// once made, the checker serves every tick, whatever one tick meets.
	checker, err := drift.New(pool, driver, drift.Config{Sample: share}, log)
	if err != nil {
		log.Error("drift check cannot run", zap.String("error", redact.Text(err.Error())))
		return
	}
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		report, err := checker.Run(ctx, false)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("drift check failed", zap.String("error", redact.Text(err.Error())))
			}
			continue
		}
		if err := report.Record(ctx, pool, drift.SourceSync); err != nil {
			log.Warn("drift check not recorded in PostgreSQL", zap.String("error", redact.Text(err.Error())))
		}
		w.drift.Reset()
		for _, c := range report.Counts {
			w.drift.WithLabelValues(strconv.FormatInt(c.TenantID, 10), c.Label, string(c.Kind)).Set(float64(c.Count))
		}
		w.total.Set(float64(report.DriftTotal))
		w.explained.Set(float64(report.ExplainedTotal))
		w.lastCheck.Set(float64(time.Now().Unix()))
		if report.DriftTotal > 0 {
			log.Warn("drift found", zap.Int("drift_total", report.DriftTotal), zap.Float64("sample", share))
		}
	}
}
