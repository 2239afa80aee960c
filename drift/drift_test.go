package drift

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap/zaptest"

	"graphsync/cypher"
	"graphsync/events"
	"graphsync/graphmodel"
	"graphsync/internal/stacktest"
	"graphsync/pipelinetest"
	"graphsync/workload"
)

func stack(t *testing.T) (*pgxpool.Pool, neo4j.DriverWithContext) { return pipelinetest.Stack(t) }

func startSync(t *testing.T, pool *pgxpool.Pool, driver neo4j.DriverWithContext, id string) {
	pipelinetest.StartSync(t, pool, driver, id)
}

func waitCaughtUp(t *testing.T, pool *pgxpool.Pool) {
	pipelinetest.WaitCaughtUp(t, pool, 60*time.Second)
}

// syncedWorkload writes cfg's workload into an emptied graph and syncs it
// with one sync process (syncID) until caught up; sync keeps running.
func syncedWorkload(t *testing.T, cfg workload.Config, syncID string) (*pgxpool.Pool, neo4j.DriverWithContext, []int64) {
	t.Helper()
	pool, driver := stack(t)
	tenants := writeWorkload(t, pool, cfg)
	cleanGraph(t, driver, tenants)
	startSync(t, pool, driver, syncID)
	waitCaughtUp(t, pool)
	return pool, driver, tenants
}

