package e2e

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"graphsync/workload"
)

// writerStopTimeout bounds how long a stopping writer may take to finish
// its round.
const writerStopTimeout = 2 * time.Minute

// writer runs workload rounds, one after the other, until stopped: each
// round creates cfg.Tenants new tenants and has cfg.Writers concurrent
// writers place cfg.Orders orders. Its queries are paced (see throttle) so
// that a scenario's writes are spread over the whole scenario instead of
// being over in seconds; finish lifts the pace for the last round.
type writer struct {
	s        *stack
	cfg      workload.Config
	pool     *pgxpool.Pool
	throttle *throttle
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
	stop     atomic.Bool
	// restarts is odd while PostgreSQL is being restarted and counts up
	// around each restart; a round that saw it move may fail.
	restarts atomic.Int64

	mu        sync.Mutex
	rounds    int
	committed int64 // events the rounds committed
	uncertain int64 // events of cut-off rounds that may have committed unacknowledged
	failure   error // a round's error no restart explains
}

// startWriter starts writing rounds of cfg, at most one query every
// queryEvery across its writers.
func (s *stack) startWriter(cfg workload.Config, queryEvery time.Duration) *writer {
	s.t.Helper()
	poolCfg, err := pgxpool.ParseConfig(s.dbURL)
	if err != nil {
		s.t.Fatalf("workload pool config: %v", err)
	}
	th := &throttle{ticker: time.NewTicker(queryEvery)}
	poolCfg.ConnConfig.Tracer = th
	poolCfg.MaxConns = int32(cfg.Writers + 2)
	ctx, cancel := context.WithCancel(context.Background())
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		cancel()
		s.t.Fatalf("workload pool: %v", err)
	}
	w := &writer{s: s, cfg: cfg, pool: pool, throttle: th, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	s.writer = w
	go w.run()
	s.t.Cleanup(func() {
		w.stop.Store(true)
		w.cancel()
		<-w.done
		w.pool.Close()
		th.ticker.Stop()
	})
	return w
}

func (w *writer) run() {
	defer close(w.done)
	for round := 1; !w.stop.Load(); round++ {
		restarts := w.restarts.Load()
		cfg := w.cfg
		cfg.Seed = int64(round)
		report, err := workload.Run(w.ctx, w.pool, cfg, nil)
		w.mu.Lock()
		w.rounds++
		w.committed += report.Events
		cutOff := err != nil && (restarts%2 == 1 || w.restarts.Load() != restarts)
		switch {
		case err == nil:
		case cutOff:
			// Each writer (and the setup) has at most one transaction in
			// flight, whose commit a restart may have acknowledged to nobody.
			w.uncertain += int64(cfg.Writers + 1)
		case w.ctx.Err() != nil:
		default:
			w.failure = err
			w.stop.Store(true)
		}
		w.mu.Unlock()
		if cutOff {
			w.s.logf("workload round %d cut off by the PostgreSQL restart (as expected): %v", round, err)
			w.awaitRestartEnd()
		}
	}
}

// awaitRestartEnd returns once no restart is in progress (or the writer
// is cancelled), so that rounds do not pile up failing against a server
// that is down.
func (w *writer) awaitRestartEnd() {
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for w.restarts.Load()%2 == 1 && w.ctx.Err() == nil {
		select {
		case <-w.ctx.Done():
		case <-ticker.C:
		}
	}
}

// restartBegin and restartEnd bracket a PostgreSQL restart.
func (w *writer) restartBegin() { w.restarts.Add(1) }

func (w *writer) restartEnd() {
	w.pool.Reset() // its connections died with the server
	w.restarts.Add(1)
}

// finish stops starting rounds, lifts the pace, waits for the current round
// and returns what the rounds committed; it fails the test if a round failed
// for no reason.
func (w *writer) finish() (committed, uncertain int64) {
	t := w.s.t
	t.Helper()
	w.stop.Store(true)
	w.throttle.off.Store(true)
	timer := time.NewTimer(writerStopTimeout)
	defer timer.Stop()
	select {
	case <-w.done:
	case <-timer.C:
		w.cancel()
		t.Fatalf("the workload round did not finish within %s of being asked to stop", writerStopTimeout)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failure != nil {
		t.Fatalf("workload round failed: %v", w.failure)
	}
	w.s.logf("workload: %d rounds committed %d events (%d more uncertain)", w.rounds, w.committed, w.uncertain)
	return w.committed, w.uncertain
}

// err reports a round's unexplained failure so far.
func (w *writer) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failure
}

// throttle paces the workload: every query waits for the next tick of a
// shared ticker, so all writers together run at most one query per tick.
// It is a pgx query tracer, so the workload runs unchanged.
type throttle struct {
	ticker *time.Ticker
	off    atomic.Bool
}

func (th *throttle) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	if !th.off.Load() {
		select {
		case <-th.ticker.C:
		case <-ctx.Done():
		}
	}
	return ctx
}

func (th *throttle) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
