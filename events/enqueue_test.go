package events

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"graphsync/internal/stacktest"
)

// inTenantTx runs fn in a transaction of the application role for tenantID,
// as a producer under row-level security runs.
func inTenantTx(t *testing.T, pool *pgxpool.Pool, tenantID int64, commit bool, fn func(pgx.Tx) error) error {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT set_config('app.tenant_id', $1, true)", itoa(tenantID)); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE graphsync_app"); err != nil {
		t.Fatal(err)
	}
	if err := fn(tx); err != nil {
		return err
	}
	if commit {
		return tx.Commit(ctx)
	}
	return nil
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

type storedRow struct {
	aggregateType, eventType string
	aggregateID              int64
	eventVersion             int16
	payload                  []byte
	traceID                  *string
}

func outboxRows(t *testing.T, pool *pgxpool.Pool, tenantID int64) []storedRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT aggregate_type, aggregate_id, event_type, event_version, payload, trace_id
		FROM outbox_messages WHERE tenant_id = $1 ORDER BY id`, tenantID)
	if err != nil {
		t.Fatal(err)
	}
	var out []storedRow
	for rows.Next() {
		var r storedRow
		if err := rows.Scan(&r.aggregateType, &r.aggregateID, &r.eventType, &r.eventVersion, &r.payload, &r.traceID); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestEnqueueWritesInCallersTransaction(t *testing.T) {
	_, pool := stacktest.FreshDatabase(t)
	ctx := context.Background()
	var tenantID int64
	if err := pool.QueryRow(ctx, "INSERT INTO tenants (name) VALUES ('t') RETURNING id").Scan(&tenantID); err != nil {
		t.Fatal(err)
	}
	created := ProductCreated{productState(7, 1)}
	placed := orderPlaced(9, 1)

	// Rolled back: no row.
	if err := inTenantTx(t, pool, tenantID, false, func(tx pgx.Tx) error {
		return Enqueue(ctx, tx, tenantID, created)
	}); err != nil {
		t.Fatal(err)
	}
	if rows := outboxRows(t, pool, tenantID); len(rows) != 0 {
		t.Fatalf("a rolled-back Enqueue left %d rows", len(rows))
	}

	// Committed: both rows, decodable back to the events.
	if err := inTenantTx(t, pool, tenantID, true, func(tx pgx.Tx) error {
		if err := Enqueue(ctx, tx, tenantID, created, WithTraceID("trace-1")); err != nil {
			return err
		}
		return Enqueue(ctx, tx, tenantID, placed)
	}); err != nil {
		t.Fatal(err)
	}
	rows := outboxRows(t, pool, tenantID)
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	for k, want := range []Event{created, placed} {
		r := rows[k]
		if r.aggregateType != want.AggregateType() || r.aggregateID != want.AggregateID() || r.eventType != want.EventType() || r.eventVersion != want.EventVersion() {
			t.Fatalf("row %d = %s %d %s v%d, want %s %d %s v%d", k, r.aggregateType, r.aggregateID, r.eventType, r.eventVersion,
				want.AggregateType(), want.AggregateID(), want.EventType(), want.EventVersion())
		}
		got, err := Decode(Record{AggregateType: r.aggregateType, AggregateID: r.aggregateID, EventType: r.eventType, EventVersion: r.eventVersion, Payload: r.payload})
		if err != nil {
			t.Fatal(err)
		}
		gotJSON, _ := json.Marshal(got)
		wantJSON, _ := json.Marshal(want)
		if string(gotJSON) != string(wantJSON) {
			t.Fatalf("row %d decodes to\n%s\nwant\n%s", k, gotJSON, wantJSON)
		}
	}
	if rows[0].traceID == nil || *rows[0].traceID != "trace-1" || rows[1].traceID != nil {
		t.Fatalf("trace ids = %v, %v; want trace-1 and NULL", rows[0].traceID, rows[1].traceID)
	}

	// An invalid event is refused before anything is written.
	bad := orderPlaced(10, 1)
	bad.Lines[0].Quantity = -3
	err := inTenantTx(t, pool, tenantID, true, func(tx pgx.Tx) error { return Enqueue(ctx, tx, tenantID, bad) })
	if !errors.Is(err, ErrInvalidPayload) {
		t.Fatalf("Enqueue(invalid) = %v, want ErrInvalidPayload", err)
	}
	if rows := outboxRows(t, pool, tenantID); len(rows) != 2 {
		t.Fatalf("an invalid Enqueue wrote a row")
	}
}

// A plain-SQL producer inserting as the seed shows (no event_version, so 1)
// with the v1 ProductCreated shape is decoded through the upcaster.
func TestSeedStyleInsertDecodes(t *testing.T) {
	_, pool := stacktest.FreshDatabase(t)
	ctx := context.Background()
	var tenantID int64
	if err := pool.QueryRow(ctx, "INSERT INTO tenants (name) VALUES ('t') RETURNING id").Scan(&tenantID); err != nil {
		t.Fatal(err)
	}
	if err := inTenantTx(t, pool, tenantID, true, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload, trace_id)
			VALUES ($1, 'Product', $2, 'ProductCreated', $3::jsonb, $4)`, tenantID, 7,
			`{"version": 1, "sku": "SKU-1", "name": "Mug", "price": "19.99", "category_id": 3, "category_name": "Kitchen", "currency": "EUR", "status": "active"}`, "t-1")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rows := outboxRows(t, pool, tenantID)
	if len(rows) != 1 || rows[0].eventVersion != 1 {
		t.Fatalf("rows = %+v, want one row at event_version 1", rows)
	}
	ev, err := Decode(Record{AggregateType: rows[0].aggregateType, AggregateID: rows[0].aggregateID, EventType: rows[0].eventType, EventVersion: rows[0].eventVersion, Payload: rows[0].payload})
	if err != nil {
		t.Fatal(err)
	}
	got := ev.(ProductCreated)
	if got.PriceCents != 1999 || got.Category == nil || got.Category.ID != 3 || got.Category.Name != "Kitchen" || got.EventVersion() != 2 {
		t.Fatalf("upcast = %+v", got)
	}
}
