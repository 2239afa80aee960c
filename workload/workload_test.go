package workload_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap/zaptest"

	"graphsync/events"
	"graphsync/internal/stacktest"
	"graphsync/workload"
)

const testTimeout = 2 * time.Minute

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// outboxRow is one outbox row of a run, decoded.
type outboxRow struct {
	id            int64
	tenantID      int64
	aggregateType string
	aggregateID   int64
	eventType     string
	eventVersion  int16
	payload       []byte
	traceID       *string
	createdXID    uint64
	event         events.Event
}

func readOutbox(t *testing.T, ctx context.Context, pool *pgxpool.Pool, tenantIDs []int64) []outboxRow {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT id, tenant_id, aggregate_type, aggregate_id, event_type, event_version,
		payload, trace_id, created_xid::text::numeric::bigint
		FROM outbox_messages WHERE tenant_id = ANY($1) ORDER BY id`, tenantIDs)
	if err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxRow, error) {
		var r outboxRow
		var xid int64
		err := row.Scan(&r.id, &r.tenantID, &r.aggregateType, &r.aggregateID, &r.eventType, &r.eventVersion,
			&r.payload, &r.traceID, &xid)
		r.createdXID = uint64(xid)
		return r, err
	})
	if err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	return list
}

// decodeAll decodes every row; the workload must write only valid events.
func decodeAll(t *testing.T, rows []outboxRow) {
	t.Helper()
	for i := range rows {
		r := &rows[i]
		ev, err := events.Decode(events.Record{OutboxID: r.id, AggregateType: r.aggregateType,
			AggregateID: r.aggregateID, EventType: r.eventType, EventVersion: r.eventVersion, Payload: r.payload})
		if err != nil {
			t.Fatalf("workload wrote an event the catalog rejects: %v", err)
		}
		r.event = ev
	}
}

func productStateOf(ev events.Event) (events.ProductState, bool) {
	switch e := ev.(type) {
	case events.ProductCreated:
		return e.ProductState, true
	case events.ProductUpdated:
		return e.ProductState, true
	case events.ProductPriceChanged:
		return e.ProductState, true
	case events.ProductDiscontinued:
		return e.ProductState, true
	}
	return events.ProductState{}, false
}

func orderStateOf(ev events.Event) events.OrderState {
	switch e := ev.(type) {
	case events.OrderPlaced:
		return e.OrderState
	case events.OrderConfirmed:
		return e.OrderState
	case events.OrderShipped:
		return e.OrderState
	case events.OrderCancelled:
		return e.OrderState
	}
	panic(fmt.Sprintf("not an order event: %T", ev))
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}

// checkConsistent proves the run's outbox and business tables agree: every
// change has exactly one event (versions 1, 2, 3... with no gap), the newest
// event of each aggregate equals its row, OrderPlaced carries the order's
// lines and customer, and the counts match the report.
func checkConsistent(t *testing.T, ctx context.Context, pool *pgxpool.Pool, report workload.Report) []outboxRow {
	t.Helper()
	rows := readOutbox(t, ctx, pool, report.TenantIDs)
	decodeAll(t, rows)

	byType := map[string]int64{}
	latest := map[string]outboxRow{} // "Product/42" -> newest row
	lastVersion := map[string]int64{}
	for _, r := range rows {
		byType[r.eventType]++
		if r.traceID == nil || len(*r.traceID) != 32 {
			t.Errorf("outbox id %d: trace_id %v, want 32 hex digits", r.id, r.traceID)
		}
		key := r.aggregateType + "/" + strconv.FormatInt(r.aggregateID, 10)
		version := r.event.AggregateVersion()
		want := lastVersion[key] + 1
		if r.eventType == events.TypeProductDeleted {
			want = lastVersion[key] // deletion reports the version it deleted
		}
		if version != want {
			t.Errorf("%s: outbox id %d (%s) has version %d, want %d: a change without its event, or two events for one change",
				key, r.id, r.eventType, version, want)
		}
		lastVersion[key] = version
		latest[key] = r
	}
	if !maps.Equal(byType, report.ByType) {
		t.Errorf("outbox events by type %v, report says %v", byType, report.ByType)
	}
	var total int64
	for _, n := range byType {
		total += n
	}
	if total != report.Events {
		t.Errorf("outbox holds %d events, report says %d", total, report.Events)
	}

	var orders, products, customers int64
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM sales_orders WHERE tenant_id = ANY($1)),
		(SELECT count(*) FROM products WHERE tenant_id = ANY($1)),
		(SELECT count(*) FROM customers WHERE tenant_id = ANY($1))`, report.TenantIDs).
		Scan(&orders, &products, &customers); err != nil {
		t.Fatalf("count business rows: %v", err)
	}
	if orders != byType[events.TypeOrderPlaced] || orders != report.Orders {
		t.Errorf("sales_orders %d, OrderPlaced events %d, report %d", orders, byType[events.TypeOrderPlaced], report.Orders)
	}
	if want := byType[events.TypeProductCreated] - byType[events.TypeProductDeleted]; products != want || products != report.Products {
		t.Errorf("products %d, created minus deleted events %d, report %d", products, want, report.Products)
	}
	if customers != report.Customers {
		t.Errorf("customers %d, report %d", customers, report.Customers)
	}

	checkProducts(t, ctx, pool, report.TenantIDs, latest)
	checkOrders(t, ctx, pool, report.TenantIDs, latest, rows)
	return rows
}

