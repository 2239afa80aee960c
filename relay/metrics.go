package relay

import (
	"graphsync/redact"

	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	gsql "graphsync/sql"
)

// Metrics are the relay's Prometheus collectors: the seed's required four
// (outbox_lag_seconds, outbox_throughput, outbox_failures, outbox_dlq_depth)
// plus claim latency, batch size and what the service needs to page on.
type Metrics struct {
	processed       prometheus.Counter
	failures        *prometheus.CounterVec
	failureTypes    eventTypeLabels
	dlqMoved        prometheus.Counter
	sinkErrors      prometheus.Counter
	claimDuration   prometheus.Histogram
	settleDuration  prometheus.Histogram
	batchSize       prometheus.Histogram
	claimLimit      prometheus.Histogram
	slotLagBytes    prometheus.Gauge
	streamPosition  prometheus.Gauge
	deferred        prometheus.Counter
	sinkBrokenGauge prometheus.Gauge
	passErrors      prometheus.Counter
}

// NewMetrics builds unregistered collectors; register them with Collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		processed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_throughput", Help: "Outbox messages delivered and marked processed.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_failures", Help: "Outbox messages the sink rejected, by event_type.",
		}, []string{"event_type"}),
		dlqMoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_dlq_moved_total", Help: "Outbox messages moved to the DLQ by this process.",
		}),
		sinkErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_sink_unavailable_total", Help: "Batches the sink could not take at all (released uncounted).",
		}),
		claimDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "outbox_claim_duration_seconds", Help: "Latency of one claim transaction.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		settleDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "outbox_settle_duration_seconds", Help: "Latency of the statement that ends a batch: marks the applied rows processed, hands back the rest and ends the batch.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "outbox_batch_size", Help: "Messages per delivered batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		claimLimit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "outbox_claim_limit_rows", Help: "Most rows each poll claim could take: --batch-size, doubling while a backlog lasts up to --backlog-batch-size; lower while a failing batch is split down or when large events filled the byte bound. Batches come out smaller when rows of aggregates in flight are left for later.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		slotLagBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_replication_slot_lag_bytes", Help: "WAL the stream mode's slot retains (server WAL end minus confirmed position).",
		}),
		streamPosition: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_replication_confirmed_lsn", Help: "The stream mode's last confirmed LSN.",
		}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_deferred_total", Help: "Valid events handed back uncounted because they wait for another aggregate's events.",
		}),
		passErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_pass_errors_total", Help: "Relay passes that failed and backed off: a claim, settle or failure record PostgreSQL refused (a DLQ that refuses rows, say), or a sink that could not take a batch. The log has each error.",
		}),
		sinkBrokenGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_sink_broken", Help: "1 while the sink reports it cannot apply anything (syntax, parameters, credentials, schema); the relay does not claim then.",
		}),
	}
}

// StageCollectors are the histograms of the relay's stages (claim, mark,
// batch size), without the gauges that query PostgreSQL: a process reads
// them as it stops, when PostgreSQL may be gone.
func (m *Metrics) StageCollectors() []prometheus.Collector {
	return []prometheus.Collector{m.claimDuration, m.settleDuration, m.batchSize}
}

// Collectors returns the collectors to register, including the gauges read
// from PostgreSQL at scrape time through pool.
func (m *Metrics) Collectors(pool *pgxpool.Pool) []prometheus.Collector {
	return []prometheus.Collector{m.processed, m.failures, m.dlqMoved, m.sinkErrors, m.claimDuration,
		m.settleDuration, m.batchSize, m.claimLimit, m.slotLagBytes, m.streamPosition, m.deferred, m.sinkBrokenGauge, m.passErrors, &statsCollector{pool: pool}}
}

