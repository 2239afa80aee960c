package stage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"graphsync/cypher"
	"graphsync/drift"
	"graphsync/embed"
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
	for i := int64(1); i <= 6; i++ {
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
		// Not a list at all: another writer's; drift reads the vector's
		// length, and must not fail on it.
		5: "SET n.embedding = 5",
	}
	for id, change := range plant {
		// Test-only Cypher of constants; the values are parameters.
		if _, err := neo4j.ExecuteQuery(w.ctx, w.driver, "MATCH (n:Product {tenant_id: $tenant, id: $id}) "+change,
			map[string]any{"tenant": w.tenant, "id": w.id(id)}, neo4j.EagerResultTransformer); err != nil {
			t.Fatal(err)
		}
	}
	r := check(true)
	want := map[drift.Kind]int{drift.MissingEmbedding: 1, drift.WrongEmbeddingModel: 1, drift.WrongEmbeddingDimension: 2, drift.StaleEmbedding: 1}
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
	if round := drain(t, s, w.ctx); round.Written != 5 || round.Embedded != 0 {
		t.Fatalf("drain after the repair: %+v, want 5 written from the cache", round)
	}
	if r := check(false); r.DriftTotal != 0 {
		t.Fatalf("drift %d after the repair: %+v", r.DriftTotal, r.Counts)
	}
	for i := int64(1); i <= 6; i++ {
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

// An unavailable embedder is retried with backoff and counted; the stage
// never stops, and the node gets its vector once the embedder answers.
func TestUnavailableEmbedderIsRetriedWithBackoff(t *testing.T) {
	w := newWorld(t)
	w.emb.unavailable = 3
	s := w.stage(stage.Config{Backoff: 10 * time.Millisecond, BackoffMax: 40 * time.Millisecond, Idle: 10 * time.Millisecond})
	w.deliver(events.ProductCreated{ProductState: productState(w.id(1), 1, "Fan", "Quiet desk fan", 2500)})
	if _, err := s.RunOnce(w.ctx); !errors.Is(err, embed.ErrUnavailable) {
		t.Fatalf("RunOnce with the embedder down: %v, want ErrUnavailable", err)
	}
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.After(2 * time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for w.node(w.id(1)).pending {
		select {
		case <-deadline:
			cancel()
			t.Fatal("the node never got its vector after the embedder came back")
		case <-tick.C:
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run ended with %v", err)
	}
	w.current(w.id(1))
	if got := testutil.ToFloat64(errorsCounter(t, s, "embedder_unavailable")); got != 3 {
		t.Fatalf("embedder_unavailable counted %g times, want 3", got)
	}
}

// errorsCounter is the stage's error counter of kind.
func errorsCounter(t *testing.T, s *stage.Stage, kind string) prometheus.Collector {
	t.Helper()
	for _, c := range s.Collectors() {
		if v, ok := c.(*prometheus.CounterVec); ok {
			if m, err := v.GetMetricWithLabelValues(kind); err == nil {
				desc := make(chan *prometheus.Desc, 1)
				v.Describe(desc)
				if strings.Contains((<-desc).String(), "embedding_errors_total") {
					return m
				}
			}
		}
	}
	t.Fatal("no embedding_errors_total collector")
	return nil
}

// gauge is the value of the stage's gauge named name.
func gauge(t *testing.T, s *stage.Stage, name string) float64 {
	t.Helper()
	for _, c := range s.Collectors() {
		if g, ok := c.(prometheus.Gauge); ok {
			desc := make(chan *prometheus.Desc, 1)
			g.Describe(desc)
			if strings.Contains((<-desc).String(), `"graphsync_`+name+`"`) {
				return testutil.ToFloat64(g)
			}
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// A text the embedder refuses (a server answering 400) costs only its own
// node: the drain embeds the rest, in batches that hold the refused text,
// counts it (round and metric), leaves it pending and finishes.
func TestDrainSkipsARefusedTextAndFinishesTheRest(t *testing.T) {
	w := newWorld(t)
	w.emb.refuse = "REFUSE-ME"
	s := w.stage(stage.Config{BatchSize: 2})
	var evs []events.Event
	for i := int64(1); i <= 5; i++ {
		description := "Enamel mug, dishwasher safe"
		if i == 2 {
			description = "REFUSE-ME enamel mug"
		}
		evs = append(evs, events.ProductCreated{ProductState: productState(w.id(i), 1, fmt.Sprintf("Mug %d", i), description, 900)})
	}
	w.deliver(evs...)
	round, err := s.Drain(w.ctx)
	if err != nil {
		t.Fatalf("drain with one refused text: %v", err)
	}
	if round.Refused != 1 || round.Written != 4 {
		t.Fatalf("drain: %+v, want 4 written and 1 refused", round)
	}
	for _, i := range []int64{1, 3, 4, 5} {
		w.current(w.id(i))
	}
	if n := w.node(w.id(2)); !n.pending || n.vector != nil {
		t.Fatalf("refused product: pending %v, %d floats; want pending without a vector", n.pending, len(n.vector))
	}
	if got := gauge(t, s, "embedding_refused"); got != 1 {
		t.Fatalf("embedding_refused = %g, want 1", got)
	}
	// Drained again, the refused text is not sent again.
	asked := w.emb.refusedTexts.Load()
	if round := drain(t, s, w.ctx); round.Refused != 1 || round.Written != 0 {
		t.Fatalf("second drain: %+v, want the 1 refused node only", round)
	}
	if again := w.emb.refusedTexts.Load() - asked; again != 0 {
		t.Fatalf("the refused text was sent %d more times", again)
	}
	// Its text changes: it is embedded.
	w.deliver(events.ProductUpdated{ProductState: productState(w.id(2), 2, "Mug 2", "Enamel mug, blue", 900)})
	if round := drain(t, s, w.ctx); round.Refused != 0 || round.Written != 1 {
		t.Fatalf("drain after the text changed: %+v, want 1 written", round)
	}
	w.current(w.id(2))
	if got := gauge(t, s, "embedding_refused"); got != 0 {
		t.Fatalf("embedding_refused = %g after the text changed, want 0", got)
	}
}

// Sync's stage never stalls on a refused text: with a refused node in the
// backlog and backoff set far beyond the test's deadline, a product
// created later still gets its vector at once.
func TestRunDoesNotStallOnARefusedText(t *testing.T) {
	w := newWorld(t)
	w.emb.refuse = "REFUSE-ME"
	s := w.stage(stage.Config{Idle: 10 * time.Millisecond, Backoff: time.Hour, BackoffMax: time.Hour})
	w.deliver(events.ProductCreated{ProductState: productState(w.id(1), 1, "Lamp", "REFUSE-ME lamp", 3000)})
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run ended with %v", err)
		}
	}()
	poll := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("the stage stalled: %s", what)
			}
			time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
		}
	}
	poll("the refused text was never asked for", func() bool { return w.emb.refusedTexts.Load() > 0 })
	w.deliver(events.ProductCreated{ProductState: productState(w.id(2), 1, "Lamp", "Brass desk lamp", 3000)})
	poll("the product created after the refused one never got its vector", func() bool { return !w.node(w.id(2)).pending })
	w.current(w.id(2))
	if !w.node(w.id(1)).pending {
		t.Fatal("the refused product is no longer pending")
	}
}

// The wait for the vector index is a setting: when it runs out while the
// index populates, the error names the index and its progress (not a
// driver timeout); a second call with time enough waits for it, also when
// the index was already created.
func TestVectorIndexWaitEndsWithItsProgress(t *testing.T) {
	w := newWorld(t)
	suffix := fmt.Sprint(w.tenant)
	model := graphmodel.Default
	e := *model.Embedding
	e.VectorProperty, e.Index = "wait_test_vector_"+suffix, "wait_test_index_"+suffix
	model.Embedding = &e
	t.Cleanup(func() {
		// Test-only DDL of a name made of digits.
		_, _ = neo4j.ExecuteQuery(context.Background(), w.driver, "DROP INDEX "+e.Index+" IF EXISTS", nil, neo4j.EagerResultTransformer)
	})
	// 5,000 vectors: population takes seconds, far more than the wait.
	for start := 0; start < 5_000; start += 5_000 {
		if _, err := neo4j.ExecuteQuery(w.ctx, w.driver, `UNWIND range($start, $start + 4999) AS i
CREATE (n:Product {tenant_id: $tenant, id: $base + i}) SET n[$property] = [x IN range(1, 384) | rand() - 0.5]`,
			map[string]any{"start": start, "tenant": w.tenant, "base": w.base, "property": e.VectorProperty}, neo4j.EagerResultTransformer); err != nil {
			t.Fatal(err)
		}
	}
	err := stage.EnsureVectorIndexWithin(w.ctx, w.driver, "", model, 384, time.Millisecond)
	if !errors.Is(err, stage.ErrVectorIndexNotOnline) {
		t.Fatalf("a wait of 1ms for 5,000 vectors: %v, want ErrVectorIndexNotOnline", err)
	}
	if msg := err.Error(); !strings.Contains(msg, e.Index) || !strings.Contains(msg, "% populated") || !strings.Contains(msg, "POPULATING") {
		t.Fatalf("error %q does not name the index, its state and its progress", msg)
	}
	if err := stage.EnsureVectorIndexWithin(w.ctx, w.driver, "", model, 384, 4*time.Minute); err != nil {
		t.Fatalf("waiting again for the populating index: %v", err)
	}
	res, err := neo4j.ExecuteQuery(w.ctx, w.driver, "SHOW INDEXES YIELD name, state WHERE name = $name RETURN state",
		map[string]any{"name": e.Index}, neo4j.EagerResultTransformer)
	if err != nil || len(res.Records) != 1 || res.Records[0].Values[0] != "ONLINE" {
		t.Fatalf("index after the second wait: %v, %v", err, res)
	}
}

// Beside (the rebuild runs it beside a replay) writes what the projector
// queues while it runs, returns what its rounds did, and ends when stop is
// closed, also while it waits with nothing pending.
func TestBesideWritesWhileRunningAndEndsWhenStopped(t *testing.T) {
	w := newWorld(t)
	s := w.stage(stage.Config{Idle: time.Hour, Backoff: time.Hour, BackoffMax: time.Hour})
	w.deliver(events.ProductCreated{ProductState: productState(w.id(1), 1, "Kettle", "Boils water fast", 2999)},
		events.ProductCreated{ProductState: productState(w.id(2), 1, "Teapot", "Porcelain, 1 l", 1999)})
	stop, done := make(chan struct{}), make(chan stage.Round, 1)
	go func() { done <- s.Beside(w.ctx, stop) }()
	deadline := time.Now().Add(time.Minute)
	for w.node(w.id(1)).pending || w.node(w.id(2)).pending {
		if time.Now().After(deadline) {
			t.Fatal("Beside wrote no vectors in a minute")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
	close(stop)
	select {
	case r := <-done:
		if r.Written != 2 || r.Embedded != 2 {
			t.Fatalf("Beside returned %+v, want 2 embedded and written", r)
		}
	case <-time.After(time.Minute):
		t.Fatal("Beside did not end within a minute of stop (its idle wait is an hour)")
	}
	w.current(w.id(1))
	w.current(w.id(2))
}
