package retrieve

import (
	"context"
	"fmt"
)

// Options are per-call settings of RetrieveWith, for a caller (an MCP tool,
// say) whose every request may ask for its own top-k, hops and budget within
// the Retriever's limits.
type Options struct {
	// TopK is the seeds taken, 1 to MaxTopK; 0 means the Retriever's.
	TopK int
	// Hops is the expansion, 0 to MaxHops, used as given (0: the seeds
	// alone); a negative value means the Retriever's.
	Hops int
	// MaxChars is the budget of context characters, at least MinMaxChars;
	// 0 means the Retriever's.
	MaxChars int
}

// RetrieveWith is Retrieve with opts in place of the Retriever's top-k, hops
// and budget. A setting out of its bounds is an error naming it; nothing is
// read then.
func (r *Retriever) RetrieveWith(ctx context.Context, tenantID int64, question string, opts Options) (*Result, error) {
	cfg := r.cfg
	if opts.TopK != 0 {
		cfg.TopK = opts.TopK
	}
	if opts.Hops >= 0 {
		cfg.Hops = opts.Hops
		cfg.NoHops = opts.Hops == 0
	}
	if opts.MaxChars != 0 {
		cfg.MaxChars = opts.MaxChars
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("retrieve options: %w", err)
	}
	// A copy, so that whatever else a Retriever holds comes along.
	with := *r
	with.cfg = cfg
	return with.Retrieve(ctx, tenantID, question)
}
