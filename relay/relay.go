package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sourcegraph/conc/pool"
	"go.uber.org/zap"

	"graphsync/outbox"
	"graphsync/redact"
)

// Relay claims outbox rows and hands them to a Sink.
type Relay struct {
	cfg     Config
	pool    *pgxpool.Pool
	sink    outbox.Sink
	log     *zap.Logger
	metrics *Metrics
	health  *health
	stats   *statistics
}

// worker is one claim-deliver loop, named relay id + "/" + index. Each of
// its claims leases under that name + "#" + a claim count (store.nextHolder),
// so a batch's marks and releases can never touch rows or aggregates that
// another worker, or a later claim of its own, took over.
type worker struct {
	*Relay
	store *store
	// limit is the most rows the next claim takes: BatchSize, halved after
	// each batch that failed with no event singled out, so a batch that
	// keeps failing is split down to single events (see Sink).
	limit int
	// holdTimer wakes the worker when the first hold runs out (holdAt);
	// only the worker's goroutine sets them (wakeForHolds).
	holdTimer *time.Timer
	holdAt    time.Time
	// failedSince is set when failures are recorded (each makes a hold); a
	// stream pass that made one arms the hold's wake-up (streamPass).
	failedSince atomic.Bool
	// rewake asks this worker to look for due rows again (deferred rows
	// become due after DependencyWait, before any poll would find them).
	rewake chan struct{}
}

// New checks cfg and builds a relay. pool must reach outbox_messages as a role
// that may read every tenant's rows (graphsync_relay). metrics may be nil.
func New(pool *pgxpool.Pool, sink outbox.Sink, cfg Config, log *zap.Logger, metrics *Metrics) (*Relay, error) {
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
	log = log.With(zap.String("relay_id", cfg.ID))
	return &Relay{
		cfg: cfg, pool: pool, sink: sink, log: log, metrics: metrics,
		health: &health{metrics: metrics}, stats: newStatistics(pool, log, cfg),
	}, nil
}

// newWorker is the relay's worker i, with its own claim identity.
func (r *Relay) newWorker(i int) *worker {
	return &worker{Relay: r, store: &store{pool: r.pool, relayID: fmt.Sprintf("%s/%d", r.cfg.ID, i), cfg: r.cfg, stats: r.stats},
		limit: r.cfg.BatchSize, rewake: make(chan struct{}, 1)}
}

// Config returns the relay's configuration with defaults filled in.
func (r *Relay) Config() Config { return r.cfg }

// Run relays until ctx is done, then finishes the batch in flight (within
// DrainTimeout; past it the batch is abandoned unmarked) and returns nil. It
// returns an error only for a problem that retrying cannot fix.
func (r *Relay) Run(ctx context.Context) error {
	waker, err := r.newWaker(ctx)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil // stopped while it prepared: nothing was claimed
		}
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
		w := r.newWorker(i)
		workers.Go(func(context.Context) error { return w.work(ctx, wake, stream) })
	}
	err = workers.Wait()
	r.stats.wait()
	return err
}

// work is one claim-deliver loop: on a wake-up it drains what is due; on a
// stream batch it delivers exactly those rows.
func (r *worker) work(ctx context.Context, wake <-chan struct{}, stream <-chan streamBatch) error {
	backoff := newBackoff(r.cfg.SinkBackoff, r.cfg.SinkBackoffMax)
	for {
		// Stream batches go first: they carry the slot's confirmation, and
		// a drain gives way to them (see drain).
		select {
		case first := <-stream:
			r.streamPass(ctx, r.gatherStream(first, stream), backoff)
			continue
		default:
		}
		select {
		case <-ctx.Done():
			return nil
		case first := <-stream:
			r.streamPass(ctx, r.gatherStream(first, stream), backoff)
		case <-wake:
			r.drain(ctx, backoff, stream)
		case <-r.rewake:
			r.drain(ctx, backoff, stream)
		}
	}
}

