package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"

	"graphsync/graphmodel"
	"graphsync/redact"
	"graphsync/retrieve"
)

// Limits of a call; the tools' schemas state them too.
const (
	// MaxQuestionChars bounds a question (in characters): a question is a
	// sentence or two, and retrieve reads only its first 64 words anyway.
	MaxQuestionChars = 2000
	// MaxKeyChars bounds a node key.
	MaxKeyChars = 100
	// MaxBudgetChars bounds the context a call returns.
	MaxBudgetChars = 20000
	// DefaultTopK, DefaultHops and DefaultBudgetChars are a call's settings
	// when it does not give them.
	DefaultTopK        = retrieve.DefaultTopK
	DefaultHops        = retrieve.MaxHops
	DefaultBudgetChars = retrieve.DefaultMaxChars
)

// Caller is who a call is for: the token that authenticated it (or "stdio")
// and its one tenant.
type Caller struct {
	TokenID  string
	TenantID int64
}

// Config sets up a Server.
type Config struct {
	// Retriever reads the graph (graph_context, graph_lookup).
	Retriever *retrieve.Retriever
	// Pool reads the projection's status (graph_status) and, over HTTP,
	// the tokens.
	Pool *pgxpool.Pool
	// Model is described by the model resource. Default: graphmodel.Default.
	Model *graphmodel.Model
	// Logger gets one line per call. Default: none.
	Logger *zap.Logger
	// Metrics counts and times the calls. Default: unregistered collectors.
	Metrics *Metrics
	// CallTimeout bounds one call, the wait for a slot included. Default: 15s.
	CallTimeout time.Duration
	// MaxConcurrentPerToken bounds the calls one token has in flight; more
	// wait for a slot within CallTimeout. Default: 4.
	MaxConcurrentPerToken int
	// LogQuestions logs each question (personal data masked); off by default.
	LogQuestions bool
	// Version is the server's version in the MCP handshake.
	Version string
}

// Server holds what every session shares: the retriever, the limits, the
// per-token slots.
type Server struct {
	cfg   Config
	mu    sync.Mutex
	slots map[string]*semaphore.Weighted
}

// New checks cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Retriever == nil || cfg.Pool == nil {
		return nil, errors.New("mcpserver: a Retriever and a PostgreSQL pool are required")
	}
	if cfg.Model == nil {
		cfg.Model = &graphmodel.Default
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 15 * time.Second
	}
	if cfg.MaxConcurrentPerToken == 0 {
		cfg.MaxConcurrentPerToken = 4
	}
	if cfg.CallTimeout < 0 || cfg.MaxConcurrentPerToken < 0 {
		return nil, errors.New("mcpserver: the call timeout and the concurrent calls per token must be positive")
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	return &Server{cfg: cfg, slots: map[string]*semaphore.Weighted{}}, nil
}

// ContextInput are graph_context's arguments.
type ContextInput struct {
	Question string `json:"question" jsonschema:"what to find, in plain words (a product, a kind of product, a feature); searched as words, never run as a query"`
	TopK     int    `json:"top_k,omitempty" jsonschema:"how many best-matching products to start from (default 5)"`
	Hops     *int   `json:"hops,omitempty" jsonschema:"how far to follow relationships: 0 the matches alone, 1 also their category and orders, 2 also products bought together and buyer segments and countries (default 2)"`
	MaxChars int    `json:"max_chars,omitempty" jsonschema:"budget of context characters, most relevant first (default 4000)"`
}

// ContextItem is one matching node and its context.
type ContextItem struct {
	Rank     int      `json:"rank"`
	Key      string   `json:"key" jsonschema:"the matching node's key, for graph_lookup"`
	Score    float64  `json:"score"`
	Content  string   `json:"content" jsonschema:"what the graph says about it, one statement per line"`
	NodeKeys []string `json:"node_keys" jsonschema:"every node the content cites"`
}

