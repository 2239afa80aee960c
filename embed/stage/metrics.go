package stage

import "github.com/prometheus/client_golang/prometheus"

// metrics are the stage's Prometheus collectors.
type metrics struct {
	pending       prometheus.Gauge
	oldestPending prometheus.Gauge
	embeddings    *prometheus.CounterVec // by source: model, cache
	written       prometheus.Counter
	dropped       prometheus.Counter
	errors        *prometheus.CounterVec // by kind
	modelLoad     prometheus.Gauge
	refused       prometheus.Gauge
}

// Error kinds of graphsync_embedding_errors_total.
const (
	errUnavailable = "embedder_unavailable" // retried with backoff
	errText        = "text"                 // a text the embedder refused; moved to the back
	errNeo4j       = "neo4j"
	errCache       = "cache" // the stage embeds without it
)

func newMetrics(ns string) *metrics {
	return &metrics{
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "embedding_pending",
			Help: "Nodes whose text has no current vector yet (the embedding stage's backlog), as last read."}),
		oldestPending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "embedding_oldest_pending_seconds",
			Help: "Age of the oldest pending node's mark, as last read; 0 when none is pending."}),
		embeddings: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "embeddings_total",
			Help: "Vectors the stage obtained, by source (model: embedded now; cache: read from PostgreSQL). rate() is embeddings/s."}, []string{"source"}),
		written: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "embedding_written_total",
			Help: "Vectors written to nodes that still held their text."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "embedding_dropped_total",
			Help: "Vectors not written because the node's text changed while they were computed (the guard)."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "embedding_errors_total",
			Help: "Embedding stage failures by kind: embedder_unavailable (retried with backoff), text, neo4j, cache."}, []string{"kind"}),
		modelLoad: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "embedding_model_load_seconds",
			Help: "How long opening the embedding model took at start."}),
		refused: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "embedding_refused",
			Help: "Nodes left pending because the embedder refused their present text; not sent again until the text changes or the process restarts."}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.pending, m.oldestPending, m.embeddings, m.written, m.dropped, m.errors, m.modelLoad, m.refused}
}