// wakeForHolds makes the worker look for due rows again when the first hold
// (a row deferred or failed, and its aggregate's rows behind it) runs out:
// a settle wakes the worker when the first row it deferred is due, but the
// other rows of that batch, and holds of other relays, may be due later, and
// the next poll may be far (stream mode's fallback poll: 30 s). One timer
// per worker, for the earliest hold.
func (r *worker) wakeForHolds(ctx context.Context) {
	// Bounded like a claim: a connection that went silent (a partition the
	// kernel has not noticed yet) must not hold the worker for minutes.
	qctx, cancel := context.WithTimeout(ctx, r.cfg.Lease)
	defer cancel()
	d, ok, err := r.store.NextHoldEnds(qctx)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("could not read when the next hold runs out; held rows wait for the next poll",
				zap.String("error", redact.Text(err.Error())))
		}
		return
	}
	if !ok {
		return
	}
	at := time.Now().Add(d)
	if r.holdTimer != nil && r.holdAt.After(time.Now()) && !r.holdAt.After(at) {
		return // an earlier wake-up is set
	}
	if r.holdTimer != nil {
		r.holdTimer.Stop()
	}
	r.holdAt = at
	r.holdTimer = time.AfterFunc(d, r.rewakeNow)
}

// wakeAfter makes the worker look for due rows again after d.
func (r *worker) wakeAfter(d time.Duration) {
	time.AfterFunc(d, r.rewakeNow)
}

// rewakeNow asks the worker to look for due rows again; a request already
// waiting covers it.
func (r *worker) rewakeNow() {
	select {
	case r.rewake <- struct{}{}:
	default:
	}
}

