package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"graphsync/internal/stacktest"
	"graphsync/workload"
)

// A rebuild killed with SIGKILL resumes where its checkpoint stands and
// reads no finished chunk again; while it runs, a second rebuild of the
// same scope is refused (exit 2); without a terminal it logs its progress.
func TestRebuildResumesAfterSIGKILL(t *testing.T) {
	ctx := context.Background()
	pgURL, pool := stacktest.FreshDatabase(t)
	driver := stacktest.Neo4j(t)
	report, err := workload.Run(ctx, pool, workload.Config{Seed: 19, Tenants: 1, Orders: 400, Writers: 2,
		ProductsPerTenant: 60, CustomersPerTenant: 200}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	tenant := report.TenantIDs[0]
	t.Cleanup(func() { stacktest.CleanGraph(t, driver, tenant) })
	args := []string{"rebuild", "--tenant", itoa(tenant), "--source", "snapshot", "--chunk-size", "5", "--progress", "log",
		"--recheck-after", "0s", "--pg-url", pgURL, "--neo4j-uri", stacktest.Neo4jURI(t)}
	checkpoint := func() (chunks, done int64, finished bool) {
		t.Helper()
		err := pool.QueryRow(ctx, `SELECT chunks, done, finished_at IS NOT NULL FROM rebuild_checkpoints WHERE scope_tenant_id = $1`,
			tenant).Scan(&chunks, &done, &finished)
		if err != nil && !strings.Contains(err.Error(), "no rows") {
			t.Fatal(err)
		}
		return chunks, done, finished
	}
	waitChunks := func(atLeast int64, what string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			if chunks, _, finished := checkpoint(); chunks >= atLeast || finished {
				return
			}
			<-time.After(10 * time.Millisecond)
		}
		t.Fatalf("%s: fewer than %d chunks checkpointed within 60s", what, atLeast)
	}

	first := startMain(t, args)
	waitChunks(10, "first run")
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	killedChunks, killedDone, finished := checkpoint()
	if finished || killedDone == 0 {
		t.Fatalf("after SIGKILL: checkpoint at %d rows, finished %v; want a run stopped half-way (kill it sooner)", killedDone, finished)
	}
	// The killed run's scope lock goes when PostgreSQL sees its connection
	// closed, a moment after the process is gone; a rebuild started before
	// that would rightly find the scope busy. The test's database is its
	// own, so any advisory lock in it is the killed run's.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var held int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&held); err != nil {
			t.Fatal(err)
		}
		if held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed rebuild's scope lock was still held 30s after it died")
		}
		<-time.After(10 * time.Millisecond)
	}

	second := startMain(t, args)
	waitChunks(killedChunks+2, "resumed run")
	if code := run(args); code != 2 {
		t.Errorf("a second rebuild of the same tenant while one runs exited %d, want 2", code)
	}
	if err := second.Wait(); err != nil {
		t.Fatalf("resumed rebuild: %v\nstdout:\n%s\nstderr:\n%s", err, second.Stdout, second.Stderr)
	}
	stdout, stderr := second.Stdout.(*bytes.Buffer).String(), second.Stderr.(*bytes.Buffer).String()
	if !strings.Contains(stdout, "resuming the snapshot rebuild") || !strings.Contains(stdout, "**Drift: 0**") {
		t.Errorf("resumed rebuild did not say it resumed, or left drift:\n%s", stdout)
	}
	if !strings.Contains(stderr, `"msg":"rebuild progress"`) || !strings.Contains(stderr, `"eta"`) {
		t.Errorf("no progress log lines without a terminal:\n%s", stderr)
	}
	var rows int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM products WHERE tenant_id = $1) + (SELECT count(*) FROM sales_orders WHERE tenant_id = $1)
		+ (SELECT count(*) FROM categories WHERE tenant_id = $1) + (SELECT count(*) FROM customers WHERE tenant_id = $1)`, tenant).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	_, done, finished := checkpoint()
	if !finished || done != rows {
		t.Errorf("after the resumed run: %d rows read over both runs (killed at %d), finished %v; the tables hold %d: a finished chunk was read again or one was skipped",
			done, killedDone, finished, rows)
	}
}

// startMain runs graphsync with args in a child process (the test binary,
// see TestMain), its output kept in buffers.
func startMain(t *testing.T, args []string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRunMain+"="+strings.Join(args, "\x1f"))
	cmd.Stdout, cmd.Stderr = &bytes.Buffer{}, &bytes.Buffer{}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// The replay applies events with the limits it is given, as sync does:
// sync run with a larger --max-order-lines took orders the default limit
// would refuse, and a rebuild given the same value replays them.
func TestRebuildReplaysWithTheGivenLimits(t *testing.T) {
	ctx := context.Background()
	pgURL, pool := stacktest.FreshDatabase(t)
	driver := stacktest.Neo4j(t)
	report, err := workload.Run(ctx, pool, workload.Config{Seed: 23, Tenants: 1, Orders: 12, Writers: 1, DeleteEvery: -1}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	tenant := report.TenantIDs[0]
	t.Cleanup(func() { stacktest.CleanGraph(t, driver, tenant) })
	var most int
	if err := pool.QueryRow(ctx, `SELECT max(n) FROM (SELECT count(*) AS n FROM order_lines WHERE tenant_id = $1 GROUP BY order_id) c`,
		tenant).Scan(&most); err != nil || most < 2 {
		t.Fatalf("the workload's largest order has %d lines (%v); want one of at least 2", most, err)
	}
	syncUntilCaughtUp(t, pgURL) // replay replays what sync applied
	rebuildWith := func(extra ...string) string {
		t.Helper()
		args := append([]string{"rebuild", "--tenant", itoa(tenant), "--source", "replay", "--progress", "log", "--recheck-after", "0s",
			"--pg-url", pgURL, "--neo4j-uri", stacktest.Neo4jURI(t), "--log-level", "error"}, extra...)
		code, out := runCapturingStdout(t, args)
		if code != 0 {
			t.Fatalf("rebuild %v: exit %d\n%s", extra, code, out)
		}
		return out
	}
	if out := rebuildWith("--max-order-lines", itoa(int64(most-1))); !strings.Contains(out, "events not applied") ||
		!strings.Contains(out, "order lines") {
		t.Errorf("replay with --max-order-lines %d below the largest order (%d lines): the summary does not name refused events:\n%s", most-1, most, out)
	}
	if out := rebuildWith("--max-order-lines", itoa(int64(most))); strings.Contains(out, "events not applied") {
		t.Errorf("replay with --max-order-lines %d: events were refused:\n%s", most, out)
	}
	code, stderr := runCapturingStderr(t, []string{"rebuild", "--max-order-lines", "0", "--pg-url", pgURL})
	if code != 2 || !strings.Contains(stderr, "--max-order-lines") {
		t.Errorf("rebuild --max-order-lines 0: exit %d, stderr %q; want exit 2 naming the flag", code, stderr)
	}
}
