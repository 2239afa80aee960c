package projector

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j/config"
	"go.uber.org/zap/zaptest"

	"graphsync/events"
	"graphsync/outbox"
)

// A batch mixing good events with poison ones: each poison event is rejected
// with an error naming it and its problem, nothing is written for it, and the
// good events are applied.
func TestPoisonEventsAreIsolated(t *testing.T) {
	p, driver := liveProjector(t)
	i := newIDs(t, driver)
	other := newIDs(t, driver)
	deliverAll(t, p, other.message(t, events.ProductCreated{ProductState: product(other.id(1), 1, "Theirs", 0, "", 100, "active")}))

	goodProduct := i.message(t, events.ProductCreated{ProductState: product(i.id(1), 1, "Mug", 0, "", 1999, "active")})
	line := func(productID int64) events.OrderLine {
		return events.OrderLine{LineNo: 1, ProductID: productID, Quantity: 1, UnitPriceCents: 100}
	}
	negative := mustJSON(t, orderPlaced(i.id(21), i.id(30), line(i.id(1))))
	negative = strings.Replace(negative, `"quantity":1`, `"quantity":-3`, 1)
	wrongType := strings.Replace(mustJSON(t, orderPlaced(i.id(22), i.id(30), line(i.id(1)))), `"total_cents":4997`, `"total_cents":"lots"`, 1)
	missing := strings.Replace(mustJSON(t, events.ProductUpdated{ProductState: product(i.id(2), 1, "X", 0, "", 1, "active")}), `"sku":"SKU-X",`, ``, 1)

	batch := []outbox.Message{
		goodProduct,
		i.raw("Order", i.id(20), "OrderPlaced", 1, `{"version": 1, "lines": [`),
		i.raw("Order", i.id(21), "OrderPlaced", 1, negative),
		i.raw("Order", i.id(22), "OrderPlaced", 1, wrongType),
		i.raw("Product", i.id(2), "ProductUpdated", 1, missing),
		i.raw("Product", i.id(3), "ProductRenamed", 1, `{"version": 1}`),
		i.raw("Product", i.id(4), "ProductUpdated", 9, `{"version": 1}`),
		i.message(t, orderPlaced(i.id(23), i.id(30), line(other.id(1)))),
		i.message(t, orderPlaced(i.id(24), i.id(30), line(i.id(9)))),
		i.message(t, orderPlaced(i.id(25), i.id(30), line(i.id(1)))), // good: product created earlier in the batch
		// Good, but behind the poison ids[4] of its aggregate: held back, not applied.
		i.message(t, events.ProductUpdated{ProductState: product(i.id(2), 2, "Later", 0, "", 1, "active")}),
	}
	ids := outboxIDs(batch)
	want := map[int64]string{
		ids[1]:  "OrderPlaced v1 (outbox id " + itoa(ids[1]) + "): payload is not valid JSON",
		ids[2]:  "OrderPlaced v1 (outbox id " + itoa(ids[2]) + "): lines[0].quantity must be > 0, got -3",
		ids[3]:  "OrderPlaced v1 (outbox id " + itoa(ids[3]) + "): total_cents has the wrong type: got JSON string, want int64",
		ids[4]:  "ProductUpdated v1 (outbox id " + itoa(ids[4]) + "): sku is required",
		ids[5]:  `"ProductRenamed" v1 (outbox id ` + itoa(ids[5]) + "): unknown event type",
		ids[6]:  "ProductUpdated v9 (outbox id " + itoa(ids[6]) + "): unknown event version (known: 1)",
		ids[7]:  "OrderPlaced v1 (outbox id " + itoa(ids[7]) + "): lines[0].product_id: product " + itoa(other.id(1)) + " belongs to another tenant",
		ids[8]:  "OrderPlaced v1 (outbox id " + itoa(ids[8]) + "): lines[0].product_id: product " + itoa(i.id(9)) + " is not in the graph yet",
		ids[10]: "ProductUpdated v1 (outbox id " + itoa(ids[10]) + "): held back behind an earlier failing event of its aggregate",
	}
	rejected := deliver(t, p, batch...)
	if len(rejected) != len(want) {
		t.Errorf("rejected %d events, want %d: %v", len(rejected), len(want), rejected)
	}
	for id, text := range want {
		if err := rejected[id]; err == nil || !strings.HasPrefix(err.Error(), text) {
			t.Errorf("rejected[%d] = %v, want %q", id, err, text)
		}
	}
	if !errors.Is(rejected[ids[7]], ErrCrossTenant) || !errors.Is(rejected[ids[8]], ErrNotProjected) || !errors.Is(rejected[ids[8]], outbox.ErrDeferred) ||
		errors.Is(rejected[ids[7]], outbox.ErrDeferred) ||
		!errors.Is(rejected[ids[2]], ErrInvalidEvent) || !errors.Is(rejected[ids[5]], events.ErrUnknownEvent) ||
		!errors.Is(rejected[ids[10]], outbox.ErrHeldBack) {
		t.Errorf("rejections do not match their sentinels: %v", rejected)
	}
	expectGraph(t, driver, i.tenant, `
(:Customer {U} {country_code: "DE", segment: "retail"})
(:Order {O} {currency: "EUR", placed_at: datetime("2026-05-01T12:00:00Z"), status: "placed", total_cents: 4997})
(:Product {P1} {currency: "EUR", description: "About Mug", name: "Mug", price_cents: 1999, sku: "SKU-Mug", status: "active"})
(:Tenant {T} {})
(:Customer {U})-[:PLACED {}]->(:Order {O})
(:Order {O})-[:CONTAINS {line_no: 1, quantity: 1, unit_price_cents: 100}]->(:Product {P1})
`, append(placeholders(i), "{O}", itoa(i.id(25)))...)
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Tenant B naming tenant A's product, customer, category or order is refused,
// and neither graph changes.
func TestCrossTenantReferencesAreRefused(t *testing.T) {
	p, driver := liveProjector(t)
	a := newIDs(t, driver)
	b := newIDs(t, driver)
	b.base = a.base // tenant B's events name tenant A's ids
	deliverAll(t, p,
		a.message(t, events.ProductCreated{ProductState: product(a.id(1), 1, "Mug", a.id(10), "Kitchen", 1999, "active")}),
		a.message(t, orderPlaced(a.id(20), a.id(30), events.OrderLine{LineNo: 1, ProductID: a.id(1), Quantity: 1, UnitPriceCents: 1999})))
	before := dump(t, driver, a.tenant).String()

	deliverAll(t, p, b.message(t, events.ProductCreated{ProductState: product(b.id(2)+500, 1, "Own", 0, "", 1, "active")}))
	attempts := []outbox.Message{
		b.message(t, orderPlaced(b.id(21)+500, b.id(31)+500, events.OrderLine{LineNo: 1, ProductID: a.id(1), Quantity: 1})),
		b.message(t, orderPlaced(b.id(22)+500, a.id(30), events.OrderLine{LineNo: 1, ProductID: b.id(2) + 500, Quantity: 1})),
		b.message(t, events.ProductCreated{ProductState: product(b.id(3)+500, 1, "Cat thief", a.id(10), "Kitchen", 1, "active")}),
		b.message(t, events.ProductUpdated{ProductState: product(a.id(1), 9, "Hijacked", 0, "", 1, "active")}),
		b.message(t, events.ProductDeleted{ID: a.id(1), Version: 9}),
		b.message(t, events.OrderCancelled{OrderState: orderState(a.id(20), 9, events.OrderStatusCancelled, nil, nil, at(5))}),
	}
	// One batch each: two of them share an aggregate, and in one batch the
	// second would be held back behind the first rather than checked.
	rejected := map[int64]error{}
	for _, m := range attempts {
		for id, err := range deliver(t, p, m) {
			rejected[id] = err
		}
	}
	for _, m := range attempts {
		if err := rejected[m.ID]; !errors.Is(err, ErrCrossTenant) {
			t.Errorf("%s: rejected with %v, want ErrCrossTenant", eventName(m), err)
		}
	}
	if after := dump(t, driver, a.tenant).String(); after != before {
		t.Fatalf("tenant A's graph changed:\n%s\nwas:\n%s", after, before)
	}
	got := dump(t, driver, b.tenant)
	if len(got.Nodes) != 2 || len(got.Relationships) != 0 || len(got.Tombstones) != 0 {
		t.Fatalf("tenant B's graph holds more than its tenant and product:\n%s", got)
	}
}

// Cypher injection in every string field and in payload keys is stored as
// plain text (or refused by validation), never run.
func TestInjectionIsInert(t *testing.T) {
	p, driver := liveProjector(t)
	i := newIDs(t, driver)
	bystander := newIDs(t, driver)
	deliverAll(t, p, bystander.message(t, events.ProductCreated{ProductState: product(bystander.id(1), 1, "Safe", 0, "", 1, "active")}))
	bystanderBefore := dump(t, driver, bystander.tenant).String()

	attacks := []string{
		`x'}) MATCH (n) DETACH DELETE n //`,
		"`}) MATCH (n) DETACH DELETE n //",
		`"}) WITH 1 AS x MATCH (n) SET n.pwned = true //`,
		`$rows`, `row.props.name`, `\u0027; CALL dbms.shutdown() //`,
		"name: 'x'}) CREATE (:Admin {tenant_id: 0}) //",
	}
	for k, attack := range attacks {
		id := int64(k + 1)
		s := product(i.id(id), 1, attack, i.id(10+id), attack, 1, "active")
		s.SKU, s.Description = attack, attack
		deliverAll(t, p, i.message(t, events.ProductCreated{ProductState: s}))
		placed := orderPlaced(i.id(20+id), i.id(30+id), events.OrderLine{LineNo: 1, ProductID: i.id(id), Quantity: 1})
		placed.Customer.Segment = attack
		deliverAll(t, p, i.message(t, placed))
		// Fields with a closed vocabulary refuse it.
		closed := orderPlaced(i.id(40+id), i.id(30+id), events.OrderLine{LineNo: 1, ProductID: i.id(id), Quantity: 1})
		closed.Currency, closed.Customer.CountryCode = attack, attack
		if rejected := deliver(t, p, i.message(t, closed)); len(rejected) != 1 {
			t.Fatalf("an injected currency was accepted: %v", rejected)
		}
		// Payload keys carrying Cypher are ignored.
		updated := s
		updated.Version, updated.PriceCents = 2, 2
		payload := mustJSON(t, events.ProductUpdated{ProductState: updated})
		payload = strings.Replace(payload, "{", "{"+mustJSON(t, attack)+`: "x", `+mustJSON(t, "name"+attack)+`: 1, `, 1)
		deliverAll(t, p, i.raw("Product", i.id(id), "ProductUpdated", 1, payload))
	}

	d := dump(t, driver, i.tenant)
	text := d.String()
	for _, attack := range attacks {
		if !strings.Contains(text, `{country_code: "DE", segment: `+strconv.Quote(attack)+`}`) ||
			!strings.Contains(text, `{currency: "EUR", description: `+strconv.Quote(attack)+`, name: `+strconv.Quote(attack)+`, price_cents: 2, sku: `+strconv.Quote(attack)+`, status: "active"}`) ||
			!strings.Contains(text, `{name: `+strconv.Quote(attack)+`}`) {
			t.Fatalf("attack %q not stored verbatim:\n%s", attack, text)
		}
	}
	pwned, err := neo4j.ExecuteQuery(context.Background(), driver, "MATCH (n) WHERE n.pwned IS NOT NULL RETURN count(n) AS pwned", nil, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	if n, _, _ := neo4j.GetRecordValue[int64](pwned.Records[0], "pwned"); n != 0 {
		t.Fatalf("injection took effect: %d nodes have a pwned property", n)
	}
	labels := map[string]int{}
	for _, n := range d.Nodes {
		labels[n.Label]++
	}
	if labels["Product"] != len(attacks) || labels["Order"] != len(attacks) || labels["Category"] != len(attacks) {
		t.Fatalf("unexpected nodes %v:\n%s", labels, text)
	}
	if after := dump(t, driver, bystander.tenant).String(); after != bystanderBefore {
		t.Fatalf("another tenant changed:\n%s", after)
	}
	assertNoStrayLabels(t, driver, i.tenant)
}

// assertNoStrayLabels fails if a node of the tenant carries a label outside
// the model, or if any (:Admin) node, which the attacks try to create, exists.
func assertNoStrayLabels(t testing.TB, driver neo4j.DriverWithContext, tenantID int64) {
	t.Helper()
	result, err := neo4j.ExecuteQuery(context.Background(), driver, `
		MATCH (n) WHERE n.tenant_id = $tenant_id
		UNWIND labels(n) AS label
		WITH collect(DISTINCT label) AS labels
		OPTIONAL MATCH (a:Admin)
		RETURN labels, count(a) AS admins`, map[string]any{"tenant_id": tenantID}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	labels, _, _ := neo4j.GetRecordValue[[]any](result.Records[0], "labels")
	admins, _, _ := neo4j.GetRecordValue[int64](result.Records[0], "admins")
	allowed := map[string]bool{"Tenant": true, "Category": true, "Customer": true, "Product": true, "Order": true, "DeletedProduct": true}
	for _, l := range labels {
		if !allowed[l.(string)] {
			t.Errorf("tenant %d has a node labelled %v, outside the model", tenantID, l)
		}
	}
	if admins != 0 {
		t.Errorf("%d (:Admin) nodes exist", admins)
	}
}

func TestPersonalDataNeverStored(t *testing.T) {
	p, driver := liveProjector(t)
	i := newIDs(t, driver)
	deliverAll(t, p, i.message(t, events.ProductCreated{ProductState: product(i.id(1), 1, "Mug", 0, "", 1999, "active")}))
	personal := []string{"jane@example.com", "Jane Doe", "+49 30 1234567", "1 Main St, Berlin", "4111111111111111", "DE89370400440532013000"}
	doc := map[string]any{}
	_ = json.Unmarshal([]byte(mustJSON(t, orderPlaced(i.id(20), i.id(30), events.OrderLine{LineNo: 1, ProductID: i.id(1), Quantity: 1}))), &doc)
	customer := doc["customer"].(map[string]any)
	customer["email"], customer["full_name"], customer["name"], customer["phone"], customer["address"] = personal[0], personal[1], personal[1], personal[2], personal[3]
	doc["shipping_address"] = personal[3]
	doc["payment"] = map[string]any{"card_number": personal[4], "iban": personal[5]}
	doc["email"] = personal[0]
	deliverAll(t, p, i.raw("Order", i.id(20), "OrderPlaced", 1, mustJSON(t, doc)))
	text := dump(t, driver, i.tenant).String()
	for _, value := range personal {
		if strings.Contains(text, value) {
			t.Fatalf("personal data %q reached the graph:\n%s", value, text)
		}
	}
	if !strings.Contains(text, `(:Customer `+itoa(i.id(30))+` {country_code: "DE", segment: "retail"})`) {
		t.Fatalf("customer not projected with its allowlisted properties:\n%s", text)
	}
}

// unreachableProjector writes through a driver pointed at a closed port,
// with short connect and retry bounds.
func unreachableProjector(t *testing.T) *Projector {
	t.Helper()
	driver, err := neo4j.NewDriverWithContext("bolt://127.0.0.1:1", neo4j.NoAuth(), func(c *config.Config) {
		c.MaxTransactionRetryTime = 200 * time.Millisecond
		c.SocketConnectTimeout = time.Second
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { driver.Close(context.Background()) })
	p, err := New(driver, Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Neo4j unreachable: Deliver returns err (the relay retries the batch without
// counting attempts) and rejects nothing.
func TestNeo4jUnavailableFailsTheBatch(t *testing.T) {
	p := unreachableProjector(t)
	i := &ids{tenant: 5}
	rejected, err := p.Deliver(context.Background(), []outbox.Message{
		i.message(t, events.ProductCreated{ProductState: product(1, 1, "Mug", 0, "", 1, "active")}),
		i.raw("Product", 2, "ProductCreated", 2, "{"),
	})
	if err == nil || rejected != nil {
		t.Fatalf("Deliver = %v, %v; want an error and no rejections", rejected, err)
	}
}

// DumpGraph shows a relationship that crosses tenants (which the projector
// never writes) from either tenant's side, so e2e comparisons catch one.
func TestDumpRevealsCrossTenantRelationships(t *testing.T) {
	p, driver := liveProjector(t)
	a := newIDs(t, driver)
	b := newIDs(t, driver)
	deliverAll(t, p, a.message(t, events.ProductCreated{ProductState: product(a.id(1), 1, "Mug", 0, "", 1, "active")}))
	deliverAll(t, p, b.message(t, events.ProductCreated{ProductState: product(b.id(1), 1, "Cup", 0, "", 1, "active")}),
		b.message(t, orderPlaced(b.id(20), b.id(30), events.OrderLine{LineNo: 1, ProductID: b.id(1), Quantity: 1})))
	// Forge the edge a bug would write.
	_, err := neo4j.ExecuteQuery(context.Background(), driver, `
		MATCH (o:Order {tenant_id: $b, id: $order}), (p:Product {tenant_id: $a, id: $product})
		CREATE (o)-[:CONTAINS {tenant_id: $b, line_no: 2, quantity: 1, unit_price_cents: 1}]->(p)`,
		map[string]any{"a": a.tenant, "b": b.tenant, "order": b.id(20), "product": a.id(1)}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	want := "(:Order " + itoa(b.id(20)) + " @tenant " + itoa(b.tenant) + ")-[:CONTAINS @tenant " + itoa(b.tenant)
	if got := dump(t, driver, a.tenant).String(); !strings.Contains(got, want) {
		t.Fatalf("tenant A's dump hides the forged edge:\n%s", got)
	}
	want = "(:Product " + itoa(a.id(1)) + " @tenant " + itoa(a.tenant) + ")"
	if got := dump(t, driver, b.tenant).String(); !strings.Contains(got, want) {
		t.Fatalf("tenant B's dump hides the forged edge:\n%s", got)
	}
}

// DeliverPrepared without a prepared batch is a caller's mistake: an error
// that says so, not a panic. It needs no Neo4j to find out.
func TestDeliverPreparedNilIsAnError(t *testing.T) {
	p := unreachableProjector(t)
	rejected, err := p.DeliverPrepared(context.Background(), nil)
	if err == nil || rejected != nil || !strings.Contains(err.Error(), "needs a batch made by Prepare") {
		t.Fatalf("DeliverPrepared(nil) = %v, %v; want no rejections and an error naming the mistake", rejected, err)
	}
}
