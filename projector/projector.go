package projector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"graphsync/cypher"
	"graphsync/events"
	"graphsync/relay"
)

// Projector applies outbox batches to Neo4j. It implements relay.Sink and is
// safe for concurrent use (the relay never hands one aggregate to two
// concurrent Deliver calls).
type Projector struct {
	driver  neo4j.DriverWithContext
	cfg     Config
	builder *cypher.Builder
	log     *zap.Logger
	metrics *metrics
	// applyBatch applies items in one transaction: apply, or a fake in the
	// bisection test.
	applyBatch func(ctx context.Context, items []*item) (map[int64]error, error)
}

var _ relay.Sink = (*Projector)(nil)

// New returns a Projector writing through driver. Its metrics are not
// registered: register Collectors() where the process keeps its registry.
func New(driver neo4j.DriverWithContext, cfg Config, logger *zap.Logger) (*Projector, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	builder, err := cypher.NewBuilder(*cfg.Model)
	if err != nil {
		return nil, fmt.Errorf("projector: %w", err)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	p := &Projector{driver: driver, cfg: cfg, builder: builder, log: logger, metrics: newMetrics(cfg.MetricsNamespace)}
	p.applyBatch = p.apply
	return p, nil
}

// Collectors returns the projector's Prometheus collectors: apply latency,
// batch size, events by outcome and Neo4j errors.
func (p *Projector) Collectors() []prometheus.Collector { return p.metrics.collectors() }

// Deliver implements relay.Sink. Events that do not decode, fail validation,
// name another tenant's ids or need a node the graph does not hold yet are
// returned in rejected, each with an error naming the event and the problem;
// nothing is written for them and the rest of the batch is applied in one
// write transaction (ExecuteWrite, which retries transient errors). Deliver
// returns only after that transaction committed. err is set only when Neo4j
// could not take the batch at all (unreachable, say): nothing was applied.
func (p *Projector) Deliver(ctx context.Context, batch []relay.Message) (map[int64]error, error) {
	start := time.Now()
	p.metrics.batchSize.Observe(float64(len(batch)))
	rejected := map[int64]error{}
	items := make([]*item, 0, len(batch))
	failing := map[aggregateKey]bool{}
	for _, m := range batch {
		key := aggregateOf(m)
		if failing[key] {
			rejected[m.ID] = heldBack(m)
			continue
		}
		it, err := p.prepare(m)
		if err != nil {
			rejected[m.ID] = err
			failing[key] = true
			continue
		}
		items = append(items, it)
	}
	if len(items) > 0 {
		refused, err := p.applyIsolating(ctx, items)
		if err != nil {
			p.metrics.neo4jErrors.WithLabelValues("unavailable").Inc()
			return nil, fmt.Errorf("apply %d events to neo4j: %w", len(items), err)
		}
		for id, reason := range refused {
			rejected[id] = reason
		}
	}
	p.metrics.applySeconds.Observe(time.Since(start).Seconds())
	for _, m := range batch {
		outcome := "applied"
		if err := rejected[m.ID]; errors.Is(err, relay.ErrHeldBack) {
			outcome = "held_back"
		} else if err != nil {
			outcome = "rejected"
		}
		p.metrics.events.WithLabelValues(metricEventType(m.EventType), outcome).Inc()
	}
	if len(rejected) > 0 {
		p.log.Debug("batch applied with rejections", zap.Int("events", len(batch)), zap.Int("rejected", len(rejected)))
	}
	return rejected, nil
}

// aggregateKey names an aggregate within a batch.
type aggregateKey struct {
	tenantID      int64
	aggregateType string
	aggregateID   int64
}

func aggregateOf(m relay.Message) aggregateKey {
	return aggregateKey{m.TenantID, m.AggregateType, m.AggregateID}
}

// heldBack is the outcome of an event not applied because an earlier event
// of its aggregate in the batch was rejected: applying it would put the
// aggregate's later state in the graph ahead of the missing one.
func heldBack(m relay.Message) error {
	return fmt.Errorf("%s: %w", eventName(m), relay.ErrHeldBack)
}

// prepare decodes, upcasts, validates and translates one message.
func (p *Projector) prepare(m relay.Message) (*item, error) {
	if m.TenantID <= 0 {
		return nil, &rejection{kind: ErrInvalidEvent, msg: fmt.Sprintf("%s: tenant_id must be > 0, got %d", eventName(m), m.TenantID)}
	}
	ev, err := events.Decode(events.Record{OutboxID: m.ID, AggregateType: m.AggregateType, AggregateID: m.AggregateID,
		EventType: m.EventType, EventVersion: m.EventVersion, Payload: m.Payload})
	if err != nil {
		return nil, &rejection{kind: ErrInvalidEvent, msg: err.Error(), cause: err}
	}
	return translate(m, ev)
}

// applyIsolating applies items in one transaction; when Neo4j refuses the
// batch because of some event's data, it bisects to find and reject that
// event and applies the rest (each half in its own transaction, in order).
func (p *Projector) applyIsolating(ctx context.Context, items []*item) (map[int64]error, error) {
	rejected, err := p.applyBatch(ctx, items)
	if err == nil {
		return rejected, nil
	}
	var dataErr *dataError
	if !errors.As(err, &dataErr) {
		return nil, err
	}
	p.metrics.neo4jErrors.WithLabelValues("data").Inc()
	if len(items) == 1 {
		p.log.Warn("neo4j refused one event; rejecting it", zap.Int64("outbox_id", items[0].msg.ID), zap.Error(err))
		return map[int64]error{items[0].msg.ID: &rejection{kind: ErrRefusedByNeo4j, msg: items[0].name + ": neo4j refused its writes: " + dataErr.Error(), cause: err}}, nil
	}
	half := len(items) / 2
	rejected = map[int64]error{}
	for _, part := range [][]*item{items[:half], items[half:]} {
		partRejected, err := p.applyIsolating(ctx, part)
		if err != nil {
			return nil, err
		}
		for id, reason := range partRejected {
			rejected[id] = reason
		}
	}
	return rejected, nil
}

// metricEventType bounds the event_type label to the catalog.
func metricEventType(eventType string) string {
	if _, known := events.Current(eventType); known {
		return eventType
	}
	return "unknown"
}