// drain claims and delivers until a claim takes nothing. A claim that took
// fewer rows than it could does not end the drain: rows held back behind a
// failing one, deferred or just released can leave a claim short while due
// rows remain.
//
// While the sink applies one batch, the next is claimed, so PostgreSQL's
// work overlaps the sink's; behind a sink faster than the settle, the claim
// ahead runs beside the previous batch's settle (docs/adr/0012). The next
// batch cannot hold an aggregate of the one in delivery (that batch stays in
// outbox_batches until it is settled, and claims leave its aggregates
// alone), so per-aggregate order and "mark only after the sink committed"
// are unchanged. A batch claimed ahead is handed back uncounted when the one
// before it failed. Likewise a delivered batch is settled (marked, its batch
// ended) while the next one is delivered: it stays in flight until then, so
// no batch delivered meanwhile holds one of its aggregates.
// A failed settle counts as a failure of the batch delivered beside it; one
// still running when the drain ends is waited for, and a failure of it
// logged.
//
// The worker that serves the replication stream also drains for the
// fallback poll. Under steady writes a drain never meets an empty claim, so
// it gives way as soon as stream batches wait (it claims nothing more, and
// asks to be woken again after them): otherwise the stream's rows would wait
// behind it, unconfirmed, and the slot would hold the WAL back.
func (r *worker) drain(ctx context.Context, backoff *backoff, stream <-chan streamBatch) {
	var ahead *claimed
	// settled is the outcome of the previous batch's settle, which runs
	// while the next batch is delivered. Every way out of the drain waits
	// for it.
	var settled chan error
	awaitSettled := func() error {
		if settled == nil {
			return nil
		}
		err := <-settled
		settled = nil
		return err
	}
	defer func() {
		if err := awaitSettled(); err != nil {
			r.log.Warn("could not settle a delivered batch; its rows are delivered again when their lease runs out",
				zap.String("error", redact.Text(err.Error())))
		}
	}()
	for ctx.Err() == nil {
		if ahead == nil && len(stream) > 0 {
			r.wakeAfter(0)
			return
		}
		var c claimed
		if ahead != nil {
			c, ahead = *ahead, nil
		} else {
			// Like the claim ahead, a claim sees the batch before it
			// settled: rows behind its aggregates are due only then.
			if err := awaitSettled(); err != nil {
				r.waitAfter(ctx, err, backoff)
				continue
			}
			var err error
			if c, err = r.claimPoll(ctx, r.limit); err != nil {
				if ctx.Err() != nil {
					return // stopping: a cancelled claim is no failure
				}
				r.waitAfter(ctx, err, backoff)
				continue
			}
			if c.taken() == 0 {
				r.wakeForHolds(ctx)
				return
			}
		}
		limit := r.limit // apply may change r.limit while the next claim runs
		type outcome struct {
			st  settlement
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			st, err := r.apply(ctx, c)
			done <- outcome{st, err}
		}()
		// The previous batch's settle has run beside the start of this
		// delivery. While the sink is still applying, the claim ahead waits
		// for that settle, so that it sees that batch ended and its rows
		// marked (rows behind them would otherwise be held back and the
		// claim come out short); the wait costs nothing, as the
		// sink is slower. A sink that is done first (fast, or a small
		// batch) would leave the settle alone on the drain's path: then the
		// claim ahead runs beside it. Either way the claim sees the previous
		// batch in flight or ended, never in between (one settle
		// statement), so order holds as for a claim beside another
		// worker's settle. A failure of that settle counts as this batch's
		// own.
		var applied outcome
		var settleErr error
		appliedFirst := false
		if settled != nil {
			select {
			case applied = <-done:
				appliedFirst = true
			case settleErr = <-settled:
				settled = nil
			}
		}
		var next claimed
		var nextErr error
		claimedAhead := time.Now()
		// applied.err is set only if the sink is done (first) and failed:
		// a batch claimed ahead would only be handed back.
		if settleErr == nil && applied.err == nil && len(stream) == 0 {
			next, nextErr = r.claimPoll(ctx, limit)
		}
		if appliedFirst {
			settleErr = awaitSettled()
		} else {
			applied = <-done
		}
		if err := errors.Join(applied.err, settleErr); err != nil {
			err = errors.Join(err, r.settle(ctx, c, applied.st))
			if nextErr == nil {
				r.handBack(ctx, next)
			}
			r.waitAfter(ctx, err, backoff)
			continue
		}
		// Marked while the next batch is delivered: this batch stays in
		// flight until its settle ends it, so the next batch, claimed
		// meanwhile, holds none of its aggregates, and a row is still
		// marked only after the sink committed it.
		settled = make(chan error, 1)
		go func() { settled <- r.settle(ctx, c, applied.st) }()
		backoff.reset()
		r.sizeForBacklog(c)
		switch {
		case ctx.Err() != nil:
			if nextErr == nil {
				r.handBack(ctx, next)
			}
		case nextErr != nil:
			r.waitAfter(ctx, nextErr, backoff)
		case time.Since(claimedAhead) > r.cfg.Lease/2:
			// It waited behind a slow batch without renewing its lease,
			// which may be running out (and another relay may take its
			// aggregates then): hand it back rather than deliver it.
			r.handBack(ctx, next)
		case next.taken() > 0:
			ahead = &next
		}
		// An empty claim ahead proves nothing yet: rows this batch released
		// or held back are due once its settle commits. The next round
		// claims afresh, after that settle.
	}
	if ahead != nil {
		r.handBack(ctx, *ahead) // stopped between claiming it and delivering it
	}
}

// sizeForBacklog sets the next claim's limit after claim c, which could look
// at c.limit due rows and looked at c.window: a full window means a backlog
// (even when rows of aggregates in flight left the batch itself short), so
// the next may take twice as many (up to BacklogBatchSize); a short one
// returns to BatchSize. A limit below BatchSize (a suspect batch being split
// down) is left to deliver. A claim the byte bound ended (MaxBatchBytes)
// sets the next to look at about twice the rows it took: each claim
// measures every payload of its window, and a window of large events many
// times what the bound lets through would be read whole each time.
func (r *worker) sizeForBacklog(c claimed) {
	switch {
	case r.limit < r.cfg.BatchSize:
	case c.taken() < c.window && 2*c.payloadBytes() >= r.cfg.MaxBatchBytes:
		r.limit = min(r.limit, max(1, 2*c.taken()))
	case c.window >= c.limit:
		r.limit = min(r.cfg.BacklogBatchSize, max(r.limit, c.limit*2))
	default:
		r.limit = r.cfg.BatchSize
	}
}

