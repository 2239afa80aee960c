package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"graphsync/events"
	"graphsync/internal/stacktest"
	"graphsync/projector"
	"graphsync/retrieve"
)

// From the business tables through sync to the context an LLM is handed:
// personal data planted in PostgreSQL (the customer's columns, and an
// e-mail address typed into a description) reaches neither the graph nor
// the context, and the context follows a product's description once sync
// has caught up.
func TestContextThroughSync(t *testing.T) {
	ctx := context.Background()
	pgURL, pool := stacktest.FreshDatabase(t)
	driver := stacktest.Neo4j(t)
	if err := projector.EnsureSchema(ctx, driver); err != nil {
		t.Fatal(err)
	}
	var tenant, category, product, customer, order int64
	const email, fullName, phone = "ada.planted@example.org", "Ada Plantagenet", "+44 20 7946 0958"
	placedAt := time.Now().UTC().Truncate(time.Millisecond)
	product0 := events.ProductState{SKU: "TP-1", Name: "Stoneware Teapot", Description: "Teapot with a bamboo lid. Trade orders: ada.planted@example.org",
		PriceCents: 3450, Currency: "EUR", Status: events.ProductStatusActive, Version: 1}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('context') RETURNING id`).Scan(&tenant); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO categories (tenant_id, name) VALUES ($1, 'Tea') RETURNING id`, tenant).Scan(&category); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO products (tenant_id, sku, name, description, category_id, price_cents) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
			tenant, product0.SKU, product0.Name, product0.Description, category, product0.PriceCents).Scan(&product); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO customers (tenant_id, email, full_name, phone, country_code, segment) VALUES ($1, $2, $3, $4, 'GB', 'vip') RETURNING id`,
			tenant, email, fullName, phone).Scan(&customer); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO sales_orders (tenant_id, customer_id, total_cents, placed_at) VALUES ($1, $2, 6900, $3) RETURNING id`,
			tenant, customer, placedAt).Scan(&order); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO order_lines (tenant_id, order_id, line_no, product_id, quantity, unit_price_cents) VALUES ($1, $2, 1, $3, 2, 3450)`,
			tenant, order, product); err != nil {
			return err
		}
		product0.ID = product
		product0.Category = &events.CategoryRef{ID: category, Name: "Tea"}
		if err := events.Enqueue(ctx, tx, tenant, events.ProductCreated{ProductState: product0}); err != nil {
			return err
		}
		return events.Enqueue(ctx, tx, tenant, events.OrderPlaced{
			OrderState: events.OrderState{ID: order, Version: 1, Status: events.OrderStatusPlaced, Currency: "EUR", TotalCents: 6900, PlacedAt: placedAt},
			Customer:   events.CustomerRef{ID: customer, Segment: "vip", CountryCode: "GB"},
			Lines:      []events.OrderLine{{LineNo: 1, ProductID: product, Quantity: 2, UnitPriceCents: 3450}},
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stacktest.CleanGraph(t, driver, tenant) })
	syncUntilCaughtUp(t, pgURL)

	contextOf := func(question string) string {
		t.Helper()
		var out bytes.Buffer
		for _, format := range []retrieve.Format{retrieve.FormatMarkdown, retrieve.FormatJSON} {
			if err := writeContext(ctx, &out, driver, retrieve.Config{}, format, tenant, question); err != nil {
				t.Fatalf("context %q (%s): %v", question, format, err)
			}
		}
		return out.String()
	}
	before := contextOf("teapot bamboo")
	if !strings.Contains(before, "Stoneware Teapot") || !strings.Contains(before, "bamboo lid") || !strings.Contains(before, "by country GB 1") {
		t.Fatalf("context lacks the product, its description or its buyers:\n%s", before)
	}
	dump, err := projector.DumpGraph(ctx, driver, tenant)
	if err != nil {
		t.Fatal(err)
	}
	for _, personal := range []string{email, fullName, phone, "Plantagenet", "@"} {
		if strings.Contains(before, personal) {
			t.Errorf("the context holds personal data %q", personal)
		}
		if strings.Contains(dump.String(), personal) {
			t.Errorf("the graph holds personal data %q", personal)
		}
	}

	// A description update, written as the application writes it.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		state := product0
		if err := tx.QueryRow(ctx, `UPDATE products SET description = 'Porcelain teapot, hand-glazed.', version = version + 1
			WHERE id = $1 RETURNING version, description`, product).Scan(&state.Version, &state.Description); err != nil {
			return err
		}
		return events.Enqueue(ctx, tx, tenant, events.ProductUpdated{ProductState: state})
	})
	if err != nil {
		t.Fatal(err)
	}
	syncUntilCaughtUp(t, pgURL)
	after := contextOf("porcelain")
	if !strings.Contains(after, "hand-glazed") || strings.Contains(after, "bamboo") {
		t.Errorf("the context does not follow the description update:\n%s", after)
	}
	var res bytes.Buffer
	if err := writeContext(ctx, &res, driver, retrieve.Config{}, retrieve.FormatMarkdown, tenant, "bamboo"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.String(), "Nothing in tenant "+strconv.FormatInt(tenant, 10)) {
		t.Errorf("the old description still matches:\n%s", res.String())
	}
}

func syncUntilCaughtUp(t *testing.T, pgURL string) {
	t.Helper()
	code := run([]string{"sync", "--until-caught-up", "--http-addr=", "--wake", "poll", "--poll-interval", "50ms",
		"--retention-every", "0", "--log-level", "error", "--pg-url", pgURL, "--neo4j-uri", stacktest.Neo4jURI(t)})
	if code != 0 {
		t.Fatalf("graphsync sync --until-caught-up exited %d", code)
	}
}

// Bad calls exit 2 with one line naming the problem, before or without
// touching Neo4j; an unreachable Neo4j exits 1.
func TestContextBadCalls(t *testing.T) {
	uri := stacktest.Neo4jURI(t)
	for name, args := range map[string][]string{
		"no tenant":      {"kettle"},
		"no question":    {"--tenant", "1"},
		"no words":       {"--tenant", "1", `"*~ ?`},
		"unknown format": {"--tenant", "1", "--format", "xml", "kettle"},
		"top-k too big":  {"--tenant", "1", "--top-k", "1000", "kettle"},
		"hops too far":   {"--tenant", "1", "--hops", "3", "kettle"},
		"unknown tenant": {"--tenant", "5000000000001", "kettle"},
		"unknown mode":   {"--tenant", "1", "--retrieval", "psychic", "kettle"},
		"no embedder":    {"--tenant", "1", "--embedder", "none", "--retrieval", "hybrid", "kettle"},
	} {
		if code := run(append([]string{"context", "--neo4j-uri", uri}, args...)); code != 2 {
			t.Errorf("%s: exit %d, want 2", name, code)
		}
	}
	// The model missing: one line naming the file and the make target, exit
	// 2, before Neo4j is even dialled.
	missing := filepath.Join(t.TempDir(), "no-model")
	code, stderr := runCapturingStderr(t, []string{"context", "--neo4j-uri", "bolt://127.0.0.1:1", "--embed-model-dir", missing, "--tenant", "1", "kettle"})
	if code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, missing) || !strings.Contains(stderr, "make model") {
		t.Errorf("missing model: exit %d, stderr %q; want 2 and one line naming the file and make model", code, stderr)
	}
	// --embedder none is today's lexical retrieval: it needs no model.
	if code := run([]string{"context", "--neo4j-uri", "bolt://127.0.0.1:1", "--embed-model-dir", missing, "--embedder", "none", "--tenant", "1", "kettle"}); code != 1 {
		t.Errorf("--embedder none with no model: exit %d, want 1 (Neo4j unreachable)", code)
	}
	if code := run([]string{"context", "--neo4j-uri", "bolt://127.0.0.1:1", "--tenant", "1", "kettle"}); code != 1 {
		t.Errorf("unreachable Neo4j: exit %d, want 1", code)
	}
	// A tenant from the environment (set for another command) is named.
	t.Setenv("GRAPHSYNC_TENANT", "7")
	code, stderr = runCapturingStderr(t, []string{"context", "--neo4j-uri", "bolt://127.0.0.1:1", "kettle"})
	if code != 1 || !strings.Contains(stderr, "tenant 7, from GRAPHSYNC_TENANT") {
		t.Errorf("tenant from GRAPHSYNC_TENANT: exit %d, stderr %q; want 1 and the tenant named", code, stderr)
	}
	code, stderr = runCapturingStderr(t, []string{"context", "--neo4j-uri", "bolt://127.0.0.1:1", "--tenant", "7", "kettle"})
	if code != 1 || strings.Contains(stderr, "GRAPHSYNC_TENANT") {
		t.Errorf("tenant on the command line: exit %d, stderr %q; want 1 and no note", code, stderr)
	}
}
