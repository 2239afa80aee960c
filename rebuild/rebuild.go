package rebuild

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap"

	"graphsync/drift"
	"graphsync/embed/stage"
	"graphsync/graphmodel"
	"graphsync/projector"
	gsql "graphsync/sql"
)

// ErrBusy is returned when another rebuild of an overlapping scope runs.
var ErrBusy = errors.New("another rebuild of this scope is running")

// Result is the outcome of a rebuild.
type Result struct {
	Source Source
	// Why the source was chosen (auto) or what to know about it.
	Why string
	// Resumed is set when the run continued a killed one.
	Resumed bool
	// Done is how many rows (snapshot) or events (replay) the base phase
	// read, chunks how many chunks it wrote, over all runs of this rebuild.
	Done, Chunks int64
	// NotApplied counts replayed events the projector rejected (the sweep
	// re-projects their aggregates from the rows); FirstRejection says why
	// the first was.
	NotApplied     int64
	FirstRejection string
	// GivenUp lists the aggregates whose waiting events the replay gave
	// up past the wait queue's bound ("tenant 7 Order 42 (3 events)"):
	// none of their later events were applied either (counted in
	// NotApplied); the sweep re-projects them from the rows.
	GivenUp []string
	// Embedded and EmbeddedFromCache count the texts whose vectors the
	// embedder computed and the cache gave (Config.Embedding), distinct in
	// each round of the stage and summed over its rounds (beside the replay
	// and after the base).
	Embedded, EmbeddedFromCache int
	// EmbeddingRefused counts the products whose text the embedder
	// refused: skipped, left pending, reported by the final drift check.
	EmbeddingRefused int
	// Repaired lists what the sweep changed.
	Repaired []string
	// Report is the final drift check of the scope.
	Report *drift.Report
	// BaseTook is the base phase of this run, Took the whole run.
	BaseTook, Took time.Duration
}

// Rebuilder runs rebuilds.
type Rebuilder struct {
	pool    *pgxpool.Pool
	driver  neo4j.DriverWithContext
	cfg     Config
	log     *zap.Logger
	checker *drift.Checker
}

// MinPoolConns is how many connections a rebuild holds at once: its
// scope's lock, a snapshot (the base's, or the sweep's drift check) and a
// read beside them. Rebuilds that share a pool need this many each.
const MinPoolConns = 3

// New returns a Rebuilder, or an error naming the setting that is wrong.
func New(pool *pgxpool.Pool, driver neo4j.DriverWithContext, cfg Config, log *zap.Logger) (*Rebuilder, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("rebuild config: %w", err)
	}
	if pool == nil || driver == nil {
		return nil, errors.New("rebuild: a PostgreSQL pool and a Neo4j driver are required")
	}
	// A rebuild holds its scope's lock on one connection and, in the sweep,
	// drift's snapshot on another while it reads beside them: a smaller
	// pool would wait for itself for ever.
	if n := pool.Config().MaxConns; n < MinPoolConns {
		return nil, fmt.Errorf("rebuild: the PostgreSQL pool allows %d connections; a rebuild needs at least %d at once (its lock, a snapshot, a read beside them)", n, MinPoolConns)
	}
	if log == nil {
		log = zap.NewNop()
	}
	var vectors *drift.VectorCheck
	if cfg.Embedding != nil {
		vectors = &drift.VectorCheck{Model: cfg.Embedding.Embedder().Model(), Dimension: cfg.Embedding.Embedder().Dimension()}
	}
	checker, err := drift.New(pool, driver, drift.Config{TenantID: cfg.TenantID, RecheckAfter: cfg.RecheckAfter,
		Database: cfg.Database, Model: cfg.Model, Vectors: vectors}, log)
	if err != nil {
		return nil, err
	}
	return &Rebuilder{pool: pool, driver: driver, cfg: cfg, log: log, checker: checker}, nil
}

