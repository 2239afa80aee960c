package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"graphsync/mcpserver"
	"graphsync/retrieve"
)

// mcpFlags are the settings of `graphsync mcp`.
type mcpFlags struct {
	tenant        int64
	httpAddr      string
	metricsAddr   string
	callTimeout   time.Duration
	maxConcurrent int
	maxSessions   int
	logQuestions  bool
	seeds         seedFlags
}

func (f *mcpFlags) register(fs *flag.FlagSet) {
	fs.Int64Var(&f.tenant, "tenant", 0, "stdio: the one tenant every call is for (env GRAPHSYNC_TENANT); not used with --http, where each token names its tenant")
	fs.StringVar(&f.httpAddr, "http", "", "serve streamable HTTP on this address (endpoint /mcp, bearer tokens, /metrics) instead of stdio, e.g. 127.0.0.1:8765")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve /metrics (every tenant's call counts and latencies) on this address, apart from /mcp; keep it private (default: none)")
	fs.DurationVar(&f.callTimeout, "call-timeout", 15*time.Second, "bound of one tool call, waiting for a slot included; a slower graph gives a tool error")
	fs.IntVar(&f.maxConcurrent, "max-concurrent-per-token", 4, "tool calls one token (or the stdio client) may have in flight; more wait for a slot within --call-timeout")
	fs.IntVar(&f.maxSessions, "max-sessions-per-token", mcpserver.DefaultMaxSessionsPerToken, "--http: sessions one token may hold open; one more is refused (HTTP 429) until one is closed or idles out")
	fs.BoolVar(&f.logQuestions, "log-questions", false, "log each graph_context question (personal data masked); off: questions never reach the log")
	f.seeds.register(fs)
}

// retrieveConfig is the retrieval graph_context runs, with the embedder the
// flags name (nil for --embedder none or lexical retrieval), as context's.
func (f *mcpFlags) retrieveConfig() (retrieve.Config, error) {
	cfg := retrieve.Config{Timeout: f.callTimeout}
	if err := f.seeds.apply(&cfg); err != nil {
		return retrieve.Config{}, err
	}
	if err := f.seeds.openEmbedder(&cfg); err != nil {
		return retrieve.Config{}, err
	}
	return cfg, nil
}

// runMCP serves the tenant graph over the Model Context Protocol, or manages
// its tokens (mcp token create|list|revoke).
func runMCP(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "token" {
		return runMCPToken(ctx, args[1:])
	}
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: graphsync mcp [--tenant N | --http ADDR] [flags]\n       graphsync mcp token create|list|revoke --tenant N [ID]")
		fs.PrintDefaults()
	}
	var conn connFlags
	conn.register(fs, true)
	var f mcpFlags
	f.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case f.callTimeout <= 0:
		return usageError{fmt.Sprintf("--call-timeout must be positive, got %s", f.callTimeout)}
	case f.maxConcurrent < 1:
		return usageError{fmt.Sprintf("--max-concurrent-per-token must be at least 1, got %d", f.maxConcurrent)}
	case f.maxSessions < 1:
		return usageError{fmt.Sprintf("--max-sessions-per-token must be at least 1, got %d", f.maxSessions)}
	case f.httpAddr == "" && f.tenant <= 0:
		return usageError{"stdio needs --tenant N (or GRAPHSYNC_TENANT): the one tenant whose graph the client may read; or serve HTTP with --http ADDR and tokens"}
	}
	rcfg, err := f.retrieveConfig()
	if err != nil {
		return err
	}
	if rcfg.Embedder != nil {
		defer rcfg.Embedder.Close()
	}
	log, err := conn.logger()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return conn.withServers(ctx, 8, func(pool *pgxpool.Pool, driver neo4j.DriverWithContext) error {
		return serveMCP(ctx, pool, driver, f, rcfg, log)
	})
}

