package rebuild

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"go.uber.org/zap"

	"graphsync/outbox"
	"graphsync/projector"
	"graphsync/redact"
	"graphsync/relay"
	gsql "graphsync/sql"
)

// replay re-applies the scope's history through the sink, a chunk at a time
// in (created_xid, id) order, from the checkpoint on. Events Neo4j left
// unapplied after part of a chunk committed are delivered again
// (retryNotApplied). An event that waits for another aggregate's events (an
// order whose product comes later in this order, see waitQueue) is kept,
// with the later events of its aggregate, and delivered again after every
// chunk until it applies. A processed event the sink rejects, or one still
// waiting at the end, is counted; the sweep re-projects its aggregate from
// the rows.
//
// Rows still pending are applied too: the running sync may have applied
// them to the graph that was lost and not marked them yet (its settle
// follows the write), and then delivers them never again. Applying one
// twice changes nothing (the guards), and one the replay cannot apply is
// the running sync's to retry or dead-letter, so it is not counted.
func (b *Rebuilder) replay(ctx context.Context, cp *checkpoint, res *Result) error {
	var filter *int64
	if b.cfg.TenantID != 0 {
		filter = &b.cfg.TenantID
	}
	var total int64
	if err := b.pool.QueryRow(ctx, gsql.Query("RebuildReplayCount"), filter).Scan(&total); err != nil {
		return fmt.Errorf("count the events to replay: %w", err)
	}
	// Every transaction that committed an event before the replay began
	// has a lower id than this one; the history is read below the oldest
	// running transaction, so at its end the replay waits for those still
	// running, then reads on: otherwise one left open (idle in transaction)
	// would end the replay before the events committed after it, which
	// sync applied before and never applies again.
	var began string
	if err := b.pool.QueryRow(ctx, gsql.Query("RebuildXactID")).Scan(&began); err != nil {
		return fmt.Errorf("take a transaction id at the replay's start: %w", err)
	}
	b.cfg.Progress(Progress{Phase: "replay", Done: cp.done, Total: total, Chunks: cp.chunks, Resumed: res.Resumed})
	// The next chunk is read, and prepared when the sink can prepare ahead,
	// while the sink applies this one; positions are stored only after a
	// chunk was applied.
	prep, _ := b.cfg.Sink.(preparer)
	chunks := make(chan historyChunk, 1)
	readCtx, stopReading := context.WithCancel(ctx)
	readerDone := make(chan struct{})
	defer func() { stopReading(); <-readerDone }()
	go func() {
		defer close(readerDone)
		defer close(chunks)
		xid, id, seen := cp.replayXID, cp.replayID, cp.done
		waited := false
		for {
			var c historyChunk
			c.batch, c.pending, c.places, c.read, c.last, c.err = b.readHistory(readCtx, xid, id, seen, filter)
			if c.err == nil && c.read < b.cfg.ChunkSize && !waited {
				// The end of what is below the oldest running transaction:
				// read the same range again once those older than the
				// replay have ended.
				waited = true
				if c.err = b.checker.AwaitTransactionsBefore(readCtx, began); c.err == nil {
					continue
				}
			}
			if c.err == nil && prep != nil && len(c.batch) > 0 {
				c.prepared = prep.Prepare(c.batch)
			}
			select {
			case chunks <- c:
			case <-readCtx.Done():
				return
			}
			if c.err != nil || c.read < b.cfg.ChunkSize {
				return
			}
			xid, id, seen = c.last.XID, c.last.ID, seen+int64(c.read)
		}
	}()
	// While a chunk is written, the next one's owner lookup is read ahead
	// (Projector.LookAhead); the write then reads again only what the chunk
	// before it touched.
	waiting := newWaitQueue(max(b.cfg.ChunkSize, DefaultChunkSize))
	c, ok := <-chunks
	for ok {
		if c.err != nil {
			return c.err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if c.read == 0 {
			break
		}
		next, nextOK := historyChunk{}, false
		lookedAhead := make(chan struct{})
		go func() {
			defer close(lookedAhead)
			next, nextOK = <-chunks
			if nextOK && next.err == nil && next.prepared != nil {
				// A failed look-ahead leaves the lookup to the write.
				_ = prep.LookAhead(ctx, next.prepared, c.prepared)
			}
		}()
		// Every return below waits for the look-ahead first.
		batch, held, gaveUp := waiting.holdBack(c.batch, c.pending, c.places)
		b.count(res, gaveUp)
		rejected, err := b.deliverChunk(ctx, c, batch, held > 0, prep)
		if err != nil {
			// The replay ends here: the look-ahead must not wait for a
			// chunk the reader may not send for a long time (it waits for
			// transactions older than the replay, one of them perhaps idle).
			stopReading()
		}
		<-lookedAhead
		if err == nil {
			rejected, err = b.retryNotApplied(ctx, batch, rejected)
		}
		if err == nil {
			b.count(res, waiting.add(batch, rejected, c.pending, c.places))
			var applied bool
			if applied, err = b.retryWaiting(ctx, waiting, writtenBy(batch, rejected), res); err == nil && applied && nextOK && next.err == nil && next.prepared != nil {
				// The waiting events just written were not in flight
				// during the look-ahead: read it again.
				_ = prep.LookAhead(ctx, next.prepared, nil)
			}
		}
		if err != nil {
			return fmt.Errorf("replay events up to outbox id %d: %w", c.last.ID, err)
		}
		cp.replayXID, cp.replayID = c.last.XID, c.last.ID
		cp.done += int64(c.read)
		cp.chunks++
		if err := waiting.pinned(*cp).store(ctx, b.pool); err != nil {
			return err
		}
		b.cfg.Progress(Progress{Phase: "replay", Done: cp.done, Total: max(total, cp.done), Chunks: cp.chunks, Resumed: res.Resumed})
		c, ok = next, nextOK
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// A last delivery of what waits, whatever it waits for (the running
	// sync may have written it meanwhile); what still waits then needs an
	// event this history does not hold (dead letters, or a dependency sync
	// never applied): the sweep's.
	if _, err := b.retryWaiting(ctx, waiting, nil, res); err != nil {
		return fmt.Errorf("replay the events still waiting at the end of the history: %w", err)
	}
	b.count(res, waiting.giveUp())
	res.GivenUp = waiting.givenUp()
	return nil
}

// count adds the events of rejected that the running sync applied to res:
// those it did not (still pending at the read) are its own to retry or
// dead-letter.
func (b *Rebuilder) count(res *Result, rejected []rejectedEvent) {
	for _, r := range rejected {
		if r.pending {
			continue
		}
		res.NotApplied++
		if res.FirstRejection == "" {
			res.FirstRejection = redact.ErrorText(fmt.Sprintf("outbox id %d: %v", r.msg.ID, r.reason))
		}
	}
}

// retryWaiting delivers the waiting events again, in their order, after a
// chunk that wrote the aggregates in written, when that may apply some of
// them (waitQueue.mayApply; written nil: whatever they wait for), and again
// while a delivery applied what others wait for. Those that apply leave the
// queue; applied reports whether any did. A queue that waits for what no
// chunk writes (a dead-lettered product) costs no delivery per chunk.
func (b *Rebuilder) retryWaiting(ctx context.Context, waiting *waitQueue, written map[aggregate]bool, res *Result) (applied bool, err error) {
	for len(waiting.msgs) > 0 && (written == nil || waiting.mayApply(written)) {
		batch := waiting.take()
		rejected, err := b.deliver(ctx, func(ctx context.Context) (map[int64]error, error) { return b.cfg.Sink.Deliver(ctx, batch) })
		if err != nil {
			return applied, err
		}
		b.count(res, waiting.add(batch, rejected, waiting.pending, waiting.places))
		if len(rejected) == len(batch) {
			break
		}
		applied = true
		written = writtenBy(batch, rejected)
	}
	return applied, nil
}

// writtenBy is the set of aggregates whose events of batch applied.
func writtenBy(batch []outbox.Message, rejected map[int64]error) map[aggregate]bool {
	out := map[aggregate]bool{}
	for _, m := range batch {
		if rejected[m.ID] == nil {
			out[aggregateOf(m)] = true
		}
	}
	return out
}

// deliverChunk hands batch, the chunk's events less those held behind
// waiting ones, to the sink: prepared when the sink prepares ahead and
// nothing was held.
func (b *Rebuilder) deliverChunk(ctx context.Context, c historyChunk, batch []outbox.Message, held bool, prep preparer) (map[int64]error, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	send := func(ctx context.Context) (map[int64]error, error) { return b.cfg.Sink.Deliver(ctx, batch) }
	if c.prepared != nil && !held {
		send = func(ctx context.Context) (map[int64]error, error) { return prep.DeliverPrepared(ctx, c.prepared) }
	}
	return b.deliver(ctx, send)
}

// retryNotApplied delivers again, in their order, the events of batch the
// sink left unapplied because Neo4j failed after part of the chunk had
// committed (outbox.ErrNotApplied): they are no fault of theirs, and a replay
// that moved on would leave them to the sweep. It tries a few times while
// each try applies some; what is still unapplied then waits with the
// deferred events (waitQueue).
func (b *Rebuilder) retryNotApplied(ctx context.Context, batch []outbox.Message, rejected map[int64]error) (map[int64]error, error) {
	for try := 0; try < 5; try++ {
		var again []outbox.Message
		for _, m := range batch {
			if errors.Is(rejected[m.ID], outbox.ErrNotApplied) {
				again = append(again, m)
			}
		}
		if len(again) == 0 {
			return rejected, nil
		}
		b.log.Warn("replay: Neo4j left events of a chunk unapplied; delivering them again",
			zap.Int("events", len(again)), zap.Int64("first_outbox_id", again[0].ID))
		more, err := b.deliver(ctx, func(ctx context.Context) (map[int64]error, error) { return b.cfg.Sink.Deliver(ctx, again) })
		if err != nil {
			return rejected, err
		}
		progressed := false
		for _, m := range again {
			if reason, ok := more[m.ID]; ok {
				rejected[m.ID] = reason
				progressed = progressed || !errors.Is(reason, outbox.ErrNotApplied)
			} else {
				delete(rejected, m.ID)
				progressed = true
			}
		}
		if !progressed {
			break
		}
	}
	return rejected, nil
}

// historyChunk is one read of the history: the processed events (prepared
// for the sink when it prepares ahead), how many rows were read, the
// position after the last.
type historyChunk struct {
	batch    []outbox.Message
	prepared *projector.Prepared
	// pending are the ids of batch's events the running sync had not
	// marked processed at the read; places says where each was read.
	pending map[int64]bool
	places  map[int64]place
	read    int
	last    relay.Position
	err     error
}

// preparer is a sink that can do the part of its delivery that needs no
// graph ahead of time (the projector: decoding, translation, statement
// rows).
type preparer interface {
	Prepare(batch []outbox.Message) *projector.Prepared
	LookAhead(ctx context.Context, prepared, inFlight *projector.Prepared) error
	DeliverPrepared(ctx context.Context, prepared *projector.Prepared) (map[int64]error, error)
}

// deliver hands a chunk to the sink through send, again after a pause when
// the whole chunk failed (Neo4j unavailable, a deadlock with live sync, a
// timeout): the events are idempotent. A broken sink is not retried.
func (b *Rebuilder) deliver(ctx context.Context, send func(context.Context) (map[int64]error, error)) (map[int64]error, error) {
	wait := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		rejected, err := send(ctx)
		if err == nil || errors.Is(err, outbox.ErrSinkBroken) || attempt == 6 {
			return rejected, err
		}
		b.log.Warn("replay chunk failed; retrying", zap.Int("attempt", attempt), zap.Duration("wait", wait),
			zap.String("error", redact.ErrorText(err.Error())))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// readHistory reads one chunk after (xid, id), seen events after the
// replay's start: the events to apply (those still pending included, their
// ids in pending), where each was read, how many rows were read, and the
// position after the last.
func (b *Rebuilder) readHistory(ctx context.Context, xid string, id, seen int64, tenant *int64) ([]outbox.Message, map[int64]bool, map[int64]place, int, relay.Position, error) {
	pos := relay.Position{XID: xid, ID: id}
	rows, err := b.pool.Query(ctx, gsql.Query("OffsetRead"), xid, id, b.cfg.ChunkSize, tenant)
	if err != nil {
		return nil, nil, nil, 0, pos, fmt.Errorf("read the outbox history: %w", err)
	}
	defer rows.Close()
	var batch []outbox.Message
	pending := map[int64]bool{}
	places := map[int64]place{}
	for rows.Next() {
		var m outbox.Message
		var trace pgtype.Text
		var occurred pgtype.Timestamptz
		var processed bool
		if err := rows.Scan(&m.ID, &m.TenantID, &m.AggregateType, &m.AggregateID, &m.EventType, &m.EventVersion,
			&m.Payload, &occurred, &m.Attempts, &trace, &pos.XID, &processed); err != nil {
			return nil, nil, nil, 0, pos, fmt.Errorf("read the outbox history: %w", err)
		}
		pos.ID = m.ID
		places[m.ID] = place{xid: pos.XID, id: m.ID, seen: seen + int64(len(batch))}
		if !processed {
			pending[m.ID] = true
		}
		m.TraceID = trace.String
		m.OccurredAt = occurred.Time
		batch = append(batch, m)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, nil, 0, pos, fmt.Errorf("read the outbox history: %w", err)
	}
	return batch, pending, places, len(batch), pos, nil
}
