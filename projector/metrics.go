package projector

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	applySeconds prometheus.Histogram
	batchSize    prometheus.Histogram
	events       *prometheus.CounterVec
	neo4jErrors  *prometheus.CounterVec
}

func newMetrics(namespace string) *metrics {
	return &metrics{
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "projector", Name: "apply_seconds",
			Help:    "Time to apply one prepared (decoded, translated) batch to Neo4j: owner lookup, admission, statements, retries.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "projector", Name: "batch_size",
			Help:    "Events per delivered batch.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "projector", Name: "events_total",
			Help: "Events by type and outcome (applied, rejected).",
		}, []string{"event_type", "outcome"}),
		neo4jErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "projector", Name: "neo4j_errors_total",
			Help: "Failed Neo4j transactions by kind: unavailable (batch retried later) or data (isolated by bisection).",
		}, []string{"kind"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.applySeconds, m.batchSize, m.events, m.neo4jErrors}
}
