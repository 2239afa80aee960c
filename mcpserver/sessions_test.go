package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"graphsync/mcpserver"
)

// A token holds at most MaxSessionsPerToken sessions open: one more is
// refused with 429 and a JSON-RPC error saying so (the Go SDK's client
// reports the status, "Too Many Requests"), while its open sessions and another token of the same
// tenant are served; a closed session frees its place.
func TestSessionsPerTokenAreCapped(t *testing.T) {
	s := newStack(t)
	srv, metrics := s.server(t, zaptest.NewLogger(t), nil)
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics.Collectors()...)
	ts := httptest.NewServer(srv.Handler(mcpserver.HTTPOptions{Tokens: mcpserver.NewTokenStore(s.pool), MaxSessionsPerToken: 2}))
	t.Cleanup(ts.Close)
	token, _ := s.token(t, s.a.tenant)
	other, _ := s.token(t, s.a.tenant)
	open := func(token string) (*mcp.ClientSession, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		session, err := mcp.NewClient(&mcp.Implementation{Name: "graphsync-test", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: ts.URL + mcpserver.Path, MaxRetries: -1,
				HTTPClient: &http.Client{Transport: bearerTransport{token}}}, nil)
		if err == nil {
			// Before ts.Close, which waits for the session's stream.
			t.Cleanup(func() { _ = session.Close() })
		}
		return session, err
	}
	first, err := open(token)
	if err != nil {
		t.Fatalf("first session: %v", err)
	}
	second := httpSession(t, ts.URL, token)

	const refusal = "too many open sessions for this token (at most 2)"
	if _, err := open(token); err == nil {
		t.Fatal("a third session of the token was opened past the cap of 2")
	} else if !strings.Contains(err.Error(), "Too Many Requests") {
		t.Errorf("the client's error does not say why: %v", err)
	}
	code, body, _ := rawPost(t, ts.URL, token, "", "",
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if code != http.StatusTooManyRequests || !strings.Contains(body, refusal) || !strings.Contains(body, `"jsonrpc":"2.0"`) {
		t.Errorf("a session past the cap: %d %s, want 429 and a JSON-RPC error", code, body)
	}
	if got := counterValue(t, registry, "graphsync_mcp_sessions_refused_total"); got != 2 {
		t.Errorf("graphsync_mcp_sessions_refused_total is %v after two sessions refused, want 2", got)
	}
	// The open sessions, and another token's, are served meanwhile.
	for name, session := range map[string]*mcp.ClientSession{"first": first, "second": second, "other token": httpSession(t, ts.URL, other)} {
		if got, _, err := call(t, session, "graph_status", map[string]any{}); err != nil || got.IsError {
			t.Errorf("%s session at the cap: %v", name, err)
		}
	}
	// Closing a session (HTTP DELETE) frees its place: the SDK drops it
	// as the DELETE is answered, so a new one opens within a deadline.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := open(token)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "Too Many Requests") || time.Now().After(deadline) {
			t.Fatalf("no session after one of two was closed: %v", err)
		}
		<-time.After(50 * time.Millisecond)
	}
}

// counterValue is the value of the counter named name in registry.
func counterValue(t *testing.T, registry *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}
