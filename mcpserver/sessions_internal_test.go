package mcpserver

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
)

// A first POST that is not an initialize (the Go SDK 1.8 client probes
// with server/discover before it falls back to initialize) makes the SDK
// open a session, answer, and close it again; the SDK lists it until a
// goroutine of its own runs. Such a session takes no place under the cap:
// before, each client connection could hold two places for a moment, and a
// token's second session was refused at a cap of 2 on a loaded machine.
func TestProbeSessionsTakeNoPlace(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "cap-test", Version: "1"}, nil)
	caps := newSessionCap(srv, 1, "30m0s", NewMetrics().sessionsRefused)
	streamable := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caps.serve(w, r, "token", streamable)
	}))
	t.Cleanup(ts.Close)
	places := func() int {
		caps.mu.Lock()
		defer caps.mu.Unlock()
		return len(caps.opened["token"]) + caps.opening["token"]
	}

	post := func(body string) int {
		req, err := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 3 {
		code := post(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}`)
		if code == http.StatusTooManyRequests {
			t.Fatalf("probe %d refused at a cap of 1 with no session open", i+1)
		}
		if got := places(); got != 0 {
			t.Fatalf("after probe %d (answered %d) the token holds %d places, want 0", i+1, code, got)
		}
	}
	// An initialize the SDK refuses leaves no session behind: its place is
	// given back once the request is done.
	if code := post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":"not an object"}`); code == http.StatusTooManyRequests {
		t.Fatal("a bad initialize refused at a cap of 1 with no session open")
	}
	deadline := time.Now().Add(10 * time.Second)
	for places() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a refused initialize still holds %d places", places())
		}
		<-time.After(10 * time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	session, err := mcp.NewClient(&mcp.Implementation{Name: "cap-test", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: ts.URL, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("a session at a cap of 1, after the probes: %v", err)
	}
	t.Cleanup(func() { _ = session.Close() })
	if got := places(); got != 1 {
		t.Errorf("an open session holds %d places, want 1", got)
	}
}

// pastDeadline is a call's context whose deadline has passed while its
// timer has not cancelled it yet: what a loaded machine shows between the
// driver's socket deadline firing and the context's own.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }
func (pastDeadline) Err() error                  { return nil }

// A driver's i/o timeout at the call's deadline is said as a timeout,
// also before the context knows it is done; without a deadline passed the
// same error is a graph that could not be read.
func TestTimeoutAtTheDeadlineIsSaidAsOne(t *testing.T) {
	s := &Server{cfg: Config{Logger: zap.NewNop(), CallTimeout: 1500 * time.Millisecond}}
	ioTimeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	if got := s.safeError(pastDeadline{context.Background()}, "graph_context", Caller{}, ioTimeout).Error(); !strings.Contains(got, "did not answer within 1.5s") {
		t.Errorf("an i/o timeout at the deadline: %q, want a timeout", got)
	}
	if got := s.safeError(context.Background(), "graph_context", Caller{}, ioTimeout).Error(); !strings.Contains(got, "could not be read") {
		t.Errorf("an i/o timeout with no deadline passed: %q, want a graph that could not be read", got)
	}
}
