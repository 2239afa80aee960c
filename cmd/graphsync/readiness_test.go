package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"graphsync/internal/stacktest"
	"graphsync/projector"
	"graphsync/relay"
)

// A sink that cannot apply anything (here: the projector writes to a Neo4j
// database that does not exist, which the real server refuses with a
// Neo.ClientError.Database error) stops the relay from claiming: readiness,
// and the /readyz that sync serves (503), name the broken sink without the
// Neo4j address, /metrics shows outbox_sink_broken 1, and no event is
// counted or dead-lettered; a
// readiness check against an unreachable Neo4j says so without echoing the
// driver's error text.
func TestReadinessNamesABrokenSink(t *testing.T) {
	ctx := context.Background()
	_, pool := stacktest.FreshDatabase(t)
	driver := stacktest.Neo4j(t)
	sink, err := projector.New(driver, projector.Config{Database: "nosuchdatabase"}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	metrics := relay.NewMetrics()
	rel, err := relay.New(pool, sink, relay.Config{PollInterval: 50 * time.Millisecond, SinkBackoff: 20 * time.Millisecond, SinkBackoffMax: 200 * time.Millisecond,
		RetryStep: 10 * time.Millisecond, MaxAttempts: 2}, zaptest.NewLogger(t), metrics)
	if err != nil {
		t.Fatal(err)
	}
	var tenant int64
	if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('broken') RETURNING id`).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := pool.Exec(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
			VALUES ($1, 'Product', $2, 'ProductDeleted', jsonb_build_object('id', $2::bigint, 'version', 1))`, tenant, 1+i); err != nil {
			t.Fatal(err)
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rel.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	ready := readiness{pool: pool, driver: driver, cfg: rel.Config(), relay: rel}
	deadline := time.Now().Add(15 * time.Second)
	var problems []string
	for time.Now().Before(deadline) {
		if problems = ready.check(ctx); len(problems) > 0 {
			break
		}
		<-time.After(50 * time.Millisecond)
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "sink broken") || !strings.Contains(problems[0], "Neo.ClientError.Database") {
		t.Fatalf("readiness = %q, want the broken sink named", problems)
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics.Collectors(pool)...)
	handler := httpHandler(registry, ready)
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(body)
	}
	if status, body := get("/readyz"); status != http.StatusServiceUnavailable || !strings.Contains(body, "sink broken") ||
		!strings.Contains(body, "Neo.ClientError.Database") {
		t.Errorf("/readyz = %d %q, want 503 naming the broken sink", status, body)
	} else if uri := stacktest.Neo4jURI(t); strings.Contains(body, uri) || strings.Contains(body, "127.0.0.1") {
		t.Errorf("/readyz leaks the Neo4j address: %q", body)
	} else if strings.Contains(body, "nosuchdatabase") {
		t.Errorf("/readyz echoes Neo4j's message, not only its code: %q", body)
	}
	if _, m := get("/metrics"); !strings.Contains(m, "\noutbox_sink_broken 1\n") {
		t.Errorf("/metrics does not show outbox_sink_broken 1")
	}
	// Several more passes: still nothing counted against the events.
	tries := func() int64 {
		_, m := get("/metrics")
		for _, line := range strings.Split(m, "\n") {
			if v, ok := strings.CutPrefix(line, "outbox_sink_unavailable_total "); ok {
				n, _ := strconv.ParseFloat(v, 64)
				return int64(n)
			}
		}
		return 0
	}
	before := tries()
	for deadline := time.Now().Add(15 * time.Second); tries() < before+3; <-time.After(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the relay tried the broken sink %d more times in 15s, want 3", tries()-before)
		}
	}
	var counted, dead int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE attempts > 1 OR last_error IS NOT NULL),
		(SELECT count(*) FROM outbox_messages_dlq) FROM outbox_messages`).Scan(&counted, &dead); err != nil {
		t.Fatal(err)
	}
	if counted != 0 || dead != 0 {
		t.Errorf("%d events counted and %d dead-lettered while the sink was broken", counted, dead)
	}

	unreachable, err := neo4j.NewDriverWithContext("bolt://127.0.0.1:1", neo4j.NoAuth())
	if err != nil {
		t.Fatal(err)
	}
	defer unreachable.Close(ctx)
	problems = readiness{pool: pool, driver: unreachable, cfg: rel.Config()}.check(ctx)
	if len(problems) != 1 || problems[0] != "neo4j: not reachable" {
		t.Errorf("readiness with Neo4j unreachable = %q, want only %q", problems, "neo4j: not reachable")
	}
}

// A database a newer release migrated, or whose applied migration text
// differs, is named as such by /readyz, not as an unreadable table: the
// operator of a rolling upgrade learns which binary to run.
func TestReadinessNamesASchemaNewerThanTheBinary(t *testing.T) {
	ctx := context.Background()
	_, pool := stacktest.FreshDatabase(t)
	ready := readiness{pool: pool, driver: stacktest.Neo4j(t), cfg: relay.Config{Wake: relay.WakePoll}}
	if problems := ready.check(ctx); len(problems) != 0 {
		t.Fatalf("readiness of a migrated database = %q, want none", problems)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO graphsync_schema_migrations (version, name, checksum) VALUES (9999, '9999_later.sql', 'x')`); err != nil {
		t.Fatal(err)
	}
	if problems := ready.check(ctx); len(problems) != 1 || !strings.Contains(problems[0], "newer than this binary") {
		t.Errorf("readiness = %q, want the newer schema named", problems)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM graphsync_schema_migrations WHERE version = 9999;
		UPDATE graphsync_schema_migrations SET checksum = 'edited' WHERE version = 1`); err != nil {
		t.Fatal(err)
	}
	if problems := ready.check(ctx); len(problems) != 1 || !strings.Contains(problems[0], "text differs") {
		t.Errorf("readiness = %q, want the edited migration named", problems)
	}
}
