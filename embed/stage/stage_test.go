package stage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/cypher"
	"graphsync/drift"
	"graphsync/embed/stage"
	"graphsync/events"
	"graphsync/graphmodel"
	"graphsync/internal/stacktest"
	"graphsync/outbox"
	"graphsync/projector"
)

// world is one test's tenant in the shared Neo4j, its fresh PostgreSQL
// database (with the cache) and a projector that embeds with emb's model.
type world struct {
	t        testing.TB
	ctx      context.Context
	tenant   int64
	base     int64 // product ids are base + n: ids are unique across tenants
	driver   neo4j.DriverWithContext
	pool     *pgxpool.Pool
	emb      *counting
	sink     *projector.Projector
	outboxID int64
}

func newWorld(t testing.TB) *world {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	w := &world{t: t, ctx: ctx, tenant: 1_000_000 + rand.Int64N(1_000_000_000), base: 1_000_000_000 + rand.Int64N(1_000_000_000)*1000, emb: testEmbedder(t)}
	_, w.pool = stacktest.FreshDatabase(t)
	w.driver = stacktest.Neo4j(t)
	if err := projector.EnsureSchema(ctx, w.driver); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stacktest.CleanGraph(t, w.driver, w.tenant) })
	sink, err := projector.New(w.driver, projector.Config{EmbeddingModel: w.emb.Model()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sink.Close)
	w.sink = sink
	return w
}

func (w *world) id(n int64) int64 { return w.base + n }

