package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"graphsync/events"
	"graphsync/internal/stacktest"
	"graphsync/projector"
)

// TestCaughtUpSaysWhatIsLeft: sync --until-caught-up exits 0 once nothing
// pending can flow, and its last word says what it left: a failing event
// (a payload that does not decode, in one batch with a good event of
// another aggregate) makes it a warning naming one failing aggregate;
// once that row is gone, the next run says every event was applied; a
// bad event dead-lettered during a run makes it a warning again.
func TestCaughtUpSaysWhatIsLeft(t *testing.T) {
	ctx := context.Background()
	pgURL, pool := stacktest.FreshDatabase(t)
	driver := stacktest.Neo4j(t)
	if err := projector.EnsureSchema(ctx, driver); err != nil {
		t.Fatal(err)
	}
	var tenant, bad int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('caught up') RETURNING id`).Scan(&tenant); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
			VALUES ($1, 'Product', 2, 'ProductCreated', '{"sku": 5}') RETURNING id`, tenant).Scan(&bad); err != nil {
			return err
		}
		return events.Enqueue(ctx, tx, tenant, events.ProductCreated{ProductState: events.ProductState{ID: 1, SKU: "K-1",
			Name: "Kettle", PriceCents: 2500, Currency: "EUR", Status: events.ProductStatusActive, Version: 1}})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stacktest.CleanGraph(t, driver, tenant) })
	syncOnce := func(maxAttempts string) string {
		t.Helper()
		code, stderr := runCapturingStderr(t, []string{"sync", "--until-caught-up", "--http-addr=", "--wake", "poll", "--poll-interval", "50ms",
			"--retention-every", "0", "--embedder", "none", "--max-attempts", maxAttempts, "--pg-url", pgURL, "--neo4j-uri", stacktest.Neo4jURI(t)})
		if code != 0 {
			t.Fatalf("sync --until-caught-up exited %d:\n%s", code, stderr)
		}
		for _, line := range strings.Split(stderr, "\n") {
			if strings.Contains(line, `"msg":"caught up`) {
				return line
			}
		}
		t.Fatalf("sync --until-caught-up did not say it caught up:\n%s", stderr)
		return ""
	}
	line := syncOnce("100")
	for _, want := range []string{`"level":"warn"`, "with events left that cannot flow", `"failing_aggregates":1`, `"waiting_aggregates":0`, `"dlq_depth":0`, `"dead_lettered":0`} {
		if !strings.Contains(line, want) {
			t.Errorf("caught up with a failing event: %s\nwant %s", line, want)
		}
	}
	var applied bool
	if err := pool.QueryRow(ctx, `SELECT processed_at IS NOT NULL FROM outbox_messages WHERE id <> $1`, bad).Scan(&applied); err != nil || !applied {
		t.Errorf("the good event of the same batch was not applied (%v)", err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM outbox_messages WHERE id = $1`, bad); err != nil {
		t.Fatal(err)
	}
	line = syncOnce("100")
	for _, want := range []string{`"level":"info"`, "every event that can flow was applied", `"failing_aggregates":0`} {
		if !strings.Contains(line, want) {
			t.Errorf("caught up with nothing left: %s\nwant %s", line, want)
		}
	}
	// One delivery allowed: the bad event moves to the DLQ during the run,
	// nothing is left pending, and the run still says so.
	if _, err := pool.Exec(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ($1, 'Product', 3, 'ProductCreated', '{"sku": 5}')`, tenant); err != nil {
		t.Fatal(err)
	}
	line = syncOnce("1")
	for _, want := range []string{`"level":"warn"`, "with events moved to the DLQ during the run", `"failing_aggregates":0`, `"dlq_depth":1`, `"dead_lettered":1`} {
		if !strings.Contains(line, want) {
			t.Errorf("caught up after a dead letter: %s\nwant %s", line, want)
		}
	}
}
