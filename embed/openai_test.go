//go:build cgo

package embed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// embeddingServer is a real HTTP server speaking OpenAI's /v1/embeddings,
// answering with the local ONNX model's vectors, unless a test's fault
// function answers first.
type embeddingServer struct {
	*httptest.Server
	requests atomic.Int64
	mu       sync.Mutex
	auth     []string
	fault    func(w http.ResponseWriter, r *http.Request, request int64) bool
}

func newEmbeddingServer(t *testing.T, fault func(w http.ResponseWriter, r *http.Request, request int64) bool) *embeddingServer {
	t.Helper()
	model := sharedEmbedder(t)
	s := &embeddingServer{fault: fault}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.requests.Add(1)
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		if r.URL.Path != "/v1/embeddings" || r.Method != http.MethodPost {
			http.Error(w, `{"error":{"type":"not_found"}}`, http.StatusNotFound)
			return
		}
		if s.fault != nil && s.fault(w, r, n) {
			return
		}
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model != "all-minilm-l6-v2" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","code":"bad_model","message":"echo of the input"}}`))
			return
		}
		vectors, err := model.Embed(r.Context(), req.Input)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		type item struct {
			Object    string    `json:"object"`
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		answer := struct {
			Object string `json:"object"`
			Data   []item `json:"data"`
			Model  string `json:"model"`
		}{Object: "list", Model: req.Model}
		// Served in reverse order: the client must place them by index.
		for i := len(vectors) - 1; i >= 0; i-- {
			answer.Data = append(answer.Data, item{Object: "embedding", Index: i, Embedding: vectors[i]})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(answer)
	}))
	t.Cleanup(s.Close)
	return s
}

func openAIConfig(url string) Config {
	return Config{
		Kind:       KindOpenAI,
		URL:        url + "/v1",
		Model:      "all-minilm-l6-v2",
		APIKey:     "sk-test-secret-0123456789",
		BatchSize:  4,
		Timeout:    10 * time.Second,
		Retries:    3,
		RetryDelay: time.Millisecond,
	}
}

