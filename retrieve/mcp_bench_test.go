package retrieve_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"graphsync/internal/stacktest"
	"graphsync/mcpserver"
	"graphsync/projector"
	"graphsync/retrieve"
)

var mcpCalls = flag.Int("mcp-calls", 500, "BenchmarkMCP: graph_context calls per concurrency level and path")

// BenchmarkMCP builds the context benchmark's graph (-context-nodes nodes,
// ten tenants) and, for 1, 10 and 50 concurrent clients, times -mcp-calls
// graph_context calls over streamable HTTP (each client its own session and
// bearer token, the tokens looked up in PostgreSQL on every request) against
// the same calls made in-process (RetrieveWith with the same options and
// the Markdown rendering, as graphsync context does), in
// the same run, the in-process path first at each level, after every
// question was asked once. It reports p50 and
// p99 of each and their ratio. Run it with `make bench-mcp`.
func BenchmarkMCP(b *testing.B) {
	ctx := context.Background()
	driver := stacktest.Neo4j(b)
	if err := projector.EnsureSchema(ctx, driver); err != nil {
		b.Fatal(err)
	}
	pgURL, _ := stacktest.FreshDatabase(b)
	// The pool `graphsync mcp` opens: eight connections.
	pgCfg, err := pgxpool.ParseConfig(pgURL)
	if err != nil {
		b.Fatal(err)
	}
	pgCfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, pgCfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	const tenants = 10
	base := 1<<53 + rand.Int64N(1<<40)*10_000_000
	tenantIDs := make([]int64, tenants)
	for i := range tenantIDs {
		// Tokens reference the tenants' rows.
		if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('bench') RETURNING id`).Scan(&tenantIDs[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { retrieve.DropBenchGraph(b, driver, tenantIDs) })
	start := time.Now()
	nodes, rels := retrieve.BuildBenchGraph(b, driver, tenantIDs, base, *retrieve.BenchNodes)
	b.Logf("graph: %d nodes, %d relationships in %s", nodes, rels, time.Since(start).Round(time.Second))

	r, err := retrieve.New(driver, retrieve.Config{Timeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := mcpserver.New(mcpserver.Config{Retriever: r, Pool: pool, CallTimeout: time.Minute, MaxConcurrentPerToken: 64})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler(mcpserver.HTTPOptions{Tokens: mcpserver.NewTokenStore(pool)}))
	b.Cleanup(ts.Close)

	rng := rand.New(rand.NewPCG(7, 11))
	questions := make([]string, *mcpCalls)
	for i := range questions {
		questions[i] = fmt.Sprintf("%s %s %s", strings.ToLower(retrieve.BenchAdjectives[rng.IntN(len(retrieve.BenchAdjectives))]),
			strings.ToLower(retrieve.BenchNouns[rng.IntN(len(retrieve.BenchNouns))]), strings.ToLower(retrieve.BenchNouns[rng.IntN(len(retrieve.BenchNouns))]))
	}
	opts := retrieve.Options{TopK: mcpserver.DefaultTopK, Hops: mcpserver.DefaultHops, MaxChars: mcpserver.DefaultBudgetChars}
	// Every question once before anything is timed (the tenants in turn),
	// so that neither path pays for plans and pages the other warmed.
	runClients(b, 10, questions, func(worker int) func(q string) error {
		tenant := tenantIDs[worker%tenants]
		return func(q string) error {
			_, err := r.RetrieveWith(ctx, tenant, q, opts)
			return err
		}
	})
	b.ResetTimer()
	for range b.N {
		for _, clients := range []int{1, 10, 50} {
			inProcess := runClients(b, clients, questions, func(worker int) func(q string) error {
				tenant := tenantIDs[worker%tenants]
				return func(q string) error {
					// As graphsync context does: retrieve, then render.
					res, err := r.RetrieveWith(ctx, tenant, q, opts)
					if err == nil && len(res.Items) == 0 {
						err = fmt.Errorf("%q found nothing", q)
					}
					if err == nil {
						err = res.WriteMarkdown(io.Discard)
					}
					return err
				}
			})
			sessions := make([]*mcp.ClientSession, clients)
			for i := range sessions {
				token, _, err := mcpserver.NewTokenStore(pool).Create(ctx, tenantIDs[i%tenants], "bench")
				if err != nil {
					b.Fatal(err)
				}
				sessions[i], err = mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx,
					&mcp.StreamableClientTransport{Endpoint: ts.URL + mcpserver.Path, MaxRetries: -1, DisableStandaloneSSE: true,
						HTTPClient: &http.Client{Transport: benchBearer{token, &http.Transport{MaxIdleConnsPerHost: 64}}}}, nil)
				if err != nil {
					b.Fatal(err)
				}
			}
			overHTTP := runClients(b, clients, questions, func(worker int) func(q string) error {
				session := sessions[worker]
				return func(q string) error {
					res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "graph_context", Arguments: map[string]any{"question": q}})
					if err == nil && res.IsError {
						err = fmt.Errorf("tool error: %v", res.Content)
					}
					return err
				}
			})
			for _, s := range sessions {
				_ = s.Close()
			}
			ip50, ip99 := retrieve.Percentiles(inProcess)
			hp50, hp99 := retrieve.Percentiles(overHTTP)
			b.ReportMetric(ms(hp50), fmt.Sprintf("http-c%d-p50-ms", clients))
			b.ReportMetric(ms(hp99), fmt.Sprintf("http-c%d-p99-ms", clients))
			b.ReportMetric(ms(ip50), fmt.Sprintf("inproc-c%d-p50-ms", clients))
			b.ReportMetric(ms(ip99), fmt.Sprintf("inproc-c%d-p99-ms", clients))
			b.Logf("%d nodes, %d clients, %d calls each path: over HTTP p50 %s p99 %s; in-process p50 %s p99 %s; ratio p50 %.2f p99 %.2f",
				nodes, clients, len(questions), hp50.Round(10*time.Microsecond), hp99.Round(10*time.Microsecond),
				ip50.Round(10*time.Microsecond), ip99.Round(10*time.Microsecond), float64(hp50)/float64(ip50), float64(hp99)/float64(ip99))
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

type benchBearer struct {
	token string
	next  http.RoundTripper
}

func (t benchBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.next.RoundTrip(r)
}

// runClients shares calls among clients workers, each running its own
// call function, and returns every call's latency.
func runClients(b *testing.B, clients int, questions []string, caller func(worker int) func(q string) error) []time.Duration {
	b.Helper()
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	next := make(chan string)
	for w := range clients {
		call := caller(w)
		wg.Go(func() {
			for q := range next {
				t0 := time.Now()
				err := call(q)
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	for _, q := range questions {
		next <- q
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	return lat
}
