package mcpserver_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap/zaptest"

	"graphsync/internal/stacktest"
	"graphsync/mcpserver"
)

// graph_status reports the last drift check `graphsync drift` recorded for
// the caller's tenant, and never another tenant's: a check of B alone
// leaves A with none; B's drift does not make C's clean check look
// otherwise, nor C's check replace B's. Over stdio (the real command) and
// HTTP (a token of the tenant).
func TestStatusReportsTheTenantsLastDriftCheck(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	var tenantC int64
	if err := s.pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('empty shop') RETURNING id`).Scan(&tenantC); err != nil {
		t.Fatal(err)
	}
	srv, metrics := s.server(t, zaptest.NewLogger(t), nil)
	ts := httpServer(t, srv, s, metrics)
	status := func(t *testing.T, tenant int64) []mcpserver.Status {
		t.Helper()
		token, _ := s.token(t, tenant)
		var out []mcpserver.Status
		for name, session := range map[string]*mcp.ClientSession{"stdio": s.stdioSession(t, tenant), "http": httpSession(t, ts.URL, token)} {
			got, _, err := call(t, session, "graph_status", map[string]any{})
			if err != nil || got.IsError {
				t.Fatalf("%s graph_status of %d: %v %s", name, tenant, err, textOf(got))
			}
			var st mcpserver.Status
			if err := remarshal(got.StructuredContent, &st); err != nil {
				t.Fatal(err)
			}
			if st.LastDriftCheck != nil && !strings.Contains(textOf(got), "last drift check") ||
				st.LastDriftCheck == nil && !strings.Contains(textOf(got), "No drift check") {
				t.Errorf("%s: the sentence does not say what the status holds: %s", name, textOf(got))
			}
			out = append(out, st)
		}
		return out
	}
	noCheck := func(t *testing.T, tenant int64) {
		t.Helper()
		for _, st := range status(t, tenant) {
			if st.LastDriftCheck != nil || st.LastDriftCheckClean != nil || st.LastDriftCheckSample != nil {
				t.Errorf("tenant %d: a drift check is reported where none covered it: %s", tenant, jsonString(st))
			}
		}
	}
	checked := func(t *testing.T, tenant int64, after, before time.Time, clean bool, sample float64) {
		t.Helper()
		for _, st := range status(t, tenant) {
			if st.LastDriftCheck == nil || st.LastDriftCheckClean == nil || st.LastDriftCheckSample == nil {
				t.Errorf("tenant %d: no drift check reported: %s", tenant, jsonString(st))
				continue
			}
			at, err := time.Parse(time.RFC3339, *st.LastDriftCheck)
			if err != nil || at.Before(after.Truncate(time.Second)) || at.After(before) {
				t.Errorf("tenant %d: last_drift_check %s is not between %s and %s (%v)", tenant, *st.LastDriftCheck, after, before, err)
			}
			if *st.LastDriftCheckClean != clean || *st.LastDriftCheckSample != sample {
				t.Errorf("tenant %d: clean %v sample %v, want %v and %v", tenant, *st.LastDriftCheckClean, *st.LastDriftCheckSample, clean, sample)
			}
		}
	}
	noCheck(t, s.a.tenant)

	// The graphs of the stack were written without rows: B's check finds
	// drift (exit 1), and covers B alone.
	startB := time.Now()
	driftCommand(t, s, 1, "--tenant", itoa(s.b.tenant))
	doneB := time.Now()
	noCheck(t, s.a.tenant)
	noCheck(t, tenantC)
	checked(t, s.b.tenant, startB, doneB, false, 1)

	// C has neither rows nor nodes: a clean check, sampled.
	startC := time.Now()
	driftCommand(t, s, 0, "--tenant", itoa(tenantC), "--sample", "0.5")
	doneC := time.Now()
	checked(t, tenantC, startC, doneC, true, 0.5)
	checked(t, s.b.tenant, startB, doneB, false, 1)
	noCheck(t, s.a.tenant)
}

// driftCommand runs the built `graphsync drift` on the stack without an
// embedder (the stack's products have no vectors) and wants exit code
// want.
func driftCommand(t *testing.T, s *stack, want int, args ...string) {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"drift", "--embedder", "none", "--recheck-after", "0s", "--log-level", "warn", "--out", os.DevNull}, args...)...)
	cmd.Env = append(os.Environ(), "GRAPHSYNC_PG_URL="+s.pgURL, "GRAPHSYNC_NEO4J_URI="+stacktest.Neo4jURI(t))
	out, err := cmd.CombinedOutput()
	code := 0
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatalf("graphsync drift %v: %v", args, err)
	}
	if code != want {
		t.Fatalf("graphsync drift %v exited %d, want %d:\n%s", args, code, want, out)
	}
	if strings.Contains(string(out), "not recorded") {
		t.Fatalf("graphsync drift %v did not record its check:\n%s", args, out)
	}
}
