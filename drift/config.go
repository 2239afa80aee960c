package drift

import (
	"errors"
	"fmt"
	"time"

	"graphsync/graphmodel"
)

// Config of a Checker. The zero value of each field means its default.
type Config struct {
	// TenantID limits the check to one tenant. Default: 0, every tenant.
	TenantID int64
	// Sample is the share of keys compared, in (0, 1]. Default: 1 (every
	// key). A sample is drawn per run, the same keys on both sides.
	Sample float64
	// ChunkSize is how many keys one read takes on each side. Default: 2000.
	ChunkSize int
	// RecheckAfter is how long the second look at a difference waits, so
	// that events in flight during the first pass land. Default: 2s;
	// NoRecheckWait looks again at once.
	RecheckAfter time.Duration
	// MaxExamples is how many findings of each kind the report lists (all
	// are counted). Default: 10.
	MaxExamples int
	// MaxSuspects bounds the differences kept for the second look and for
	// repair; past it, differences are counted from the first pass only.
	// Default: 100000.
	MaxSuspects int
	// Database is the Neo4j database. Default: "" (the server's default).
	Database string
	// Model is the graph model. Default: graphmodel.Default.
	Model *graphmodel.Model
	// Vectors, when set, checks the vectors of the model's embedded label
	// against this embedder's model and dimension (missing_embedding,
	// stale_embedding, wrong_embedding_model, wrong_embedding_dimension).
	// Default: nil, vectors are not checked (their properties are still
	// allowed).
	Vectors *VectorCheck
}

// VectorCheck names the embedder the graph's vectors must come from.
type VectorCheck struct {
	Model     string
	Dimension int
}

// NoRecheckWait is a Config.RecheckAfter that does not wait (a zero reads
// as the default).
const NoRecheckWait time.Duration = -1

func (c Config) withDefaults() Config {
	if c.Sample == 0 {
		c.Sample = 1
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = 2000
	}
	if c.RecheckAfter == 0 {
		c.RecheckAfter = 2 * time.Second
	}
	if c.MaxExamples == 0 {
		c.MaxExamples = 10
	}
	if c.MaxSuspects == 0 {
		c.MaxSuspects = 100_000
	}
	if c.Model == nil {
		c.Model = &graphmodel.Default
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if !(c.Sample > 0 && c.Sample <= 1) { // NaN too
		errs = append(errs, fmt.Errorf("sample must be a fraction in (0, 1], got %g", c.Sample))
	}
	if c.TenantID < 0 {
		errs = append(errs, fmt.Errorf("tenant must be a tenant id, got %d", c.TenantID))
	}
	if c.ChunkSize < 1 || c.MaxExamples < 1 || c.MaxSuspects < 1 {
		errs = append(errs, errors.New("chunk size, max examples and max suspects must be positive"))
	}
	if err := c.Model.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