// claimPoll is one timed poll claim of up to limit rows.
func (r *worker) claimPoll(ctx context.Context, limit int) (claimed, error) {
	start := time.Now()
	c, err := r.store.OutboxClaim(ctx, limit)
	r.metrics.claimDuration.Observe(time.Since(start).Seconds())
	r.metrics.claimLimit.Observe(float64(limit))
	c.limit = limit
	return c, err
}

// handBack releases a claimed batch that will not be delivered, uncounted.
func (r *worker) handBack(ctx context.Context, c claimed) {
	if c.taken() == 0 {
		return
	}
	st := settlement{released: append(messageIDs(c.messages), messageIDs(c.unreadable)...)}
	bookCtx, cancel := bookkeeping(ctx)
	defer cancel()
	if _, _, err := r.store.OutboxSettle(bookCtx, c.holder, st); err != nil {
		r.log.Warn("could not hand back a batch claimed ahead; its rows are free again when their lease runs out",
			zap.Int("rows", len(st.released)), zap.String("error", redact.Text(err.Error())))
	}
}

// waitAfter waits after a failed pass: the broken-sink interval, or the
// next backoff step.
func (r *worker) waitAfter(ctx context.Context, err error, backoff *backoff) {
	if errors.Is(err, errSuspectBatch) {
		return // the batch was released to be retried smaller, at once
	}
	r.metrics.passErrors.Inc()
	wait := backoff.next()
	if errors.Is(err, outbox.ErrSinkBroken) {
		wait = r.cfg.SinkBackoffMax
	}
	r.log.Warn("relay pass failed; backing off", zap.String("error", redact.Text(err.Error())), zap.Duration("backoff", wait))
	sleepCtx(ctx, wait)
}

