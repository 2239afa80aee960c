package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/events"
	"graphsync/internal/stacktest"
	"graphsync/outbox"
	"graphsync/projector"
)

// The first vertical slice: in one PostgreSQL transaction, update an order
// and insert its outbox row; read the rows back, apply them to Neo4j through
// the real driver, and read the node back.
func TestVerticalSlice(t *testing.T) {
	ctx := context.Background()
	_, pool := stacktest.FreshDatabase(t)
	driver := stacktest.Neo4j(t)
	if err := projector.EnsureSchema(ctx, driver); err != nil {
		t.Fatal(err)
	}
	var tenant, category, product, customer, order int64
	placedAt := time.Now().UTC().Truncate(time.Millisecond)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('slice') RETURNING id`).Scan(&tenant); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO categories (tenant_id, name) VALUES ($1, 'Tea') RETURNING id`, tenant).Scan(&category); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO products (tenant_id, sku, name, category_id, price_cents) VALUES ($1, 'T-1', 'Green tea', $2, 450) RETURNING id`,
			tenant, category).Scan(&product); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO customers (tenant_id, email, full_name, country_code) VALUES ($1, 'ada@example.com', 'Ada L', 'DE') RETURNING id`,
			tenant).Scan(&customer); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO sales_orders (tenant_id, customer_id, total_cents, placed_at) VALUES ($1, $2, 900, $3) RETURNING id`,
			tenant, customer, placedAt).Scan(&order); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO order_lines (tenant_id, order_id, line_no, product_id, quantity, unit_price_cents) VALUES ($1, $2, 1, $3, 2, 450)`,
			tenant, order, product); err != nil {
			return err
		}
		if err := events.Enqueue(ctx, tx, tenant, events.ProductCreated{ProductState: events.ProductState{ID: product, Version: 1, SKU: "T-1",
			Name: "Green tea", Category: &events.CategoryRef{ID: category, Name: "Tea"}, PriceCents: 450, Currency: "EUR", Status: "active"}}); err != nil {
			return err
		}
		return events.Enqueue(ctx, tx, tenant, events.OrderPlaced{
			OrderState: events.OrderState{ID: order, Version: 1, Status: "placed", Currency: "EUR", TotalCents: 900, PlacedAt: placedAt},
			Customer:   events.CustomerRef{ID: customer, Segment: "retail", CountryCode: "DE"},
			Lines:      []events.OrderLine{{LineNo: 1, ProductID: product, Quantity: 2, UnitPriceCents: 450}},
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stacktest.CleanGraph(t, driver, tenant) })

	// The business change and its event, in one transaction, as the seed shows.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var state events.OrderState
		state.ID = order
		err := tx.QueryRow(ctx, `UPDATE sales_orders SET status = 'confirmed', confirmed_at = now(), version = version + 1
			WHERE id = $1 AND version = $2
			RETURNING version, status, currency, total_cents, placed_at, confirmed_at`, order, 1).
			Scan(&state.Version, &state.Status, &state.Currency, &state.TotalCents, &state.PlacedAt, &state.ConfirmedAt)
		if err != nil {
			return err
		}
		return events.Enqueue(ctx, tx, tenant, events.OrderConfirmed{OrderState: state}, events.WithTraceID("slice-trace"))
	})
	if err != nil {
		t.Fatal(err)
	}

	rows, err := pool.Query(ctx, `SELECT id, tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload, occurred_at, coalesce(trace_id, '')
		FROM outbox_messages WHERE tenant_id = $1 ORDER BY id`, tenant)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outbox.Message, error) {
		var m outbox.Message
		var payload []byte
		err := r.Scan(&m.ID, &m.TenantID, &m.AggregateType, &m.AggregateID, &m.EventType, &m.EventVersion, &payload, &m.OccurredAt, &m.TraceID)
		m.Payload = json.RawMessage(payload)
		return m, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(batch) != 3 || batch[2].EventType != "OrderConfirmed" || batch[2].TraceID != "slice-trace" {
		t.Fatalf("outbox rows read back: %+v", batch)
	}
	sink, err := projector.New(driver, projector.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rejected, err := sink.Deliver(ctx, batch)
	if err != nil || len(rejected) != 0 {
		t.Fatalf("deliver: rejected %v, err %v", rejected, err)
	}

	session := driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeRead})
	defer session.Close(ctx)
	record, err := neo4j.ExecuteRead(ctx, session, func(tx neo4j.ManagedTransaction) (*neo4j.Record, error) {
		res, err := tx.Run(ctx, `MATCH (c:Customer {tenant_id: $t})-[:PLACED]->(o:Order {tenant_id: $t, id: $id})-[l:CONTAINS]->(p:Product {tenant_id: $t})
			RETURN o.status AS status, l.quantity AS quantity, p.name AS product, c.id AS customer`, map[string]any{"t": tenant, "id": order})
		if err != nil {
			return nil, err
		}
		return res.Single(ctx)
	})
	if err != nil {
		t.Fatalf("read the order back from Neo4j: %v", err)
	}
	if status, _ := record.Get("status"); status != "confirmed" {
		t.Errorf("order status in the graph = %v, want confirmed", status)
	}
	if quantity, _ := record.Get("quantity"); quantity != int64(2) {
		t.Errorf("line quantity = %v, want 2", quantity)
	}
	if name, _ := record.Get("product"); name != "Green tea" {
		t.Errorf("product = %v", name)
	}
}
