package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"graphsync/internal/stacktest"
	"graphsync/projector"
)

// `graphsync drift` on a clean tenant exits 0 and writes a JSON report with
// an integer drift_total; bad calls and unreachable servers exit 2.
func TestDriftCommand(t *testing.T) {
	ctx := context.Background()
	pgURL, pool := stacktest.FreshDatabase(t)
	driver := stacktest.Neo4j(t)
	if err := projector.EnsureSchema(ctx, driver); err != nil {
		t.Fatal(err)
	}
	var tenant int64
	if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('drift') RETURNING id`).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	conn := []string{"--pg-url", pgURL, "--neo4j-uri", stacktest.Neo4jURI(t), "--log-level", "error"}
	out := filepath.Join(t.TempDir(), "report.json")
	if code := run(append([]string{"drift", "--tenant", itoa(tenant), "--format", "json", "--out", out, "--recheck-after", "0s"}, conn...)); code != 0 {
		t.Fatalf("drift on a clean tenant exited %d", code)
	}
	body, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var report struct {
		DriftTotal *int              `json:"drift_total"`
		Counts     []json.RawMessage `json:"counts"`
		Explained  []json.RawMessage `json:"explained"`
		Foreign    []json.RawMessage `json:"foreign"`
	}
	if err := json.Unmarshal(body, &report); err != nil || report.DriftTotal == nil || *report.DriftTotal != 0 {
		t.Fatalf("report %s: drift_total missing or not 0 (%v)", body, err)
	}
	// A clean report's lists are empty lists, not null: a consumer iterates
	// over them without a special case.
	if report.Counts == nil || report.Explained == nil || report.Foreign == nil {
		t.Errorf("report %s: counts, explained and foreign must be lists, even empty", body)
	}
	// The check is recorded for its tenant (graph_status reads it); a second
	// one replaces it: one row per tenant.
	first := driftRecord(t, pool, tenant)
	if !first.clean || first.sample != 1 || first.source != "drift" || first.counts != "{}" || first.rows != 1 {
		t.Errorf("recorded check = %+v, want one clean row of every key by drift, no counts", first)
	}
	if code := run(append([]string{"drift", "--tenant", itoa(tenant), "--sample", "0.25", "--out", os.DevNull, "--recheck-after", "0s"}, conn...)); code != 0 {
		t.Fatalf("second drift on a clean tenant exited %d", code)
	}
	if second := driftRecord(t, pool, tenant); second.rows != 1 || second.sample != 0.25 || !second.finishedAt.After(first.finishedAt) {
		t.Errorf("after a second check: %+v, want its one row replacing %+v", second, first)
	}
	for name, args := range map[string][]string{
		"unknown format":       append([]string{"drift", "--format", "xml"}, conn...),
		"unknown tenant":       append([]string{"drift", "--tenant", "5000000000001"}, conn...),
		"bad sample":           append([]string{"drift", "--sample", "2"}, conn...),
		"tenant not a number":  append([]string{"drift", "--tenant", "abc"}, conn...),
		"zero sample":          append([]string{"drift", "--tenant", itoa(tenant), "--sample", "0"}, conn...),
		"NaN sample":           append([]string{"drift", "--tenant", itoa(tenant), "--sample", "NaN"}, conn...),
		"unreachable neo4j":    {"drift", "--pg-url", pgURL, "--neo4j-uri", "bolt://127.0.0.1:1"},
		"unreachable postgres": {"drift", "--pg-url", "postgres://graphsync:secret@127.0.0.1:1/x?sslmode=disable&connect_timeout=2", "--neo4j-uri", stacktest.Neo4jURI(t)},
	} {
		code, stderr := runCapturingStderr(t, args)
		if code != 2 {
			t.Errorf("%s: exit %d, want 2", name, code)
		}
		// One clear line: the command's name and why, no stack trace, no
		// password.
		if lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "graphsync drift: ") {
			t.Errorf("%s: standard error is not one line naming the command:\n%s", name, stderr)
		}
		if strings.Contains(stderr, "secret") || strings.Contains(stderr, "goroutine") {
			t.Errorf("%s: standard error holds a password or a stack trace:\n%s", name, stderr)
		}
	}
}

// runCapturingStderr runs the command and returns its exit code and what it
// wrote to standard error.
func runCapturingStderr(t *testing.T, args []string) (int, string) {
	t.Helper()
	return runCapturing(t, &os.Stderr, args)
}

// runCapturingStdout is run(args) with what it writes to standard output.
func runCapturingStdout(t *testing.T, args []string) (int, string) {
	t.Helper()
	return runCapturing(t, &os.Stdout, args)
}

// runCapturing is run(args) with what it writes to *stream (os.Stdout or
// os.Stderr).
func runCapturing(t *testing.T, stream **os.File, args []string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := *stream
	*stream = w
	read := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		read <- string(b)
	}()
	code := run(args)
	*stream = saved
	w.Close()
	out := <-read
	r.Close()
	return code, out
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// sync --drift-check-every exports what a sampled check finds: an orphan
// node planted in the graph shows up in graphsync_drift for its tenant,
// label and kind, with the time of the check.
func TestDriftWatchExportsGauges(t *testing.T) {
	ctx := context.Background()
	_, pool := stacktest.FreshDatabase(t)
	driver := stacktest.Neo4j(t)
	var tenant int64
	if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('watched') RETURNING id`).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stacktest.CleanGraph(t, driver, tenant) })
	if _, err := neo4j.ExecuteQuery(ctx, driver, `CREATE (:Product {tenant_id: $t, id: $t, name: 'nobody wrote me'})`,
		map[string]any{"t": tenant}, neo4j.EagerResultTransformer); err != nil {
		t.Fatal(err)
	}
	w := newDriftWatch()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(runCtx, pool, driver, 50*time.Millisecond, 1, zaptest.NewLogger(t))
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(30 * time.Second)
	for testutil.ToFloat64(w.lastCheck) == 0 && time.Now().Before(deadline) {
		<-time.After(20 * time.Millisecond)
	}
	if testutil.ToFloat64(w.lastCheck) == 0 {
		t.Fatal("no drift check finished within 30s")
	}
	if got := testutil.ToFloat64(w.drift.WithLabelValues(strconv.FormatInt(tenant, 10), "Product", "orphan_node")); got != 1 {
		t.Errorf("graphsync_drift{Product, orphan_node} = %v, want 1", got)
	}
	// The check is recorded for the tenant, by kind, as sync's; the watch
	// keeps checking and the tenant keeps one row.
	rec := driftRecord(t, pool, tenant)
	for rec.rows == 0 && time.Now().Before(deadline) {
		<-time.After(20 * time.Millisecond)
		rec = driftRecord(t, pool, tenant)
	}
	if rec.rows != 1 || rec.clean || rec.source != "sync" || rec.counts != `{"orphan_node": 1}` || rec.sample != 1 {
		t.Errorf("recorded check = %+v, want one row by sync with one orphan_node", rec)
	}
}

