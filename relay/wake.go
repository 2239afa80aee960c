package relay

import (
	"graphsync/redact"

	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// streamBatch is a run of committed outbox rows named by the replication
// stream, in commit order. done is called once they were delivered and
// marked (or left to the fallback poll because another relay holds them).
type streamBatch struct {
	ids  []int64
	done func()
	// progress says a chunk went through: a pass over a large transaction
	// that moves is no stall, however long it takes.
	progress func()
	// live reports whether the replication connection that named the rows
	// is still open. A queued batch of a connection gone is not delivered:
	// the next connection names its rows again (nothing confirmed them),
	// and they must not wait behind the old backlog (see streamPass).
	live func() bool
}

// isLive: a batch without a live func (tests) counts as live.
func (b streamBatch) isLive() bool { return b.live == nil || b.live() }

// waker tells workers when to claim. Every mode broadcasts "look for due rows"
// on a timer (the poll, or the safety net of the other modes); notify adds
// NOTIFY hints and stream hands worker 0 the rows it saw committed.
type waker struct {
	r      *Relay
	mu     sync.Mutex
	wakes  []chan struct{}
	stream chan streamBatch
	// source runs alongside the timer: nil for poll.
	source func(ctx context.Context) error
}

func (r *Relay) newWaker(ctx context.Context) (*waker, error) {
	// Room for a batch's worth of transactions: while the stream worker
	// applies one batch, the next one gathers here (unbuffered, the worker
	// found one transaction waiting and batches shrank to a few rows).
	w := &waker{r: r, stream: make(chan streamBatch, r.cfg.BatchSize)}
	switch r.cfg.Wake {
	case WakePoll:
	case WakeNotify:
		w.source = w.listen
	case WakeStream:
		s, err := newStreamer(ctx, r, w.stream)
		if err != nil {
			return nil, err
		}
		w.source = s.run
	default:
		return nil, fmt.Errorf("unknown wake mode %q", r.cfg.Wake)
	}
	return w, nil
}

// subscribe returns a channel that receives a value whenever rows may be due.
// It starts full, so each worker drains the backlog on start.
func (w *waker) subscribe() <-chan struct{} {
	ch := make(chan struct{}, 1)
	ch <- struct{}{}
	w.mu.Lock()
	w.wakes = append(w.wakes, ch)
	w.mu.Unlock()
	return ch
}

func (w *waker) broadcast() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.wakes {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

func (w *waker) interval() time.Duration {
	if w.r.cfg.Wake == WakeStream {
		return w.r.cfg.FallbackPollInterval
	}
	return w.r.cfg.PollInterval
}

func (w *waker) run(ctx context.Context) error {
	var sourceDone chan error
	if w.source != nil {
		sourceDone = make(chan error, 1)
		go func() { sourceDone <- w.source(ctx) }()
	}
	ticker := time.NewTicker(w.interval())
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			if sourceDone != nil {
				return <-sourceDone
			}
			return nil
		case err := <-sourceDone:
			return err
		case <-ticker.C:
			w.broadcast()
		}
	}
}

// listen is the notify mode: LISTEN on a dedicated connection and broadcast
// each hint. The hint carries nothing; the claim path is the poll's. A lost
// connection is re-established with backoff, the timer covering the gap.
func (w *waker) listen(ctx context.Context) error {
	r := w.r
	backoff := newBackoff(r.cfg.SinkBackoff, r.cfg.SinkBackoffMax)
	for ctx.Err() == nil {
		established, err := w.listenOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if established {
			backoff.reset() // as the stream's: a good connection starts afresh
		}
		wait := backoff.next()
		r.log.Warn("LISTEN connection lost; reconnecting", zap.String("error", redact.Text(err.Error())), zap.Duration("backoff", wait))
		sleepCtx(ctx, wait)
	}
	return nil
}

// listenOnce runs one LISTEN connection; established reports whether LISTEN
// took effect.
func (w *waker) listenOnce(ctx context.Context) (established bool, err error) {
	pooled, err := w.r.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("acquire LISTEN connection: %w", err)
	}
	// The connection carries LISTEN state: it must not go back to the pool.
	conn := pooled.Hijack()
	defer closeWithin(ctx, conn.Close)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{w.r.cfg.NotifyChannel}.Sanitize()); err != nil {
		return false, fmt.Errorf("LISTEN %s: %w", w.r.cfg.NotifyChannel, err)
	}
	// Rows committed before LISTEN took effect are found by this wake-up.
	w.broadcast()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return true, err
		}
		w.broadcast()
	}
}

// closeWithin closes a connection on a context of its own: the caller's may
// be done already, and a close must not hang on a dead server.
func closeWithin(ctx context.Context, close func(context.Context) error) {
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = close(closeCtx)
}