// Run rebuilds the scope: base, sweep, check. A rebuild of the same scope
// that was killed is resumed from its checkpoint. Cancelling ctx stops after
// the chunk in hand; the checkpoint keeps what was done.
func (b *Rebuilder) Run(ctx context.Context) (*Result, error) {
	start := time.Now()
	tenants, err := b.checker.Tenants(ctx)
	if err != nil {
		return nil, err
	}
	unlock, err := lockScope(ctx, b.pool, b.cfg.TenantID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// An empty database gets its constraints and indexes back first.
	if err := projector.EnsureModelSchema(ctx, b.driver, *b.cfg.Model, b.cfg.Database); err != nil {
		return nil, fmt.Errorf("ensure the graph's constraints and indexes: %w", err)
	}
	cp, resumed, err := loadCheckpoint(ctx, b.pool, b.cfg.TenantID)
	if err != nil {
		return nil, err
	}
	notResumed := ""
	if resumed {
		if notResumed = b.startAnew(cp); notResumed != "" {
			resumed = false
		}
	}
	res := &Result{Resumed: resumed}
	if resumed {
		if b.cfg.Source != SourceAuto && b.cfg.Source != cp.source {
			return nil, fmt.Errorf("an unfinished %s rebuild of this scope (started %s) would be resumed, but --source is %s: run with --source %s or auto to resume it",
				cp.source, cp.startedAt.UTC().Format(time.RFC3339), b.cfg.Source, cp.source)
		}
		res.Source, res.Why = cp.source, fmt.Sprintf("resuming the %s rebuild started %s", cp.source, cp.startedAt.UTC().Format(time.RFC3339))
		if cp.phase == phaseBase && res.Source == SourceSnapshot {
			if err := checkSequenceCache(ctx, b.pool); err != nil {
				return nil, err
			}
		}
	} else {
		if res.Source, res.Why, err = b.chooseSource(ctx); err != nil {
			return nil, err
		}
		if notResumed != "" {
			res.Why += "; " + notResumed
		}
		if res.Source == SourceSnapshot {
			if err := checkSequenceCache(ctx, b.pool); err != nil {
				return nil, err
			}
		}
		if cp, err = startCheckpoint(ctx, b.pool, b.cfg.TenantID, res.Source); err != nil {
			return nil, err
		}
	}
	b.log.Info("rebuild", zap.String("source", string(res.Source)), zap.String("why", res.Why), zap.Int64("tenant", b.cfg.TenantID))
	if cp.phase == phaseBase {
		baseStart := time.Now()
		switch res.Source {
		case SourceReplay:
			stopEmbedding := b.embedBeside(ctx, res)
			err = b.replay(ctx, cp, res)
			res.BaseTook = time.Since(baseStart)
			stopEmbedding()
		default:
			err = b.snapshot(ctx, cp, tenants, res)
			res.BaseTook = time.Since(baseStart)
		}
		if err != nil {
			return res, err
		}
		cp.phase = phaseSweep
		if err := cp.store(ctx, b.pool); err != nil {
			return res, err
		}
	}
	res.Done, res.Chunks = cp.done, cp.chunks
	// Vectors before the sweep: the replay's projector queued every product
	// it wrote (most have their vector by now, written beside the replay),
	// so the sweep then finds their vectors current, and a sweep that
	// repairs nothing is the final check (no second pass for the vectors).
	// What the sweep queues (a snapshot writes no marks, a repaired text) is
	// embedded after it, and checked again.
	if err := b.embed(ctx, cp, res, resumed); err != nil {
		return res, err
	}
	b.cfg.Progress(Progress{Phase: "sweep", Done: cp.done, Total: cp.done, Chunks: cp.chunks, Resumed: resumed})
	// The sweep: what the guards kept stale, and what no row backs. A
	// capped check repairs the first MaxSuspects differences; go again.
	// A sweep that found nothing to repair is the final check itself.
	var report *drift.Report
	for round := 0; round < 10; round++ {
		if report, err = b.checker.Run(ctx, true); err != nil {
			return res, fmt.Errorf("sweep: %w", err)
		}
		res.Repaired = append(res.Repaired, report.Repaired...)
		if report.SuspectsCapped == 0 {
			break
		}
	}
	if len(report.Repaired) > 0 {
		if err := b.embed(ctx, cp, res, resumed); err != nil {
			return res, err
		}
	}
	if report.DriftTotal > 0 || report.SuspectsCapped > 0 || len(report.Repaired) > 0 {
		b.cfg.Progress(Progress{Phase: "check", Done: cp.done, Total: cp.done, Chunks: cp.chunks, Resumed: resumed})
		if report, err = b.checker.Run(ctx, false); err != nil {
			return res, fmt.Errorf("final drift check: %w", err)
		}
	}
	res.Report = report
	cp.phase = phaseDone
	if err := cp.store(ctx, b.pool); err != nil {
		return res, err
	}
	res.Took = time.Since(start)
	return res, nil
}

// ErrSequenceCached is returned for a snapshot when the outbox id sequence
// hands out ids in blocks (CACHE above 1).
var ErrSequenceCached = errors.New("the outbox id sequence caches ids per session")

// checkSequenceCache refuses a snapshot when the outbox id sequence has a
// CACHE above 1. A snapshot chunk's watermark for reference nodes takes the
// sequence's last value before the read as the bound of the ids events the
// read did not see can carry (drift's Checker.ReadChunk); with a cache, a
// session draws later ids from a block it took earlier, below that bound,
// and the chunk's stamp would make sync drop those events.
func checkSequenceCache(ctx context.Context, pool *pgxpool.Pool) error {
	var cache int64
	if err := pool.QueryRow(ctx, gsql.Query("RebuildOutboxSequenceCache")).Scan(&cache); err != nil {
		return fmt.Errorf("read the outbox id sequence's CACHE: %w", err)
	}
	if cache > 1 {
		return fmt.Errorf("%w (CACHE %d): a snapshot needs CACHE 1, as the migrations create it, to know which events its reads did not see; "+
			"run ALTER TABLE outbox_messages ALTER COLUMN id SET CACHE 1, or rebuild with --source replay", ErrSequenceCached, cache)
	}
	return nil
}

// embedBeside runs the embedding stage's rounds beside the replay, when the
// rebuild writes vectors: the replay's projector queues every product it
// writes, and their vectors are written while the replay goes on rather
// than all after it (ADR 0031). A snapshot writes no marks: nothing to run
// beside it. The guards keep it safe, as beside sync: a vector is written
// only where the node still holds its text. Failures are retried as in
// sync; the drain after the base has the last word. The returned func
// stops the rounds (waiting for the one in flight) and adds what they did
// to res.
func (b *Rebuilder) embedBeside(ctx context.Context, res *Result) (stop func()) {
	if b.cfg.Embedding == nil {
		return func() {}
	}
	stopCh, done := make(chan struct{}), make(chan stage.Round, 1)
	go func() { done <- b.cfg.Embedding.Beside(ctx, stopCh) }()
	return func() {
		close(stopCh)
		round := <-done
		res.Embedded += round.Embedded
		res.EmbeddedFromCache += round.Cached
	}
}

// embed drains the embedding stage's backlog of the scope, when the
// rebuild writes vectors.
func (b *Rebuilder) embed(ctx context.Context, cp *checkpoint, res *Result, resumed bool) error {
	if b.cfg.Embedding == nil {
		return nil
	}
	b.cfg.Progress(Progress{Phase: "embed", Done: cp.done, Total: cp.done, Chunks: cp.chunks, Resumed: resumed})
	round, err := b.cfg.Embedding.Drain(ctx)
	res.Embedded += round.Embedded
	res.EmbeddedFromCache += round.Cached
	// A later drain reads the nodes an earlier one left refused again.
	res.EmbeddingRefused = max(res.EmbeddingRefused, round.Refused)
	if err != nil {
		return fmt.Errorf("embed: %w", err)
	}
	return nil
}

// startAnew says why the unfinished rebuild cp is not resumed but started
// anew (--restart, or older than ResumeWithin), or "" when it is resumed.
func (b *Rebuilder) startAnew(cp *checkpoint) string {
	started := fmt.Sprintf("the unfinished %s rebuild started %s", cp.source, cp.startedAt.UTC().Format(time.RFC3339))
	switch age := time.Since(cp.startedAt); {
	case b.cfg.Restart:
		return "started anew (--restart), not resuming " + started
	case age > b.cfg.ResumeWithin:
		return fmt.Sprintf("started anew, not resuming %s: it is %s old, older than %s (--resume-within)",
			started, age.Round(time.Minute), b.cfg.ResumeWithin)
	}
	return ""
}

// chooseSource decides auto from what retention recorded it dropped.
func (b *Rebuilder) chooseSource(ctx context.Context) (Source, string, error) {
	var filter *int64
	if b.cfg.TenantID != 0 {
		filter = &b.cfg.TenantID
	}
	var partitions, dropped int64
	if err := b.pool.QueryRow(ctx, gsql.Query("RebuildHistoryGaps"), filter).Scan(&partitions, &dropped); err != nil {
		return "", "", fmt.Errorf("read which history retention dropped: %w", err)
	}
	complete := partitions == 0
	gap := fmt.Sprintf("retention dropped %d events of this scope with %d archive partitions", dropped, partitions)
	switch {
	case b.cfg.Source == SourceReplay && complete:
		return SourceReplay, "replay requested; the history is complete", nil
	case b.cfg.Source == SourceReplay:
		return SourceReplay, "replay requested although " + gap + "; the sweep re-projects what that history held from the rows", nil
	case b.cfg.Source == SourceSnapshot:
		return SourceSnapshot, "snapshot requested", nil
	case complete:
		return SourceReplay, "the history is complete: retention dropped none of this scope's events", nil
	default:
		return SourceSnapshot, "the history is incomplete: " + gap, nil
	}
}

// snapshot writes the row projection of every tenant in scope, label by
// label (reference labels before the aggregates that point at them), a
// chunk at a time, from the checkpoint on.
func (b *Rebuilder) snapshot(ctx context.Context, cp *checkpoint, tenants []int64, res *Result) error {
	var filter *int64
	if b.cfg.TenantID != 0 {
		filter = &b.cfg.TenantID
	}
	var total int64
	if err := b.pool.QueryRow(ctx, gsql.Query("RebuildSnapshotCount"), filter).Scan(&total); err != nil {
		return fmt.Errorf("count the rows to read: %w", err)
	}
	var labels []string
	for _, l := range b.cfg.Model.Labels {
		if l.Role == graphmodel.RoleReference || l.Role == graphmodel.RoleAggregate {
			labels = append(labels, l.Name)
		}
	}
	b.cfg.Progress(Progress{Phase: "snapshot", Done: cp.done, Total: total, Chunks: cp.chunks, Resumed: res.Resumed})
	// The next chunk is read while this one is written; the position is
	// stored only after a chunk was written.
	type read struct {
		chunk *drift.Chunk
		err   error
	}
	chunks := make(chan read, 1)
	readCtx, stopReading := context.WithCancel(ctx)
	readerDone := make(chan struct{})
	defer func() { stopReading(); <-readerDone }()
	start := *cp
	go func() {
		defer close(readerDone)
		defer close(chunks)
		for _, tenant := range tenants {
			if tenant < start.tenantID {
				continue // done in a run before
			}
			for li, label := range labels {
				after := int64(0)
				if tenant == start.tenantID {
					if at := indexOf(labels, start.label); at > li {
						continue
					} else if at == li {
						after = start.afterID
					}
				}
				for {
					chunk, err := b.checker.ReadChunk(readCtx, tenant, label, after, b.cfg.ChunkSize)
					select {
					case chunks <- read{chunk, err}:
					case <-readCtx.Done():
						return
					}
					if err != nil {
						return
					}
					if chunk.Rows < b.cfg.ChunkSize {
						break
					}
					after = chunk.Last
				}
			}
		}
	}()
	for r := range chunks {
		if r.err != nil {
			return r.err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := b.checker.WriteChunk(ctx, r.chunk); err != nil {
			return err
		}
		cp.tenantID, cp.label, cp.afterID = r.chunk.Tenant, r.chunk.Label, r.chunk.Last
		cp.done += int64(r.chunk.Rows)
		cp.chunks++
		if err := cp.store(ctx, b.pool); err != nil {
			return err
		}
		b.cfg.Progress(Progress{Phase: "snapshot", Done: cp.done, Total: max(total, cp.done), Chunks: cp.chunks, Resumed: res.Resumed})
	}
	return ctx.Err()
}

func indexOf(labels []string, label string) int {
	for i, l := range labels {
		if l == label {
			return i
		}
	}
	return -1
}
