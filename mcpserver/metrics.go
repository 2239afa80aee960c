package mcpserver

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the MCP server's Prometheus collectors, by tool; no label
// names a tenant or a token.
type Metrics struct {
	requests *prometheus.CounterVec
	errors   *prometheus.CounterVec
	duration *prometheus.HistogramVec
	authFail prometheus.Counter
	// sessionsRefused counts the sessions a token could not open: it held
	// its cap of open sessions (HTTP 429).
	sessionsRefused prometheus.Counter
}

// NewMetrics builds unregistered collectors; register them with Collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "graphsync_mcp_tool_requests_total", Help: "MCP tool calls, by tool.",
		}, []string{"tool"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "graphsync_mcp_tool_errors_total", Help: "MCP tool calls that ended in a tool error, by tool.",
		}, []string{"tool"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "graphsync_mcp_tool_duration_seconds", Help: "MCP tool call latency, by tool (the wait for a slot included).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"tool"}),
		authFail: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "graphsync_mcp_unauthorized_total", Help: "HTTP requests refused with 401 (missing, unknown or revoked token).",
		}),
		sessionsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "graphsync_mcp_sessions_refused_total", Help: "MCP sessions refused with 429: the token held its cap of open sessions (--max-sessions-per-token).",
		}),
	}
}

// Collectors lists the collectors to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.errors, m.duration, m.authFail, m.sessionsRefused}
}

func (m *Metrics) observe(tool, outcome string, d time.Duration) {
	m.requests.WithLabelValues(tool).Inc()
	if outcome != "ok" {
		m.errors.WithLabelValues(tool).Inc()
	}
	m.duration.WithLabelValues(tool).Observe(d.Seconds())
}

// bytesBuilder is a strings.Builder that is an io.Writer.
type bytesBuilder = strings.Builder
