package mcpserver_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"graphsync/events"
	"graphsync/internal/stacktest"
	"graphsync/mcpserver"
	"graphsync/outbox"
	"graphsync/projector"
	"graphsync/retrieve"
)

// planted is a word only tenant B's catalogue holds; plantedToo is one of
// B's description words that no question of the tests names.
const (
	planted    = "zyxquokka"
	plantedToo = "vermiglioso"
)

// stack is two tenants of one PostgreSQL database and their graphs: A a
// small shop, B the same shop plus a product, a category and orders holding
// the planted words.
type stack struct {
	pgURL  string
	pool   *pgxpool.Pool
	driver neo4j.DriverWithContext
	a, b   tenantGraph
}

type tenantGraph struct {
	tenant   int64
	base     int64
	outboxID int64
}

func (g *tenantGraph) id(n int64) int64 { return g.base + n }

var (
	schemaOnce sync.Once
	schemaErr  error
)

func newStack(t testing.TB) *stack {
	t.Helper()
	pgURL, pool := stacktest.FreshDatabase(t)
	driver := stacktest.Neo4j(t)
	schemaOnce.Do(func() { schemaErr = projector.EnsureSchema(context.Background(), driver) })
	if schemaErr != nil {
		t.Fatalf("EnsureSchema: %v", schemaErr)
	}
	s := &stack{pgURL: pgURL, pool: pool, driver: driver}
	ctx := context.Background()
	for _, g := range []*tenantGraph{&s.a, &s.b} {
		if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('shop') RETURNING id`).Scan(&g.tenant); err != nil {
			t.Fatal(err)
		}
		g.base = 1<<52 + rand.Int64N(1<<40)*1000
		g.outboxID = rand.Int64N(1 << 40)
	}
	t.Cleanup(func() { stacktest.CleanGraph(t, driver, s.a.tenant, s.b.tenant) })
	sink, err := projector.New(driver, projector.Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []*tenantGraph{&s.a, &s.b} {
		g := g
		apply := func(evs ...events.Event) {
			var batch []outbox.Message
			for _, ev := range evs {
				payload, err := json.Marshal(ev)
				if err != nil {
					t.Fatal(err)
				}
				g.outboxID++
				batch = append(batch, outbox.Message{ID: g.outboxID, TenantID: g.tenant, AggregateType: ev.AggregateType(),
					AggregateID: ev.AggregateID(), EventType: ev.EventType(), EventVersion: ev.EventVersion(),
					Payload: payload, OccurredAt: time.Now(), Attempts: 1})
			}
			rejected, err := sink.Deliver(ctx, batch)
			if err != nil || len(rejected) != 0 {
				t.Fatalf("deliver: rejected %v, err %v", rejected, err)
			}
		}
		product := func(n int64, name, description string, category int64, categoryName string) events.ProductCreated {
			return events.ProductCreated{ProductState: events.ProductState{ID: g.id(n), Version: 1, SKU: "SKU-" + strings.ReplaceAll(name, " ", "-"),
				Name: name, Description: description, PriceCents: 2999, Currency: "EUR", Status: events.ProductStatusActive,
				Category: &events.CategoryRef{ID: g.id(category), Name: categoryName}}}
		}
		line := func(no int32, p int64, q int32) events.OrderLine {
			return events.OrderLine{LineNo: no, ProductID: g.id(p), Quantity: q, UnitPriceCents: 1000}
		}
		order := func(n, customer int64, lines ...events.OrderLine) events.OrderPlaced {
			return events.OrderPlaced{OrderState: events.OrderState{ID: g.id(n), Version: 1, Status: events.OrderStatusPlaced,
				Currency: "EUR", TotalCents: 1000, PlacedAt: time.Now()},
				Customer: events.CustomerRef{ID: g.id(customer), Segment: "retail", CountryCode: "DE"}, Lines: lines}
		}
		apply(product(11, "Electric Kettle", "Boils water in a minute.", 1, "Kitchen"),
			product(12, "Wireless Speaker", "Bluetooth speaker with deep bass.", 2, "Audio"),
			product(13, "Coffee Grinder", "Burr grinder for fresh coffee.", 1, "Kitchen"))
		if g == &s.b {
			apply(product(14, "Kettle "+planted, "A "+planted+" kettle, "+plantedToo+" and fast: coffee, water, speaker.", 3, planted+" gear"))
			apply(order(31, 21, line(1, 11, 1), line(2, 14, 2)), order(32, 22, line(1, 14, 1), line(2, 12, 1)))
		} else {
			apply(order(31, 21, line(1, 11, 1), line(2, 13, 2)))
		}
	}
	return s
}

// server builds a Server on the stack; tweak adjusts its config.
func (s *stack) server(t testing.TB, log *zap.Logger, tweak func(*mcpserver.Config)) (*mcpserver.Server, *mcpserver.Metrics) {
	t.Helper()
	r, err := retrieve.New(s.driver, retrieve.Config{})
	if err != nil {
		t.Fatal(err)
	}
	metrics := mcpserver.NewMetrics()
	cfg := mcpserver.Config{Retriever: r, Pool: s.pool, Logger: log, Metrics: metrics}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := mcpserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return srv, metrics
}

// httpServer serves srv's handler with a registry holding its metrics.
func httpServer(t testing.TB, srv *mcpserver.Server, s *stack, metrics *mcpserver.Metrics) *httptest.Server {
	t.Helper()
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics.Collectors()...)
	ts := httptest.NewServer(srv.Handler(mcpserver.HTTPOptions{Tokens: mcpserver.NewTokenStore(s.pool), Gatherer: registry}))
	t.Cleanup(ts.Close)
	return ts
}

func (s *stack) token(t testing.TB, tenant int64) (string, mcpserver.Token) {
	t.Helper()
	token, row, err := mcpserver.NewTokenStore(s.pool).Create(context.Background(), tenant, "test")
	if err != nil {
		t.Fatal(err)
	}
	return token, row
}

// bearerTransport adds a bearer token to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func connect(t testing.TB, transport mcp.Transport) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	session, err := mcp.NewClient(&mcp.Implementation{Name: "graphsync-test", Version: "1"}, nil).Connect(ctx, transport, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = session.Close() })
	return session
}

func httpSession(t testing.TB, url, token string) *mcp.ClientSession {
	t.Helper()
	return connect(t, &mcp.StreamableClientTransport{Endpoint: url + mcpserver.Path, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearerTransport{token}}})
}

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// binary builds bin/graphsync once per test process, into a temporary
// folder.
func binary(t testing.TB) string {
	t.Helper()
	root := stacktest.RepoRoot(t)
	binaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "graphsync-mcp-test-")
		if err != nil {
			binaryErr = err
			return
		}
		binaryPath = filepath.Join(dir, "graphsync")
		cmd := exec.Command("go", "build", "-o", binaryPath, "./cmd/graphsync")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			binaryErr = &buildError{string(out)}
		}
	})
	if binaryErr != nil {
		t.Fatalf("build graphsync: %v", binaryErr)
	}
	return binaryPath
}

type buildError struct{ out string }

func (e *buildError) Error() string { return e.out }

// stdioSession runs `graphsync mcp --tenant N` and connects to it.
func (s *stack) stdioSession(t testing.TB, tenant int64, extra ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"mcp", "--tenant", itoa(tenant), "--log-level", "warn"}, extra...)...)
	cmd.Env = append(os.Environ(), "GRAPHSYNC_PG_URL="+s.pgURL, "GRAPHSYNC_NEO4J_URI="+stacktest.Neo4jURI(t))
	cmd.Stderr = &testWriter{t: t}
	return connect(t, &mcp.CommandTransport{Command: cmd})
}

type testWriter struct{ t testing.TB }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Logf("server: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func itoa(n int64) string { return strings.TrimSpace(strings.ReplaceAll(jsonString(n), `"`, "")) }

func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// call calls a tool and returns its result as JSON text (content and
// structured content), or the protocol error.
func call(t testing.TB, session *mcp.ClientSession, tool string, args any) (*mcp.CallToolResult, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return nil, "", err
	}
	return res, jsonString(res), nil
}

// textOf is a result's text content, joined.
func textOf(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// graphCounts counts the whole graph's nodes, relationships and properties.
func graphCounts(t testing.TB, driver neo4j.DriverWithContext) [3]int64 {
	t.Helper()
	ctx := context.Background()
	res, err := neo4j.ExecuteQuery(ctx, driver, `MATCH (n) WITH count(n) AS nodes, sum(size(keys(n))) AS props
		OPTIONAL MATCH ()-[r]->() RETURN nodes, props, count(r) AS rels`, nil, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	var out [3]int64
	for i, k := range []string{"nodes", "props", "rels"} {
		out[i], _, _ = neo4j.GetRecordValue[int64](res.Records[0], k)
	}
	return out
}
