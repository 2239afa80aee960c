package projector

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"graphsync/cypher"
	"graphsync/events"
	"graphsync/outbox"
)

// Projector applies outbox batches to Neo4j. It implements outbox.Sink and is
// safe for concurrent use (the relay never hands one aggregate to two
// concurrent Deliver calls).
type Projector struct {
	driver  neo4j.DriverWithContext
	cfg     Config
	builder *cypher.Builder
	log     *zap.Logger
	metrics *metrics
	// applyBatch applies items in one transaction (with the owner lookup
	// read ahead, when not nil): apply, or a fake in the bisection test.
	applyBatch func(ctx context.Context, items []*item, ahead *lookAhead) (map[int64]error, error)
	// plans is the state of the checks of Neo4j's plans (plans.go).
	plans planChecks
}

var _ outbox.Sink = (*Projector)(nil)

// New returns a Projector writing through driver. Its metrics are not
// registered: register Collectors() where the process keeps its registry.
func New(driver neo4j.DriverWithContext, cfg Config, logger *zap.Logger) (*Projector, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	builder, err := cypher.NewBuilder(*cfg.Model, cypher.BuilderOptions{EmbeddingModel: cfg.EmbeddingModel})
	if err != nil {
		return nil, fmt.Errorf("projector: %w", err)
	}
	if err := checkCoverage(*cfg.Model); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	p := &Projector{driver: driver, cfg: cfg, builder: builder, log: logger, metrics: newMetrics(cfg.MetricsNamespace)}
	p.applyBatch = p.apply
	p.plans.last, p.plans.run = time.Now(), p.checkPlans
	p.plans.ctx, p.plans.cancel = context.WithCancel(context.Background())
	return p, nil
}

// Collectors returns the projector's Prometheus collectors: apply latency,
// batch size, events by outcome and Neo4j errors.
func (p *Projector) Collectors() []prometheus.Collector { return p.metrics.collectors() }

// Deliver implements outbox.Sink. Events that do not decode, fail validation
// or name another tenant's ids are rejected, each with an error naming the
// event and the problem; an event that needs a node another aggregate's
// events have not put in the graph yet is deferred (outbox.ErrDeferred). The
// rest of the batch is applied in one write transaction (ExecuteWrite, which
// retries transient errors). When Neo4j refuses the batch because of some
// event's data, the batch is bisected between aggregates' chains, never
// inside one: the event Neo4j refuses is rejected and the rest of its chain
// held back. Deliver returns only after what it reports applied committed.
//
// err is set only when nothing was applied; it wraps outbox.ErrSinkUnavailable
// or outbox.ErrSinkBroken, or is a suspect failure (see outbox.Sink). When a
// part of the batch committed before Neo4j became unavailable, the rest is
// rejected with outbox.ErrNotApplied instead.
func (p *Projector) Deliver(ctx context.Context, batch []outbox.Message) (map[int64]error, error) {
	return p.DeliverPrepared(ctx, p.Prepare(batch))
}

// Prepared is a batch checked, decoded, translated and shaped into statement
// rows: the part of Deliver that needs no Neo4j, which a caller can do while
// an earlier batch is being written (the rebuild's replay does). Delivery
// changes nothing of it but drop LookAhead's reading, which serves one
// delivery, so a failed delivery can be retried with it (and looks up again).
type Prepared struct {
	batch []outbox.Message
	items []*item
	// rejected holds the events that failed before Neo4j, and the later
	// events of their aggregates.
	rejected map[int64]error
	// ahead is the owner lookup LookAhead read for the next delivery.
	ahead *lookAhead
}

// Prepare does the part of Deliver that needs no Neo4j: bounds, decoding,
// upcasting, validation, translation and statement rows of each event.
func (p *Projector) Prepare(batch []outbox.Message) *Prepared {
	prep := &Prepared{batch: batch, items: make([]*item, 0, len(batch)), rejected: map[int64]error{}}
	failing := failedAggregates{}
	for _, m := range batch {
		if failing.holdsBack(m, prep.rejected) {
			continue
		}
		it, err := p.prepare(m)
		if err != nil {
			failing.fail(m, prep.rejected, err)
			continue
		}
		prep.items = append(prep.items, it)
	}
	return prep
}

