package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
)

// The line sync ends with carries each stage's count and total and the
// percentiles of each, estimated inside the bucket they fall in.
func TestStageFields(t *testing.T) {
	claim := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "outbox_claim_duration_seconds",
		Buckets: []float64{0.001, 0.002, 0.004, 0.008}})
	apply := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "graphsync_projector_apply_seconds"})
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "outbox_throughput"})
	registry := prometheus.NewRegistry()
	registry.MustRegister(claim, apply, other)
	// 98 claims between 1 and 2 ms, 2 between 4 and 8 ms.
	for range 98 {
		claim.Observe(0.0015)
	}
	claim.Observe(0.005)
	claim.Observe(0.006)
	apply.Observe(0.25)
	other.Add(7)

	got := map[string]any{}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range stageFields(registry) {
		f.AddTo(enc)
	}
	for k, v := range enc.Fields {
		got[k] = v
	}
	if got["claim_count"] != uint64(100) || got["apply_count"] != uint64(1) || got["apply_sum"] != 0.25 {
		t.Fatalf("stage fields %v", got)
	}
	if _, ok := got["outbox_throughput_count"]; ok {
		t.Fatalf("a metric that is no stage was reported: %v", got)
	}
	// The 50th claim is in the (1 ms, 2 ms] bucket, halfway through its 98.
	if p50 := got["claim_p50_seconds"].(float64); p50 < 0.001 || p50 > 0.002 {
		t.Fatalf("claim p50 %v, want within (0.001, 0.002]", p50)
	}
	// The 99th is in the (4 ms, 8 ms] bucket.
	if p99 := got["claim_p99_seconds"].(float64); p99 <= 0.004 || p99 > 0.008 {
		t.Fatalf("claim p99 %v, want within (0.004, 0.008]", p99)
	}
	// Every stage has its percentiles: the one apply is in (0.1 s, 0.25 s]
	// of the default buckets; batch sizes are counts, not seconds.
	if p99 := got["apply_p99_seconds"].(float64); p99 <= 0.1 || p99 > 0.25 {
		t.Fatalf("apply p99 %v, want within (0.1, 0.25]", p99)
	}
}