func checkProducts(t *testing.T, ctx context.Context, pool *pgxpool.Pool, tenantIDs []int64, latest map[string]outboxRow) {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT p.id, p.version, p.sku, p.name, p.description, p.category_id, c.name,
		p.price_cents, p.currency, p.status
		FROM products p LEFT JOIN categories c ON c.tenant_id = p.tenant_id AND c.id = p.category_id
		WHERE p.tenant_id = ANY($1)`, tenantIDs)
	if err != nil {
		t.Fatalf("read products: %v", err)
	}
	inTable := map[int64]bool{}
	for rows.Next() {
		var (
			p            events.ProductState
			categoryID   *int64
			categoryName *string
		)
		if err := rows.Scan(&p.ID, &p.Version, &p.SKU, &p.Name, &p.Description, &categoryID, &categoryName,
			&p.PriceCents, &p.Currency, &p.Status); err != nil {
			t.Fatalf("scan product: %v", err)
		}
		if categoryID != nil {
			p.Category = &events.CategoryRef{ID: *categoryID, Name: *categoryName}
		}
		inTable[p.ID] = true
		r, ok := latest["Product/"+strconv.FormatInt(p.ID, 10)]
		if !ok {
			t.Errorf("product %d has no event", p.ID)
			continue
		}
		state, ok := productStateOf(r.event)
		if !ok {
			t.Errorf("product %d exists but its newest event is %s", p.ID, r.eventType)
			continue
		}
		if got, _ := json.Marshal(state); string(got) != string(must(json.Marshal(p))) {
			t.Errorf("product %d: newest event (%s) carries\n%s\nthe row is\n%s", p.ID, r.eventType, got, must(json.Marshal(p)))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read products: %v", err)
	}
	for key, r := range latest {
		if r.aggregateType == events.AggregateProduct && !inTable[r.aggregateID] && r.eventType != events.TypeProductDeleted {
			t.Errorf("%s has no row but its newest event is %s", key, r.eventType)
		}
		if r.eventType == events.TypeProductDeleted && inTable[r.aggregateID] {
			t.Errorf("%s was deleted by event but its row exists", key)
		}
	}
}

func checkOrders(t *testing.T, ctx context.Context, pool *pgxpool.Pool, tenantIDs []int64, latest map[string]outboxRow, all []outboxRow) {
	t.Helper()
	placed := map[int64]events.OrderPlaced{}
	for _, r := range all {
		if e, ok := r.event.(events.OrderPlaced); ok {
			placed[e.ID] = e
		}
	}
	rows, err := pool.Query(ctx, `SELECT o.id, o.version, o.status, o.currency, o.total_cents, o.placed_at,
		o.confirmed_at, o.shipped_at, o.cancelled_at, c.id, c.segment, coalesce(c.country_code, ''),
		(SELECT coalesce(json_agg(json_build_object('line_no', l.line_no, 'product_id', l.product_id,
			'quantity', l.quantity, 'unit_price_cents', l.unit_price_cents) ORDER BY l.line_no), '[]')
		 FROM order_lines l WHERE l.tenant_id = o.tenant_id AND l.order_id = o.id)
		FROM sales_orders o JOIN customers c ON c.tenant_id = o.tenant_id AND c.id = o.customer_id
		WHERE o.tenant_id = ANY($1)`, tenantIDs)
	if err != nil {
		t.Fatalf("read orders: %v", err)
	}
	for rows.Next() {
		var (
			o         events.OrderState
			customer  events.CustomerRef
			linesJSON []byte
		)
		if err := rows.Scan(&o.ID, &o.Version, &o.Status, &o.Currency, &o.TotalCents, &o.PlacedAt,
			&o.ConfirmedAt, &o.ShippedAt, &o.CancelledAt, &customer.ID, &customer.Segment, &customer.CountryCode,
			&linesJSON); err != nil {
			t.Fatalf("scan order: %v", err)
		}
		var lines []events.OrderLine
		if err := json.Unmarshal(linesJSON, &lines); err != nil {
			t.Fatalf("order %d lines: %v", o.ID, err)
		}
		r, ok := latest["Order/"+strconv.FormatInt(o.ID, 10)]
		if !ok {
			t.Errorf("order %d has no event", o.ID)
			continue
		}
		got := orderStateOf(r.event)
		if got.ID != o.ID || got.Version != o.Version || got.Status != o.Status || got.Currency != o.Currency ||
			got.TotalCents != o.TotalCents || !got.PlacedAt.Equal(o.PlacedAt) || !sameTime(got.ConfirmedAt, o.ConfirmedAt) ||
			!sameTime(got.ShippedAt, o.ShippedAt) || !sameTime(got.CancelledAt, o.CancelledAt) {
			t.Errorf("order %d: newest event (%s) carries %+v, the row is %+v", o.ID, r.eventType, got, o)
		}
		p, ok := placed[o.ID]
		if !ok {
			t.Errorf("order %d has no OrderPlaced", o.ID)
			continue
		}
		if !slices.Equal(p.Lines, lines) {
			t.Errorf("order %d: OrderPlaced lines %+v, order_lines %+v", o.ID, p.Lines, lines)
		}
		if p.Customer != customer {
			t.Errorf("order %d: OrderPlaced customer %+v, row %+v", o.ID, p.Customer, customer)
		}
		if len(lines) < 1 || len(lines) > 4 {
			t.Errorf("order %d has %d lines, want 1 to 4", o.ID, len(lines))
		}
		var sum int64
		for _, l := range lines {
			sum += int64(l.Quantity) * l.UnitPriceCents
		}
		if sum != o.TotalCents || p.TotalCents != sum {
			t.Errorf("order %d: total_cents %d, OrderPlaced total %d, sum of lines %d", o.ID, o.TotalCents, p.TotalCents, sum)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read orders: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestRunDefaultWorkloadWritesEveryChangeWithItsEvent(t *testing.T) {
	ctx := testContext(t)
	_, pool := stacktest.FreshDatabase(t)
	report, err := workload.Run(ctx, pool, workload.Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("default workload: %d events %v", report.Events, report.ByType)

	if len(report.TenantIDs) != 3 || report.Orders != 60 || report.Customers != 30 || report.Products != 60 {
		t.Errorf("report %+v, want 3 tenants, 60 orders, 30 customers, 60 products", report)
	}
	// Exact for the defaults, whatever the seed: these are counted by order number.
	for eventType, want := range map[string]int64{
		events.TypeOrderPlaced:         60,
		events.TypeProductCreated:      60 + 3, // 20 per tenant, plus one every 20 orders to delete
		events.TypeProductDeleted:      3,
		events.TypeProductPriceChanged: 12, // every 5 orders
		events.TypeProductUpdated:      6,  // every 10 orders
	} {
		if got := report.ByType[eventType]; got != want {
			t.Errorf("%s: %d events, want %d", eventType, got, want)
		}
	}
	for _, eventType := range []string{events.TypeOrderConfirmed, events.TypeOrderShipped,
		events.TypeOrderCancelled, events.TypeProductDiscontinued} {
		if report.ByType[eventType] == 0 {
			t.Errorf("no %s events in the default workload", eventType)
		}
	}
	rows := checkConsistent(t, ctx, pool, report)

	// OrdersPerTx 1: one change, one event, one transaction.
	xids := map[uint64]int{}
	for _, r := range rows {
		xids[r.createdXID]++
	}
	if len(xids) != len(rows) {
		t.Errorf("%d events in %d transactions, want one transaction per event", len(rows), len(xids))
	}
	// Each order's lines were inserted by the transaction that wrote its OrderPlaced.
	var mismatched int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_messages m
		JOIN order_lines l ON l.tenant_id = m.tenant_id AND l.order_id = m.aggregate_id
		WHERE m.tenant_id = ANY($1) AND m.event_type = 'OrderPlaced'
		  AND l.xmin::text::bigint <> (m.created_xid::text::numeric % 4294967296)::bigint`, report.TenantIDs).
		Scan(&mismatched); err != nil {
		t.Fatalf("compare transactions: %v", err)
	}
	if mismatched != 0 {
		t.Errorf("%d order lines were not written in their OrderPlaced's transaction", mismatched)
	}
}