// TestOpenAIEmbedderServesTheModel: the dimension comes from the server's
// first answer, texts go in batches, the key as a bearer token, and the
// vectors equal the local model's.
func TestOpenAIEmbedderServesTheModel(t *testing.T) {
	server := newEmbeddingServer(t, nil)
	e, err := Open(openAIConfig(server.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if want := "openai:all-minilm-l6-v2@" + strings.TrimPrefix(server.URL, "http://") + "/v1"; e.Dimension() != 384 || e.Model() != want {
		t.Fatalf("dimension %d model %q, want 384 %s", e.Dimension(), e.Model(), want)
	}
	texts, _ := loadFixture(t, DefaultModel)
	texts = texts[:10]
	before := server.requests.Load()
	got, err := e.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	if n := server.requests.Load() - before; n != 3 {
		t.Errorf("%d requests for 10 texts in batches of 4, want 3", n)
	}
	sameAsLocalModel(t, texts, got)
	server.mu.Lock()
	defer server.mu.Unlock()
	for _, auth := range server.auth {
		if auth != "Bearer sk-test-secret-0123456789" {
			t.Fatalf("Authorization %q", auth)
		}
	}
}

// TestOpenAIEmbedderRetries: 5xx, 429 and a hung server are retried with
// backoff and counted; past the retries the error wraps ErrUnavailable;
// a refusal (400) is not retried; a garbage answer is retried and then
// wraps ErrBadAnswer. No error holds the key or the server's message.
func TestOpenAIEmbedderRetries(t *testing.T) {
	failFirst := func(n int64, status int) func(http.ResponseWriter, *http.Request, int64) bool {
		return func(w http.ResponseWriter, r *http.Request, request int64) bool {
			if request > 1 && request <= 1+n { // request 1 is Open's probe
				w.WriteHeader(status)
				_, _ = w.Write([]byte(`{"error":{"message":"overloaded: wireless speaker","type":"server_error"}}`))
				return true
			}
			return false
		}
	}
	hang := func(w http.ResponseWriter, r *http.Request, request int64) bool {
		if request == 1 {
			return false
		}
		// The server notices a closed connection only once the body is read.
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done() // until the client gives up
		return true
	}
	garbage := func(body string) func(http.ResponseWriter, *http.Request, int64) bool {
		return func(w http.ResponseWriter, r *http.Request, request int64) bool {
			if request == 1 {
				return false
			}
			_, _ = w.Write([]byte(body))
			return true
		}
	}
	wrongDimension := `{"data":[{"index":0,"embedding":[0.1,0.2,0.3]}]}`
	twoForOne := `{"data":[{"index":0,"embedding":[1]},{"index":1,"embedding":[1]}]}`
	cases := []struct {
		name         string
		fault        func(http.ResponseWriter, *http.Request, int64) bool
		model        string
		wantErr      error // nil: success
		wantRequests int64 // after the probe
		wantRetries  int
		wantInError  string
	}{
		{"503 twice then ok", failFirst(2, http.StatusServiceUnavailable), "", nil, 3, 2, ""},
		{"429 once then ok", failFirst(1, http.StatusTooManyRequests), "", nil, 2, 1, ""},
		{"500 always", failFirst(100, http.StatusInternalServerError), "", ErrUnavailable, 4, 3, "status 500 (type server_error)"},
		{"hung server", hang, "", ErrUnavailable, 4, 3, "timed out"},
		{"not JSON", garbage("<html>bad gateway</html>"), "", ErrBadAnswer, 4, 3, "not the JSON"},
		{"wrong dimension", garbage(wrongDimension), "", ErrBadAnswer, 4, 3, "has 3 floats, want 384"},
		{"wrong count", garbage(twoForOne), "", ErrBadAnswer, 4, 3, "2 vectors for 1 texts"},
		{"empty data", garbage(`{"data":[]}`), "", ErrBadAnswer, 4, 3, "0 vectors for 1 texts"},
		{"zero vector", garbage(`{"data":[{"index":0,"embedding":[` + strings.TrimSuffix(strings.Repeat("0,", 384), ",") + `]}]}`), "", ErrBadAnswer, 4, 3, "has length 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			server := newEmbeddingServer(t, tc.fault)
			cfg := openAIConfig(server.URL)
			// Short for the hung server, long enough elsewhere for the
			// model to answer on a busy machine (a timed-out probe would
			// shift the request count).
			cfg.Timeout = 10 * time.Second
			if tc.name == "hung server" {
				cfg.Timeout = time.Second
			}
			var retries atomic.Int64
			cfg.OnRetry = func(error) { retries.Add(1) }
			e, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			got, err := e.Embed(context.Background(), []string{"a wireless speaker"})
			if n := server.requests.Load() - 1; n != tc.wantRequests {
				t.Errorf("%d requests, want %d", n, tc.wantRequests)
			}
			if int(retries.Load()) != tc.wantRetries {
				t.Errorf("%d retries counted, want %d", retries.Load(), tc.wantRetries)
			}
			if tc.wantErr == nil {
				if err != nil || len(got) != 1 || len(got[0]) != 384 {
					t.Fatalf("got %d vectors, %v; want one", len(got), err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.wantInError) || strings.Contains(msg, "sk-test") || strings.Contains(msg, "wireless") || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want one line with %q, without the key or the text", msg, tc.wantInError)
			}
		})
	}
}

func TestOpenAIEmbedderRefusalIsNotRetried(t *testing.T) {
	server := newEmbeddingServer(t, nil)
	cfg := openAIConfig(server.URL)
	cfg.Model = "no-such-model"
	_, err := Open(cfg)
	if err == nil || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrBadAnswer) {
		t.Fatalf("Open with a model the server refuses: %v, want a plain refusal", err)
	}
	if n := server.requests.Load(); n != 1 {
		t.Errorf("%d requests, want 1 (a 400 is not retried)", n)
	}
	if msg := err.Error(); !strings.Contains(msg, "status 400 (type invalid_request_error, code bad_model)") || strings.Contains(msg, "echo of the input") || !strings.Contains(msg, "no-such-model") {
		t.Errorf("error %q", msg)
	}
}

// TestOpenAIEmbedderServerDown: Open's probe of a server that is not there
// fails with ErrUnavailable after its retries, naming the endpoint.
func TestOpenAIEmbedderServerDown(t *testing.T) {
	server := httptest.NewServer(http.NotFoundHandler())
	url := server.URL
	server.Close() // nothing listens there now
	cfg := openAIConfig(url)
	var retries atomic.Int64
	cfg.OnRetry = func(error) { retries.Add(1) }
	_, err := Open(cfg)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), url+"/v1/embeddings") {
		t.Fatalf("Open against a closed port: %v, want ErrUnavailable naming the endpoint", err)
	}
	if retries.Load() != 3 {
		t.Errorf("%d retries, want 3", retries.Load())
	}
}

// TestOpenAIEmbedderCancelStopsBackoff: a cancelled context ends the wait
// between tries at once, even with a long backoff.
func TestOpenAIEmbedderCancelStopsBackoff(t *testing.T) {
	retrying := make(chan struct{}, 16)
	server := newEmbeddingServer(t, func(w http.ResponseWriter, r *http.Request, request int64) bool {
		if request == 1 {
			return false
		}
		w.WriteHeader(http.StatusBadGateway)
		return true
	})
	cfg := openAIConfig(server.URL)
	cfg.RetryDelay = time.Hour
	cfg.OnRetry = func(error) { retrying <- struct{}{} }
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := e.Embed(ctx, []string{"x"})
		done <- err
	}()
	<-retrying // the first try failed; Embed now waits an hour
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("cancelled during backoff: %v, want context.Canceled and ErrUnavailable", err)
	}
}

