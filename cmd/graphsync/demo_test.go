package main

import (
	"bytes"
	"context"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/internal/stacktest"
)

// `graphsync summary` without tenants shows every tenant, with its outbox
// events counted (all, and pending) for that tenant only.
func TestSummaryShowsEveryTenant(t *testing.T) {
	_, pool := stacktest.FreshDatabase(t)
	driver := stacktest.Neo4j(t)
	ctx := context.Background()
	events := map[int64][2]int{} // tenant: all events, pending
	for i, want := range [][2]int{{3, 1}, {2, 2}} {
		var id int64
		if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ($1) RETURNING id`, "summary "+strconv.Itoa(i)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload, processed_at)
			SELECT $1, 'Order', g, 'OrderConfirmed', '{}', CASE WHEN g > $3 THEN now() END FROM generate_series(1, $2) g`,
			id, want[0], want[1]); err != nil {
			t.Fatal(err)
		}
		events[id] = want
	}
	var out bytes.Buffer
	if err := printSummary(ctx, &out, pool, driver, nil); err != nil {
		t.Fatal(err)
	}
	shown := map[int64]bool{}
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		id, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue // the header, the outbox line
		}
		want, ok := events[id]
		if !ok {
			t.Errorf("summary shows tenant %d, which this database does not have:\n%s", id, out.String())
			continue
		}
		shown[id] = true
		if f[2] != strconv.Itoa(want[0]) || f[3] != strconv.Itoa(want[1]) {
			t.Errorf("tenant %d: events %s, pending %s; want %d and %d", id, f[2], f[3], want[0], want[1])
		}
	}
	if len(shown) != len(events) {
		t.Errorf("summary shows %d of %d tenants:\n%s", len(shown), len(events), out.String())
	}
}

// A node another writer gave a float tenant id (Cypher finds 1.0 IN [1])
// is left out of the summary instead of crashing it, and a relationship
// from it counts for nobody.
func TestSummaryLeavesOutAFloatTenantID(t *testing.T) {
	_, pool := stacktest.FreshDatabase(t)
	driver := stacktest.Neo4j(t)
	ctx := context.Background()
	tenant := time.Now().UnixNano()%1_000_000_000 + 5_000_000_000
	if _, err := pool.Exec(ctx, `INSERT INTO tenants (id, name) VALUES ($1, 'summary float')`, tenant); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stacktest.CleanGraph(t, driver, tenant) })
	if _, err := neo4j.ExecuteQuery(ctx, driver, `CREATE (:Chunk {tenant_id: toFloat($t)})-[:MENTIONS]->(:Product {tenant_id: $t, id: 1})`,
		map[string]any{"t": tenant}, neo4j.EagerResultTransformer); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printSummary(ctx, &out, pool, driver, []int64{tenant}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Product=1") || strings.Contains(out.String(), "Chunk") || strings.Contains(out.String(), "MENTIONS") {
		t.Errorf("want the Product counted and the float-tenant node and its relationship left out:\n%s", out.String())
	}
}