func TestRunBatchedTransactionsStayConsistent(t *testing.T) {
	ctx := testContext(t)
	_, pool := stacktest.FreshDatabase(t)
	cfg := workload.Config{Seed: 11, Tenants: 2, ProductsPerTenant: 12, Orders: 400, Writers: 3, OrdersPerTx: 50}
	report, err := workload.Run(ctx, pool, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if report.Orders != 400 {
		t.Errorf("orders %d, want 400", report.Orders)
	}
	rows := checkConsistent(t, ctx, pool, report)
	xids := map[uint64]int{}
	for _, r := range rows {
		xids[r.createdXID]++
	}
	for xid, n := range xids {
		if n > cfg.OrdersPerTx {
			t.Errorf("transaction %d holds %d events, more than OrdersPerTx %d", xid, n, cfg.OrdersPerTx)
		}
	}
	if len(xids) >= len(rows)/10 {
		t.Errorf("%d events in %d transactions: OrdersPerTx %d did not batch", len(rows), len(xids), cfg.OrdersPerTx)
	}
}

// fingerprint is a run's events with everything the database assigns (ids,
// timestamps, tenant ids) replaced by what the workload chose: tenant by its
// position in the report, product ids by SKU, customer ids by email.
func fingerprint(t *testing.T, ctx context.Context, pool *pgxpool.Pool, report workload.Report) []string {
	t.Helper()
	rows := readOutbox(t, ctx, pool, report.TenantIDs)
	skus := map[int64]string{}
	for _, r := range rows {
		if r.eventType == events.TypeProductCreated {
			var p struct{ SKU string }
			must(0, json.Unmarshal(r.payload, &p))
			skus[r.aggregateID] = p.SKU
		}
	}
	emails := map[int64]string{}
	customerRows := must(pool.Query(ctx, `SELECT id, email FROM customers WHERE tenant_id = ANY($1)`, report.TenantIDs))
	for customerRows.Next() {
		var id int64
		var email string
		must(0, customerRows.Scan(&id, &email))
		emails[id] = email
	}
	if err := customerRows.Err(); err != nil {
		t.Fatalf("read customers: %v", err)
	}
	tenantIndex := map[int64]int{}
	for i, id := range report.TenantIDs {
		tenantIndex[id] = i
	}
	var prints []string
	for _, r := range rows {
		var doc map[string]any
		must(0, json.Unmarshal(r.payload, &doc))
		for _, key := range []string{"id", "placed_at", "confirmed_at", "shipped_at", "cancelled_at"} {
			delete(doc, key)
		}
		if category, ok := doc["category"].(map[string]any); ok {
			delete(category, "id")
		}
		if customer, ok := doc["customer"].(map[string]any); ok {
			customer["id"] = emails[int64(customer["id"].(float64))]
		}
		if lines, ok := doc["lines"].([]any); ok {
			for _, line := range lines {
				line := line.(map[string]any)
				line["product_id"] = skus[int64(line["product_id"].(float64))]
			}
		}
		aggregate := "" // orders have no stable name: their content identifies them
		if r.aggregateType == events.AggregateProduct {
			aggregate = skus[r.aggregateID]
		}
		prints = append(prints, fmt.Sprintf("tenant %d %s v%d %s %s trace=%s %s", tenantIndex[r.tenantID],
			r.eventType, r.eventVersion, r.aggregateType, aggregate, *r.traceID, must(json.Marshal(doc))))
	}
	slices.Sort(prints)
	return prints
}

// multisetDifference returns the elements of sorted a not matched in sorted b.
func multisetDifference(a, b []string) []string {
	var only []string
	for i, j := 0, 0; i < len(a); {
		switch {
		case j >= len(b) || a[i] < b[j]:
			only = append(only, a[i])
			i++
		case a[i] > b[j]:
			j++
		default:
			i++
			j++
		}
	}
	return only
}

func TestRunIsDeterministicForASeed(t *testing.T) {
	ctx := testContext(t)
	cfg := workload.Config{Seed: 7, Orders: 150, Writers: 3}
	run := func(cfg workload.Config) []string {
		_, pool := stacktest.FreshDatabase(t)
		report, err := workload.Run(ctx, pool, cfg, zaptest.NewLogger(t))
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		return fingerprint(t, ctx, pool, report)
	}
	first, second := run(cfg), run(cfg)
	if !slices.Equal(first, second) {
		onlyFirst, onlySecond := multisetDifference(first, second), multisetDifference(second, first)
		t.Fatalf("same seed, different events (%d and %d events); only in the first run:\n%s\nonly in the second:\n%s",
			len(first), len(second), strings.Join(onlyFirst, "\n"), strings.Join(onlySecond, "\n"))
	}
	cfg.Seed = 8
	if other := run(cfg); slices.Equal(first, other) {
		t.Errorf("seeds 7 and 8 wrote the same events")
	}
}

// TestRunWritesAsTheApplicationRoleUnderRLS records, with triggers, who
// wrote every business and outbox row and under which app.tenant_id.
func TestRunWritesAsTheApplicationRoleUnderRLS(t *testing.T) {
	ctx := testContext(t)
	_, pool := stacktest.FreshDatabase(t)
	if _, err := pool.Exec(ctx, `
		CREATE TABLE write_audit (table_name TEXT, op TEXT, role TEXT, setting TEXT, row_tenant BIGINT);
		GRANT INSERT ON write_audit TO graphsync_app;
		CREATE FUNCTION audit_write() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE r RECORD;
		BEGIN
			IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
			INSERT INTO write_audit VALUES (TG_TABLE_NAME, TG_OP, current_user,
				current_setting('app.tenant_id', true), r.tenant_id);
			RETURN NULL;
		END $$;
		CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON outbox_messages FOR EACH ROW EXECUTE FUNCTION audit_write();
		CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON products FOR EACH ROW EXECUTE FUNCTION audit_write();
		CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON sales_orders FOR EACH ROW EXECUTE FUNCTION audit_write();
		CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON order_lines FOR EACH ROW EXECUTE FUNCTION audit_write();
		CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON customers FOR EACH ROW EXECUTE FUNCTION audit_write();
		CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON categories FOR EACH ROW EXECUTE FUNCTION audit_write();
	`); err != nil {
		t.Fatalf("install audit triggers: %v", err)
	}
	report, err := workload.Run(ctx, pool, workload.Config{Seed: 3, Orders: 40, OrdersPerTx: 7}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}

	var writes, foreign int64
	if err := pool.QueryRow(ctx, `SELECT count(*),
		count(*) FILTER (WHERE role <> 'graphsync_app' OR setting IS DISTINCT FROM row_tenant::text)
		FROM write_audit`).Scan(&writes, &foreign); err != nil {
		t.Fatalf("read audit: %v", err)
	}
	if writes < report.Events+report.Customers {
		t.Errorf("audit saw %d writes, fewer than %d events plus %d customers", writes, report.Events, report.Customers)
	}
	if foreign != 0 {
		t.Errorf("%d of %d writes were not made as graphsync_app scoped to the row's tenant", foreign, writes)
	}

	// Row-level security really scopes the application role: as tenant A it
	// sees A's rows and nothing of B's.
	a, b := report.TenantIDs[0], report.TenantIDs[1]
	var ownProducts, ownOrders, ownCustomers, foreignRows int64
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('role', 'graphsync_app', true), set_config('app.tenant_id', $1, true)`,
			strconv.FormatInt(a, 10)); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM products), (SELECT count(*) FROM sales_orders), (SELECT count(*) FROM customers),
			(SELECT count(*) FROM products WHERE tenant_id = $1) + (SELECT count(*) FROM sales_orders WHERE tenant_id = $1)
			  + (SELECT count(*) FROM customers WHERE tenant_id = $1)`, b).
			Scan(&ownProducts, &ownOrders, &ownCustomers, &foreignRows)
	})
	if err != nil {
		t.Fatalf("read as application role: %v", err)
	}
	var wantProducts, wantOrders, wantCustomers int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM products WHERE tenant_id = $1),
		(SELECT count(*) FROM sales_orders WHERE tenant_id = $1), (SELECT count(*) FROM customers WHERE tenant_id = $1)`, a).
		Scan(&wantProducts, &wantOrders, &wantCustomers); err != nil {
		t.Fatalf("count as superuser: %v", err)
	}
	if ownProducts != wantProducts || ownOrders != wantOrders || ownCustomers != wantCustomers || wantOrders == 0 {
		t.Errorf("as tenant %d the app role sees %d products, %d orders, %d customers; the tenant has %d, %d, %d",
			a, ownProducts, ownOrders, ownCustomers, wantProducts, wantOrders, wantCustomers)
	}
	if foreignRows != 0 {
		t.Errorf("as tenant %d the app role sees %d rows of tenant %d", a, foreignRows, b)
	}
}

func TestRunStoresPersonalDataOnlyInBusinessTables(t *testing.T) {
	ctx := testContext(t)
	_, pool := stacktest.FreshDatabase(t)
	report, err := workload.Run(ctx, pool, workload.Config{Seed: 5}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var total, complete, distinctNames int64
	if err := pool.QueryRow(ctx, `SELECT count(*),
		count(*) FILTER (WHERE email ~ '^[a-z]+\.[a-z]+\.[0-9]+@example\.(com|org)$' AND full_name ~ '^\S+ \S+'
			AND phone ~ '^\+[0-9]+ 555-01[0-9]{2}$' AND address ~ '^[0-9]+ .+, [0-9]{5} .+, [A-Z]{2}$'
			AND segment IN ('retail', 'business', 'vip') AND country_code ~ '^[A-Z]{2}$'),
		count(DISTINCT full_name)
		FROM customers WHERE tenant_id = ANY($1)`, report.TenantIDs).Scan(&total, &complete, &distinctNames); err != nil {
		t.Fatalf("read customers: %v", err)
	}
	if total != report.Customers || complete != total || distinctNames < total/2 {
		t.Errorf("%d customers, %d with complete personal data, %d distinct names", total, complete, distinctNames)
	}
	var shippedToCustomer, orders int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE o.shipping_address = c.address), count(*)
		FROM sales_orders o JOIN customers c ON c.tenant_id = o.tenant_id AND c.id = o.customer_id
		WHERE o.tenant_id = ANY($1)`, report.TenantIDs).Scan(&shippedToCustomer, &orders); err != nil {
		t.Fatalf("read orders: %v", err)
	}
	if shippedToCustomer != orders || orders == 0 {
		t.Errorf("%d of %d orders ship to their customer's address", shippedToCustomer, orders)
	}
	var leaks int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_messages m
		WHERE m.tenant_id = ANY($1) AND EXISTS (SELECT 1 FROM customers c WHERE c.tenant_id = m.tenant_id
		  AND (strpos(m.payload::text, c.email) > 0 OR strpos(m.payload::text, c.full_name) > 0
		    OR strpos(m.payload::text, c.address) > 0 OR strpos(m.payload::text, c.phone) > 0))`,
		report.TenantIDs).Scan(&leaks); err != nil {
		t.Fatalf("search outbox for personal data: %v", err)
	}
	if leaks != 0 {
		t.Errorf("%d events carry a customer's personal data", leaks)
	}
}

func TestPlantPoisonWritesRowsTheCatalogRejects(t *testing.T) {
	ctx := testContext(t)
	_, pool := stacktest.FreshDatabase(t)
	const tenantID = 4242
	n := 2*len(workload.PoisonKinds) + 1
	ids, err := workload.PlantPoison(ctx, pool, tenantID, n)
	if err != nil {
		t.Fatalf("PlantPoison: %v", err)
	}
	if len(ids) != n || !slices.IsSorted(ids) {
		t.Fatalf("PlantPoison returned ids %v, want %d ascending ids", ids, n)
	}
	rows := readOutbox(t, ctx, pool, []int64{tenantID})
	if len(rows) != n {
		t.Fatalf("outbox holds %d rows of tenant %d, want %d", len(rows), tenantID, n)
	}
	wantKind := map[string]error{
		workload.PoisonMalformedPayload:  events.ErrInvalidPayload,
		workload.PoisonNegativeQuantity:  events.ErrInvalidPayload,
		workload.PoisonUnknownEventType:  events.ErrUnknownEvent,
		workload.PoisonWrongEventVersion: events.ErrUnknownEvent,
		workload.PoisonPayloadNotObject:  events.ErrInvalidPayload,
		workload.PoisonAggregateMismatch: events.ErrInvalidPayload,
	}
	xids := map[uint64]bool{}
	for i, r := range rows {
		kind := workload.PoisonKinds[i%len(workload.PoisonKinds)]
		if r.id != ids[i] {
			t.Errorf("row %d: outbox id %d, PlantPoison said %d", i, r.id, ids[i])
		}
		if r.traceID == nil || *r.traceID != "poison-"+kind {
			t.Errorf("outbox id %d: trace_id %v, want poison-%s", r.id, r.traceID, kind)
		}
		xids[r.createdXID] = true
		_, err := events.Decode(events.Record{OutboxID: r.id, AggregateType: r.aggregateType, AggregateID: r.aggregateID,
			EventType: r.eventType, EventVersion: r.eventVersion, Payload: r.payload})
		if !errors.Is(err, wantKind[kind]) {
			t.Errorf("%s (outbox id %d): Decode error %v, want %v", kind, r.id, err, wantKind[kind])
			continue
		}
		t.Logf("%s: %v", kind, err)
		if kind == workload.PoisonNegativeQuantity && !strings.Contains(err.Error(), "quantity") {
			t.Errorf("%s rejected for another reason: %v", kind, err)
		}
	}
	if len(xids) != n {
		t.Errorf("%d poison rows in %d transactions, want one each", n, len(xids))
	}
}

func TestRunRejectsInvalidConfig(t *testing.T) {
	for _, cfg := range []workload.Config{
		{Tenants: -1},
		{OrdersPerTx: -5},
		{CancelPercent: 101},
	} {
		if _, err := workload.Run(context.Background(), nil, cfg, nil); !errors.Is(err, workload.ErrInvalidConfig) {
			t.Errorf("Run(%+v) error %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

// BenchmarkRun writes about 100k events per iteration into a fresh database,
// one change per transaction and 500 per transaction:
//
//	go test -run '^$' -bench BenchmarkRun -benchtime 1x ./workload/
func BenchmarkRun(b *testing.B) {
	for _, perTx := range []int{1, 500} {
		b.Run(fmt.Sprintf("OrdersPerTx=%d", perTx), func(b *testing.B) {
			var events int64
			var elapsed time.Duration
			for b.Loop() {
				b.StopTimer()
				_, pool := stacktest.FreshDatabase(b)
				b.StartTimer()
				started := time.Now()
				report, err := workload.Run(context.Background(), pool,
					workload.Config{Orders: 35_500, ProductsPerTenant: 100, CustomersPerTenant: 200, OrdersPerTx: perTx}, nil)
				elapsed += time.Since(started)
				if err != nil {
					b.Fatalf("Run: %v", err)
				}
				events += report.Events
			}
			b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
			b.ReportMetric(float64(events)/float64(b.N), "events/op")
		})
	}
}
