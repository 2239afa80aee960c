package stacktest

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The outage controls act on the services scripts/services.sh started; they
// are for e2e tests, which run alone (never in parallel with other packages
// or with each other), because every test sharing the services sees the
// outage.

const (
	serviceScriptTimeout = 5 * time.Minute
	serviceWaitTimeout   = 3 * time.Minute
	pollInterval         = 100 * time.Millisecond
)

// StopNeo4j stops the shared Neo4j (SIGTERM, clean shutdown) and waits until
// its Bolt port refuses connections.
func StopNeo4j(t testing.TB) {
	t.Helper()
	uri := Neo4jURI(t)
	runScript(t, "neo4j.sh", "stop")
	address := hostPort(t, uri)
	waitFor(t, "Neo4j at "+Redact(uri)+" to go down", func(ctx context.Context) error {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", address)
		if err != nil {
			return nil // refused: down
		}
		conn.Close()
		return errors.New("still accepting connections")
	})
}

// StartNeo4j starts the shared Neo4j again and waits until it answers
// RETURN 1 at the same URI.
func StartNeo4j(t testing.TB) {
	t.Helper()
	uri := Neo4jURI(t)
	auth := neo4jAuth(t)
	runScript(t, "neo4j.sh", "start")
	waitFor(t, "Neo4j at "+Redact(uri)+" to answer", func(ctx context.Context) error {
		return neo4jAnswers(ctx, uri, auth)
	})
}

// RestartPostgres restarts the shared PostgreSQL cluster (fast shutdown:
// every connection is cut) and waits until it accepts connections again at
// the same URL.
func RestartPostgres(t testing.TB) {
	t.Helper()
	adminURL := requireEnv(t, EnvPostgresURL)
	runScript(t, "pg.sh", "restart")
	waitFor(t, "PostgreSQL at "+Redact(adminURL)+" to accept connections", func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		return conn.Ping(ctx)
	})
}

func runScript(t testing.TB, script string, args ...string) {
	t.Helper()
	path := filepath.Join(RepoRoot(t), "scripts", script)
	ctx, cancel := context.WithTimeout(context.Background(), serviceScriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	// The scripts detach what they start and close its stdio, so waiting
	// for the output here never waits on a service.
	output, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("stacktest: %s %v: %v\n%s", path, args, err, output)
	}
	t.Logf("stacktest: %s %v:\n%s", script, args, output)
}

// waitFor polls check until it returns nil or serviceWaitTimeout passes.
func waitFor(t testing.TB, what string, check func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), serviceWaitTimeout)
	defer cancel()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	var lastErr error
	for {
		attemptCtx, attemptCancel := context.WithTimeout(ctx, 5*time.Second)
		lastErr = check(attemptCtx)
		attemptCancel()
		if lastErr == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stacktest: timed out after %s waiting for %s: %v", serviceWaitTimeout, what, lastErr)
		case <-ticker.C:
		}
	}
}

func hostPort(t testing.TB, rawURL string) string {
	t.Helper()
	parsed, err := url.Parse(rawURL)
	if err != nil || parsed.Host == "" {
		t.Fatalf("stacktest: cannot read host:port from %s", Redact(rawURL))
	}
	if parsed.Port() == "" {
		return net.JoinHostPort(parsed.Hostname(), "7687")
	}
	return parsed.Host
}
