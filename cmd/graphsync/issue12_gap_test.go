package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"graphsync/internal/teststack"
	"graphsync/projector"
	"graphsync/relay"
)

// Issue 12, Deliver "sink broken ... /readyz 503 naming the reason, a
// metric": TestReadinessNamesABrokenSink checks readiness.check; here the
// HTTP handler sync serves answers 503 naming the broken sink (and not the
// Neo4j address), and /metrics shows outbox_sink_broken 1, with the real
// projector writing to a Neo4j database that does not exist.
func TestIssue12ReadyzAndMetricForABrokenSink(t *testing.T) {
	ctx := context.Background()
	_, pool := teststack.FreshDatabase(t)
	driver := teststack.Neo4j(t)
	sink, err := projector.New(driver, projector.Config{Database: "nosuchdatabase"}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	metrics := relay.NewMetrics()
	rel, err := relay.New(pool, sink, relay.Config{PollInterval: 50 * time.Millisecond, SinkBackoff: 20 * time.Millisecond,
		SinkBackoffMax: 200 * time.Millisecond, RetryStep: 10 * time.Millisecond, MaxAttempts: 2}, zaptest.NewLogger(t), metrics)
	if err != nil {
		t.Fatal(err)
	}
	var tenant int64
	if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('broken') RETURNING id`).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT $1, 'Product', g, 'ProductDeleted', jsonb_build_object('id', g, 'version', 1) FROM generate_series(1, 5) g`, tenant); err != nil {
		t.Fatal(err)
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
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics.Collectors(pool)...)
	handler := httpHandler(registry, readiness{pool: pool, driver: driver, cfg: rel.Config(), relay: rel})
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(body)
	}
	deadline := time.Now().Add(15 * time.Second)
	status, body := get("/readyz")
	for status == http.StatusOK && time.Now().Before(deadline) {
		<-time.After(50 * time.Millisecond)
		status, body = get("/readyz")
	}
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "sink broken") || !strings.Contains(body, "Neo.ClientError.Database") {
		t.Fatalf("/readyz = %d %q, want 503 naming the broken sink", status, body)
	}
	if uri := teststack.Neo4jURI(t); strings.Contains(body, uri) || strings.Contains(body, "127.0.0.1") {
		t.Errorf("/readyz leaks the Neo4j address: %q", body)
	}
	if _, m := get("/metrics"); !strings.Contains(m, "\noutbox_sink_broken 1\n") {
		t.Errorf("/metrics does not show outbox_sink_broken 1")
	}
	var counted, dead int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE attempts > 1 OR last_error IS NOT NULL),
		(SELECT count(*) FROM outbox_messages_dlq) FROM outbox_messages`).Scan(&counted, &dead); err != nil {
		t.Fatal(err)
	}
	if counted != 0 || dead != 0 {
		t.Errorf("%d events counted and %d dead-lettered while the sink was broken", counted, dead)
	}
}