// ContextOutput is graph_context's structured result.
type ContextOutput struct {
	Items     []ContextItem `json:"items"`
	NodeKeys  []string      `json:"node_keys" jsonschema:"every node key cited, each once"`
	Matches   int           `json:"matches" jsonschema:"matching nodes found, before the budget"`
	Chars     int           `json:"chars"`
	Truncated bool          `json:"truncated" jsonschema:"true when the budget left something out"`
	TopK      int           `json:"top_k"`
	Hops      int           `json:"hops"`
	MaxChars  int           `json:"max_chars"`
}

// LookupInput are graph_lookup's arguments.
type LookupInput struct {
	Key string `json:"key" jsonschema:"a node key as graph_context cites it, Label:id, e.g. Product:15"`
}

// LookupLine is one statement about a node's neighbourhood.
type LookupLine struct {
	Text     string   `json:"text"`
	NodeKeys []string `json:"node_keys"`
}

// LookupOutput is graph_lookup's structured result.
type LookupOutput struct {
	Key           string         `json:"key"`
	Label         string         `json:"label"`
	ID            int64          `json:"id"`
	Properties    map[string]any `json:"properties" jsonschema:"the node's properties (only those the model allows)"`
	Neighbourhood []LookupLine   `json:"neighbourhood" jsonschema:"what lies around the node, aggregated"`
}

// StatusInput is graph_status's (empty) argument object.
type StatusInput struct{}

const (
	toolContext = "graph_context"
	toolLookup  = "graph_lookup"
	toolStatus  = "graph_status"
)

// MCP returns an MCP server with the tools and the model resource. fixed,
// when not nil, is the caller of every call (stdio); otherwise each call's
// caller is the bearer token its HTTP request carried (Handler), and a call
// without one is refused.
func (s *Server) MCP(fixed *Caller) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "graphsync", Title: "graphsync tenant graph", Version: s.cfg.Version},
		&mcp.ServerOptions{
			Instructions: "Read-only access to one shop's commerce graph (products, categories, orders; customers only as counts). " +
				"Start with graph_context for a question, follow a cited key with graph_lookup, and check graph_status before saying how fresh the data is. " +
				"Read the resource " + ModelURI + " for what the graph holds.",
			Capabilities: &mcp.ServerCapabilities{},
		})
	addTool(s, srv, fixed, &mcp.Tool{
		Name:  toolContext,
		Title: "Search the shop's graph",
		Description: "Find what the shop's graph knows about a question: the best-matching products (by name and description), " +
			"their category, how often and with what they were ordered, and who (by segment and country, counted) bought them. " +
			"Returns Markdown context with every statement ending in the node keys it came from ([Product:15, Category:3]); cite them, " +
			"and pass one to graph_lookup for more. The question is searched as plain words: no query language is interpreted.",
		InputSchema: contextSchema(),
	}, s.graphContext)
	addTool(s, srv, fixed, &mcp.Tool{
		Name:  toolLookup,
		Title: "Look up one node",
		Description: "Show one node of the shop's graph by the key graph_context cited (Label:id, e.g. Product:15): " +
			"its properties and its neighbourhood, aggregated (a product's category, orders and products bought with it; " +
			"a category's products; an order's lines). Labels: " + fmt.Sprint(retrieve.LookupLabels(s.cfg.Model)) + ". " +
			"A key that is not in this shop's graph is reported as not found.",
		InputSchema: lookupSchema(),
	}, s.graphLookup)
	addTool(s, srv, fixed, &mcp.Tool{
		Name:  toolStatus,
		Title: "How fresh the graph is",
		Description: "Say how far the shop's graph is behind its PostgreSQL database: events waiting to be applied, " +
			"how long the oldest has waited, events that could not be applied (dead letters), " +
			"and when the graph was last compared with PostgreSQL (a drift check) and whether it matched. " +
			"Use it before stating that the graph is current.",
	}, s.graphStatus)
	srv.AddReceivingMiddleware(s.observe(fixed))
	text := ModelMarkdown(s.cfg.Model)
	srv.AddResource(&mcp.Resource{
		URI: ModelURI, Name: "graph-model", Title: "The graph model", MIMEType: "text/markdown",
		Description: "Labels, properties and relationships the shop's graph can hold, what each means, and what the tools do with them.",
		Size:        int64(len(text)),
	}, func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: ModelURI, MIMEType: "text/markdown", Text: text}}}, nil
	})
	return srv
}

