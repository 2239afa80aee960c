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

// replay re-applies the scope's processed history through the sink, a chunk
// at a time in (created_xid, id) order, from the checkpoint on. Rows still
// pending are the running sync's and are passed over. Events Neo4j left
// unapplied after part of a chunk committed are delivered again
// (retryNotApplied). An event the sink rejects is counted; the sweep
// re-projects its aggregate from the rows.
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
		xid, id := cp.replayXID, cp.replayID
		waited := false
		for {
			var c historyChunk
			c.batch, c.read, c.last, c.err = b.readHistory(readCtx, xid, id, filter)
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
			xid, id = c.last.XID, c.last.ID
		}
	}()
	// While a chunk is written, the next one's owner lookup is read ahead
	// (Projector.LookAhead); the write then reads again only what the chunk
	// before it touched.
	c, ok := <-chunks
	for ok {
		if c.err != nil {
			return c.err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if c.read == 0 {
			return nil
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
		rejected, err := b.deliverChunk(ctx, c, prep)
		if err != nil {
			// The replay ends here: the look-ahead must not wait for a
			// chunk the reader may not send for a long time (it waits for
			// transactions older than the replay, one of them perhaps idle).
			stopReading()
		}
		<-lookedAhead
		if err == nil {
			rejected, err = b.retryNotApplied(ctx, c.batch, rejected)
		}
		if len(c.batch) > 0 {
			if err != nil {
				return fmt.Errorf("replay events up to outbox id %d: %w", c.last.ID, err)
			}
			for _, m := range c.batch {
				if reason, ok := rejected[m.ID]; ok {
					res.NotApplied++
					if res.FirstRejection == "" {
						res.FirstRejection = redact.ErrorText(fmt.Sprintf("outbox id %d: %v", m.ID, reason))
					}
				}
			}
		}
		cp.replayXID, cp.replayID = c.last.XID, c.last.ID
		cp.done += int64(c.read)
		cp.chunks++
		if err := cp.store(ctx, b.pool); err != nil {
			return err
		}
		b.cfg.Progress(Progress{Phase: "replay", Done: cp.done, Total: max(total, cp.done), Chunks: cp.chunks, Resumed: res.Resumed})
		c, ok = next, nextOK
	}
	return ctx.Err()
}

// deliverChunk hands a chunk's events to the sink, prepared when the sink
// prepares ahead.
func (b *Rebuilder) deliverChunk(ctx context.Context, c historyChunk, prep preparer) (map[int64]error, error) {
	if len(c.batch) == 0 {
		return nil, nil
	}
	send := func(ctx context.Context) (map[int64]error, error) { return b.cfg.Sink.Deliver(ctx, c.batch) }
	if c.prepared != nil {
		send = func(ctx context.Context) (map[int64]error, error) { return prep.DeliverPrepared(ctx, c.prepared) }
	}
	return b.deliver(ctx, send)
}

// retryNotApplied delivers again, in their order, the events of batch the
// sink left unapplied because Neo4j failed after part of the chunk had
// committed (outbox.ErrNotApplied): they are no fault of theirs, and a replay
// that moved on would leave them to the sweep. It tries a few times while
// each try applies some; what is still unapplied then is counted, as any
// rejection.
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
	read     int
	last     relay.Position
	err      error
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

// readHistory reads one chunk after (xid, id): the processed events to
// apply, how many rows were read, and the position after the last.
func (b *Rebuilder) readHistory(ctx context.Context, xid string, id int64, tenant *int64) ([]outbox.Message, int, relay.Position, error) {
	pos := relay.Position{XID: xid, ID: id}
	rows, err := b.pool.Query(ctx, gsql.Query("OffsetRead"), xid, id, b.cfg.ChunkSize, tenant)
	if err != nil {
		return nil, 0, pos, fmt.Errorf("read the outbox history: %w", err)
	}
	defer rows.Close()
	var batch []outbox.Message
	read := 0
	for rows.Next() {
		var m outbox.Message
		var trace pgtype.Text
		var occurred pgtype.Timestamptz
		var processed bool
		if err := rows.Scan(&m.ID, &m.TenantID, &m.AggregateType, &m.AggregateID, &m.EventType, &m.EventVersion,
			&m.Payload, &occurred, &m.Attempts, &trace, &pos.XID, &processed); err != nil {
			return nil, 0, pos, fmt.Errorf("read the outbox history: %w", err)
		}
		pos.ID = m.ID
		read++
		if !processed {
			continue
		}
		m.TraceID = trace.String
		m.OccurredAt = occurred.Time
		batch = append(batch, m)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, pos, fmt.Errorf("read the outbox history: %w", err)
	}
	return batch, read, pos, nil
}
