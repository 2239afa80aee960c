package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"graphsync/internal/stacktest"
	"graphsync/workload"
)

// e2ePassword is the password the bad-config tests put in connection
// strings; it must never appear in graphsync's output.
const e2ePassword = "e2e-S3cret-pw-93f1"

// TestBadConfig runs `graphsync sync` with settings it cannot work with:
//   - PostgreSQL unreachable (a URL and a key=value string, each with a
//     password): exit 1 with one line naming the server, password redacted;
//   - an unknown wake mode, as a flag or from GRAPHSYNC_WAKE: exit 2;
//   - Neo4j unreachable: the service starts anyway, /healthz answers 200 and
//     /readyz 503 naming Neo4j, and nothing is marked processed.
func TestBadConfig(t *testing.T) {
	neo4jURI := stacktest.Neo4jURI(t)

	// A password with characters a URL must escape, to catch redaction of
	// only one of its spellings.
	const oddPassword = "p@ss:w/rd?" + e2ePassword
	unreachable := []struct {
		name     string
		password string
		pgURL    func(host, port, password string) string
	}{
		{"PostgreSQL URL unreachable", e2ePassword, func(host, port, password string) string {
			return fmt.Sprintf("postgres://graphsync:%s@%s/graphsync?sslmode=disable&connect_timeout=5", password, net.JoinHostPort(host, port))
		}},
		{"PostgreSQL URL with an escaped password unreachable", oddPassword, func(host, port, password string) string {
			u := url.URL{Scheme: "postgres", User: url.UserPassword("graphsync", password), Host: net.JoinHostPort(host, port),
				Path: "/graphsync", RawQuery: "sslmode=disable&connect_timeout=5"}
			return u.String()
		}},
		// No sslmode: pgx's default (prefer) tries twice, TLS then plain text.
		{"PostgreSQL URL with default sslmode unreachable", e2ePassword, func(host, port, password string) string {
			return fmt.Sprintf("postgres://graphsync:%s@%s/graphsync?connect_timeout=5", password, net.JoinHostPort(host, port))
		}},
		{"PostgreSQL key-value string unreachable", e2ePassword, func(host, port, password string) string {
			return fmt.Sprintf("host=%s port=%s user=graphsync password=%s dbname=graphsync sslmode=disable connect_timeout=5", host, port, password)
		}},
	}
	for _, tc := range unreachable {
		t.Run(tc.name, func(t *testing.T) {
			host, port, _ := net.SplitHostPort(closedLoopbackAddr(t))
			pgURL := tc.pgURL(host, port, tc.password)
			result := runGraphsync(t, graphsyncEnv(pgURL, neo4jURI), "sync", "--http-addr", freeLoopbackAddr(t))
			t.Logf("exit %d after %s; stderr:\n%s", result.exitCode, result.elapsed.Round(time.Millisecond), result.stderr)
			if result.exitCode != 1 {
				t.Errorf("exit code %d, want 1", result.exitCode)
			}
			output := result.stderr + result.stdout
			for _, spelling := range []string{tc.password, url.QueryEscape(tc.password), url.PathEscape(tc.password), e2ePassword} {
				if strings.Contains(output, spelling) {
					t.Errorf("the password (as %q) is in graphsync's output", spelling)
				}
			}
			lines := nonEmptyLines(result.stderr)
			if len(lines) != 1 {
				t.Fatalf("stderr has %d lines, want one clear line", len(lines))
			}
			if !strings.Contains(lines[0], "PostgreSQL") || !strings.Contains(lines[0], host) || !strings.Contains(lines[0], port) {
				t.Errorf("the error does not name PostgreSQL and the server %s:%s: %s", host, port, lines[0])
			}
		})
	}

	invalid := []struct{ name, pgURL string }{
		{"PostgreSQL URL with a bad port", "postgres://graphsync:" + e2ePassword + "@127.0.0.1:notaport/graphsync"},
		{"PostgreSQL URL with a bad escape in the password", "postgres://graphsync:" + e2ePassword + "%zz@127.0.0.1:5432/graphsync"},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			result := runGraphsync(t, graphsyncEnv(tc.pgURL, neo4jURI), "sync", "--http-addr", freeLoopbackAddr(t))
			t.Logf("exit %d; stderr:\n%s", result.exitCode, result.stderr)
			if result.exitCode != 2 {
				t.Errorf("exit code %d, want 2 (a usage error)", result.exitCode)
			}
			if strings.Contains(result.stderr+result.stdout, e2ePassword) {
				t.Errorf("the password is in graphsync's output")
			}
			if lines := nonEmptyLines(result.stderr); len(lines) != 1 || !strings.Contains(lines[0], "PostgreSQL") {
				t.Errorf("stderr has %d lines, want one line about the PostgreSQL URL", len(lines))
			}
		})
	}

	t.Run("unknown wake mode flag", func(t *testing.T) {
		result := runGraphsync(t, graphsyncEnv("postgres://graphsync@127.0.0.1:1/graphsync", neo4jURI), "sync", "--wake", "carrier-pigeon")
		checkUsageError(t, result, "carrier-pigeon")
	})
	t.Run("unknown wake mode from the environment", func(t *testing.T) {
		result := runGraphsync(t, graphsyncEnv("postgres://graphsync@127.0.0.1:1/graphsync", neo4jURI, "GRAPHSYNC_WAKE=smoke-signal"), "sync")
		checkUsageError(t, result, "smoke-signal")
	})

	t.Run("Neo4j unreachable", func(t *testing.T) {
		s := newStack(t)
		s.migrate()
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		defer cancel()
		report, err := workload.Run(ctx, s.pool, workload.Config{Tenants: 1, Orders: 5, Writers: 1}, nil)
		if err != nil {
			t.Fatalf("write events: %v", err)
		}
		deadNeo4j := "bolt://" + closedLoopbackAddr(t)
		p := s.startSync("no-neo4j", graphsyncEnv(s.dbURL, deadNeo4j), append(s.syncArgs("poll"), "--drain-timeout", "2s")...)
		p.waitReadyz(t, http.StatusServiceUnavailable, startTimeout)
		if status, body, err := p.get("/healthz"); err != nil || status != http.StatusOK {
			t.Errorf("/healthz answered %d (%v): %s; want 200: the process is alive", status, err, body)
		}
		status, body := p.readyz()
		if !strings.Contains(strings.ToLower(body), "neo4j") {
			t.Errorf("/readyz answered %d without naming Neo4j: %s", status, body)
		}
		s.logf("/readyz with Neo4j unreachable: %d %s", status, body)
		// The relay keeps trying; nothing may be marked processed meanwhile.
		watchFor(2*time.Second, func() (bool, string) {
			if c := s.mustCounts(); c.processed != 0 {
				t.Fatalf("%d rows marked processed with Neo4j unreachable", c.processed)
			}
			if !p.running() {
				t.Fatalf("%s exited with Neo4j unreachable: %s", p.name, p.exitDescription())
			}
			return false, ""
		})
		if c := s.mustCounts(); c.pending != report.Events {
			t.Errorf("outbox: %s; want all %d events pending", c, report.Events)
		}
		p.signal(termSignal)
		if code, ok := p.waitExit(exitTimeout); !ok || code != 0 {
			t.Errorf("%s after SIGTERM: exited %v with code %d; want exit 0 within %s", p.name, ok, code, exitTimeout)
		}
	})
}

// closedLoopbackAddr returns a loopback address nothing listens on.
func closedLoopbackAddr(t testing.TB) string {
	return freeLoopbackAddr(t)
}

func checkUsageError(t *testing.T, result commandResult, bad string) {
	t.Helper()
	t.Logf("exit %d; stderr:\n%s", result.exitCode, result.stderr)
	if result.exitCode != 2 {
		t.Errorf("exit code %d, want 2 (usage error)", result.exitCode)
	}
	if !strings.Contains(result.stderr, bad) || !strings.Contains(result.stderr, "poll") {
		t.Errorf("stderr does not name the bad mode %q and the valid ones", bad)
	}
}

func nonEmptyLines(s string) []string {
	var lines []string
	for _, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) != "" {
			lines = append(lines, line)
		}
	}
	return lines
}