// addTool registers one of the server's tools: read-only, its handler run
// for its caller within the limits (wrap).
func addTool[In, Out any](s *Server, srv *mcp.Server, fixed *Caller, tool *mcp.Tool,
	run func(ctx context.Context, c Caller, in In) (*mcp.CallToolResult, Out, error)) {
	tool.Annotations = readOnly()
	mcp.AddTool(srv, tool, wrap(s, fixed, tool.Name, run))
}

func readOnly() *mcp.ToolAnnotations {
	f := false
	return &mcp.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &f, IdempotentHint: true, OpenWorldHint: &f}
}

func contextSchema() *jsonschema.Schema {
	schema, err := jsonschema.For[ContextInput](nil)
	if err != nil {
		panic(err)
	}
	maxLen := MaxQuestionChars
	one := 1
	schema.Properties["question"].MinLength = &one
	schema.Properties["question"].MaxLength = &maxLen
	bound(schema.Properties["top_k"], 1, retrieve.MaxTopK)
	hops := schema.Properties["hops"]
	hops.Types, hops.Type = nil, "integer"
	bound(hops, 0, retrieve.MaxHops)
	bound(schema.Properties["max_chars"], retrieve.MinMaxChars, MaxBudgetChars)
	return schema
}

func lookupSchema() *jsonschema.Schema {
	schema, err := jsonschema.For[LookupInput](nil)
	if err != nil {
		panic(err)
	}
	maxLen := MaxKeyChars
	schema.Properties["key"].MaxLength = &maxLen
	schema.Properties["key"].Pattern = `^[A-Za-z]+:[0-9]+$`
	return schema
}

func bound(s *jsonschema.Schema, lo, hi int) {
	l, h := float64(lo), float64(hi)
	s.Minimum, s.Maximum = &l, &h
}

// toolError is an error whose text is the server's own and safe to show
// the client: a tool result with isError set.
type toolError struct{ msg string }

func (e toolError) Error() string { return e.msg }

// wrap runs a tool for its caller within the limits, and turns an error
// into a tool error whose text never holds a driver error, a tenant id or a
// token. observe counts, times and logs it.
func wrap[In, Out any](s *Server, fixed *Caller, tool string, run func(ctx context.Context, c Caller, in In) (*mcp.CallToolResult, Out, error)) mcp.ToolHandlerFor[In, Out] {
	return func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		var zero Out
		caller, ok := callerOf(fixed, req)
		if !ok {
			// Handler authenticates every HTTP request first: this is a
			// server set up without one.
			return nil, zero, toolError{"not authenticated"}
		}
		ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		defer cancel()
		if err := s.acquire(ctx, caller.TokenID); err != nil {
			return nil, zero, err
		}
		defer s.release(caller.TokenID)
		res, out, err := run(ctx, caller, in)
		if err != nil {
			return nil, zero, s.safeError(ctx, tool, caller, err)
		}
		return res, out, nil
	}
}