func writeWorkload(t *testing.T, pool *pgxpool.Pool, cfg workload.Config) []int64 {
	t.Helper()
	report, err := workload.Run(context.Background(), pool, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return report.TenantIDs
}

func check(t *testing.T, pool *pgxpool.Pool, driver neo4j.DriverWithContext, tenant int64, repair bool) *Report {
	t.Helper()
	c, err := New(pool, driver, Config{TenantID: tenant, RecheckAfter: 100 * time.Millisecond}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	report, err := c.Run(context.Background(), repair)
	if err != nil {
		t.Fatal(err)
	}
	return report
}

func cleanGraph(t *testing.T, driver neo4j.DriverWithContext, tenants []int64) {
	t.Cleanup(func() { stacktest.CleanGraph(t, driver, tenants...) })
}

// The event path (sync) and the row path (the row projection) give the
// same canonical graph: every node, property, version and relationship the
// rows imply is what sync wrote, on the demo workload and on a larger
// randomised one with re-prices, cancellations, deletions and concurrent
// writers (events committed out of id order).
func TestEventPathEqualsRowPath(t *testing.T) {
	for name, cfg := range map[string]workload.Config{
		"demo":       {},
		"randomised": {Seed: 42, Tenants: 4, ProductsPerTenant: 30, CustomersPerTenant: 12, Orders: 400, Writers: 6, OrdersPerTx: 3, DeleteEvery: 7, PriceChangeEvery: 3, DiscontinueEvery: 11},
	} {
		t.Run(name, func(t *testing.T) {
			pool, driver, tenants := syncedWorkload(t, cfg, "sync-"+name)
			for _, tenant := range tenants {
				report := check(t, pool, driver, tenant, false)
				if report.DriftTotal != 0 || report.ExplainedTotal != 0 {
					var b strings.Builder
					_ = report.WriteMarkdown(&b, 0)
					t.Fatalf("tenant %d: drift %d, explained %d after sync caught up:\n%s", tenant, report.DriftTotal, report.ExplainedTotal, b.String())
				}
				nodes := 0
				for _, l := range report.Tenants[0].Labels {
					nodes += l.Nodes
				}
				if nodes == 0 {
					t.Fatalf("tenant %d: nothing compared", tenant)
				}
			}
		})
	}
}

func cypherExec(t *testing.T, driver neo4j.DriverWithContext, query string, params map[string]any) {
	t.Helper()
	if _, err := neo4j.ExecuteQuery(context.Background(), driver, query, params, neo4j.EagerResultTransformer); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func ids(t *testing.T, pool *pgxpool.Pool, query string, args ...any) []int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

// Each kind of drift, planted by hand, is named with its key; --repair fixes
// every repairable one (drift 0 afterwards) and leaves foreign labels alone.
func TestPlantedDriftIsFoundAndRepaired(t *testing.T) {
	pool, driver, tenants := syncedWorkload(t, workload.Config{Seed: 7, Tenants: 2, Orders: 40, DeleteEvery: -1}, "sync-planted")
	a, b := tenants[0], tenants[1]
	if report := check(t, pool, driver, a, false); report.DriftTotal != 0 {
		t.Fatalf("drift %d before planting", report.DriftTotal)
	}
	products := ids(t, pool, `SELECT id FROM products WHERE tenant_id = $1 ORDER BY id`, a)
	orders := ids(t, pool, `SELECT id FROM sales_orders WHERE tenant_id = $1 ORDER BY id`, a)
	bProducts := ids(t, pool, `SELECT id FROM products WHERE tenant_id = $1 ORDER BY id`, b)
	withCategory := ids(t, pool, `SELECT id FROM products WHERE tenant_id = $1 AND category_id IS NOT NULL ORDER BY id`, a)
	p := func(id int64) map[string]any { return map[string]any{"t": a, "id": id} }

	// A node deleted by hand.
	deletedOrder := orders[0]
	cypherExec(t, driver, `MATCH (n:Order {tenant_id: $t, id: $id}) DETACH DELETE n`, p(deletedOrder))
	// A property edited in the Neo4j browser.
	editedProduct := products[0]
	cypherExec(t, driver, `MATCH (n:Product {tenant_id: $t, id: $id}) SET n.name = 'Edited by hand'`, p(editedProduct))
	// A lowered version.
	loweredOrder := orders[1]
	cypherExec(t, driver, `MATCH (n:Order {tenant_id: $t, id: $id}) SET n.sync_version = n.sync_version - 1`, p(loweredOrder))
	// A raised version: the graph ahead of the rows, as after PostgreSQL
	// was restored from a backup. Repair rewrites it from the rows.
	raisedOrder := orders[6]
	cypherExec(t, driver, `MATCH (n:Order {tenant_id: $t, id: $id}) SET n.sync_version = n.sync_version + 5, n.status = 'raised by hand'`, p(raisedOrder))
	// A foreign label (GraphRAG chunks, say): reported, never repaired.
	cypherExec(t, driver, `CREATE (:Chunk {tenant_id: $t, id: 1, text: 'a document chunk'})`, map[string]any{"t": a})
	// A property outside the allowlist holding an e-mail address.
	piiProduct := products[1]
	cypherExec(t, driver, `MATCH (n:Product {tenant_id: $t, id: $id}) SET n.contact = 'buyer.planted@example.org'`, p(piiProduct))
	// An e-mail address in a list, and a field the model names personal
	// (whatever it holds: a name matches no pattern).
	listProduct := products[3]
	cypherExec(t, driver, `MATCH (n:Product {tenant_id: $t, id: $id}) SET n.contacts = ['list.planted@example.org']`, p(listProduct))
	customers := ids(t, pool, `SELECT id FROM customers WHERE tenant_id = $1 ORDER BY id LIMIT 1`, a)
	namedCustomer := customers[0]
	cypherExec(t, driver, `MATCH (n:Customer {tenant_id: $t, id: $id}) SET n.full_name = 'Jane Planted'`, p(namedCustomer))
	// Two tenants linked.
	linkedOrder := orders[2]
	cypherExec(t, driver, `MATCH (o:Order {tenant_id: $t, id: $id}), (x:Product {tenant_id: $tb, id: $pb})
		CREATE (o)-[:CONTAINS {tenant_id: $t, line_no: 99, quantity: 1, unit_price_cents: 1}]->(x)`,
		map[string]any{"t": a, "id": linkedOrder, "tb": b, "pb": bProducts[0]})
	// A relationship deleted.
	uncategorised := withCategory[len(withCategory)-1]
	cypherExec(t, driver, `MATCH (n:Product {tenant_id: $t, id: $id})-[r:IN_CATEGORY]->() DELETE r`, p(uncategorised))
	// An extra relationship.
	extraOrder := orders[3]
	other := ids(t, pool, `SELECT DISTINCT customer_id FROM sales_orders WHERE tenant_id = $1 AND customer_id <> (SELECT customer_id FROM sales_orders WHERE id = $2) ORDER BY 1 LIMIT 1`, a, extraOrder)
	cypherExec(t, driver, `MATCH (c:Customer {tenant_id: $t, id: $c}), (o:Order {tenant_id: $t, id: $id})
		CREATE (c)-[:PLACED {tenant_id: $t}]->(o)`,
		map[string]any{"t": a, "id": extraOrder, "c": other[0]})
	// A relationship whose other end is a node of the wrong label that has
	// the expected id: a Product's IN_CATEGORY moved from its Category to
	// another node of the tenant with the category's id (business ids start
	// at one base in every table, so such a node exists).
	res, err := neo4j.ExecuteQuery(context.Background(), driver, `MATCH (p:Product {tenant_id: $t})-[:IN_CATEGORY]->(c:Category)
		WHERE NOT p.id IN $planted
		MATCH (x {tenant_id: $t, id: c.id}) WHERE NOT x:Category
		RETURN p.id AS product, labels(x)[0] AS label ORDER BY p.id LIMIT 1`,
		map[string]any{"t": a, "planted": []int64{editedProduct, piiProduct, listProduct, uncategorised}}, neo4j.EagerResultTransformer)
	if err != nil || len(res.Records) != 1 {
		t.Fatalf("no product whose category id is also the id of another node of tenant %d (%v)", a, err)
	}
	misdirected, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "product")
	wrongLabel, _, _ := neo4j.GetRecordValue[string](res.Records[0], "label")
	cypherExec(t, driver, `MATCH (p:Product {tenant_id: $t, id: $id})-[r:IN_CATEGORY]->(c:Category)
		MATCH (x:`+wrongLabel+` {tenant_id: $t, id: c.id})
		DELETE r CREATE (p)-[:IN_CATEGORY {tenant_id: $t}]->(x)`, p(misdirected))
	// Relationship properties outside the allowlist: one holding an e-mail
	// address, one not.
	relPII, relExtra := orders[4], orders[5]
	cypherExec(t, driver, `MATCH (:Customer)-[r:PLACED]->(:Order {tenant_id: $t, id: $id}) SET r.buyer_email = 'rel.planted@example.org'`, p(relPII))
	cypherExec(t, driver, `MATCH (:Order {tenant_id: $t, id: $id})-[r:CONTAINS]->() SET r.note = 'typed in the browser'`, p(relExtra))
	// Personal fields of one label on another node, and on a relationship:
	// matching no pattern, their values must not be shown either.
	copiedName, relAddress := orders[7], orders[8]
	cypherExec(t, driver, `MATCH (n:Order {tenant_id: $t, id: $id}) SET n.full_name = 'Jane Copied'`, p(copiedName))
	cypherExec(t, driver, `MATCH (:Customer)-[r:PLACED]->(:Order {tenant_id: $t, id: $id}) SET r.shipping_address = '12 Planted Street'`, p(relAddress))
	// A node without a tenant: every one-tenant check of the shared graph
	// sees it, so it goes however the test ends.
	cypherExec(t, driver, `CREATE (:Customer {id: -424242, segment: 'retail'})`, nil)
	t.Cleanup(func() {
		cypherExec(t, driver, `MATCH (n:Customer {id: -424242}) WHERE n.tenant_id IS NULL DETACH DELETE n`, nil)
	})
	// An event marked processed that was never applied: the row changed in
	// PostgreSQL, its outbox row says done, the graph never saw it.
	neverApplied := products[2]
	if _, err := pool.Exec(context.Background(), `WITH u AS (UPDATE products SET price_cents = price_cents + 1, version = version + 1
		WHERE id = $1 RETURNING tenant_id, id)
		INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT tenant_id, 'Product', id, 'ProductPriceChanged', '{}' FROM u`, neverApplied); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `UPDATE outbox_messages SET processed_at = now() WHERE processed_at IS NULL`); err != nil {
		t.Fatal(err)
	}

	report := check(t, pool, driver, a, false)
	// Ids of different labels may be equal (one base for every table), so
	// each finding is named by kind, label and id.
	want := []struct {
		kind   Kind
		label  string
		id     int64
		detail string
	}{
		{MissingNode, "Order", deletedOrder, "no node; the rows imply one"},
		{StaleNode, "Product", editedProduct, "name: graph \"Edited by hand\""},
		{StaleNode, "Order", loweredOrder, "version: graph"},
		{StaleNode, "Order", raisedOrder, "the graph is ahead of the rows"},
		{StaleNode, "Product", neverApplied, "price_cents"},
		{PersonalData, "Product", piiProduct, "contact holds an e-mail address"},
		{PersonalData, "Product", listProduct, "contacts holds an e-mail address"},
		{PersonalData, "Customer", namedCustomer, "full_name is a personal field of Customer"},
		{CrossTenant, "Order", linkedOrder, fmt.Sprintf("to tenant %d", b)},
		{MissingRelationship, "Product", uncategorised, "IN_CATEGORY"},
		{ExtraRelationship, "Order", extraOrder, "PLACED"},
		{ExtraRelationship, "Product", misdirected, "ends at a node labelled " + wrongLabel + ", not Category"},
		{MissingRelationship, "Product", misdirected, "IN_CATEGORY"},
		{PersonalData, "Order", relPII, "PLACED]->(" + fmt.Sprint(relPII) + "): property buyer_email holds an e-mail address"},
		{PropertyNotAllowed, "Order", relExtra, "property note (text of 20 characters) is outside the allowlist"},
		{PersonalData, "Order", copiedName, "property full_name is a personal field of Customer"},
		{PersonalData, "Order", relAddress, "property shipping_address is a personal field of Order"},
		{NodeWithoutTenant, "Customer", -424242, "no tenant_id"},
	}
	var md strings.Builder
	if err := report.WriteMarkdown(&md, 0); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		found := false
		for _, f := range report.Examples[w.kind] {
			if f.Label == w.label && f.ID == w.id && strings.Contains(f.Detail, w.detail) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s of %s %d (%q) not reported:\n%s", w.kind, w.label, w.id, w.detail, md.String())
		}
	}
	for _, personal := range []string{"buyer.planted@example.org", "rel.planted@example.org", "list.planted@example.org", "Jane Planted",
		"Jane Copied", "12 Planted Street"} {
		if strings.Contains(md.String(), personal) {
			t.Errorf("the report echoes the personal data it found (%s)", personal)
		}
	}
	if !strings.Contains(md.String(), "Checked 1 tenant, every key,") {
		t.Errorf("the report's scope line is not \"Checked 1 tenant, every key, ...\":\n%s", md.String())
	}
	if !strings.Contains(md.String(), "| foreign_label | \"Chunk\"") {
		t.Errorf("the foreign label is not reported:\n%s", md.String())
	}

	repaired := check(t, pool, driver, a, true)
	if len(repaired.Repaired) == 0 {
		t.Fatal("repair changed nothing")
	}
	// A node without a tenant is no tenant's: only a whole-graph repair
	// removes it, never a one-tenant one.
	res, err = neo4j.ExecuteQuery(context.Background(), driver, `MATCH (n:Customer {id: -424242}) WHERE n.tenant_id IS NULL RETURN count(n) AS n`,
		nil, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	if n, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "n"); n != 1 {
		t.Errorf("a repair of tenant %d removed a node without a tenant", a)
	}
	cypherExec(t, driver, `MATCH (n:Customer {id: -424242}) WHERE n.tenant_id IS NULL DETACH DELETE n`, nil)
	after := check(t, pool, driver, a, false)
	if after.DriftTotal != 0 {
		md.Reset()
		_ = after.WriteMarkdown(&md, 0)
		t.Fatalf("drift %d after repair:\n%s", after.DriftTotal, md.String())
	}
	res, err = neo4j.ExecuteQuery(context.Background(), driver, `MATCH (n:Chunk {tenant_id: $t}) RETURN count(n) AS n`,
		map[string]any{"t": a}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	if n, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "n"); n != 1 {
		t.Errorf("repair touched the foreign label: %d Chunk nodes left", n)
	}
	cypherExec(t, driver, `MATCH (n:Chunk {tenant_id: $t}) DELETE n`, map[string]any{"t": a})
	full := check(t, pool, driver, b, false)
	if full.DriftTotal != 0 {
		t.Errorf("tenant %d: drift %d after repairing tenant %d", b, full.DriftTotal, a)
	}
	// A sampled check reads a share of the keys, the same on both sides.
	c, err := New(pool, driver, Config{TenantID: b, Sample: 0.3, RecheckAfter: time.Millisecond}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	sampled, err := c.Run(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	orderCounts := func(r *Report) (rows, nodes int) {
		for _, l := range r.Tenants[0].Labels {
			if l.Label == "Order" {
				return l.Rows, l.Nodes
			}
		}
		return 0, 0
	}
	fullRows, _ := orderCounts(full)
	rows, nodes := orderCounts(sampled)
	if sampled.DriftTotal != 0 || rows != nodes || rows == 0 || rows >= fullRows {
		t.Errorf("sample 0.3: drift %d, %d order rows and %d nodes of %d", sampled.DriftTotal, rows, nodes, fullRows)
	}
}

// A run during a live workload with two sync processes reports no
// unexplained drift.
func TestNoFalseDriftUnderLoad(t *testing.T) {
	pool, driver := stack(t)
	startSync(t, pool, driver, "sync-a")
	startSync(t, pool, driver, "sync-b")
	// The tenants exist once the workload's set-up committed them.
	tenants, done := pipelinetest.StartWorkload(t, pool, workload.Config{Seed: 3, Tenants: 2, Orders: 1500, Writers: 3})
	cleanGraph(t, driver, tenants)
	runs := 0
	for loaded := true; loaded; runs++ {
		select {
		case <-done:
			loaded = false
		default:
		}
		for _, tenant := range tenants {
			if report := check(t, pool, driver, tenant, false); report.DriftTotal != 0 {
				var md strings.Builder
				_ = report.WriteMarkdown(&md, 0)
				t.Fatalf("run %d under load, tenant %d: drift %d:\n%s", runs, tenant, report.DriftTotal, md.String())
			}
		}
	}
	t.Logf("%d drift runs under load, no false drift", runs)
}

// The repair of a node found ahead of its rows overwrites exactly the
// version drift saw: a node that moved on since (sync applied a newer
// event) is left alone, and a row without a seen version never lowers a
// node. One statement, several rows, in one run.
func TestRepairLowersOnlyTheVersionItSaw(t *testing.T) {
	_, driver := stack(t)
	tenant := 9_000_000_000 + time.Now().UnixNano()%1_000_000_000
	cleanGraph(t, driver, []int64{tenant})
	for id, version := range map[int64]int64{1: 7, 2: 8, 3: 7} {
		cypherExec(t, driver, `CREATE (:Order {tenant_id: $t, id: $id, sync_version: $v, sync_outbox_id: 0, status: 'graph'})`,
			map[string]any{"t": tenant, "id": id, "v": version})
	}
	text, err := cypher.RepairNodeText(graphmodel.Default, graphmodel.LabelOrder)
	if err != nil {
		t.Fatal(err)
	}
	row := func(id int64, seen any) map[string]any {
		r := map[string]any{"tenant_id": tenant, "id": id, "version": int64(5), "props": map[string]any{"status": "rows"}}
		if seen != nil {
			r["seen"] = seen
		}
		return r
	}
	// 1: still at the version seen; 2: moved on from 7 to 8; 3: no seen.
	cypherExec(t, driver, text, map[string]any{"rows": []any{row(1, int64(7)), row(2, int64(7)), row(3, nil)}})
	res, err := neo4j.ExecuteQuery(context.Background(), driver, `MATCH (n:Order {tenant_id: $t}) RETURN n.id AS id, n.sync_version AS v, n.status AS s ORDER BY n.id`,
		map[string]any{"t": tenant}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{1: "5 rows", 2: "8 graph", 3: "7 graph"}
	for _, rec := range res.Records {
		id, _, _ := neo4j.GetRecordValue[int64](rec, "id")
		v, _, _ := neo4j.GetRecordValue[int64](rec, "v")
		s, _, _ := neo4j.GetRecordValue[string](rec, "s")
		if got := fmt.Sprintf("%d %s", v, s); got != want[id] {
			t.Errorf("order %d: version and status %q, want %q", id, got, want[id])
		}
	}
	if len(res.Records) != 3 {
		t.Fatalf("%d orders, want 3", len(res.Records))
	}
}

// A reference node has no version to guard its repair by: a stale one is
// rewritten from its rows only while it still holds the outbox id drift
// read on it, so a rename sync applied between the verdict and the repair
// is not undone. The verdict carries that id; rows without it (a
// reference node an aggregate's repair names) are written as before.
func TestRepairOfAReferenceNodeLeavesALaterEvent(t *testing.T) {
	_, driver := stack(t)
	tenant := 9_000_000_000 + time.Now().UnixNano()%1_000_000_000
	cleanGraph(t, driver, []int64{tenant})
	for id := int64(1); id <= 3; id++ {
		cypherExec(t, driver, `CREATE (:Category {tenant_id: $t, id: $id, sync_version: 0, sync_outbox_id: 40, name: 'graph'})`,
			map[string]any{"t": tenant, "id": id})
	}
	model := graphmodel.Default
	label, _ := model.Label(graphmodel.LabelCategory)
	got := &node{label: label.Name, id: 1, props: map[string]any{"name": "graph", graphmodel.PropOutboxID: int64(40)}}
	want := &node{label: label.Name, id: 1, props: map[string]any{"name": "rows"}, required: true}
	findings := compareNode(model, nil, tenant, label, want, got)
	if len(findings) != 1 || findings[0].repair.upsert == nil || findings[0].repair.upsert.outboxSeen == nil ||
		*findings[0].repair.upsert.outboxSeen != 40 {
		t.Fatalf("findings %+v: want one stale node whose repair carries the outbox id read (40)", findings)
	}
	// Sync applies a rename of category 2 after the verdict.
	cypherExec(t, driver, `MATCH (c:Category {tenant_id: $t, id: 2}) SET c.sync_outbox_id = 41, c.name = 'event'`, map[string]any{"t": tenant})
	text, err := cypher.RepairNodeText(model, label.Name)
	if err != nil {
		t.Fatal(err)
	}
	row := func(id int64, seen any) map[string]any {
		r := map[string]any{"tenant_id": tenant, "id": id, "version": int64(0), "props": map[string]any{"name": "rows"}}
		if seen != nil {
			r["outbox_seen"] = seen
		}
		return r
	}
	// 1: still as read; 2: moved on from 40 to 41; 3: no outbox id read.
	cypherExec(t, driver, text, map[string]any{"rows": []any{row(1, int64(40)), row(2, int64(40)), row(3, nil)}})
	res, err := neo4j.ExecuteQuery(context.Background(), driver, `MATCH (c:Category {tenant_id: $t}) RETURN c.id AS id, c.name AS name ORDER BY c.id`,
		map[string]any{"t": tenant}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	wantNames := map[int64]string{1: "rows", 2: "event", 3: "rows"}
	for _, rec := range res.Records {
		id, _, _ := neo4j.GetRecordValue[int64](rec, "id")
		name, _, _ := neo4j.GetRecordValue[string](rec, "name")
		if name != wantNames[id] {
			t.Errorf("category %d after the repair: %q, want %q", id, name, wantNames[id])
		}
	}
	if len(res.Records) != 3 {
		t.Fatalf("%d categories, want 3", len(res.Records))
	}
}

// Past MaxSuspects, differences are counted from the first pass only and
// left unrepaired: a first-pass verdict may be false under live sync, and a
// repair acts on it for good. Each run repairs what its second look
// confirmed; later runs go on until nothing is left.
func TestRepairActsOnlyOnWhatTheSecondLookConfirmed(t *testing.T) {
	pool, driver := stack(t)
	tenant := 9_000_000_000 + time.Now().UnixNano()%1_000_000_000
	cleanGraph(t, driver, []int64{tenant})
	if _, err := pool.Exec(context.Background(), `INSERT INTO tenants (id, name) VALUES ($1, 'capped')`, tenant); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DELETE FROM tenants WHERE id = $1`, tenant) })
	cypherExec(t, driver, `MERGE (:Tenant {tenant_id: $t, id: $t})`, map[string]any{"t": tenant})
	for id := int64(1); id <= 3; id++ {
		cypherExec(t, driver, `CREATE (:Product {tenant_id: $t, id: $id, sync_version: 1, sync_outbox_id: 1, name: 'no row'})`,
			map[string]any{"t": tenant, "id": id})
	}
	products := func() int64 {
		res, err := neo4j.ExecuteQuery(context.Background(), driver, `MATCH (p:Product {tenant_id: $t}) RETURN count(p) AS n`,
			map[string]any{"t": tenant}, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		n, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "n")
		return n
	}
	// With one example kept per kind, the capped findings past it are
	// counted, not kept (memory does not grow with the drift found), and
	// the counts stay whole.
	one, err := New(pool, driver, Config{TenantID: tenant, RecheckAfter: 10 * time.Millisecond, MaxSuspects: 1, MaxExamples: 1}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	counted, err := one.Run(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if counted.DriftTotal != 3 || len(counted.Examples[OrphanNode]) != 1 || counted.Examples[OrphanNode][0].ID == 0 ||
		len(counted.Counts) != 1 || counted.Counts[0].Count != 3 {
		t.Fatalf("three orphans, one example kept: drift %d, examples %+v, counts %+v", counted.DriftTotal, counted.Examples[OrphanNode], counted.Counts)
	}
	c, err := New(pool, driver, Config{TenantID: tenant, RecheckAfter: 10 * time.Millisecond, MaxSuspects: 1}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.Run(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if first.SuspectsCapped != 2 || first.DriftTotal != 3 {
		t.Fatalf("first run: %d capped, drift %d; want 2 capped of 3 orphans", first.SuspectsCapped, first.DriftTotal)
	}

	if n := products(); n != 2 {
		t.Fatalf("%d orphan products left after the first repair, want 2 (only the one the second look confirmed removed)", n)
	}
	for run := 2; products() > 0; run++ {
		if run > 4 {
			t.Fatalf("%d orphan products left after %d runs", products(), run-1)
		}
		if _, err := c.Run(context.Background(), true); err != nil {
			t.Fatal(err)
		}
	}
	if last := check(t, pool, driver, tenant, false); last.DriftTotal != 0 {
		t.Errorf("drift %d after the runs, want 0: %+v", last.DriftTotal, last.Examples)
	}
}

// The repair of a tenant PostgreSQL does not have removes the projection's
// nodes of it and leaves other data of that tenant (a label no projection
// owns) alone. The repair action is run directly: a whole-graph check here
// would also find the tenants of other packages' tests.
func TestRepairOfAnUnknownTenantKeepsForeignLabels(t *testing.T) {
	pool, driver := stack(t)
	tenant := 9_000_000_000 + time.Now().UnixNano()%1_000_000_000
	cleanGraph(t, driver, []int64{tenant})
	cypherExec(t, driver, `CREATE (:Tenant {tenant_id: $t, id: $t}), (:Product {tenant_id: $t, id: 1}), (:Chunk {tenant_id: $t, id: 1, text: 'a chunk'})`,
		map[string]any{"t": tenant})
	c, err := New(pool, driver, Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	r := &run{c: c, model: *c.cfg.Model, findings: []Finding{{Kind: OrphanNode, TenantID: tenant, Label: tenantLabel(*c.cfg.Model),
		ID: tenant, Count: 2, repair: &repairAction{deleteTenant: true}}}}
	if _, err := r.repair(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := neo4j.ExecuteQuery(context.Background(), driver, `MATCH (n {tenant_id: $t}) RETURN labels(n)[0] AS label ORDER BY label`,
		map[string]any{"t": tenant}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, rec := range res.Records {
		l, _, _ := neo4j.GetRecordValue[string](rec, "label")
		left = append(left, l)
	}
	if fmt.Sprint(left) != "[Chunk]" {
		t.Errorf("nodes of the unknown tenant after the repair: %v, want only the Chunk", left)
	}
}

// An e-mail address and a phone number a producer typed into a product's
// description and its category's name: sync writes them masked, the row
// projection masks them alike (no drift), and a description another writer
// left unmasked (a hand edit, or a graphsync from before masking) is found
// as personal data and re-projected masked by --repair. A SKU shaped like a
// phone number is a code: written whole, and no drift.
func TestPersonalDataInRowsIsMaskedOnBothSides(t *testing.T) {
	pool, driver, tenants := syncedWorkload(t, workload.Config{Seed: 13, Tenants: 1, Orders: 4, DeleteEvery: -1}, "sync-masked")
	a := tenants[0]
	ctx := context.Background()
	const email, phone = "desk.planted@example.org", "+44 20 7946 0958"
	var product int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var s events.ProductState
		var categoryID int64
		var categoryName string
		err := tx.QueryRow(ctx, `WITH c AS (
				UPDATE categories SET name = name || ' (' || $3 || ')'
				WHERE id = (SELECT category_id FROM products WHERE tenant_id = $1 AND category_id IS NOT NULL ORDER BY id LIMIT 1)
				RETURNING id, name),
			p AS (
				UPDATE products SET description = description || ' Ask ' || $2 || '.', sku = 'KIT-100-250-1000', version = version + 1
				WHERE id = (SELECT min(id) FROM products WHERE tenant_id = $1 AND category_id = (SELECT id FROM c))
				RETURNING id, version, sku, name, description, price_cents, currency, status)
			SELECT p.id, p.version, p.sku, p.name, p.description, p.price_cents, p.currency, p.status, c.id, c.name FROM p, c`,
			a, email, phone).Scan(&s.ID, &s.Version, &s.SKU, &s.Name, &s.Description, &s.PriceCents, &s.Currency, &s.Status, &categoryID, &categoryName)
		if err != nil {
			return err
		}
		product, s.Category = s.ID, &events.CategoryRef{ID: categoryID, Name: categoryName}
		return events.Enqueue(ctx, tx, a, events.ProductUpdated{ProductState: s})
	})
	if err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, pool)
	graphText := func() string {
		t.Helper()
		res, err := neo4j.ExecuteQuery(ctx, driver, `MATCH (p:Product {tenant_id: $t, id: $id})-[:IN_CATEGORY]->(c:Category)
			RETURN p.description + ' | ' + c.name + ' | ' + p.sku AS text`, map[string]any{"t": a, "id": product}, neo4j.EagerResultTransformer)
		if err != nil || len(res.Records) != 1 {
			t.Fatalf("product %d and its category: %v", product, err)
		}
		text, _, _ := neo4j.GetRecordValue[string](res.Records[0], "text")
		return text
	}
	synced := graphText()
	if strings.Contains(synced, "@") || strings.Contains(synced, "7946") || !strings.Contains(synced, "Ask [e-mail removed].") ||
		!strings.Contains(synced, "([phone number removed])") || !strings.HasSuffix(synced, " | KIT-100-250-1000") {
		t.Fatalf("sync wrote %q", synced)
	}
	if report := check(t, pool, driver, a, false); report.DriftTotal != 0 {
		var md strings.Builder
		_ = report.WriteMarkdown(&md, 0)
		t.Fatalf("drift %d with the masked text on both sides:\n%s", report.DriftTotal, md.String())
	}
	cypherExec(t, driver, `MATCH (p:Product {tenant_id: $t, id: $id}) SET p.description = p.description + ' Or ' + $email`,
		map[string]any{"t": a, "id": product, "email": email})
	report := check(t, pool, driver, a, false)
	found := false
	for _, f := range report.Examples[PersonalData] {
		found = found || (f.Label == "Product" && f.ID == product && strings.Contains(f.Detail, "description holds an e-mail address"))
	}
	if !found {
		t.Fatalf("the unmasked description of product %d is not reported as personal data: %v", product, report.Examples[PersonalData])
	}
	check(t, pool, driver, a, true)
	if repaired := graphText(); repaired != synced {
		t.Errorf("after --repair the graph holds %q, want %q", repaired, synced)
	}
}

// Pending events explain differences an event would change, never personal
// data: no event writes an e-mail address into a customer. One pending Order
// event of the tenant (which writes Customer nodes), due only in an hour so
// that sync leaves it pending, leaves a planted e-mail a finding, and
// --repair removes it.
func TestOutboxRowsDoNotExplainPersonalData(t *testing.T) {
	pool, driver, tenants := syncedWorkload(t, workload.Config{Seed: 11, Tenants: 1, Orders: 6, DeleteEvery: -1}, "sync-explained")
	a := tenants[0]
	orders := ids(t, pool, `SELECT id FROM sales_orders WHERE tenant_id = $1 ORDER BY id`, a)
	customer := ids(t, pool, `SELECT customer_id FROM sales_orders WHERE id = $1`, orders[0])[0]
	if _, err := pool.Exec(context.Background(), `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload, available_at)
		VALUES ($1, 'Order', $2, 'OrderConfirmed', '{}', now() + interval '1 hour')`, a, orders[len(orders)-1]); err != nil {
		t.Fatal(err)
	}
	cypherExec(t, driver, `MATCH (c:Customer {tenant_id: $t, id: $id}) SET c.email = 'explained.planted@example.org'`,
		map[string]any{"t": a, "id": customer})
	report := check(t, pool, driver, a, false)
	found := false
	for _, f := range report.Examples[PersonalData] {
		found = found || (f.Label == "Customer" && f.ID == customer)
	}
	if !found || report.DriftTotal == 0 {
		t.Fatalf("the e-mail on customer %d beside a pending order event: drift %d, personal data %v; want it found",
			customer, report.DriftTotal, report.Examples[PersonalData])
	}
	check(t, pool, driver, a, true)
	res, err := neo4j.ExecuteQuery(context.Background(), driver, `MATCH (c:Customer {tenant_id: $t, id: $id}) RETURN c.email AS email`,
		map[string]any{"t": a, "id": customer}, neo4j.EagerResultTransformer)
	if err != nil || len(res.Records) != 1 {
		t.Fatalf("customer %d after the repair: %v", customer, err)
	}
	if email, _ := res.Records[0].Get("email"); email != nil {
		t.Errorf("customer %d still holds %v after --repair", customer, email)
	}
}

// A relationship the rows do not imply is deleted only while its owner is
// the node drift read: when sync applied the owner's next event in between
// (which may imply it, and then keeps the one it finds), the repair leaves
// it for the next run. Both of the owner's stamps are checked, its version
// and its outbox id: either one moving means sync wrote the owner.
func TestExtraRelationshipRepairLeavesAnOwnerSyncMovedOn(t *testing.T) {
	pool, driver := stack(t)
	ctx := context.Background()
	tenant := 9_000_000_000 + time.Now().UnixNano()%1_000_000_000
	cleanGraph(t, driver, []int64{tenant})
	if _, err := neo4j.ExecuteQuery(ctx, driver, `CREATE (o:Order {tenant_id: $t, id: 1, sync_version: 3, sync_outbox_id: 70})
		-[:CONTAINS {tenant_id: $t, line_no: 1}]->(:Product {tenant_id: $t, id: 2})`,
		map[string]any{"t": tenant}, neo4j.EagerResultTransformer); err != nil {
		t.Fatal(err)
	}
	c, err := New(pool, driver, Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	model := *c.cfg.Model
	label, _ := model.Label("Order")
	edges := func() int64 {
		t.Helper()
		res, err := neo4j.ExecuteQuery(ctx, driver, `MATCH (:Order {tenant_id: $t, id: 1})-[r:CONTAINS]->() RETURN count(r) AS n`,
			map[string]any{"t": tenant}, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		n, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "n")
		return n
	}
	// The verdict: the rows imply an order without lines.
	verdict := func() []Finding {
		t.Helper()
		got, err := graphChunk(ctx, driver, c.cfg.Database, model, "Order", tenant, 0, 10, sample{offset: 0, share: 1000})
		if err != nil || len(got) != 1 {
			t.Fatalf("graph read: %v, %d nodes", err, len(got))
		}
		want := &node{label: "Order", id: 1, version: got[0].version}
		findings := compareRels(model, tenant, label, want, &got[0], want)
		if len(findings) != 1 || findings[0].Kind != ExtraRelationship || findings[0].repair.deleteRel == nil {
			t.Fatalf("findings %+v, want one extra relationship to delete", findings)
		}
		return findings
	}
	repair := func(findings []Finding) {
		t.Helper()
		if _, err := (&run{c: c, model: model, findings: findings}).repair(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, moved := range []string{"SET o.sync_version = 4", "SET o.sync_outbox_id = 71"} {
		findings := verdict()
		// Sync applies the owner's next event after the verdict.
		if _, err := neo4j.ExecuteQuery(ctx, driver, "MATCH (o:Order {tenant_id: $t, id: 1}) "+moved,
			map[string]any{"t": tenant}, neo4j.EagerResultTransformer); err != nil {
			t.Fatal(err)
		}
		repair(findings)
		if n := edges(); n != 1 {
			t.Fatalf("after %s, the repair of the verdict before it left %d relationships, want the one sync may have made right", moved, n)
		}
	}
	repair(verdict())
	if n := edges(); n != 0 {
		t.Fatalf("the repair of a verdict on the owner as it is left %d relationships, want 0", n)
	}
}

// A relationship's repair acts on the relationship drift read, not on
// whatever now has its element id (Neo4j gives the id of a deleted
// relationship to a new one, of any tenant): it checks the type and both
// ends' keys too.
func TestRelationshipRepairChecksMoreThanTheElementID(t *testing.T) {
	pool, driver := stack(t)
	tenant := 9_000_000_000 + time.Now().UnixNano()%1_000_000_000
	cleanGraph(t, driver, []int64{tenant})
	res, err := neo4j.ExecuteQuery(context.Background(), driver, `CREATE (o:Order {tenant_id: $t, id: 1})-[r:CONTAINS {tenant_id: $t, line_no: 1, note: 'x'}]->(p:Product {tenant_id: $t, id: 2})
		RETURN elementId(r) AS eid`, map[string]any{"t": tenant}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	eid, _, _ := neo4j.GetRecordValue[string](res.Records[0], "eid")
	c, err := New(pool, driver, Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	repair := func(ref *relRef, prop bool) {
		t.Helper()
		a := &repairAction{deleteRel: ref}
		if prop {
			a = &repairAction{removeRelProp: &relProp{rel: ref, key: "note"}}
		}
		r := &run{c: c, model: *c.cfg.Model, findings: []Finding{{Kind: ExtraRelationship, TenantID: tenant, Label: "Order", ID: 1, repair: a}}}
		if _, err := r.repair(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	state := func() string {
		res, err := neo4j.ExecuteQuery(context.Background(), driver, `MATCH (:Order {tenant_id: $t})-[r:CONTAINS]->() RETURN count(r) AS n, collect(r.note) AS notes`,
			map[string]any{"t": tenant}, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		n, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "n")
		notes, _, _ := neo4j.GetRecordValue[[]any](res.Records[0], "notes")
		return fmt.Sprint(n, notes)
	}
	// The element id as read, but another relationship now: another end.
	stranger := &relRef{elementID: eid, typ: "CONTAINS", fromTenant: tenant, fromID: 1, toTenant: tenant, toID: 3}
	repair(stranger, true)
	repair(stranger, false)
	if got := state(); got != "1 [x]" {
		t.Fatalf("after repairs of a relationship that has its element id but not its ends: %s, want it untouched (1 [x])", got)
	}
	same := &relRef{elementID: eid, typ: "CONTAINS", fromTenant: tenant, fromID: 1, toTenant: tenant, toID: 2}
	repair(same, true)
	if got := state(); got != "1 []" {
		t.Errorf("after removing its property: %s, want 1 []", got)
	}
	repair(same, false)
	if got := state(); got != "0 []" {
		t.Errorf("after deleting it: %s, want 0 []", got)
	}
}

// Dead-lettered events explain no difference: no one is applying them, so
// the graph stays different until an operator retries them or a repair
// writes the rows. A dead-lettered Order event of the tenant once hid every
// Customer difference (a reference node's differences are explained by any
// pending event of the aggregate type that writes it), and a product's own
// dead-lettered event hid its difference, for as long as they stayed there.
func TestDeadLetteredEventsDoNotExplainDrift(t *testing.T) {
	pool, driver, tenants := syncedWorkload(t, workload.Config{Seed: 23, Tenants: 1, Orders: 6, DeleteEvery: -1}, "sync-dead-lettered")
	a := tenants[0]
	orders := ids(t, pool, `SELECT id FROM sales_orders WHERE tenant_id = $1 ORDER BY id`, a)
	customer := ids(t, pool, `SELECT customer_id FROM sales_orders WHERE id = $1`, orders[0])[0]
	product := ids(t, pool, `SELECT id FROM products WHERE tenant_id = $1 ORDER BY id LIMIT 1`, a)[0]
	for _, planted := range []struct {
		aggregateType, eventType string
		id                       int64
	}{{"Order", "OrderConfirmed", orders[len(orders)-1]}, {"Product", "ProductPriceChanged", product}} {
		if _, err := pool.Exec(context.Background(), `INSERT INTO outbox_messages_dlq (id, tenant_id, aggregate_type, aggregate_id, event_type, payload, last_error)
			VALUES (9000000000000 + $2, $1, $3, $2, $4, '{}', 'planted')`, a, planted.id, planted.aggregateType, planted.eventType); err != nil {
			t.Fatal(err)
		}
	}
	// A customer's segment changed with no event to carry it, and a
	// product's name changed in the graph by hand.
	if _, err := pool.Exec(context.Background(), `UPDATE customers SET segment = 'planted-segment' WHERE id = $1`, customer); err != nil {
		t.Fatal(err)
	}
	cypherExec(t, driver, `MATCH (p:Product {tenant_id: $t, id: $id}) SET p.name = 'planted name'`, map[string]any{"t": a, "id": product})

	report := check(t, pool, driver, a, false)
	stale := map[string]bool{}
	for _, f := range report.Examples[StaleNode] {
		stale[fmt.Sprintf("%s %d", f.Label, f.ID)] = true
	}
	for _, want := range []string{fmt.Sprintf("Customer %d", customer), fmt.Sprintf("Product %d", product)} {
		if !stale[want] {
			t.Errorf("%s differs from its rows beside dead-lettered events of the tenant, but is not reported stale (stale: %v, explained: %v)",
				want, report.Examples[StaleNode], report.Explained)
		}
	}
	if report.ExplainedTotal != 0 {
		t.Errorf("with nothing pending, %d differences were explained: %v", report.ExplainedTotal, report.Explained)
	}
	check(t, pool, driver, a, true)
	if after := check(t, pool, driver, a, false); after.DriftTotal != 0 {
		t.Errorf("after --repair: drift %d, %v", after.DriftTotal, after.Examples)
	}
}

// A product found ahead of its rows (PostgreSQL restored from a backup) in
// another category: the repair lowers the node to the rows' version and
// moves its category edge back, in one run. Before, only the node's stale
// finding carried the version seen; the missing edge's repair, the last
// one kept, did not, so the node and the edge were refused while the extra
// edge was deleted: the product was left with no category, run after run.
func TestRepairOfANodeAheadOfItsRowsMovesItsEdges(t *testing.T) {
	pool, driver, tenants := syncedWorkload(t, workload.Config{Seed: 29, Tenants: 1, Orders: 6, DeleteEvery: -1}, "sync-ahead")
	a := tenants[0]
	product := ids(t, pool, `SELECT id FROM products WHERE tenant_id = $1 AND category_id IS NOT NULL ORDER BY id LIMIT 1`, a)[0]
	category := ids(t, pool, `SELECT category_id FROM products WHERE id = $1`, product)[0]
	res, err := neo4j.ExecuteQuery(context.Background(), driver, `
		MATCH (p:Product {tenant_id: $t, id: $id})-[r:IN_CATEGORY]->(c:Category)
		MATCH (other:Category {tenant_id: $t}) WHERE other.id <> c.id
		WITH p, r, other LIMIT 1
		CREATE (p)-[moved:IN_CATEGORY]->(other)
		SET moved = properties(r), p.sync_version = p.sync_version + 5
		DELETE r
		RETURN other.id AS other`, map[string]any{"t": a, "id": product}, neo4j.EagerResultTransformer)
	if err != nil || len(res.Records) != 1 {
		t.Fatalf("moving product %d to another category in the graph: %v (%d records)", product, err, len(res.Records))
	}

	report := check(t, pool, driver, a, false)
	kinds := map[Kind]bool{}
	for kind, examples := range report.Examples {
		for _, f := range examples {
			if f.Label == "Product" && f.ID == product {
				kinds[kind] = true
			}
		}
	}
	for _, want := range []Kind{StaleNode, ExtraRelationship, MissingRelationship} {
		if !kinds[want] {
			t.Fatalf("product %d, ahead of its rows in another category: no %s finding (%v)", product, want, report.Examples)
		}
	}
	check(t, pool, driver, a, true)
	res, err = neo4j.ExecuteQuery(context.Background(), driver, `MATCH (p:Product {tenant_id: $t, id: $id})
		OPTIONAL MATCH (p)-[:IN_CATEGORY]->(c:Category)
		RETURN p.sync_version AS version, collect(c.id) AS categories`, map[string]any{"t": a, "id": product}, neo4j.EagerResultTransformer)
	if err != nil || len(res.Records) != 1 {
		t.Fatalf("product %d after the repair: %v", product, err)
	}
	categories, _ := res.Records[0].Get("categories")
	version, _ := res.Records[0].Get("version")
	rowVersion := ids(t, pool, `SELECT version::bigint FROM products WHERE id = $1`, product)[0]
	if fmt.Sprint(categories) != fmt.Sprint([]any{category}) || version != rowVersion {
		t.Errorf("product %d after --repair: version %v in categories %v; the rows say version %d in category %d",
			product, version, categories, rowVersion, category)
	}
	if after := check(t, pool, driver, a, false); after.DriftTotal != 0 {
		t.Errorf("after --repair: drift %d, %v", after.DriftTotal, after.Examples)
	}
}

// A role that row-level security keeps from reading every tenant (here one
// that may SELECT every table but is neither a member of graphsync_relay
// nor BYPASSRLS: it sees no tenant at all) is refused before anything is
// compared: otherwise every tenant of the graph would look orphaned, and a
// repair or a rebuild would remove them.
func TestRoleThatCannotSeeEveryTenantIsRefused(t *testing.T) {
	pool, driver := stack(t)
	ctx := context.Background()
	role := fmt.Sprintf("gs_test_rls_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, `CREATE ROLE `+role+` LOGIN`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The role is the cluster's, not the test database's.
		_, _ = pool.Exec(ctx, `DROP OWNED BY `+role)
		_, _ = pool.Exec(ctx, `DROP ROLE `+role)
	})
	if _, err := pool.Exec(ctx, `GRANT SELECT ON ALL TABLES IN SCHEMA public TO `+role); err != nil {
		t.Fatal(err)
	}
	tenant := writeWorkload(t, pool, workload.Config{Seed: 11, Tenants: 1, Orders: 2})[0]
	var visible int64
	cfg := pool.Config()
	cfg.ConnConfig.User = role
	limited, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer limited.Close()
	if err := limited.QueryRow(ctx, `SELECT count(*) FROM tenants`).Scan(&visible); err != nil {
		t.Fatal(err)
	}
	if visible != 0 {
		t.Fatalf("the limited role sees %d tenants; the test needs one that sees none", visible)
	}
	for _, scope := range []int64{0, tenant} {
		c, err := New(limited, driver, Config{TenantID: scope}, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Run(ctx, false)
		if err == nil || !strings.Contains(err.Error(), "graphsync_relay") {
			t.Errorf("tenant scope %d: a role that sees no tenant ran the check (error %v)", scope, err)
		}
	}
}

// Nodes of a projected label whose id is missing or not an integer are
// found, in a whole-graph and a one-tenant run, and --repair removes them.
// A float id (it compares with integers) used to be read as id 0 by the
// chunks, which paged from 0 again for ever.
func TestNodesWithoutAPositiveIntegerIDAreFoundAndRepaired(t *testing.T) {
	pool, driver, tenants := syncedWorkload(t, workload.Config{Seed: 5, Tenants: 1, Orders: 10, DeleteEvery: -1}, "sync-ids")
	tenant := tenants[0]
	cypherExec(t, driver, `CREATE (:Product {tenant_id: $t, id: '9', name: 'a string id'}),
		(:Product {tenant_id: $t, id: 99999.0, name: 'a float id'}), (:Product {tenant_id: $t, name: 'no id'}),
		(:Product {tenant_id: $t, id: 0, name: 'id 0'}), (:Product {tenant_id: $t, id: -5, name: 'a negative id'}),
		(:DeletedProduct {tenant_id: $t, id: 88888.0})`, map[string]any{"t": tenant})
	for _, scope := range []int64{tenant, 0} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		c, err := New(pool, driver, Config{TenantID: scope, RecheckAfter: 100 * time.Millisecond}, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		report, err := c.Run(ctx, false)
		cancel()
		if err != nil {
			t.Fatalf("scope %d: %v", scope, err)
		}
		found := map[string]int{}
		for _, c := range report.Counts {
			if c.Kind == NodeWithoutID && c.TenantID == tenant {
				found[c.Label] += c.Count
			}
		}
		if found["Product"] != 5 || found["DeletedProduct"] != 1 {
			t.Errorf("scope %d: nodes without a positive integer id found %v, want Product 5, DeletedProduct 1", scope, found)
		}
	}
	check(t, pool, driver, tenant, true)
	if report := check(t, pool, driver, tenant, false); report.DriftTotal != 0 {
		t.Errorf("drift %d after the repair: %+v", report.DriftTotal, report.Counts)
	}
}

// A category's difference is explained only by a pending event that will
// write that category. A busy tenant always has some Product event pending:
// counting any of them hid every category difference for as long as the
// tenant stayed busy. The pending event still explains the category it names.
func TestOnlyAnEventThatWritesAReferenceNodeExplainsIt(t *testing.T) {
	pool, driver, tenants := syncedWorkload(t, workload.Config{Seed: 13, Tenants: 1, Orders: 6, DeleteEvery: -1}, "sync-reference")
	a := tenants[0]
	ctx := context.Background()
	cats := ids(t, pool, `SELECT DISTINCT category_id FROM products WHERE tenant_id = $1 AND category_id IS NOT NULL ORDER BY 1`, a)
	if len(cats) < 2 {
		t.Fatalf("the workload gave %d categories with products, want 2", len(cats))
	}
	named, other := cats[0], cats[1]
	// A ProductUpdated of a product of the first category, due in an hour so
	// that sync leaves it pending.
	var s events.ProductState
	var categoryName string
	if err := pool.QueryRow(ctx, `SELECT p.id, p.version, p.sku, p.name, p.description, p.price_cents, p.currency, p.status, c.name
		FROM products p JOIN categories c ON c.tenant_id = p.tenant_id AND c.id = p.category_id
		WHERE p.tenant_id = $1 AND p.category_id = $2 ORDER BY p.id LIMIT 1`, a, named).Scan(
		&s.ID, &s.Version, &s.SKU, &s.Name, &s.Description, &s.PriceCents, &s.Currency, &s.Status, &categoryName); err != nil {
		t.Fatal(err)
	}
	s.Category = &events.CategoryRef{ID: named, Name: categoryName}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := events.Enqueue(ctx, tx, a, events.ProductUpdated{ProductState: s}); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE outbox_messages SET available_at = now() + interval '1 hour'
			WHERE tenant_id = $1 AND processed_at IS NULL`, a)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	cypherExec(t, driver, `MATCH (c:Category {tenant_id: $t}) WHERE c.id IN [$named, $other] SET c.name = 'edited in the browser'`,
		map[string]any{"t": a, "named": named, "other": other})
	report := check(t, pool, driver, a, false)
	stale := map[int64]bool{}
	for _, f := range report.Examples[StaleNode] {
		if f.Label == graphmodel.LabelCategory {
			stale[f.ID] = true
		}
	}
	explained := map[int64]bool{}
	for _, e := range report.Explained {
		if e.Label == graphmodel.LabelCategory {
			explained[e.ID] = true
		}
	}
	if !stale[other] || explained[other] {
		t.Errorf("category %d, which no pending event writes: stale %v, explained %v; want it drift", other, stale[other], explained[other])
	}
	if stale[named] || !explained[named] {
		t.Errorf("category %d, which a pending event will write: stale %v, explained %v; want it explained", named, stale[named], explained[named])
	}
}

// Relationships of the model's types that no chunk reads (written the wrong
// way round, or from a node of another label) are found, in a one-tenant
// and a whole-graph run, and --repair deletes them where both ends are
// projection nodes; one touching a label no projection owns is reported,
// never repaired.
func TestMisplacedRelationshipsAreFoundAndRepaired(t *testing.T) {
	pool, driver, tenants := syncedWorkload(t, workload.Config{Seed: 17, Tenants: 1, Orders: 6, DeleteEvery: -1}, "sync-misplaced")
	a := tenants[0]
	product := ids(t, pool, `SELECT id FROM products WHERE tenant_id = $1 AND category_id IS NOT NULL ORDER BY id LIMIT 1`, a)[0]
	order := ids(t, pool, `SELECT id FROM sales_orders WHERE tenant_id = $1 ORDER BY id LIMIT 1`, a)[0]
	p := map[string]any{"t": a, "product": product, "order": order}
	cypherExec(t, driver, `MATCH (p:Product {tenant_id: $t, id: $product})-[:IN_CATEGORY]->(c:Category)
		CREATE (c)-[:IN_CATEGORY {tenant_id: $t}]->(p)`, p)
	cypherExec(t, driver, `MATCH (o:Order {tenant_id: $t, id: $order})<-[:PLACED]-(c:Customer)
		CREATE (o)-[:PLACED {tenant_id: $t}]->(c)`, p)
	cypherExec(t, driver, `MATCH (p:Product {tenant_id: $t, id: $product})
		CREATE (:Chunk {tenant_id: $t, id: 1})-[:IN_CATEGORY {tenant_id: $t}]->(p)`, p)
	t.Cleanup(func() { cypherExec(t, driver, `MATCH (n:Chunk {tenant_id: $t}) DETACH DELETE n`, p) })
	misplacedCount := func(r *Report) int {
		n := 0
		for _, f := range r.Examples[ExtraRelationship] {
			if strings.Contains(f.Detail, "the projection writes none") && f.TenantID == a {
				n += f.Count
			}
		}
		return n
	}
	if n := misplacedCount(check(t, pool, driver, a, false)); n != 3 {
		t.Errorf("one-tenant run: %d misplaced relationships found, want 3", n)
	}
	if n := misplacedCount(check(t, pool, driver, 0, false)); n != 3 {
		t.Errorf("whole-graph run: %d misplaced relationships found, want 3", n)
	}
	check(t, pool, driver, a, true)
	if n := misplacedCount(check(t, pool, driver, a, false)); n != 1 {
		t.Errorf("after the repair %d misplaced relationships are left, want the one from the Chunk", n)
	}
}

// A repair writes its rows a chunk per transaction (Config.ChunkSize): a
// graph that lost a tenant's orders is put back whole, in as many
// transactions as there are chunks, every order counted once across them.
func TestRepairWritesInChunks(t *testing.T) {
	pool, driver, tenants := syncedWorkload(t, workload.Config{Seed: 11, Tenants: 1, Orders: 23, DeleteEvery: -1}, "sync-chunks")
	tenant := tenants[0]
	orders := len(ids(t, pool, `SELECT id FROM sales_orders WHERE tenant_id = $1`, tenant))
	cypherExec(t, driver, `MATCH (o:Order {tenant_id: $t}) DETACH DELETE o`, map[string]any{"t": tenant})
	c, err := New(pool, driver, Config{TenantID: tenant, ChunkSize: 4, RecheckAfter: 100 * time.Millisecond}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	report, err := c.Run(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("re-projected Order nodes from their rows: %d, in %d transactions", orders, (orders+3)/4)
	if !slices.Contains(report.Repaired, want) {
		t.Errorf("repaired %q, want a line %q", report.Repaired, want)
	}
	if report := check(t, pool, driver, tenant, false); report.DriftTotal != 0 {
		t.Errorf("drift %d after the repair: %+v", report.DriftTotal, report.Counts)
	}
}

// A tenant run sees the edges another tenant's nodes own that reach into
// its tenant (a product of tenant B in a category of tenant A, an order of
// B containing a product of A): the chunks read each edge from its owner,
// so only a whole-graph run saw them, from B's side. --repair --tenant A
// removes them.
func TestTenantRunSeesLinksFromOtherTenants(t *testing.T) {
	pool, driver, tenants := syncedWorkload(t, workload.Config{Seed: 19, Tenants: 2, Orders: 8, DeleteEvery: -1}, "sync-linked")
	a, b := tenants[0], tenants[1]
	p := map[string]any{"a": a, "b": b,
		"category": ids(t, pool, `SELECT id FROM categories WHERE tenant_id = $1 ORDER BY id LIMIT 1`, a)[0],
		"productA": ids(t, pool, `SELECT id FROM products WHERE tenant_id = $1 ORDER BY id LIMIT 1`, a)[0],
		"productB": ids(t, pool, `SELECT id FROM products WHERE tenant_id = $1 ORDER BY id LIMIT 1`, b)[0],
		"orderB":   ids(t, pool, `SELECT id FROM sales_orders WHERE tenant_id = $1 ORDER BY id LIMIT 1`, b)[0]}
	cypherExec(t, driver, `MATCH (p:Product {tenant_id: $b, id: $productB}), (c:Category {tenant_id: $a, id: $category})
		CREATE (p)-[:IN_CATEGORY {tenant_id: $b}]->(c)`, p)
	cypherExec(t, driver, `MATCH (o:Order {tenant_id: $b, id: $orderB}), (p:Product {tenant_id: $a, id: $productA})
		CREATE (o)-[:CONTAINS {tenant_id: $b, line_no: 99, quantity: 1, unit_price_cents: 1}]->(p)`, p)
	linked := func(r *Report) int {
		n := 0
		for _, c := range r.Counts {
			if c.Kind == CrossTenant && c.TenantID == a {
				n += c.Count
			}
		}
		return n
	}
	if n := linked(check(t, pool, driver, a, false)); n != 2 {
		t.Errorf("tenant run of A: %d relationships from tenant B found, want 2", n)
	}
	check(t, pool, driver, a, true)
	for _, tenant := range []int64{a, b} {
		if report := check(t, pool, driver, tenant, false); report.DriftTotal != 0 {
			t.Errorf("tenant %d: drift %d after the repair of A: %+v", tenant, report.DriftTotal, report.Counts)
		}
	}
}

// The tenant node and the tombstones carry graphsync's own keys only: a
// property another writer put there is reported (personal data as such)
// and --repair removes it, as on every other node of the model.
func TestTenantAndTombstonePropertiesAreChecked(t *testing.T) {
	pool, driver, tenants := syncedWorkload(t, workload.Config{Seed: 21, Tenants: 1, Orders: 6, DeleteEvery: 2}, "sync-special-props")
	tenant := tenants[0]
	p := map[string]any{"t": tenant}
	cypherExec(t, driver, `MATCH (n:Tenant {tenant_id: $t, id: $t}) SET n.owner_email = 'owner@example.org'`, p)
	cypherExec(t, driver, `MATCH (n:DeletedProduct {tenant_id: $t}) WITH n ORDER BY n.id LIMIT 1 SET n.note = 'kept for audit'`, p)
	found := map[string]Kind{}
	for _, c := range check(t, pool, driver, tenant, false).Counts {
		if c.TenantID == tenant && (c.Label == graphmodel.LabelTenant || c.Label == graphmodel.LabelDeletedProduct) {
			found[c.Label] = c.Kind
		}
	}
	if found[graphmodel.LabelTenant] != PersonalData || found[graphmodel.LabelDeletedProduct] != PropertyNotAllowed {
		t.Errorf("found %v, want personal_data on the Tenant node and property_not_allowed on the tombstone", found)
	}
	check(t, pool, driver, tenant, true)
	if report := check(t, pool, driver, tenant, false); report.DriftTotal != 0 {
		t.Errorf("drift %d after the repair: %+v", report.DriftTotal, report.Counts)
	}
}
