package rebuild

import (
	"errors"
	"fmt"
	"graphsync/embed/stage"
	"time"

	"graphsync/drift"
	"graphsync/graphmodel"
	"graphsync/outbox"
)

// Source is where the base state comes from.
type Source string

// Sources of a rebuild.
const (
	// SourceAuto replays when the scope's history is complete, else takes
	// a snapshot.
	SourceAuto Source = "auto"
	// SourceReplay re-applies the outbox history (archive and outbox).
	SourceReplay Source = "replay"
	// SourceSnapshot writes the row projection of the business tables.
	SourceSnapshot Source = "snapshot"
)

// ParseSource reads a --source value.
func ParseSource(s string) (Source, error) {
	switch Source(s) {
	case SourceAuto, SourceReplay, SourceSnapshot:
		return Source(s), nil
	}
	return "", fmt.Errorf("unknown source %q: want auto, replay or snapshot", s)
}

// DefaultChunkSize is how many rows (snapshot) or events (replay) a chunk
// reads, writes and checkpoints: Config.ChunkSize 0 and
// `graphsync rebuild --chunk-size` both default to it.
const DefaultChunkSize = 2000

// DefaultResumeWithin is how old an unfinished rebuild may be and still be
// resumed: Config.ResumeWithin 0 and `graphsync rebuild --resume-within`
// both default to it.
const DefaultResumeWithin = 24 * time.Hour

// MaxChunkSize is the largest chunk a rebuild takes.
const MaxChunkSize = 100_000

// GCPercent is the Go garbage collector's target `graphsync rebuild` runs
// with when GOGC is not set (Go's default is 100). A rebuild is a batch job
// that shares two cores with Neo4j: collecting a quarter as often gives the
// CPU to Neo4j's writes. Replays of the 100k-node benchmark graph run in
// alternating pairs in one process took 10.45-11.45 s with 400 against
// 11.13-13.36 s with 100 (ADR 0011); memory stays bounded by the chunk.
const GCPercent = 400

// Config of a rebuild. The zero value of each field means its default.
type Config struct {
	// TenantID limits the rebuild to one tenant; every other tenant's
	// nodes are left untouched. Default: 0, every tenant.
	TenantID int64
	// Source of the base state. Default: SourceAuto.
	Source Source
	// ChunkSize is how many rows (snapshot) or events (replay) one chunk
	// reads and writes. Default: DefaultChunkSize.
	ChunkSize int
	// Sink applies replayed events: the projector sync uses. Required.
	Sink outbox.Sink
	// RecheckAfter is the drift check's wait before its second look.
	// Default: 2s; drift.NoRecheckWait looks again at once.
	RecheckAfter time.Duration
	// Progress, when set, is called after every chunk and phase change.
	Progress func(Progress)
	// Database is the Neo4j database. Default: "" (the server's default).
	Database string
	// Model is the graph model. Default: graphmodel.Default.
	Model *graphmodel.Model
	// Restart starts the rebuild anew even when an unfinished one of the
	// scope would be resumed. Default: false.
	Restart bool
	// ResumeWithin is how long ago an unfinished rebuild of the scope may
	// have started to be resumed; an older one is started anew (what it
	// wrote is as old as its start, and the graph may have lost it since).
	// Default: DefaultResumeWithin.
	ResumeWithin time.Duration
	// Embedding, when set, makes the rebuild write vectors: the stage runs
	// its rounds beside a replay (whose projector queues every product it
	// writes; ADR 0031), drains the scope's backlog (from the cache first)
	// after the base phase, and again after a sweep that repaired
	// something (it queues every node without a current vector), and the
	// drift checks compare vectors too (ADR 0023). Sink must then be a
	// projector with the stage's embedding model. Default: nil, no
	// vectors.
	Embedding *stage.Stage
}

func (c Config) withDefaults() Config {
	if c.Source == "" {
		c.Source = SourceAuto
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = DefaultChunkSize
	}
	if c.RecheckAfter == 0 {
		c.RecheckAfter = drift.DefaultRecheckAfter
	}
	if c.Model == nil {
		c.Model = &graphmodel.Default
	}
	if c.ResumeWithin == 0 {
		c.ResumeWithin = DefaultResumeWithin
	}
	if c.Progress == nil {
		c.Progress = func(Progress) {}
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if _, err := ParseSource(string(c.Source)); err != nil {
		errs = append(errs, err)
	}
	if c.TenantID < 0 {
		errs = append(errs, fmt.Errorf("tenant must be a tenant id, got %d", c.TenantID))
	}
	if c.ChunkSize < 1 || c.ChunkSize > MaxChunkSize {
		errs = append(errs, fmt.Errorf("chunk size must be in 1..%d, got %d", MaxChunkSize, c.ChunkSize))
	}
	if c.ResumeWithin < 0 {
		errs = append(errs, fmt.Errorf("resume within must be a positive duration, got %s", c.ResumeWithin))
	}
	if c.Sink == nil {
		errs = append(errs, errors.New("no sink to replay events into"))
	}
	return errors.Join(errs...)
}

// Progress is where a rebuild stands.
type Progress struct {
	Phase  string // "replay", "snapshot", "sweep", "embed", "check"
	Done   int64  // rows or events of the base phase done so far
	Total  int64  // rows or events the base phase reads (counted at its start)
	Chunks int64
	// Resumed is set when the run continues a killed one.
	Resumed bool
}