// observe counts, times and logs every tools/call, those the SDK refuses
// before a tool runs (arguments against the schema, an unknown tool) too:
// one log line a call, with the token's id, never the token, and the
// question only when asked for.
func (s *Server) observe(fixed *Caller) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			call, ok := req.(*mcp.CallToolRequest)
			if method != "tools/call" || !ok || call.Params == nil {
				return next(ctx, method, req)
			}
			start := time.Now()
			res, err := next(ctx, method, req)
			elapsed := time.Since(start)
			tool := call.Params.Name
			if tool != toolContext && tool != toolLookup && tool != toolStatus {
				tool = "unknown" // a client's text never becomes a label
			}
			outcome := "ok"
			var text string
			if r, isResult := res.(*mcp.CallToolResult); err != nil || !isResult || r == nil {
				outcome = "protocol_error"
			} else if r.IsError {
				outcome = "tool_error"
				for _, c := range r.Content {
					if tc, isText := c.(*mcp.TextContent); isText {
						text = truncate(tc.Text, 300)
					}
				}
			}
			s.cfg.Metrics.observe(tool, outcome, elapsed)
			caller, _ := callerOf(fixed, call)
			fields := []zap.Field{zap.String("token_id", caller.TokenID), zap.Int64("tenant_id", caller.TenantID),
				zap.String("tool", tool), zap.Duration("duration", elapsed), zap.String("outcome", outcome)}
			if outcome == "tool_error" && s.cfg.LogQuestions {
				// The SDK's schema errors may quote an argument: logged
				// only where arguments may be.
				fields = append(fields, zap.String("error", graphmodel.MaskPersonalData(text)))
			}
			if s.cfg.LogQuestions && tool == toolContext {
				var in struct{ Question any }
				_ = json.Unmarshal(call.Params.Arguments, &in)
				if q, isString := in.Question.(string); isString {
					fields = append(fields, zap.String("question", graphmodel.MaskPersonalData(truncate(q, 500))))
				}
			}
			s.cfg.Logger.Info("mcp call", fields...)
			return res, err
		}
	}
}

func callerOf(fixed *Caller, req *mcp.CallToolRequest) (Caller, bool) {
	if fixed != nil {
		return *fixed, true
	}
	if req == nil || req.Extra == nil || req.Extra.TokenInfo == nil {
		return Caller{}, false
	}
	c, ok := req.Extra.TokenInfo.Extra[callerKey].(Caller)
	return c, ok
}

// safeError is the text a client sees for err: the server's own messages
// as they are, a timeout said as one, anything else (a driver's or
// PostgreSQL's error) logged redacted and reported without detail.
func (s *Server) safeError(ctx context.Context, tool string, c Caller, err error) error {
	var te toolError
	switch {
	case errors.As(err, &te):
		return te
	case errors.Is(err, retrieve.ErrNoSearchTerms), errors.Is(err, retrieve.ErrBadKey):
		return toolError{err.Error()}
	case errors.Is(err, retrieve.ErrNotFound):
		return toolError{"not found: no node with this key in this shop's graph"}
	case errors.Is(err, retrieve.ErrUnknownTenant):
		return toolError{"this shop's graph is empty: nothing has been synced into it yet"}
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || deadlinePassed(ctx):
		return toolError{fmt.Sprintf("the graph did not answer within %s; try again later, or with a smaller top_k or hops", s.cfg.CallTimeout)}
	}
	s.cfg.Logger.Warn("mcp tool failed", zap.String("tool", tool), zap.String("token_id", c.TokenID),
		zap.Int64("tenant_id", c.TenantID), zap.String("error", redact.Text(err.Error())))
	return toolError{"the graph could not be read; the server's log has the details"}
}

// deadlinePassed reports whether ctx's deadline has passed. The driver
// sets its socket's deadline from the call's, and when that fires first it
// returns an i/o timeout while the context's own timer has not yet
// cancelled it: on a loaded machine the gap is milliseconds, and the
// timeout would read as a broken graph.
func deadlinePassed(ctx context.Context) bool {
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}

func (s *Server) acquire(ctx context.Context, tokenID string) error {
	s.mu.Lock()
	slot := s.slots[tokenID]
	if slot == nil {
		slot = semaphore.NewWeighted(int64(s.cfg.MaxConcurrentPerToken))
		s.slots[tokenID] = slot
	}
	s.mu.Unlock()
	if slot.TryAcquire(1) {
		return nil
	}
	if err := slot.Acquire(ctx, 1); err != nil {
		return toolError{fmt.Sprintf("too many calls in flight for this token (at most %d at once) for %s; try again later",
			s.cfg.MaxConcurrentPerToken, s.cfg.CallTimeout)}
	}
	return nil
}

func (s *Server) release(tokenID string) {
	s.mu.Lock()
	slot := s.slots[tokenID]
	s.mu.Unlock()
	slot.Release(1)
}