// The demo in stream mode reads through a slot of its own and drops it at
// the end: a slot left behind keeps all the WAL the cluster writes after it
// (one left by `make demo` once held 54 GB of a developer machine's disk).
func TestDemoLeavesNoReplicationSlot(t *testing.T) {
	url, pool := stacktest.FreshDatabase(t)
	driver := stacktest.Neo4j(t)
	ctx := context.Background()
	cleanDemoGraph(t, ctx, pool, driver)
	code := run([]string{"demo", "--wake", "stream", "--tenants", "1", "--products", "3", "--customers", "2", "--orders", "4",
		"--question", "", "--http-addr=", "--retention-every", "0", "--log-level", "error",
		"--pg-url", url, "--neo4j-uri", stacktest.Neo4jURI(t)})
	if code != 0 {
		t.Fatalf("graphsync demo exited %d", code)
	}
	var slots, publications int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots WHERE database = current_database()),
		(SELECT count(*) FROM pg_publication)`).Scan(&slots, &publications); err != nil {
		t.Fatal(err)
	}
	if slots != 0 || publications != 0 {
		t.Errorf("the demo left %d replication slots and %d publications in its database", slots, publications)
	}
	var pending int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if pending != 0 {
		t.Errorf("%d outbox rows still pending after the demo", pending)
	}
}

// Ctrl-C during the demo's sync still drops the demo's replication slot.
// Neo4j is unreachable here, so the sync cannot catch up and is running
// (with its slot) when the interrupt comes.
func TestInterruptedDemoLeavesNoReplicationSlot(t *testing.T) {
	url, pool := stacktest.FreshDatabase(t)
	ctx := context.Background()
	// While the test listens too, an interrupt never kills the test binary.
	caught := make(chan os.Signal, 1)
	signal.Notify(caught, os.Interrupt)
	defer signal.Stop(caught)
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"demo", "--wake", "stream", "--tenants", "1", "--products", "3", "--customers", "2", "--orders", "4",
			"--question", "", "--http-addr=", "--retention-every", "0", "--log-level", "error",
			"--drain-timeout", "1s", "--pg-url", url, "--neo4j-uri", "bolt://127.0.0.1:1"})
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var slots int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = current_database() AND active`).Scan(&slots); err != nil {
			t.Fatal(err)
		}
		if slots > 0 {
			break
		}
		select {
		case code := <-done:
			t.Fatalf("the demo ended (exit %d) before its sync was running", code)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the demo's sync never opened its replication slot")
		}
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code == 0 {
			t.Errorf("the interrupted demo exited 0")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the demo did not stop after Ctrl-C")
	}
	var slots, publications int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots WHERE database = current_database()),
		(SELECT count(*) FROM pg_publication)`).Scan(&slots, &publications); err != nil {
		t.Fatal(err)
	}
	if slots != 0 || publications != 0 {
		t.Errorf("the interrupted demo left %d replication slots and %d publications in its database", slots, publications)
	}
}

// make demo ends with a question that shares no word with the product that
// answers it, answered by hybrid retrieval over the vectors sync's
// embedding stage wrote: the first entity of the last context is a tent.
func TestDemoEndsWithAnAnswerByMeaning(t *testing.T) {
	url, pool := stacktest.FreshDatabase(t)
	driver := stacktest.Neo4j(t)
	ctx := context.Background()
	cleanDemoGraph(t, ctx, pool, driver)
	code, out := runCapturingStdout(t, []string{"demo", "--wake", "poll", "--question", "", "--http-addr=", "--retention-every", "0",
		"--log-level", "error", "--pg-url", url, "--neo4j-uri", stacktest.Neo4jURI(t)})
	if code != 0 {
		t.Fatalf("graphsync demo exited %d:\n%s", code, out)
	}
	last := out[strings.LastIndex(out, "# Graph context"):]
	if !strings.Contains(out, "--retrieval hybrid "+strconv.Quote(demoMeaningQuestion)) {
		t.Fatalf("the demo did not end with the question %q:\n%s", demoMeaningQuestion, last)
	}
	first := regexp.MustCompile(`(?m)^1\. Product \d+ "([^"]*)".*$`).FindStringSubmatch(last)
	if first == nil || !strings.HasSuffix(first[1], " Tent") {
		t.Fatalf("the last context's first entity is %v, want a tent:\n%s", first, last)
	}
	for _, word := range strings.Fields(demoMeaningQuestion) {
		if len(word) > 3 && strings.Contains(strings.ToLower(first[0]), word) {
			t.Errorf("the question shares %q with the answer %s", word, first[0])
		}
	}
}

// cleanDemoGraph removes, at the test's end, the graph of every tenant the
// demo wrote into the test's own database.
func cleanDemoGraph(t *testing.T, ctx context.Context, pool *pgxpool.Pool, driver neo4j.DriverWithContext) {
	t.Helper()
	t.Cleanup(func() {
		rows, err := pool.Query(ctx, `SELECT id FROM tenants`)
		if err != nil {
			t.Error(err)
			return
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Error(err)
			return
		}
		stacktest.CleanGraph(t, driver, ids...)
	})
}