func TestConfigNeverPrintsTheKey(t *testing.T) {
	cfg := openAIConfig("http://127.0.0.1:1")
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(format, cfg); strings.Contains(out, "sk-test") {
			t.Errorf("%s of Config shows the key: %s", format, out)
		}
	}
}

// Two servers serving different weights under one model name give two
// model ids, so their vectors never share a cache entry or pass drift as
// each other's; the id holds no credentials nor query.
func TestOpenAIModelIDNamesTheServer(t *testing.T) {
	first := newEmbeddingServer(t, nil)
	// The second serves other weights: every vector reversed.
	second := newEmbeddingServer(t, nil)
	model := sharedEmbedder(t)
	second.fault = func(w http.ResponseWriter, r *http.Request, _ int64) bool {
		var req struct {
			Input []string `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return true
		}
		vectors, err := model.Embed(r.Context(), req.Input)
		if err != nil {
			http.Error(w, "model", http.StatusInternalServerError)
			return true
		}
		type item struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		var answer struct {
			Data []item `json:"data"`
		}
		for i, v := range vectors {
			reversed := make([]float32, len(v))
			for d := range v {
				reversed[d] = v[len(v)-1-d]
			}
			answer.Data = append(answer.Data, item{Index: i, Embedding: reversed})
		}
		_ = json.NewEncoder(w).Encode(answer)
		return true
	}
	a, err := Open(openAIConfig(first.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cfg := openAIConfig(strings.Replace(second.URL, "http://", "http://user:pa55word@", 1))
	cfg.URL += "/?api-version=2024-02-01&key=query-secret"
	b, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	va, err := a.Embed(context.Background(), []string{"ceramic teapot"})
	if err != nil {
		t.Fatal(err)
	}
	vb, err := b.Embed(context.Background(), []string{"ceramic teapot"})
	if err != nil {
		t.Fatal(err)
	}
	if c := cosine(va[0], vb[0]); c > 0.99 {
		t.Fatalf("the two servers answer alike (cosine %v): the test needs different weights", c)
	}
	if a.Model() == b.Model() {
		t.Fatalf("two servers with different weights share the model id %q", a.Model())
	}
	for _, secret := range []string{"user", "pa55word", "api-version", "query-secret", "?"} {
		if strings.Contains(b.Model(), secret) {
			t.Fatalf("model id %q holds %q", b.Model(), secret)
		}
	}
	if want := "openai:all-minilm-l6-v2@" + strings.TrimPrefix(second.URL, "http://") + "/v1"; b.Model() != want {
		t.Fatalf("model id %q, want %q", b.Model(), want)
	}
}

// TestServerIDIsTheSameHoweverTheURLIsSpelled: one server spelled with a
// trailing slash, the scheme's default port, capitals in the host, or
// empty and dot segments in the path keeps one model id (another id would
// embed every text again), and is asked at the same endpoint; another
// port, path or host is another server.
func TestServerIDIsTheSameHoweverTheURLIsSpelled(t *testing.T) {
	server := newEmbeddingServer(t, nil)
	opened := func(base string) Embedder {
		t.Helper()
		cfg := openAIConfig(base)
		cfg.URL = base
		e, err := Open(cfg)
		if err != nil {
			t.Fatalf("%s: %v", base, err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e
	}
	plain := opened(server.URL + "/v1")
	for _, spelled := range []string{server.URL + "/v1/", server.URL + "//v1/./",
		server.URL + "/x/../v1"} {
		if got := opened(spelled).Model(); got != plain.Model() {
			t.Errorf("%s: model id %q, want %q as for %s/v1", spelled, got, plain.Model(), server.URL)
		}
	}
	for want, spellings := range map[string][]string{
		"embed.example.org/v1":    {"https://embed.example.org/v1", "https://Embed.Example.ORG:443/v1"},
		"10.0.0.5:8080/v1":        {"http://10.0.0.5:8080/v1"},
		"10.0.0.5":                {"http://10.0.0.5", "http://10.0.0.5:80", "http://10.0.0.5:"},
		"10.0.0.5:443":            {"http://10.0.0.5:443"},
		"embed.example.org:80/v1": {"https://embed.example.org:80/v1"},
	} {
		for _, raw := range spellings {
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			if got := serverID(u); got != want {
				t.Errorf("%s: server id %q, want %q", raw, got, want)
			}
		}
	}
}