// awaitVisible waits up to about a second until every one of ids is visible.
// Rows still out of sight then are left to the fallback poll.
func (r *worker) awaitVisible(ctx context.Context, ids []int64) error {
	wait := 500 * time.Microsecond
	deadline := time.Now().Add(time.Second)
	// The lookups are bounded too: a PostgreSQL that does not answer must
	// not hold the stream's worker for ever.
	qctx, cancel := context.WithDeadline(ctx, deadline.Add(time.Second))
	defer cancel()
	for {
		unseen, err := r.store.OutboxNotVisible(qctx, ids)
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

// gatherStream merges stream batches already waiting, up to
// BacklogBatchSize rows: batches waiting are a backlog, and nothing waits
// for more to come.
func (r *worker) gatherStream(first streamBatch, stream <-chan streamBatch) []streamBatch {
	batches := []streamBatch{first}
	size := len(first.ids)
	for size < r.cfg.BacklogBatchSize {
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
//
// Batches of a replication connection gone are skipped: nothing confirmed
// their rows, so the next connection names them again, and its own
// transactions must not wait behind the old connection's backlog (at load
// 19, every new connection let go before its first transaction came up, and
// the slot did not move for minutes). A pass already running finishes: its
// chunks are progress for the connection open now (streamer.progressed),
// and the rows it delivers are found marked when they come again.
func (r *worker) streamPass(ctx context.Context, batches []streamBatch, backoff *backoff) {
	batches = slices.DeleteFunc(batches, func(b streamBatch) bool { return !b.isLive() })
	if len(batches) == 0 {
		return
	}
	ids := batches[0].ids
	if len(batches) > 1 {
		ids = nil
		for _, b := range batches {
			ids = append(ids, b.ids...)
		}
	}
	// A large transaction is delivered in chunks, in commit order. ids[next:]
	// have not been in a chunk yet; left are rows of earlier chunks that a
	// claim left, claimed again first. The ids are never copied: a
	// transaction of millions of rows costs its ids and one chunk.
	var left []int64
	next := 0
	byteLimit := 0 // set once the byte bound ended a claim
	dropped := false
	for (len(left) > 0 || next < len(ids)) && ctx.Err() == nil {
		limit := r.limit
		if limit >= r.cfg.BatchSize {
			limit = r.cfg.BacklogBatchSize // what was gathered is a backlog already
		}
		if byteLimit > 0 {
			limit = min(limit, byteLimit)
		}
		var chunk, fresh []int64
		if n := min(limit, len(left)+len(ids)-next); n <= len(left) {
			chunk = left[:n]
		} else {
			fresh = ids[next : next+n-len(left)]
			chunk = fresh
			if len(left) > 0 {
				chunk = slices.Concat(left, fresh)
			}
		}
		restOfLeft := left[len(chunk)-len(fresh):]
		next += len(fresh)
		// Logical decoding can hand over a commit a moment before it is
		// visible to other snapshots; a row claimed too early would be
		// missed and block its aggregate until the fallback poll. Visibility
		// only ever grows, so waiting for it once, before a row's first
		// claim, is enough: the rows left by a claim were waited for.
		if len(fresh) > 0 {
			if err := r.awaitVisible(ctx, fresh); err != nil {
				r.log.Warn("relay stream pass: visibility check failed", zap.String("error", redact.Text(err.Error())))
			}
		}
		took := map[int64]bool{}
		var tookBytes int64
		err := r.pass(ctx, func(ctx context.Context) (claimed, error) {
			c, err := r.store.OutboxClaimByID(ctx, chunk, len(restOfLeft) > 0 || next < len(ids))
			for _, ms := range [][]outbox.Message{c.messages, c.unreadable} {
				for _, m := range ms {
					took[m.ID] = true
				}
			}
			for _, id := range c.deadLettered {
				took[id] = true
			}
			tookBytes = c.payloadBytes()
			return c, err
		})
		if err != nil {
			left = slices.Concat(chunk, restOfLeft) // the same chunk again
			r.waitAfter(ctx, err, backoff)
			continue
		}
		backoff.reset()
		// One call: every batch reports to the same open connection
		// (streamer.progressed), and a gathered backlog holds hundreds.
		if p := batches[0].progress; p != nil {
			p()
		}
		// Rows of the chunk the claim left (past its byte bound, or behind
		// a row of their aggregate it left) are claimed again first, in
		// commit order, as long as claims take something: those still left
		// then wait for the fallback poll, as before. When the byte bound
		// ended the claim, later chunks are about twice what it took, so
		// that a transaction of large events is not measured whole again
		// and again.
		var notTaken []int64
		if len(took) > 0 {
			for _, id := range chunk {
				if !took[id] {
					notTaken = append(notTaken, id)
				}
			}
		} else {
			dropped = true
		}
		switch {
		case len(notTaken) > 0 && 2*tookBytes >= r.cfg.MaxBatchBytes:
			byteLimit = max(1, 2*len(took))
		case len(notTaken) == 0 && byteLimit > 0:
			byteLimit *= 2 // it took its whole chunk: grow back
		}
		left = append(notTaken, restOfLeft...)
	}
	if ctx.Err() != nil {
		return // not confirmed: the slot will replay them, the rows are in the outbox anyway
	}
	for _, b := range batches {
		b.done()
	}
	// A failure recorded in the pass holds its aggregate back until its
	// retry is due, and rows the pass dropped may wait behind a hold: look
	// again when the first hold runs out, as the end of a drain does, not
	// at the fallback poll (30 s by default).
	if r.failedSince.Swap(false) || dropped {
		r.wakeForHolds(ctx)
	}
}

// errSuspectBatch: the sink failed a batch with no event singled out; it was
// released to be claimed again in a smaller batch.
var errSuspectBatch = errors.New("batch failed without a data error; retrying it smaller")

// pass claims one batch, delivers it and records the outcome.
func (r *worker) pass(ctx context.Context, claim func(context.Context) (claimed, error)) error {
	start := time.Now()
	c, err := claim(ctx)
	r.metrics.claimDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		return err
	}
	return r.finish(ctx, c)
}

// finish delivers a claimed batch and records the outcome: failures first,
// then one settling statement for the rest that also ends the batch.
func (r *worker) finish(ctx context.Context, c claimed) error {
	if c.taken() == 0 {
		return nil
	}
	st, err := r.apply(ctx, c)
	return errors.Join(err, r.settle(ctx, c, st))
}

// apply delivers a claimed batch (not empty) and records the events that
// failed by their own fault; it says what to settle for the rest.
func (r *worker) apply(ctx context.Context, c claimed) (settlement, error) {
	var err error
	if len(c.deadLettered) > 0 {
		r.metrics.dlqMoved.Add(float64(len(c.deadLettered)))
		r.log.Error("dead-lettered rows whose last attempt recorded no outcome (relay stopped, or lost PostgreSQL before marking)",
			zap.Int64s("outbox_ids", c.deadLettered))
	}
	var st settlement
	if len(c.unreadable) > 0 {
		err = r.recordFailures(ctx, c.holder, c.unreadable, c.unreadableErrs)
		// The failed rows' later rows wait for them, as behind a sink's
		// rejection (block on error): handed back uncounted.
		c.messages, st.released = outbox.Behind(c.messages, c.unreadable)
	}
	switch {
	case err != nil:
		st.released = append(st.released, messageIDs(c.messages)...) // not delivered: handed back uncounted
	case len(c.messages) > 0:
		r.metrics.batchSize.Observe(float64(len(c.messages)))
		held := st.released
		st, err = r.deliver(ctx, c)
		st.released = append(st.released, held...)
	}
	return st, err
}

// settle ends a batch in one statement: marks what was applied, hands back
// the rest and ends the batch.
func (r *worker) settle(ctx context.Context, c claimed, st settlement) error {
	bookCtx, bookCancel := bookkeeping(ctx)
	defer bookCancel()
	settling := time.Now()
	marked, due, err := r.store.OutboxSettle(bookCtx, c.holder, st)
	r.metrics.settleDuration.Observe(time.Since(settling).Seconds())
	if err != nil {
		// Rows applied but not marked will be delivered again after their
		// lease, and the sink's guards make that a no-op.
		return err
	}
	if marked < int64(len(st.applied)) {
		r.log.Warn("some delivered rows had lost their lease (it ran out and a later claim took them); they may be delivered again",
			zap.Int("delivered", len(st.applied)), zap.Int64("marked", marked))
	}
	r.metrics.processed.Add(float64(marked))
	if len(st.deferred) > 0 {
		r.metrics.deferred.Add(float64(len(st.deferred)))
		// Look again when the first of them is due: no poll may come
		// sooner (stream mode's fallback poll is 30 s away).
		r.wakeAfter(due)
	}
	return nil
}

// deliver hands a claimed batch to the sink under a renewed lease, records
// the events that failed by their own fault and says what to settle for the
// rest. The sink runs on a context that outlives a soft stop by
// DrainTimeout, so a stopping relay finishes its batch when it can.
func (r *worker) deliver(ctx context.Context, c claimed) (settlement, error) {
	batch := c.messages
	ids := messageIDs(batch)
	deliverCtx, cancel := drainContext(ctx, r.cfg.DrainTimeout)
	defer cancel()

	renewDone := make(chan struct{})
	renewStopped := make(chan struct{})
	go func() {
		defer close(renewStopped)
		r.renewLease(deliverCtx, c.holder, len(ids), renewDone)
	}()
	rejected, sinkErr := r.sink.Deliver(deliverCtx, batch)
	close(renewDone)
	<-renewStopped

	if sinkErr != nil {
		return settlement{released: ids}, r.sinkFailed(ctx, c.holder, batch, sinkErr)
	}
	r.health.sinkWorks()
	if r.limit < r.cfg.BatchSize {
		r.limit = min(r.cfg.BatchSize, r.limit*2) // back from a split-down
	}
	var st settlement
	var failed []outbox.Message
	var notApplied error
	for _, m := range batch {
		rejectErr := rejected[m.ID]
		switch {
		case rejectErr == nil:
			st.applied = append(st.applied, m.ID)
		case errors.Is(rejectErr, outbox.ErrHeldBack):
			st.released = append(st.released, m.ID)
		case errors.Is(rejectErr, outbox.ErrNotApplied):
			st.released = append(st.released, m.ID)
			notApplied = rejectErr
		case errors.Is(rejectErr, outbox.ErrDeferred):
			st.deferred = append(st.deferred, m.ID)
		default:
			failed = append(failed, m)
		}
	}
	if len(failed) > 0 {
		if err := r.recordFailures(ctx, c.holder, failed, rejected); err != nil {
			return st, err
		}
	}
	if notApplied != nil {
		r.metrics.sinkErrors.Inc()
		if errors.Is(notApplied, outbox.ErrSinkBroken) {
			r.health.sinkBroken(notApplied) // what it applied first does not make it work
		}
		return st, fmt.Errorf("sink applied part of a batch of %d, then: %w", len(batch), notApplied)
	}
	return st, nil
}

// sinkFailed handles a batch the sink could not apply at all, by class (see
// Sink). Nothing of it was applied; the caller releases what is not recorded
// as failed here (uncounted).
func (r *worker) sinkFailed(ctx context.Context, holder string, batch []outbox.Message, sinkErr error) error {
	switch {
	case errors.Is(sinkErr, outbox.ErrSinkBroken):
		r.health.sinkBroken(sinkErr)
		r.metrics.sinkErrors.Inc()
	case errors.Is(sinkErr, outbox.ErrSinkUnavailable):
		r.metrics.sinkErrors.Inc()
	case len(batch) == 1:
		// Split down to one event and it still fails: from here on it is
		// the event's attempt that counts, so it cannot stall the relay.
		r.limit = r.cfg.BatchSize
		return r.recordFailures(ctx, holder, batch, map[int64]error{batch[0].ID: sinkErr})
	default:
		r.limit = max(1, min(r.limit, len(batch))/2)
		r.metrics.sinkErrors.Inc()
		r.log.Warn("sink failed a batch without naming an event; retrying it in smaller batches",
			zap.Int("batch", len(batch)), zap.Int("next_limit", r.limit), zap.String("error", redact.Text(sinkErr.Error())))
		return errSuspectBatch
	}
	return fmt.Errorf("sink could not take a batch of %d: %w", len(batch), sinkErr)
}

// recordFailures records events that failed by their own fault: last_error,
// the retry schedule, past the limit the DLQ. Each is logged once, here.
func (r *worker) recordFailures(ctx context.Context, holder string, failed []outbox.Message, reasons map[int64]error) error {
	for _, m := range failed {
		r.metrics.failed(m.EventType)
		r.log.Warn("event failed", zap.Int64("outbox_id", m.ID), zap.String("event_type", redact.Clip(m.EventType, 64)),
			zap.Int64("tenant_id", m.TenantID), zap.String("aggregate_type", redact.Clip(m.AggregateType, 64)),
			zap.Int64("aggregate_id", m.AggregateID), zap.String("trace_id", redact.Clip(m.TraceID, 128)),
			zap.Int16("attempt", m.Attempts), zap.String("error", redact.Clip(redact.Text(reasons[m.ID].Error()), 1024)))
	}
	bookCtx, cancel := bookkeeping(ctx)
	defer cancel()
	moved, err := r.store.OutboxFail(bookCtx, holder, failed, reasons)
	if err != nil {
		return err
	}
	r.failedSince.Store(true)
	if len(moved) > 0 {
		r.metrics.dlqMoved.Add(float64(len(moved)))
		r.log.Error("moved events to the DLQ after their last attempt", zap.Int64s("outbox_ids", moved))
	}
	return nil
}

// bookkeeping is the context of a statement that records what became of a
// claimed batch (settle, hand back, failures): it must run even when ctx was
// cancelled between the claim and now (a soft stop), or the batch would
// stay in flight until its lease runs out, and the takeover count an attempt
// for each of its rows. It is bounded by its own timeout instead.
func bookkeeping(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}

// renewLease extends the batch's lease every Lease/3 until done is closed.
func (r *worker) renewLease(ctx context.Context, holder string, rows int, done <-chan struct{}) {
	ticker := time.NewTicker(r.cfg.Lease / 3)
	defer ticker.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-ticker.C:
			// Bounded: a renewal stuck on a connection that went silent (a
			// failover) would hold the delivery, which waits for it, until
			// TCP gave up, long after the lease ran out.
			renewCtx, cancel := context.WithTimeout(ctx, r.cfg.Lease/3)
			err := r.store.OutboxExtendLease(renewCtx, holder, rows)
			cancel()
			if err != nil {
				r.log.Warn("could not renew lease", zap.String("error", redact.Text(err.Error())))
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
