package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sourcegraph/conc/pool"
	"go.uber.org/zap"
)

// Relay claims outbox rows and hands them to a Sink.
type Relay struct {
	cfg     Config
	pool    *pgxpool.Pool
	sink    Sink
	log     *zap.Logger
	metrics *Metrics
}

// worker is one claim-deliver loop. Each has its own lease identity
// (relay id + "/" + index), so a worker's marks and releases can never touch
// rows another worker of the same process took over.
type worker struct {
	*Relay
	store *store
}

// New checks cfg and builds a relay. pool must reach outbox_messages as a role
// that may read every tenant's rows (graphsync_relay). metrics may be nil.
func New(pool *pgxpool.Pool, sink Sink, cfg Config, log *zap.Logger, metrics *Metrics) (*Relay, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("relay config: %w", err)
	}
	if pool == nil || sink == nil {
		return nil, errors.New("relay: a pool and a sink are required")
	}
	if log == nil {
		log = zap.NewNop()
	}
	if metrics == nil {
		metrics = NewMetrics()
	}
	return &Relay{
		cfg: cfg, pool: pool, sink: sink, log: log.With(zap.String("relay_id", cfg.ID)), metrics: metrics,
	}, nil
}

// Config returns the relay's configuration with defaults filled in.
func (r *Relay) Config() Config { return r.cfg }

// Run relays until ctx is done, then finishes the batch in flight (within
// DrainTimeout; past it the batch is abandoned unmarked) and returns nil. It
// returns an error only for a problem that retrying cannot fix.
func (r *Relay) Run(ctx context.Context) error {
	waker, err := r.newWaker(ctx)
	if err != nil {
		return err
	}
	workers := pool.New().WithErrors().WithContext(context.WithoutCancel(ctx))
	workers.Go(func(context.Context) error { return waker.run(ctx) })
	for i := 0; i < r.cfg.Workers; i++ {
		wake := waker.subscribe()
		var stream <-chan streamBatch
		if i == 0 {
			// One worker takes the stream, so its rows go out in commit order.
			stream = waker.stream
		}
		w := &worker{Relay: r, store: &store{pool: r.pool, relayID: fmt.Sprintf("%s/%d", r.cfg.ID, i), cfg: r.cfg}}
		workers.Go(func(context.Context) error { return w.work(ctx, wake, stream) })
	}
	return workers.Wait()
}

// work is one claim-deliver loop: on a wake-up it drains what is due; on a
// stream batch it delivers exactly those rows.
func (r *worker) work(ctx context.Context, wake <-chan struct{}, stream <-chan streamBatch) error {
	backoff := newBackoff(r.cfg.SinkBackoff, r.cfg.SinkBackoffMax)
	for {
		select {
		case <-ctx.Done():
			return nil
		case first := <-stream:
			r.streamPass(ctx, r.gatherStream(first, stream), backoff)
		case <-wake:
			r.drain(ctx, backoff)
		}
	}
}

// drain claims and delivers until a claim comes back short.
func (r *worker) drain(ctx context.Context, backoff *backoff) {
	for ctx.Err() == nil {
		result := r.pass(ctx, r.store.OutboxClaim)
		if result.err != nil {
			wait := backoff.next()
			r.log.Warn("relay pass failed; backing off", zap.Error(result.err), zap.Duration("backoff", wait))
			sleepCtx(ctx, wait)
			continue
		}
		backoff.reset()
		if result.claimed < r.cfg.BatchSize {
			return
		}
	}
}

// awaitVisible waits up to about a second until every one of ids is visible.
// Rows still out of sight then are left to the fallback poll.
func (r *worker) awaitVisible(ctx context.Context, ids []int64) error {
	wait := 500 * time.Microsecond
	deadline := time.Now().Add(time.Second)
	for {
		unseen, err := r.store.OutboxNotVisible(ctx, ids)
		if err != nil || len(unseen) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			r.log.Warn("streamed rows not visible after a second; leaving them to the fallback poll", zap.Int64s("outbox_ids", unseen))
			return nil
		}
		if !sleepCtx(ctx, wait) {
			return ctx.Err()
		}
		wait = min(wait*2, 100*time.Millisecond)
	}
}

// gatherStream merges stream batches already waiting, up to BatchSize rows.
func (r *worker) gatherStream(first streamBatch, stream <-chan streamBatch) []streamBatch {
	batches := []streamBatch{first}
	size := len(first.ids)
	for size < r.cfg.BatchSize {
		select {
		case next := <-stream:
			batches = append(batches, next)
			size += len(next.ids)
		default:
			return batches
		}
	}
	return batches
}

// streamPass delivers the rows the stream named, retrying while the sink or
// PostgreSQL is unavailable, and only then lets the stream confirm them.
func (r *worker) streamPass(ctx context.Context, batches []streamBatch, backoff *backoff) {
	var ids []int64
	for _, b := range batches {
		ids = append(ids, b.ids...)
	}
	// A large transaction is delivered in BatchSize chunks, in commit order.
	for len(ids) > 0 && ctx.Err() == nil {
		chunk := ids[:min(len(ids), r.cfg.BatchSize)]
		// Logical decoding can hand over a commit a moment before it is
		// visible to other snapshots; a row claimed too early would be
		// missed and block its aggregate until the fallback poll. Visibility
		// only ever grows, so waiting for it before the claim is enough.
		if err := r.awaitVisible(ctx, chunk); err != nil {
			r.log.Warn("relay stream pass: visibility check failed", zap.Error(err))
		}
		result := r.pass(ctx, func(ctx context.Context) (claimed, error) { return r.store.OutboxClaimByID(ctx, chunk) })
		if result.err != nil {
			wait := backoff.next()
			r.log.Warn("relay stream pass failed; backing off", zap.Error(result.err), zap.Duration("backoff", wait))
			sleepCtx(ctx, wait)
			continue
		}
		backoff.reset()
		ids = ids[len(chunk):]
	}
	if ctx.Err() != nil {
		return // not confirmed: the slot will replay them, the rows are in the outbox anyway
	}
	for _, b := range batches {
		b.done()
	}
}

