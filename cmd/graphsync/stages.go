package main

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
)

// stageHistograms are the histograms that say where a sync process's time
// went: the claim, the sink's apply (Neo4j) and the statement that marks a
// batch, and the batches' sizes.
var stageHistograms = map[string]string{
	"outbox_claim_duration_seconds":     "claim",
	"graphsync_projector_apply_seconds": "apply",
	"outbox_settle_duration_seconds":    "mark",
	"outbox_batch_size":                 "batch_size",
}

// stageFields sums this process's stages from its own metrics, for the line
// sync ends with: count and total of each stage, and its p50 and p99
// (estimated from its buckets, linearly within a bucket, as Prometheus'
// histogram_quantile does). Benchmarks read it; an operator reads where a
// drain spent its time without a Prometheus server.
func stageFields(g prometheus.Gatherer) []zap.Field {
	families, err := g.Gather()
	if err != nil {
		return []zap.Field{zap.String("stages_error", err.Error())}
	}
	var fields []zap.Field
	for _, family := range families {
		stage, ok := stageHistograms[family.GetName()]
		if !ok || len(family.GetMetric()) == 0 {
			continue
		}
		unit := "_seconds"
		if stage == "batch_size" {
			unit = ""
		}
		h := family.GetMetric()[0].GetHistogram()
		fields = append(fields, zap.Uint64(stage+"_count", h.GetSampleCount()), zap.Float64(stage+"_sum", h.GetSampleSum()))
		fields = append(fields, zap.Float64(stage+"_p50"+unit, bucketQuantile(h, 0.50)),
			zap.Float64(stage+"_p99"+unit, bucketQuantile(h, 0.99)))
	}
	return fields
}

// bucketQuantile estimates quantile q of a histogram from its cumulative
// buckets (sorted by upper bound, as the client library writes them).
func bucketQuantile(h *dto.Histogram, q float64) float64 {
	total := float64(h.GetSampleCount())
	if total == 0 {
		return 0
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for _, b := range h.GetBucket() {
		upper, count := b.GetUpperBound(), float64(b.GetCumulativeCount())
		if count >= rank {
			if count == below || math.IsInf(upper, 1) {
				return upper
			}
			return lower + (upper-lower)*(rank-below)/(count-below)
		}
		lower, below = upper, count
	}
	return lower // past the last finite bound
}
