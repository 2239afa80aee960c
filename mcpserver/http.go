package mcpserver

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"graphsync/redact"
)

// Path is the streamable HTTP endpoint.
const Path = "/mcp"

// callerKey is where an authenticated request's Caller sits in the SDK's
// TokenInfo.Extra, which the SDK hands to every tool call of that request.
const callerKey = "graphsync.caller"

// WWWAuthenticate is the challenge of a 401 (RFC 6750): the same for a
// missing, unknown and revoked token, so that it tells nothing about which.
const WWWAuthenticate = `Bearer realm="graphsync-mcp"`

// HTTPOptions set up Handler.
type HTTPOptions struct {
	// Tokens authenticates every request.
	Tokens *TokenStore
	// Gatherer, when set, is served on /metrics.
	Gatherer prometheus.Gatherer
	// SessionTimeout closes a session idle this long. Default: 30 minutes.
	SessionTimeout time.Duration
	// MaxSessionsPerToken bounds the sessions one token holds open; one
	// more is refused with 429 until one is closed or idles out. Default:
	// DefaultMaxSessionsPerToken.
	MaxSessionsPerToken int
}

// Handler serves MCP's streamable HTTP transport on Path, every request
// authenticated by its bearer token, and /metrics when opts.Gatherer is set.
func (s *Server) Handler(opts HTTPOptions) http.Handler {
	if opts.SessionTimeout == 0 {
		opts.SessionTimeout = 30 * time.Minute
	}
	if opts.MaxSessionsPerToken <= 0 {
		opts.MaxSessionsPerToken = DefaultMaxSessionsPerToken
	}
	srv := s.MCP(nil)
	sessions := newSessionCap(srv, opts.MaxSessionsPerToken, opts.SessionTimeout.String(), s.cfg.Metrics.sessionsRefused)
	streamable := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{SessionTimeout: opts.SessionTimeout})
	// The SDK's own middleware carries the caller to the tool calls (and
	// ties a session to the token that opened it: another token gets 403
	// on it); the token was checked before, by authenticate.
	carry := auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		info, _ := ctx.Value(tokenInfoKey{}).(*auth.TokenInfo)
		if info == nil {
			return nil, auth.ErrInvalidToken
		}
		return info, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(streamable)
	mux := http.NewServeMux()
	mux.Handle(Path, s.authenticate(opts.Tokens, sessions, carry))
	if opts.Gatherer != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{}))
	}
	return mux
}

type tokenInfoKey struct{}

// authenticate refuses a request without a valid token with 401 and no
// detail, and otherwise passes it on with its caller, within the token's
// sessions.
func (s *Server) authenticate(tokens *TokenStore, sessions *sessionCap, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearer(r)
		var caller Caller
		var err error = ErrUnknownToken
		if ok {
			caller, err = tokens.Resolve(r.Context(), token)
		}
		if err != nil {
			if !errors.Is(err, ErrUnknownToken) {
				// PostgreSQL could not say: not the client's fault, and
				// nothing to tell it either.
				s.cfg.Logger.Warn("mcp token lookup failed", zap.String("error", redact.Text(err.Error())))
				http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
				return
			}
			s.cfg.Metrics.authFail.Inc()
			w.Header().Set("WWW-Authenticate", WWWAuthenticate)
			http.Error(w, http.StatusText(http.StatusUnauthorized), http.StatusUnauthorized)
			return
		}
		if isBatch(r) {
			// JSON-RPC batches left MCP in 2025-06-18; an older client
			// could otherwise send thousands of calls in one request.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"JSON-RPC batches are not supported: send one request per HTTP request"}}`)
			return
		}
		info := &auth.TokenInfo{UserID: caller.TokenID, Extra: map[string]any{callerKey: caller}}
		sessions.serve(w, r.WithContext(context.WithValue(r.Context(), tokenInfoKey{}, info)), caller.TokenID, next)
	})
}

// isBatch reports whether a POST's body starts with '[' (a JSON-RPC batch),
// leaving the body to be read whole after.
func isBatch(r *http.Request) bool {
	if r.Method != http.MethodPost || r.Body == nil {
		return false
	}
	br := bufio.NewReader(r.Body)
	r.Body = struct {
		io.Reader
		io.Closer
	}{br, r.Body}
	for i := 1; i <= 64; i++ {
		b, err := br.Peek(i)
		if err != nil {
			return false
		}
		switch b[i-1] {
		case ' ', '\t', '\r', '\n':
			continue
		case '[':
			return true
		}
		return false
	}
	return false
}

// bearer returns the token of an Authorization: Bearer header.
func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