// DeliverPrepared is Deliver for a batch Prepare has prepared (and
// LookAhead may have looked up).
func (p *Projector) DeliverPrepared(ctx context.Context, prep *Prepared) (map[int64]error, error) {
	if prep == nil {
		return nil, errors.New("projector: DeliverPrepared needs a batch made by Prepare, got nil")
	}
	start := time.Now()
	batch, items := prep.batch, prep.items
	// A reading ahead serves one delivery: this one may apply a part of the
	// batch before it fails, which the reading would not know of.
	ahead := prep.ahead
	prep.ahead = nil
	p.metrics.batchSize.Observe(float64(len(batch)))
	rejected := maps.Clone(prep.rejected)
	if len(items) > 0 {
		run := &chainRun{p: p, rejected: rejected, applied: map[int64]bool{}, ahead: ahead}
		if err := run.apply(ctx, chainsOf(items)); err != nil {
			class := classify(err)
			if class == classSuspect && len(items) == 1 && memoryShort(err) {
				// One bounded event that Neo4j has no memory for: Neo4j's
				// memory is short (other load holds it), not the event's
				// fault. Counted, it would reach the DLQ healthy.
				class = classUnavailable
			}
			p.metrics.neo4jErrors.WithLabelValues(class.String()).Inc()
			if len(run.applied) == 0 {
				return nil, sinkError(class, fmt.Errorf("apply %d events to neo4j: %w", len(items), err))
			}
			notApplied := fmt.Errorf("%w: %w", outbox.ErrNotApplied, sinkError(class, err))
			for _, it := range items {
				if !run.applied[it.msg.ID] && rejected[it.msg.ID] == nil {
					rejected[it.msg.ID] = notApplied
				}
			}
		}
	}
	p.metrics.applySeconds.Observe(time.Since(start).Seconds())
	for _, m := range batch {
		outcome := "applied"
		switch err := rejected[m.ID]; {
		case errors.Is(err, outbox.ErrHeldBack):
			outcome = "held_back"
		case errors.Is(err, outbox.ErrDeferred):
			outcome = "deferred"
		case errors.Is(err, outbox.ErrNotApplied):
			outcome = "not_applied"
		case err != nil:
			outcome = "rejected"
		}
		p.metrics.events.WithLabelValues(metricEventType(m.EventType), outcome).Inc()
	}
	return rejected, nil
}

// aggregateKey names an aggregate within a batch.
type aggregateKey struct {
	tenantID      int64
	aggregateType string
	aggregateID   int64
}

func aggregateOf(m outbox.Message) aggregateKey {
	return aggregateKey{m.TenantID, m.AggregateType, m.AggregateID}
}

// failedAggregates is the one notion of "this aggregate failed in this
// batch" that decoding, admission and Neo4j's refusals share: once an event
// of an aggregate fails, every later event of it in the batch is held back.
type failedAggregates map[aggregateKey]bool

// fail records m's failure in rejected and marks its aggregate.
func (f failedAggregates) fail(m outbox.Message, rejected map[int64]error, err error) {
	rejected[m.ID] = err
	f[aggregateOf(m)] = true
}

// holdsBack reports whether m's aggregate failed earlier in the batch, and
// then records m as held back.
func (f failedAggregates) holdsBack(m outbox.Message, rejected map[int64]error) bool {
	if !f[aggregateOf(m)] {
		return false
	}
	rejected[m.ID] = heldBack(m)
	return true
}

// heldBack is the outcome of an event not applied because an earlier event
// of its aggregate in the batch failed: applying it would put the
// aggregate's later state in the graph ahead of the missing one.
func heldBack(m outbox.Message) error {
	return fmt.Errorf("%s: %w", eventName(m), outbox.ErrHeldBack)
}