func serveMCP(ctx context.Context, pool *pgxpool.Pool, driver neo4j.DriverWithContext, f mcpFlags, rcfg retrieve.Config, log *zap.Logger) error {
	r, err := retrieve.New(driver, rcfg)
	if err != nil {
		return err
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := mcpserver.NewMetrics()
	registry.MustRegister(metrics.Collectors()...)
	srv, err := mcpserver.New(mcpserver.Config{Retriever: r, Pool: pool, Logger: log, Metrics: metrics,
		CallTimeout: f.callTimeout, MaxConcurrentPerToken: f.maxConcurrent, LogQuestions: f.logQuestions})
	if err != nil {
		return err
	}
	// /metrics counts every tenant's calls, so it is served on an address
	// of its own (--metrics-addr), never beside /mcp where any token holder
	// could read other tenants' activity from it.
	if f.metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
		go func() { _ = serveHTTP(ctx, f.metricsAddr, mux, log, "metrics") }()
	}
	if f.httpAddr != "" {
		handler := srv.Handler(mcpserver.HTTPOptions{Tokens: mcpserver.NewTokenStore(pool), MaxSessionsPerToken: f.maxSessions})
		return serveHTTP(ctx, f.httpAddr, handler, log, "mcp")
	}
	log.Info("mcp serving stdio", zap.Int64("tenant_id", f.tenant))
	err = srv.MCP(&mcpserver.Caller{TokenID: "stdio", TenantID: f.tenant}).Run(ctx, &mcp.StdioTransport{})
	if ctx.Err() != nil || errors.Is(err, mcp.ErrConnectionClosed) {
		return nil
	}
	return err
}

// serveHTTP serves handler on addr until ctx is done.
func serveHTTP(ctx context.Context, addr string, handler http.Handler, log *zap.Logger, what string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return usageError{fmt.Sprintf("listen on %s: %v", addr, err)}
	}
	server := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	log.Info(what+" serving HTTP", zap.String("addr", ln.Addr().String()), zap.String("endpoint", mcpserver.Path))
	// Tests and scripts read the address from here when they asked for port 0.
	fmt.Fprintf(os.Stderr, "graphsync %s: listening on http://%s\n", what, ln.Addr())
	done := make(chan error, 1)
	go func() { done <- server.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return server.Shutdown(shutdownCtx)
	}
}

func runMCPToken(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError{"want a subcommand: token create|list|revoke"}
	}
	sub := args[0]
	fs := flag.NewFlagSet("mcp token "+sub, flag.ContinueOnError)
	var conn connFlags
	conn.register(fs, false)
	tenant := fs.Int64("tenant", 0, "the token's tenant: create binds the token to it, revoke acts on its tokens alone, list shows its tokens (0: every tenant's)")
	name := fs.String("name", "", "create: a name for the token, to tell tokens apart in list")
	switch sub {
	case "create", "list", "revoke":
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(os.Stderr, "usage: graphsync mcp token create --tenant N [--name TEXT] | list [--tenant N] | revoke --tenant N ID")
		fs.SetOutput(os.Stderr)
		fs.PrintDefaults()
		return flag.ErrHelp
	default:
		return usageError{fmt.Sprintf("unknown token subcommand %q: want create, list or revoke", sub)}
	}
	words, err := parseFlagsAndWords(fs, args[1:])
	if err != nil {
		return err
	}
	var id int64
	switch {
	case sub != "list" && *tenant <= 0:
		return usageError{fmt.Sprintf("mcp token %s needs --tenant N", sub)}
	case sub == "revoke" && len(words) != 1:
		return usageError{"mcp token revoke takes one token id (see mcp token list)"}
	case sub != "revoke" && len(words) > 0:
		return usageError{fmt.Sprintf("unexpected argument %q", words[0])}
	}
	if sub == "revoke" {
		if id, err = strconv.ParseInt(words[0], 10, 64); err != nil || id <= 0 {
			return usageError{fmt.Sprintf("%q is not a token id", words[0])}
		}
	}
	return conn.withPostgres(ctx, func(pool *pgxpool.Pool) error {
		store := mcpserver.NewTokenStore(pool)
		switch sub {
		case "create":
			token, t, err := store.Create(ctx, *tenant, *name)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "token %d for tenant %d created; it is shown this once and only its hash is stored:\n", t.ID, t.TenantID)
			fmt.Println(token)
			return nil
		case "revoke":
			if err := store.Revoke(ctx, *tenant, id); err != nil {
				return err
			}
			fmt.Printf("token %d revoked\n", id)
			return nil
		}
		tokens, err := store.List(ctx, *tenant)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tTENANT\tNAME\tCREATED\tREVOKED")
		for _, t := range tokens {
			revoked := "-"
			if t.RevokedAt != nil {
				revoked = t.RevokedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\n", t.ID, t.TenantID, t.Name, t.CreatedAt.UTC().Format(time.RFC3339), revoked)
		}
		return w.Flush()
	})
}
