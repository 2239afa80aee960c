package mcpserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxSessionsPerToken is HTTPOptions.MaxSessionsPerToken's default.
const DefaultMaxSessionsPerToken = 16

// sessionHeader is the streamable HTTP transport's session header.
const sessionHeader = "Mcp-Session-Id"

// sessionCap bounds the HTTP sessions one token holds open. A session is
// opened by a POST without a session id and lives in the SDK until the
// client deletes it or it idles out; the cap counts the sessions a token
// opened that the MCP server still lists, and the openings in flight, so
// that concurrent openings cannot pass it together.
type sessionCap struct {
	srv     *mcp.Server
	max     int
	timeout string
	refused prometheus.Counter // each 429
	mu      sync.Mutex
	// opened holds, per token id, the ids of the sessions it opened.
	opened  map[string]map[string]bool
	opening map[string]int
}

func newSessionCap(srv *mcp.Server, max int, timeout string, refused prometheus.Counter) *sessionCap {
	return &sessionCap{srv: srv, max: max, timeout: timeout, refused: refused, opened: map[string]map[string]bool{}, opening: map[string]int{}}
}

// serve passes r to next, unless it would open a session past the token's
// cap: then 429 with a JSON-RPC error saying what to do.
func (c *sessionCap) serve(w http.ResponseWriter, r *http.Request, tokenID string, next http.Handler) {
	if r.Method != http.MethodPost || r.Header.Get(sessionHeader) != "" || !isInitialize(r) {
		next.ServeHTTP(w, r)
		return
	}
	if !c.reserve(tokenID) {
		c.refused.Inc()
		msg, _ := json.Marshal(fmt.Sprintf("too many open sessions for this token (at most %d): close one (HTTP DELETE with its %s header) or wait until one has been idle for %s",
			c.max, sessionHeader, c.timeout))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":`+string(msg)+`}}`)
		return
	}
	var id string
	defer func() { c.release(tokenID, id) }()
	next.ServeHTTP(w, r)
	// The SDK set the new session's id on the response, if it opened one.
	// An initialize that failed opens one too, closes it again and lists
	// it until a goroutine of its own has run: only a session that was
	// initialized takes a place.
	if opened := w.Header().Get(sessionHeader); opened != "" && c.initialized(opened) {
		id = opened
	}
}

// initializeHead is how much of a first POST's body isInitialize reads:
// an initialize request is a few hundred bytes.
const initializeHead = 64 << 10

// isInitialize reports whether r's body is a JSON-RPC initialize request,
// leaving the body to be read whole after. Only an initialize opens a
// session that stays: the SDK answers any other first POST (a 2026-07-28
// client's server/discover probe) in a session it closes at once, so such
// a request takes no place, not even while in flight. A body longer than
// initializeHead counts as an initialize.
func isInitialize(r *http.Request) bool {
	if r.Body == nil {
		return false
	}
	head, err := io.ReadAll(io.LimitReader(r.Body, initializeHead+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
	if err != nil || len(head) > initializeHead {
		return true
	}
	var msg struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(head, &msg) != nil {
		return true // the SDK answers it; counted as an opening meanwhile
	}
	return msg.Method == "initialize"
}

// initialized reports whether the MCP server lists session id as
// initialized.
func (c *sessionCap) initialized(id string) bool {
	for ss := range c.srv.Sessions() {
		if ss.ID() == id {
			return ss.InitializeParams() != nil
		}
	}
	return false
}

// reserve counts an opening in flight for tokenID when the token's live
// sessions and openings leave room.
func (c *sessionCap) reserve(tokenID string) bool {
	live := map[string]bool{}
	for ss := range c.srv.Sessions() {
		live[ss.ID()] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Forget every token's closed sessions, so that the map holds live
	// sessions alone.
	for token, ids := range c.opened {
		for id := range ids {
			if !live[id] {
				delete(ids, id)
			}
		}
		if len(ids) == 0 {
			delete(c.opened, token)
		}
	}
	if len(c.opened[tokenID])+c.opening[tokenID] >= c.max {
		return false
	}
	c.opening[tokenID]++
	return true
}

// release ends an opening of tokenID, which opened session id ("" none).
func (c *sessionCap) release(tokenID, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opening[tokenID]--; c.opening[tokenID] == 0 {
		delete(c.opening, tokenID)
	}
	if id == "" {
		return
	}
	if c.opened[tokenID] == nil {
		c.opened[tokenID] = map[string]bool{}
	}
	c.opened[tokenID][id] = true
}