// prepare checks the bounds, decodes, upcasts, validates and translates one
// message, and makes its statement rows (which checks them against the
// graph model).
func (p *Projector) prepare(m outbox.Message) (*item, error) {
	if m.TenantID <= 0 {
		return nil, &rejection{kind: ErrInvalidEvent, msg: fmt.Sprintf("%s: tenant_id must be > 0, got %d", eventName(m), m.TenantID)}
	}
	ev, err := events.DecodeWithin(events.Record{OutboxID: m.ID, AggregateType: m.AggregateType, AggregateID: m.AggregateID,
		EventType: m.EventType, EventVersion: m.EventVersion, Payload: m.Payload}, p.cfg.Limits)
	if err != nil {
		return nil, &rejection{kind: ErrInvalidEvent, msg: err.Error(), cause: err}
	}
	it, err := translate(m, ev)
	if err != nil {
		return nil, err
	}
	if it.rows, err = p.builder.Rows(it.mut); err != nil {
		return nil, &rejection{kind: ErrInvalidEvent, msg: it.name + ": does not fit the graph model: " + err.Error(), cause: err}
	}
	return it, nil
}

// chain is the events of one aggregate in a batch, in order.
type chain []*item

// chainsOf groups items into their aggregates' chains, in order of each
// aggregate's first event.
func chainsOf(items []*item) []chain {
	index := map[aggregateKey]int{}
	var chains []chain
	for _, it := range items {
		key := aggregateOf(it.msg)
		i, ok := index[key]
		if !ok {
			i = len(chains)
			index[key] = i
			chains = append(chains, nil)
		}
		chains[i] = append(chains[i], it)
	}
	return chains
}

// chainRun applies chains, bisecting on Neo4j's refusals, and keeps what was
// applied and rejected.
type chainRun struct {
	p        *Projector
	rejected map[int64]error
	applied  map[int64]bool
	// ahead serves the first transaction only, the whole batch: the
	// bisection's halves apply after other halves committed.
	ahead *lookAhead
}

// apply applies chains in one transaction. When Neo4j refuses it because of
// some event's data, it splits the chains in two halves (never a chain) and
// applies each; a single refused chain is split into a prefix and the rest,
// the rest applied only when the prefix went through whole. An error other
// than a data refusal stops the run: what is applied so far stays applied.
func (r *chainRun) apply(ctx context.Context, chains []chain) error {
	var items []*item
	for _, c := range chains {
		items = append(items, c...)
	}
	ahead := r.ahead
	r.ahead = nil
	refused, err := r.p.applyBatch(ctx, items, ahead)
	if err == nil {
		for _, it := range items {
			if reason := refused[it.msg.ID]; reason != nil {
				r.rejected[it.msg.ID] = reason
			} else {
				r.applied[it.msg.ID] = true
			}
		}
		return nil
	}
	if classify(err) != classData {
		return err
	}
	r.p.metrics.neo4jErrors.WithLabelValues(classData.String()).Inc()
	if len(chains) > 1 {
		half := len(chains) / 2
		if err := r.apply(ctx, chains[:half]); err != nil {
			return err
		}
		return r.apply(ctx, chains[half:])
	}
	c := chains[0]
	if len(c) == 1 {
		r.rejected[c[0].msg.ID] = &rejection{kind: ErrRefusedByNeo4j, msg: c[0].name + ": neo4j refused its writes: " + err.Error(), cause: err}
		return nil
	}
	half := len(c) / 2
	if err := r.apply(ctx, []chain{c[:half]}); err != nil {
		return err
	}
	for _, it := range c[:half] {
		if r.rejected[it.msg.ID] != nil {
			for _, later := range c[half:] {
				r.rejected[later.msg.ID] = heldBack(later.msg)
			}
			return nil
		}
	}
	return r.apply(ctx, []chain{c[half:]})
}

func (c failureClass) String() string {
	switch c {
	case classUnavailable:
		return "unavailable"
	case classBroken:
		return "broken"
	case classData:
		return "data"
	}
	return "suspect"
}

// metricEventType bounds the event_type label to the catalog.
func metricEventType(eventType string) string {
	if _, known := events.Current(eventType); known {
		return eventType
	}
	return "unknown"
}