// driftCheckRow is what drift_checks holds for a tenant.
type driftCheckRow struct {
	rows       int
	finishedAt time.Time
	clean      bool
	sample     float64
	counts     string
	source     string
}

func driftRecord(t *testing.T, pool *pgxpool.Pool, tenant int64) driftCheckRow {
	t.Helper()
	var r driftCheckRow
	if err := pool.QueryRow(context.Background(), `SELECT count(*) OVER (), finished_at, clean, sample, counts::text, source
		FROM drift_checks WHERE tenant_id = $1`, tenant).Scan(&r.rows, &r.finishedAt, &r.clean, &r.sample, &r.counts, &r.source); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("read drift_checks: %v", err)
	}
	return r
}

// plantOrphan gives a fresh tenant a Product node no row backs: drift to
// find and --repair to delete.
func plantOrphan(t *testing.T) (pgURL string, pool *pgxpool.Pool, tenant int64, orphans func() int64) {
	t.Helper()
	ctx := context.Background()
	pgURL, pool = stacktest.FreshDatabase(t)
	driver := stacktest.Neo4j(t)
	if err := projector.EnsureSchema(ctx, driver); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('orphaned') RETURNING id`).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stacktest.CleanGraph(t, driver, tenant) })
	if _, err := neo4j.ExecuteQuery(ctx, driver, `CREATE (:Product {tenant_id: $t, id: $t, name: 'nobody wrote me'})`,
		map[string]any{"t": tenant}, neo4j.EagerResultTransformer); err != nil {
		t.Fatal(err)
	}
	return pgURL, pool, tenant, func() int64 { return nodesOf(t, driver, "Product", tenant) }
}

// nodesOf counts a tenant's nodes of a model label.
func nodesOf(t *testing.T, driver neo4j.DriverWithContext, label string, tenant int64) int64 {
	t.Helper()
	res, err := neo4j.ExecuteQuery(context.Background(), driver, `MATCH (n {tenant_id: $t}) WHERE $label IN labels(n) RETURN count(n) AS n`,
		map[string]any{"t": tenant, "label": label}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := res.Records[0].Get("n")
	return n.(int64)
}

// An --out that cannot be written stops drift before it compares or
// repairs anything: the orphan a --repair would delete is still there. A
// report file drift created is removed again when no report was written,
// and one that existed keeps its text.
func TestDriftOutIsOpenedBeforeTheRepair(t *testing.T) {
	pgURL, _, tenant, orphans := plantOrphan(t)
	conn := []string{"--pg-url", pgURL, "--neo4j-uri", stacktest.Neo4jURI(t), "--log-level", "error", "--recheck-after", "0s"}
	dir := t.TempDir()
	unwritable := filepath.Join(dir, "no such folder", "report.md")
	code, stderr := runCapturingStderr(t, append([]string{"drift", "--tenant", itoa(tenant), "--repair", "--out", unwritable}, conn...))
	if code != 2 || !strings.Contains(stderr, "write the report") {
		t.Errorf("--repair --out into a missing folder: exit %d, want 2 naming the report:\n%s", code, stderr)
	}
	if n := orphans(); n != 1 {
		t.Fatalf("after the refused run the tenant has %d Product nodes, want the orphan still there: Neo4j was repaired before --out was opened", n)
	}

	created := filepath.Join(dir, "new.md")
	if code := run([]string{"drift", "--tenant", itoa(tenant), "--out", created, "--pg-url", pgURL, "--neo4j-uri", "bolt://127.0.0.1:1"}); code != 2 {
		t.Errorf("unreachable Neo4j: exit %d, want 2", code)
	}
	if _, err := os.Stat(created); !os.IsNotExist(err) {
		t.Errorf("a run that wrote no report left %s behind (%v)", created, err)
	}
	earlier := filepath.Join(dir, "earlier.md")
	if err := os.WriteFile(earlier, []byte("the earlier report\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"drift", "--tenant", itoa(tenant), "--out", earlier, "--pg-url", pgURL, "--neo4j-uri", "bolt://127.0.0.1:1"}); code != 2 {
		t.Errorf("unreachable Neo4j: exit %d, want 2", code)
	}
	if body, err := os.ReadFile(earlier); err != nil || string(body) != "the earlier report\n" {
		t.Errorf("a run that wrote no report changed the earlier one: %q, %v", body, err)
	}

	// The report that is written replaces a longer earlier one whole.
	if err := os.WriteFile(earlier, []byte(strings.Repeat("an earlier, longer report\n", 1000)), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := run(append([]string{"drift", "--tenant", itoa(tenant), "--repair", "--format", "json", "--out", earlier}, conn...)); code != 1 {
		t.Errorf("--repair of the orphan: exit %d, want 1 (the drift found before the repair)", code)
	}
	var report struct {
		DriftTotal int `json:"drift_total"`
	}
	if body, err := os.ReadFile(earlier); err != nil || json.Unmarshal(body, &report) != nil || report.DriftTotal != 1 {
		t.Errorf("the report file does not hold the new report alone (%v):\n%.300s", err, body)
	}
	if n := orphans(); n != 0 {
		t.Errorf("after --repair the tenant has %d Product nodes, want none", n)
	}
	// A file that cannot be emptied, and need not be (make bench-drift
	// writes its reports there).
	if code, stderr := runCapturingStderr(t, append([]string{"drift", "--tenant", itoa(tenant), "--out", os.DevNull}, conn...)); code != 0 {
		t.Errorf("--out %s: exit %d, want 0:\n%s", os.DevNull, code, stderr)
	}
}

// SIGTERM stops drift like rebuild: exit 2 and one line saying it stopped
// and what may be half done (a --repair may have applied part of its
// repairs), instead of dying by the signal.
func TestDriftStopsOnSignal(t *testing.T) {
	pgURL, pool, tenant, _ := plantOrphan(t)
	for _, c := range []struct {
		repair bool
		want   string
	}{
		{false, "graphsync drift: stopped before the comparison finished: nothing was changed"},
		{true, "graphsync drift: stopped before the comparison finished: nothing was changed"}, // the repair starts after it
	} {
		// The child is known to have its handler once it has connected to
		// PostgreSQL; its wait before the second look (a minute) keeps it
		// running until the signal comes.
		app := fmt.Sprintf("drift-signal-%d-%t", tenant, c.repair)
		u, err := url.Parse(pgURL)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("application_name", app)
		u.RawQuery = q.Encode()
		args := []string{"drift", "--tenant", itoa(tenant), "--recheck-after", "60s", "--log-level", "error",
			"--pg-url", u.String(), "--neo4j-uri", stacktest.Neo4jURI(t)}
		if c.repair {
			args = append(args, "--repair")
		}
		child := startMain(t, args)
		deadline := time.Now().Add(30 * time.Second)
		for {
			var connected int
			if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&connected); err != nil {
				t.Fatal(err)
			}
			if connected > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("drift (repair %t) did not connect within 30s", c.repair)
			}
			<-time.After(10 * time.Millisecond)
		}
		if err := child.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		err = child.Wait()
		stderr := child.Stderr.(*bytes.Buffer).String()
		if code := child.ProcessState.ExitCode(); code != 2 || !strings.HasPrefix(stderr, c.want) {
			t.Errorf("SIGTERM (repair %t): exit %d (%v), want 2 and %q:\n%s", c.repair, code, err, c.want, stderr)
		}
	}
}

// A --repair stopped part way still writes its report: what it applied
// before the stop, then the statement it stopped at. The repair deletes the
// orphan Order, then waits for the orphan Product, which another
// transaction holds locked, and is stopped there.
func TestDriftRepairStoppedPartWayWritesItsReport(t *testing.T) {
	ctx := context.Background()
	pgURL, _, tenant, orphanProducts := plantOrphan(t)
	driver := stacktest.Neo4j(t)
	if _, err := neo4j.ExecuteQuery(ctx, driver, `CREATE (:Order {tenant_id: $t, id: $t})`,
		map[string]any{"t": tenant}, neo4j.EagerResultTransformer); err != nil {
		t.Fatal(err)
	}
	orphanOrders := func() int64 { return nodesOf(t, driver, "Order", tenant) }
	session := driver.NewSession(ctx, neo4j.SessionConfig{})
	defer session.Close(ctx)
	lock, err := session.BeginTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(ctx)
	res, err := lock.Run(ctx, `MATCH (p:Product {tenant_id: $t, id: $t}) SET p.locked = true`, map[string]any{"t": tenant})
	if err == nil {
		_, err = res.Consume(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(t.TempDir(), "report.md")
	child := startMain(t, []string{"drift", "--tenant", itoa(tenant), "--repair", "--out", out, "--recheck-after", "0s",
		"--log-level", "error", "--pg-url", pgURL, "--neo4j-uri", stacktest.Neo4jURI(t)})
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := neo4j.ExecuteQuery(ctx, driver, `SHOW TRANSACTIONS YIELD status, currentQuery
WHERE status STARTS WITH 'Blocked' AND currentQuery CONTAINS 'MATCH (n:Product' RETURN count(*) AS n`, nil, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.Records[0].Get("n"); n.(int64) > 0 {
			break
		}
		if child.ProcessState != nil || time.Now().After(deadline) {
			t.Fatalf("the repair did not wait for the locked Product within 60s:\n%s", child.Stderr.(*bytes.Buffer).String())
		}
		<-time.After(20 * time.Millisecond)
	}
	if err := child.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = child.Wait()
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	stderr := child.Stderr.(*bytes.Buffer).String()
	if code := child.ProcessState.ExitCode(); code != 2 || !strings.Contains(stderr, "applied part of its repairs, which the report lists") {
		t.Errorf("stopped during the repair: exit %d (%v), want 2 saying the report lists what was applied:\n%s", code, err, stderr)
	}
	report, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("no report written: %v", err)
	}
	text := string(report)
	applied := strings.Index(text, "- deleted orphan Order nodes: 1")
	stopped := strings.Index(text, "- **stopped here**")
	if applied < 0 || stopped < applied || !strings.Contains(text[stopped:], "deleted orphan Product nodes") {
		t.Errorf("the report does not list the applied delete, then the stop at the Product delete:\n%s", text)
	}
	if o, p := orphanOrders(), orphanProducts(); o != 0 || p != 1 {
		t.Errorf("after the stop: %d orphan Orders, %d orphan Products; want 0 (deleted before the stop) and 1 (never deleted)", o, p)
	}
}