type passResult struct {
	claimed int
	err     error
}

// pass claims one batch, delivers it and records the outcome.
func (r *worker) pass(ctx context.Context, claim func(context.Context) (claimed, error)) passResult {
	start := time.Now()
	c, err := claim(ctx)
	r.metrics.claimDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		return passResult{err: err}
	}
	if len(c.deadLettered) > 0 {
		r.metrics.dlqMoved.Add(float64(len(c.deadLettered)))
		r.log.Error("dead-lettered rows whose last attempt recorded no outcome (relay stopped, or lost PostgreSQL before marking)",
			zap.Int64s("outbox_ids", c.deadLettered))
	}
	claimedCount := c.candidates
	if len(c.messages) == 0 {
		return passResult{claimed: claimedCount}
	}
	r.metrics.batchSize.Observe(float64(len(c.messages)))
	if err := r.deliver(ctx, c.messages); err != nil {
		return passResult{claimed: claimedCount, err: err}
	}
	return passResult{claimed: claimedCount}
}

// deliver hands a claimed batch to the sink under a renewed lease and records
// the outcome. The sink runs on a context that outlives a soft stop by
// DrainTimeout, so a stopping relay finishes its batch when it can.
func (r *worker) deliver(ctx context.Context, batch []Message) error {
	ids := messageIDs(batch)
	deliverCtx, cancel := drainContext(ctx, r.cfg.DrainTimeout)
	defer cancel()

	renewDone := make(chan struct{})
	renewStopped := make(chan struct{})
	go func() {
		defer close(renewStopped)
		r.renewLease(deliverCtx, ids, renewDone)
	}()
	rejected, sinkErr := r.sink.Deliver(deliverCtx, batch)
	close(renewDone)
	<-renewStopped

	// Bookkeeping must happen even when ctx was cancelled mid-delivery; it is
	// bounded by its own timeout instead.
	bookCtx, bookCancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer bookCancel()
	if sinkErr != nil {
		r.metrics.sinkErrors.Inc()
		if err := r.store.OutboxRelease(bookCtx, ids); err != nil {
			return errors.Join(fmt.Errorf("sink: %w", sinkErr), err)
		}
		return fmt.Errorf("sink could not take a batch of %d: %w", len(batch), sinkErr)
	}
	var applied, failed []Message
	var heldBack []int64
	for _, m := range batch {
		rejectErr := rejected[m.ID]
		switch {
		case rejectErr == nil:
			applied = append(applied, m)
		case errors.Is(rejectErr, ErrHeldBack):
			heldBack = append(heldBack, m.ID)
		default:
			failed = append(failed, m)
		}
	}
	if len(heldBack) > 0 {
		if err := r.store.OutboxRelease(bookCtx, heldBack); err != nil {
			return err
		}
	}
	if len(applied) > 0 {
		marked, err := r.store.OutboxMarkProcessed(bookCtx, messageIDs(applied))
		if err != nil {
			// The graph has the effect; the rows will be delivered again after
			// their lease and the sink's guards make that a no-op.
			return err
		}
		if marked < int64(len(applied)) {
			r.log.Warn("some delivered rows had lost their lease to another relay; they may be delivered again",
				zap.Int("delivered", len(applied)), zap.Int64("marked", marked))
		}
		r.metrics.processed.Add(float64(marked))
	}
	if len(failed) > 0 {
		for _, m := range failed {
			r.metrics.failures.WithLabelValues(m.EventType).Inc()
			r.log.Warn("sink rejected event", zap.Int64("outbox_id", m.ID), zap.String("event_type", m.EventType),
				zap.Int64("tenant_id", m.TenantID), zap.String("aggregate_type", m.AggregateType),
				zap.Int64("aggregate_id", m.AggregateID), zap.String("trace_id", m.TraceID),
				zap.Int16("attempt", m.Attempts), zap.Error(rejected[m.ID]))
		}
		moved, err := r.store.OutboxFail(bookCtx, failed, rejected)
		if err != nil {
			return err
		}
		if len(moved) > 0 {
			r.metrics.dlqMoved.Add(float64(len(moved)))
			r.log.Error("moved events to the DLQ after their last attempt", zap.Int64s("outbox_ids", moved))
		}
	}
	return nil
}

// renewLease extends the batch's lease every Lease/3 until done is closed.
func (r *worker) renewLease(ctx context.Context, ids []int64, done <-chan struct{}) {
	ticker := time.NewTicker(r.cfg.Lease / 3)
	defer ticker.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-ticker.C:
			if err := r.store.OutboxExtendLease(ctx, ids); err != nil {
				r.log.Warn("could not renew lease", zap.Error(err))
			}
		}
	}
}

// drainContext outlives parent's cancellation by grace, so work in flight can
// finish after a soft stop.
func drainContext(parent context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	stop := context.AfterFunc(parent, func() {
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-timer.C:
			cancel()
		case <-ctx.Done():
		}
	})
	return ctx, func() {
		stop()
		cancel()
	}
}

// sleepCtx waits d or until ctx is done; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

type backoff struct {
	first, max, current time.Duration
}

func newBackoff(first, max time.Duration) *backoff { return &backoff{first: first, max: max} }

func (b *backoff) next() time.Duration {
	if b.current == 0 {
		b.current = b.first
	} else {
		b.current = min(b.current*2, b.max)
	}
	return b.current
}

func (b *backoff) reset() { b.current = 0 }