func (s *Server) graphContext(ctx context.Context, c Caller, in ContextInput) (*mcp.CallToolResult, ContextOutput, error) {
	// The schema states these bounds and the SDK checks them first; they
	// are checked again so that no caller of this package relies on it.
	// JSON decoding turns bytes that are not UTF-8 into U+FFFD: a question
	// holding one was not text as sent.
	if !utf8.ValidString(in.Question) || strings.ContainsRune(in.Question, utf8.RuneError) {
		return nil, ContextOutput{}, toolError{"the question is not valid UTF-8 text"}
	}
	if n := utf8.RuneCountInString(in.Question); n > MaxQuestionChars {
		return nil, ContextOutput{}, toolError{fmt.Sprintf("the question is %d characters; at most %d", n, MaxQuestionChars)}
	}
	opts := retrieve.Options{TopK: in.TopK, Hops: DefaultHops, MaxChars: in.MaxChars}
	if opts.TopK == 0 {
		opts.TopK = DefaultTopK
	}
	if in.Hops != nil {
		opts.Hops = *in.Hops
	}
	if opts.MaxChars == 0 {
		opts.MaxChars = DefaultBudgetChars
	}
	switch {
	case opts.TopK < 1 || opts.TopK > retrieve.MaxTopK:
		return nil, ContextOutput{}, toolError{fmt.Sprintf("top_k must be between 1 and %d, got %d", retrieve.MaxTopK, opts.TopK)}
	case opts.Hops < 0 || opts.Hops > retrieve.MaxHops:
		return nil, ContextOutput{}, toolError{fmt.Sprintf("hops must be between 0 and %d, got %d", retrieve.MaxHops, opts.Hops)}
	case opts.MaxChars < retrieve.MinMaxChars || opts.MaxChars > MaxBudgetChars:
		return nil, ContextOutput{}, toolError{fmt.Sprintf("max_chars must be between %d and %d, got %d", retrieve.MinMaxChars, MaxBudgetChars, opts.MaxChars)}
	}
	res, err := s.cfg.Retriever.RetrieveWith(ctx, c.TenantID, in.Question, opts)
	if err != nil {
		return nil, ContextOutput{}, err
	}
	out := ContextOutput{Items: []ContextItem{}, NodeKeys: []string{}, Matches: len(res.Seeds), Chars: res.Chars,
		Truncated: res.Truncated, TopK: res.TopK, Hops: res.Hops, MaxChars: res.MaxChars}
	seen := map[string]bool{}
	for _, it := range res.Items {
		keys := it.Keys()
		out.Items = append(out.Items, ContextItem{Rank: it.Rank, Key: retrieve.NodeKey(it.Seed.Label, it.Seed.ID),
			Score: it.Seed.Score, Content: it.Content(), NodeKeys: keys})
		for _, k := range keys {
			if !seen[k] {
				seen[k] = true
				out.NodeKeys = append(out.NodeKeys, k)
			}
		}
	}
	var md bytesBuilder
	if err := res.WriteMarkdown(&md); err != nil {
		return nil, ContextOutput{}, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: md.String()}}}, out, nil
}

func (s *Server) graphLookup(ctx context.Context, c Caller, in LookupInput) (*mcp.CallToolResult, LookupOutput, error) {
	if len(in.Key) > MaxKeyChars || !utf8.ValidString(in.Key) {
		return nil, LookupOutput{}, toolError{fmt.Sprintf("the key must be Label:id, at most %d characters", MaxKeyChars)}
	}
	res, err := s.cfg.Retriever.Lookup(ctx, c.TenantID, in.Key)
	if err != nil {
		return nil, LookupOutput{}, err
	}
	out := LookupOutput{Key: res.Key, Label: res.Label, ID: res.ID, Properties: res.Props, Neighbourhood: []LookupLine{}}
	for _, l := range res.Lines {
		out.Neighbourhood = append(out.Neighbourhood, LookupLine{Text: l.Text, NodeKeys: l.Keys})
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Markdown()}}}, out, nil
}

func (s *Server) graphStatus(ctx context.Context, c Caller, _ StatusInput) (*mcp.CallToolResult, Status, error) {
	st, err := readStatus(ctx, s.cfg.Pool, c.TenantID)
	if err != nil {
		return nil, Status{}, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: st.Sentence()}}}, st, nil
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