func (w *world) stage(cfg stage.Config) *stage.Stage {
	w.t.Helper()
	cfg.Tenants = []int64{w.tenant}
	s, err := stage.New(w.driver, stage.NewCache(w.pool), w.emb, cfg, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	return s
}

// deliver applies events through the projector, as sync does.
func (w *world) deliver(evs ...events.Event) {
	w.t.Helper()
	batch := make([]outbox.Message, len(evs))
	for i, ev := range evs {
		payload, err := json.Marshal(ev)
		if err != nil {
			w.t.Fatal(err)
		}
		w.outboxID++
		batch[i] = outbox.Message{ID: w.outboxID, TenantID: w.tenant, AggregateType: ev.AggregateType(), AggregateID: ev.AggregateID(),
			EventType: ev.EventType(), EventVersion: ev.EventVersion(), Payload: payload, OccurredAt: time.Now(), Attempts: 1}
	}
	rejected, err := w.sink.Deliver(w.ctx, batch)
	if err != nil {
		w.t.Fatal(err)
	}
	for id, err := range rejected {
		if err != nil {
			w.t.Fatalf("event %d rejected: %v", id, err)
		}
	}
}

func productState(id, version int64, name, description string, price int64) events.ProductState {
	return events.ProductState{ID: id, Version: version, SKU: fmt.Sprintf("SKU-%d", id), Name: name, Description: description,
		PriceCents: price, Currency: "EUR", Status: "active"}
}

// node is what the graph holds of a product's embedding.
type node struct {
	text, hash, textHash, model string
	vector                      []float64
	pending                     bool
}

func (w *world) node(id int64) node {
	w.t.Helper()
	res, err := neo4j.ExecuteQuery(w.ctx, w.driver, `MATCH (n:Product {tenant_id: $tenant, id: $id})
RETURN properties(n) AS props`, map[string]any{"tenant": w.tenant, "id": id}, neo4j.EagerResultTransformer)
	if err != nil || len(res.Records) != 1 {
		w.t.Fatalf("read product %d: %v (%d records)", id, err, len(res.Records))
	}
	props, _, _ := neo4j.GetRecordValue[map[string]any](res.Records[0], "props")
	n := node{text: graphmodel.EmbeddedText(graphmodel.LabelProduct, props), pending: props[graphmodel.PropEmbeddingPending] != nil}
	n.hash, _ = props[graphmodel.PropEmbeddingHash].(string)
	n.textHash, _ = props[graphmodel.PropEmbeddingTextHash].(string)
	n.model, _ = props[graphmodel.PropEmbeddingModel].(string)
	if v, ok := props[graphmodel.PropEmbedding].([]any); ok {
		for _, f := range v {
			n.vector = append(n.vector, f.(float64))
		}
	}
	return n
}

// current fails unless the node's vector is the model's vector of the
// text the node holds now.
func (w *world) current(id int64) node {
	w.t.Helper()
	n := w.node(id)
	want := graphmodel.EmbeddingHash(w.emb.Model(), n.text)
	if n.pending || n.hash != want || n.textHash != want || n.model != w.emb.Model() || len(n.vector) != w.emb.Dimension() {
		w.t.Fatalf("product %d not current: pending %v, hash %.12s, text hash %.12s, want %.12s, model %q, %d floats",
			id, n.pending, n.hash, n.textHash, want, n.model, len(n.vector))
	}
	vs, err := w.emb.Embedder.Embed(w.ctx, []string{n.text})
	if err != nil {
		w.t.Fatal(err)
	}
	for i, f := range vs[0] {
		if diff := float64(f) - n.vector[i]; diff > 1e-6 || diff < -1e-6 {
			w.t.Fatalf("product %d: vector[%d] = %g, the model gives %g for its text", id, i, n.vector[i], f)
		}
	}
	return n
}

func drain(t *testing.T, s *stage.Stage, ctx context.Context) stage.Round {
	t.Helper()
	round, err := s.Drain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return round
}

// A text change re-embeds; a price change embeds nothing and leaves the
// vector as it is. Mixed in one batch with a product whose text changes.
func TestTextChangeReembedsPriceChangeDoesNot(t *testing.T) {
	w := newWorld(t)
	s := w.stage(stage.Config{})
	w.deliver(events.ProductCreated{ProductState: productState(w.id(1), 1, "Kettle", "Boils water fast", 2999)},
		events.ProductCreated{ProductState: productState(w.id(2), 1, "Teapot", "Porcelain, 1 l", 1999)})
	if n := w.node(w.id(1)); !n.pending || n.vector != nil {
		t.Fatalf("a new product is not pending: %+v", n)
	}
	if r := drain(t, s, w.ctx); r.Written != 2 || r.Embedded != 2 {
		t.Fatalf("first drain: %+v, want 2 embedded and written", r)
	}
	w.current(w.id(1))
	before := w.current(w.id(2))

	calls := w.emb.texts.Load()
	w.deliver(events.ProductPriceChanged{ProductState: productState(w.id(2), 2, "Teapot", "Porcelain, 1 l", 2499)},
		events.ProductUpdated{ProductState: productState(w.id(1), 2, "Kettle", "Boils water fast, 1.7 l, steel", 2999)})
	if w.node(w.id(2)).pending {
		t.Fatal("a price change marked the product pending")
	}
	if !w.node(w.id(1)).pending {
		t.Fatal("a text change did not mark the product pending")
	}
	r := drain(t, s, w.ctx)
	if r.Read != 1 || r.Written != 1 || w.emb.texts.Load()-calls != 1 {
		t.Fatalf("after a price and a text change: %+v, %d texts embedded; want the one changed text", r, w.emb.texts.Load()-calls)
	}
	w.current(w.id(1))
	if after := w.current(w.id(2)); after.hash != before.hash {
		t.Fatal("the price change changed the vector")
	}
}

// The guard: a vector computed for an old text is not written over a
// newer one. The newer text is committed while the stage embeds the older
// (inside its Embed call), so the stage's write finds another hash.
func TestGuardDropsAVectorOfAnOlderText(t *testing.T) {
	w := newWorld(t)
	s := w.stage(stage.Config{})
	w.deliver(events.ProductCreated{ProductState: productState(w.id(1), 1, "Lamp", "Desk lamp", 1000)})
	w.emb.before = func() {
		w.deliver(events.ProductUpdated{ProductState: productState(w.id(1), 2, "Lamp", "Desk lamp with a dimmer", 1000)})
	}
	r, err := s.RunOnce(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Read != 1 || r.Written != 0 || r.Dropped != 1 {
		t.Fatalf("round over an interleaved change: %+v, want the vector dropped", r)
	}
	n := w.node(w.id(1))
	if n.vector != nil || !n.pending {
		t.Fatalf("the older text's vector was written or the node left the backlog: %+v", n)
	}
	drain(t, s, w.ctx)
	if n := w.current(w.id(1)); !strings.Contains(n.text, "dimmer") {
		t.Fatalf("vector of %q, want the newer text", n.text)
	}
}

// Texts that are hard for a tokenizer never crash the stage: each gets a
// vector (or a clear refusal counted as such).
func TestBadTextsNeverCrashTheStage(t *testing.T) {
	w := newWorld(t)
	s := w.stage(stage.Config{})
	texts := []string{
		"",
		// The longest description an event may carry (65,536 characters),
		// here 70 kB: the model cuts it at its token limit.
		strings.Repeat("Fünf lange Sätze. ", 3640),
		"🚀🔥 Rocket mug ☕️ 👍🏽",
		"无线蓝牙耳机，降噪，续航三十小时",
		"سماعة لاسلكية مع خاصية إلغاء الضوضاء",
		"Tab\there\x00nul\x01\x1b[31mred\u200b\ufeff",
		"\xff\xfe invalid UTF-8",
	}
	var evs []events.Event
	for i, text := range texts {
		evs = append(evs, events.ProductCreated{ProductState: productState(w.id(int64(i+1)), 1, "P", text, 100)})
	}
	w.deliver(evs...)
	r := drain(t, s, w.ctx)
	if r.Refused != 0 || r.Written != len(texts) {
		t.Fatalf("bad texts: %+v, want all %d written", r, len(texts))
	}
	for i := range texts {
		w.current(w.id(int64(i + 1)))
	}
}

// The cache outlives the graph: a rebuild into an empty Neo4j (the same
// products projected again) takes every vector from PostgreSQL and embeds
// nothing.
func TestRebuildIntoEmptyGraphEmbedsNothingEmbeddedBefore(t *testing.T) {
	w := newWorld(t)
	s := w.stage(stage.Config{BatchSize: 4})
	var evs []events.Event
	for i := int64(1); i <= 10; i++ {
		evs = append(evs, events.ProductCreated{ProductState: productState(w.id(i), 1, "Chair", "Oak chair model "+string(rune('A'+i)), 100*i)})
	}
	w.deliver(evs...)
	if r := drain(t, s, w.ctx); r.Embedded != 10 {
		t.Fatalf("first drain: %+v, want 10 embedded", r)
	}
	stacktest.CleanGraph(t, w.driver, w.tenant)
	w.deliver(evs...) // outbox ids differ; the graph is empty, so all apply
	before := w.emb.texts.Load()
	r := drain(t, s, w.ctx)
	if r.Cached != 10 || r.Embedded != 0 || r.Written != 10 || w.emb.texts.Load() != before {
		t.Fatalf("rebuild: %+v, %d texts embedded; want all 10 from the cache", r, w.emb.texts.Load()-before)
	}
	for i := int64(1); i <= 10; i++ {
		w.current(w.id(i))
	}
}

// migrate's vector index: created with the embedder's dimension, kept
// when it matches, recreated when the dimension changes.
func TestVectorIndexFollowsTheDimension(t *testing.T) {
	w := newWorld(t)
	read := func() int64 {
		res, err := neo4j.ExecuteQuery(w.ctx, w.driver, cypher.VectorIndexQuery, map[string]any{"name": graphmodel.VectorProductEmbed}, neo4j.EagerResultTransformer)
		if err != nil || len(res.Records) != 1 {
			t.Fatalf("read the vector index: %v (%d records)", err, len(res.Records))
		}
		dims, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "dimensions")
		return dims
	}
	t.Cleanup(func() {
		if err := stage.EnsureVectorIndex(context.Background(), w.driver, "", graphmodel.Default, w.emb.Dimension()); err != nil {
			t.Error(err)
		}
	})
	for _, dim := range []int{w.emb.Dimension(), 8, w.emb.Dimension()} {
		if err := stage.EnsureVectorIndex(w.ctx, w.driver, "", graphmodel.Default, dim); err != nil {
			t.Fatal(err)
		}
		if got := read(); got != int64(dim) {
			t.Fatalf("vector index of %d dimensions, want %d", got, dim)
		}
	}
}

// Drift reports each kind of vector drift as its own kind, and --repair
// (mark, then the stage's drain) fixes them all.
func TestDriftReportsAndRepairsVectors(t *testing.T) {
	w := newWorld(t)
	s := w.stage(stage.Config{})
	if _, err := w.pool.Exec(w.ctx, `INSERT INTO tenants (id, name) VALUES ($1, 'vectors')`, w.tenant); err != nil {
		t.Fatal(err)
	}
	var evs []events.Event
	for i := int64(1); i <= 5; i++ {
		p := productState(w.id(i), 1, fmt.Sprintf("Bowl %d", i), "Stoneware bowl, glazed", 1200)
		if _, err := w.pool.Exec(w.ctx, `INSERT INTO products (id, tenant_id, sku, name, description, price_cents, currency, status, version)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, p.ID, w.tenant, p.SKU, p.Name, p.Description, p.PriceCents, p.Currency, p.Status, p.Version); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, events.ProductCreated{ProductState: p})
	}
	w.deliver(evs...)
	drain(t, s, w.ctx)
	check := func(repair bool) *drift.Report {
		t.Helper()
		c, err := drift.New(w.pool, w.driver, drift.Config{TenantID: w.tenant, RecheckAfter: drift.NoRecheckWait,
			Vectors: &drift.VectorCheck{Model: w.emb.Model(), Dimension: w.emb.Dimension()}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		report, err := c.Run(w.ctx, repair)
		if err != nil {
			t.Fatal(err)
		}
		return report
	}
	if r := check(false); r.DriftTotal != 0 {
		t.Fatalf("drift %d before anything was planted: %+v", r.DriftTotal, r.Counts)
	}
	plant := map[int64]string{
		1: "REMOVE n.embedding, n.embedding_hash, n.embedding_model",
		2: "SET n.embedding_model = 'another-model'",
		3: "SET n.embedding = [0.5, 0.5, 0.5]",
		4: "SET n.embedding_hash = 'not the text'",
	}
	for id, change := range plant {
		// Test-only Cypher of constants; the values are parameters.
		if _, err := neo4j.ExecuteQuery(w.ctx, w.driver, "MATCH (n:Product {tenant_id: $tenant, id: $id}) "+change,
			map[string]any{"tenant": w.tenant, "id": w.id(id)}, neo4j.EagerResultTransformer); err != nil {
			t.Fatal(err)
		}
	}
	r := check(true)
	want := map[drift.Kind]int{drift.MissingEmbedding: 1, drift.WrongEmbeddingModel: 1, drift.WrongEmbeddingDimension: 1, drift.StaleEmbedding: 1}
	got := map[drift.Kind]int{}
	for _, c := range r.Counts {
		got[c.Kind] += c.Count
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("drift kinds %v, want %v", got, want)
	}
	if len(r.Repaired) == 0 {
		t.Fatal("repair changed nothing")
	}
	if round := drain(t, s, w.ctx); round.Written != 4 || round.Embedded != 0 {
		t.Fatalf("drain after the repair: %+v, want 4 written from the cache", round)
	}
	if r := check(false); r.DriftTotal != 0 {
		t.Fatalf("drift %d after the repair: %+v", r.DriftTotal, r.Counts)
	}
	for i := int64(1); i <= 5; i++ {
		w.current(w.id(i))
	}
}

// The backlog is an index lookup: the pending read scans the pending
// mark's range index in order and stops at its limit, without a sort of
// every pending node (a backlog of a million must cost what a batch costs).
func TestPendingReadScansTheIndexInOrder(t *testing.T) {
	driver := stacktest.Neo4j(t)
	ctx := context.Background()
	if err := projector.EnsureSchema(ctx, driver); err != nil {
		t.Fatal(err)
	}
	for _, tenants := range []any{nil, []int64{1, 2}} {
		res, err := neo4j.ExecuteQuery(ctx, driver, "EXPLAIN "+cypher.EmbeddingPendingText(graphmodel.DefaultEmbedding),
			map[string]any{"limit": int64(64), "tenants": tenants}, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		var operators []string
		var walk func(p neo4j.Plan)
		walk = func(p neo4j.Plan) {
			operators = append(operators, fmt.Sprintf("%s %v", p.Operator(), p.Arguments()["Details"]))
			for _, c := range p.Children() {
				walk(c)
			}
		}
		walk(res.Summary.Plan())
		plan := strings.Join(operators, "\n")
		if !strings.Contains(plan, "NodeIndexScan") || !strings.Contains(plan, graphmodel.PropEmbeddingPending) ||
			strings.Contains(plan, "Sort") || strings.Contains(plan, "NodeByLabelScan") {
			t.Fatalf("tenants %v: the pending read does not scan the pending index in order:\n%s", tenants, plan)
		}
	}
}