var (
	lagDesc = prometheus.NewDesc("outbox_lag_seconds",
		"Age of the oldest pending outbox message (0 when none is pending).", nil, nil)
	dlqDepthDesc = prometheus.NewDesc("outbox_dlq_depth",
		"Rows in outbox_messages_dlq.", nil, nil)
	blockedDesc = prometheus.NewDesc("outbox_blocked_aggregates",
		"Aggregates whose pending events wait behind a failing event.", nil, nil)
	waitingDesc = prometheus.NewDesc("outbox_waiting_aggregates",
		"Aggregates whose next event waits for another aggregate's events (an order whose product is not in the graph), uncounted.", nil, nil)
	longestWaitDesc = prometheus.NewDesc("outbox_longest_wait_seconds",
		"How long the aggregate waiting longest for another aggregate's events has waited (0 when none waits).", nil, nil)
	statsUpDesc = prometheus.NewDesc("outbox_stats_up",
		"1 when the outbox gauges could be read from PostgreSQL at this scrape.", nil, nil)
)

// statsCollector reads the outbox gauges from PostgreSQL at scrape time, so
// every process reports the same truth and nothing is cached stale.
type statsCollector struct{ pool *pgxpool.Pool }

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lagDesc
	ch <- dlqDepthDesc
	ch <- blockedDesc
	ch <- waitingDesc
	ch <- longestWaitDesc
	ch <- statsUpDesc
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	stats, err := ReadStats(context.Background(), c.pool)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(statsUpDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(statsUpDesc, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, stats.LagSeconds)
	ch <- prometheus.MustNewConstMetric(dlqDepthDesc, prometheus.GaugeValue, float64(stats.DLQDepth))
	ch <- prometheus.MustNewConstMetric(blockedDesc, prometheus.GaugeValue, float64(stats.BlockedAggregates))
	ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, float64(stats.WaitingAggregates))
	ch <- prometheus.MustNewConstMetric(longestWaitDesc, prometheus.GaugeValue, stats.LongestWaitSeconds)
}

// Stats is the outbox's state as the gauges report it.
type Stats struct {
	LagSeconds        float64
	DLQDepth          int64
	BlockedAggregates int64
	// WaitingAggregates wait for another aggregate's events (deferred);
	// LongestWaitSeconds is how long the first of them has waited.
	WaitingAggregates  int64
	LongestWaitSeconds float64
}

// ReadStats reads the outbox gauges, within 5 seconds.
func ReadStats(ctx context.Context, pool *pgxpool.Pool) (Stats, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var s Stats
	err := pool.QueryRow(ctx, gsql.Query("OutboxStats")).Scan(&s.LagSeconds, &s.DLQDepth, &s.BlockedAggregates,
		&s.WaitingAggregates, &s.LongestWaitSeconds)
	return s, err
}

// PendingFlowing reports whether any pending row is neither failing nor
// waiting behind a failing row of its aggregate, nor of an aggregate that
// has waited for another aggregate's events for longer than waited (the
// event it waits for is in the DLQ, or never came); false means caught up.
func PendingFlowing(ctx context.Context, pool *pgxpool.Pool, waited time.Duration) (bool, error) {
	var flowing bool
	if err := pool.QueryRow(ctx, gsql.Query("OutboxPendingFlowing"), waited).Scan(&flowing); err != nil {
		return false, fmt.Errorf("check pending outbox rows: %w", err)
	}
	return flowing, nil
}

// maxEventTypeLabels bounds the event_type values outbox_failures takes: the
// type is producer text, and a producer that writes a new one per event
// (an id in the type, say) would otherwise grow every process's memory and
// the scrape without end. Types past the bound count as "other".
const maxEventTypeLabels = 64

// eventTypeLabels turns producer event types into bounded label values:
// valid UTF-8 (the client panics on anything else), at most 64 bytes, and
// at most maxEventTypeLabels distinct values.
type eventTypeLabels struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (l *eventTypeLabels) label(eventType string) string {
	v := redact.Clip(strings.ToValidUTF8(eventType, "\uFFFD"), 64)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[v] {
		return v
	}
	if len(l.seen) >= maxEventTypeLabels {
		return "other"
	}
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	l.seen[v] = true
	return v
}

// failed counts a failure of an event of eventType.
func (m *Metrics) failed(eventType string) {
	m.failures.WithLabelValues(m.failureTypes.label(eventType)).Inc()
}
