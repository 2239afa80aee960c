package relay

import (
	"regexp"
	"sync"

	"graphsync/redact"
)

// health is what the relay knows about its sink beyond single batches: a
// sink reported broken keeps the relay from claiming until a batch goes
// through again.
type health struct {
	metrics *Metrics
	mu      sync.Mutex
	broken  string
}

func (h *health) sinkBroken(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.broken = brokenReason(err)
	h.metrics.sinkBrokenGauge.Set(1)
}

// statusCode finds a Neo4j status code in an error's text.
var statusCode = regexp.MustCompile(`\bNeo\.(ClientError|TransientError|DatabaseError)\.[A-Za-z]+\.[A-Za-z]+\b`)

// brokenReason is what /readyz says of a broken sink: the server's status
// code, which names the kind of problem. The message stays in the log: it
// may name a user and its roles, a database or parts of a statement, and
// /readyz answers anyone who can reach it.
func brokenReason(err error) string {
	if code := statusCode.FindString(err.Error()); code != "" {
		return code + " (the log has the message)"
	}
	return "see the log for the sink's error"
}

func (h *health) sinkWorks() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.broken != "" {
		h.broken = ""
		h.metrics.sinkBrokenGauge.Set(0)
	}
}

// Health returns the relay's problems, for /readyz: empty when it relays
// normally. A broken sink (see ErrSinkBroken) is named with its reason.
func (r *Relay) Health() []string {
	r.health.mu.Lock()
	defer r.health.mu.Unlock()
	if r.health.broken != "" {
		return []string{"sink broken, not claiming until it clears: " + r.health.broken}
	}
	return nil
}

// clip bounds a text for logs and error columns: redact.Clip's rule.
func clip(s string, maxBytes int) string { return redact.Clip(s, maxBytes) }

// redactLog hides credentials in a text before it reaches a log or an
// HTTP answer: package redact's rule, the one every command uses.
func redactLog(s string) string { return redact.Text(s) }
