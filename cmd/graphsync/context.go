package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/embed"
	"graphsync/redact"
	"graphsync/retrieve"
)

// contextFlags are the settings of `graphsync context`.
type contextFlags struct {
	tenant   int64
	format   string
	topK     int
	hops     int
	maxChars int
	seeds    seedFlags
}

// seedFlags choose how seeds are found (--retrieval) and with which
// embedder; context and mcp share them.
type seedFlags struct {
	retrieval string
	embedder  embed.Config
}

func (f *seedFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.retrieval, "retrieval", "", "lexical (fulltext), vector (meaning) or hybrid (both, fused); default hybrid, lexical with --embedder none")
	f.embedder.RegisterFlags(fs)
}

// apply checks --retrieval against --embedder and sets cfg.Retrieval.
func (f *seedFlags) apply(cfg *retrieve.Config) error {
	if f.retrieval == "" {
		return nil
	}
	r, err := retrieve.ParseRetrieval(f.retrieval)
	if err != nil {
		return usageError{"--retrieval: " + err.Error()}
	}
	if r != retrieve.RetrievalLexical && f.embedder.Kind == embed.KindNone {
		return usageError{fmt.Sprintf("--retrieval %s needs an embedder: drop --embedder none", r)}
	}
	cfg.Retrieval = r
	return nil
}

// openEmbedder opens the embedder the flags name into cfg, unless retrieval
// is lexical (nothing to embed): nil for --embedder none. Missing or corrupt
// model files stop the command with one line naming the file and the make
// target that fetches it (exit 2).
func (f *seedFlags) openEmbedder(cfg *retrieve.Config) error {
	if cfg.Retrieval == retrieve.RetrievalLexical {
		return nil
	}
	e, err := embed.Open(f.embedder)
	switch {
	case err != nil && embed.IsStartError(err):
		return usageError{err.Error()}
	case err != nil:
		return fmt.Errorf("open the embedder: %s", redact.Text(err.Error()))
	}
	cfg.Embedder = e
	return nil
}

func (f *contextFlags) register(fs *flag.FlagSet) {
	fs.Int64Var(&f.tenant, "tenant", 0, "tenant whose graph is searched (required)")
	fs.StringVar(&f.format, "format", "markdown", "markdown or json (neo4j-graphrag's RetrieverResult shape)")
	fs.IntVar(&f.topK, "top-k", retrieve.DefaultTopK, fmt.Sprintf("seed nodes (fulltext, vector or both fused, per --retrieval), best first (1-%d)", retrieve.MaxTopK))
	fs.IntVar(&f.hops, "hops", retrieve.MaxHops, "expansion: 0 seeds only, 1 + category and orders, 2 + bought together and buyer segments/countries")
	fs.IntVar(&f.maxChars, "max-chars", retrieve.DefaultMaxChars, fmt.Sprintf("budget of context characters, most relevant first (at least %d)", retrieve.MinMaxChars))
	f.seeds.register(fs)
}

// config checks the flags and turns them into a retrieve.Config.
func (f *contextFlags) config() (retrieve.Config, retrieve.Format, error) {
	format, err := retrieve.ParseFormat(f.format)
	if err != nil {
		return retrieve.Config{}, "", usageError{err.Error()}
	}
	if f.tenant <= 0 {
		return retrieve.Config{}, "", usageError{"--tenant is required: the id of the tenant whose graph is searched"}
	}
	if f.topK < 1 || f.topK > retrieve.MaxTopK {
		return retrieve.Config{}, "", usageError{fmt.Sprintf("--top-k must be between 1 and %d, got %d", retrieve.MaxTopK, f.topK)}
	}
	if f.hops < 0 || f.hops > retrieve.MaxHops {
		return retrieve.Config{}, "", usageError{fmt.Sprintf("--hops must be between 0 and %d, got %d", retrieve.MaxHops, f.hops)}
	}
	// retrieve.Config reads a zero budget as its default; on the command
	// line it is below the least.
	if f.maxChars < retrieve.MinMaxChars {
		return retrieve.Config{}, "", usageError{fmt.Sprintf("--max-chars must be at least %d, got %d", retrieve.MinMaxChars, f.maxChars)}
	}
	cfg := retrieve.Config{TopK: f.topK, Hops: f.hops, NoHops: f.hops == 0, MaxChars: f.maxChars}
	if err := f.seeds.apply(&cfg); err != nil {
		return retrieve.Config{}, "", err
	}
	return cfg, format, nil
}

// runContext prints the graph context of a question for one tenant.
func runContext(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("context", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: graphsync context --tenant N [--retrieval lexical|vector|hybrid] [--embedder onnx|openai|none] [--format markdown|json] [--top-k K] [--hops H] [--max-chars N] \"question text\"")
		fs.PrintDefaults()
	}
	var conn connFlags
	conn.register(fs, true)
	var f contextFlags
	f.register(fs)
	words, err := parseFlagsAndWords(fs, args)
	if err != nil {
		return err
	}
	cfg, format, err := f.config()
	if err != nil {
		return err
	}
	if err := f.seeds.openEmbedder(&cfg); err != nil {
		return err
	}
	if cfg.Embedder != nil {
		defer cfg.Embedder.Close()
	}
	question := strings.Join(words, " ")
	if !retrieve.Askable(question, cfg.Retrieval) {
		return usageError{"give a question with at least one word, e.g. graphsync context --tenant 1 \"wireless speaker\""}
	}
	// --tenant may come from GRAPHSYNC_TENANT, set for another command:
	// whose graph is searched is said, as dlq list does.
	onCommandLine := false
	fs.Visit(func(fl *flag.Flag) { onCommandLine = onCommandLine || fl.Name == "tenant" })
	if !onCommandLine {
		fmt.Fprintf(os.Stderr, "context: tenant %d, from GRAPHSYNC_TENANT\n", f.tenant)
	}
	driver, err := conn.openNeo4j(ctx, true)
	if err != nil {
		return err
	}
	defer driver.Close(ctx)
	return writeContext(ctx, os.Stdout, driver, cfg, format, f.tenant, question)
}

// writeContext retrieves and renders one question's context.
func writeContext(ctx context.Context, out io.Writer, driver neo4j.DriverWithContext, cfg retrieve.Config, format retrieve.Format, tenant int64, question string) error {
	r, err := retrieve.New(driver, cfg)
	if err != nil {
		return usageError{err.Error()}
	}
	res, err := r.Retrieve(ctx, tenant, question)
	switch {
	case errors.Is(err, retrieve.ErrUnknownTenant):
		return usageError{fmt.Sprintf("tenant %d has no nodes in the graph (is the id right, and has sync run?)", tenant)}
	case errors.Is(err, retrieve.ErrNoSearchTerms):
		return usageError{err.Error()}
	case err != nil:
		return fmt.Errorf("context: %s", redact.Text(err.Error()))
	}
	return res.Write(out, format)
}
