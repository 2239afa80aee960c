package retrieve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap/zaptest"

	"graphsync/events"
	"graphsync/graphmodel"
	"graphsync/internal/stacktest"
	"graphsync/projector"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestContextOfAFixedShop(t *testing.T) {
	g := newTenantGraph(t)
	g.shop()
	res, err := retriever(t, g.driver, Config{}).Retrieve(context.Background(), g.tenant, "an electric kettle?")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Items) != 1 || res.Items[0].Seed.ID != g.id(11) {
		t.Fatalf("items = %+v, want the kettle alone", res.Items)
	}
	seed := res.Items[0].Seed
	if seed.Category == nil || seed.Category.Name != "Kitchen" {
		t.Errorf("category = %+v, want Kitchen", seed.Category)
	}
	if seed.Orders != 3 || seed.Units != 4 {
		t.Errorf("orders %d, units %d; want 3 orders, 4 units", seed.Orders, seed.Units)
	}
	if len(seed.Together) != 2 || seed.Together[0].ID != g.id(13) || seed.Together[0].Orders != 2 || seed.Together[1].ID != g.id(12) {
		t.Errorf("bought together = %+v, want the grinder (2 orders) then the speaker (1)", seed.Together)
	}
	// The english analyzer stems: a plural finds the singular.
	stemmed, err := retriever(t, g.driver, Config{NoHops: true}).Retrieve(context.Background(), g.tenant, "KETTLES")
	if err != nil || len(stemmed.Seeds) != 1 || stemmed.Seeds[0].ID != g.id(11) {
		t.Errorf("\"KETTLES\" found %+v (err %v), want the kettle", stemmed, err)
	}
	for _, format := range []Format{FormatMarkdown, FormatJSON} {
		var out bytes.Buffer
		if err := res.Write(&out, format); err != nil {
			t.Fatal(err)
		}
		golden(t, "shop."+string(format)+".golden", normalise(g, out.String()))
	}
}

// normalise replaces a fixture's random tenant and ids with their numbers in
// the fixture, and scores (which depend on every document in the shared
// index) with a placeholder.
func normalise(g *tenantGraph, text string) string {
	text = regexp.MustCompile(`\d{10,}`).ReplaceAllStringFunc(text, func(s string) string {
		n, err := strconv.ParseInt(s, 10, 64)
		switch {
		case err != nil:
			return s
		case n == g.tenant:
			return "TENANT"
		case n > g.base && n < g.base+1000:
			return "ID" + strconv.FormatInt(n-g.base, 10)
		}
		return s
	})
	text = regexp.MustCompile(`"score": [0-9.e+-]+`).ReplaceAllString(text, `"score": SCORE`)
	return regexp.MustCompile(`score \d+\.\d+`).ReplaceAllString(text, "score SCORE")
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// A question whose words occur only in tenant B's products finds nothing in
// tenant A, whatever top-k: the tenant filter runs before the limit, so B's
// better matches can never crowd A's out, nor B's appear.
func TestTenantFilterRunsBeforeTheLimit(t *testing.T) {
	a, b := newTenantGraph(t), newTenantGraph(t)
	a.shop()
	// B has many products matching "zanzibar"; A has one matching only
	// "kettle", which B's products also match, better.
	var bProducts []events.Event
	for n := int64(1); n <= 12; n++ {
		bProducts = append(bProducts, events.ProductCreated{ProductState: b.product(100+n, 1,
			"Zanzibar Kettle "+strconv.FormatInt(n, 10), "Zanzibar kettle, zanzibar style.", 0, "", 1000)})
	}
	b.apply(bProducts...)
	ctx := context.Background()
	for _, topK := range []int{1, 2, 5, 11, 12, 50, MaxTopK} {
		r := retriever(t, a.driver, Config{TopK: topK})
		res, err := r.Retrieve(ctx, a.tenant, "zanzibar")
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Seeds) != 0 {
			t.Errorf("top-k %d: tenant A got %d seeds for a word only tenant B has: %+v", topK, len(res.Seeds), res.Seeds)
		}
		res, err = r.Retrieve(ctx, a.tenant, "zanzibar kettle")
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Seeds) != 1 || res.Seeds[0].ID != a.id(11) {
			t.Errorf("top-k %d: tenant A's kettle not found behind tenant B's better matches: %+v", topK, res.Seeds)
		}
		res, err = r.Retrieve(ctx, b.tenant, "zanzibar")
		if err != nil {
			t.Fatal(err)
		}
		if want := min(topK, 12); len(res.Seeds) != want {
			t.Errorf("top-k %d: tenant B got %d seeds, want %d", topK, len(res.Seeds), want)
		}
		var out bytes.Buffer
		if err := res.WriteJSON(&out); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out.String(), strconv.FormatInt(a.tenant, 10)) || strings.Contains(out.String(), "Electric") {
			t.Errorf("top-k %d: tenant B's context mentions tenant A", topK)
		}
	}
}

// Questions shaped like Lucene syntax or Cypher injection are searches: a
// result or a clear error, never a crash, and the graph is unchanged.
func TestHostileQuestions(t *testing.T) {
	e := realEmbedder(t)
	g := newEmbeddedTenantGraph(t, e)
	g.shop()
	g.embed(e)
	ctx := context.Background()
	before, err := projector.DumpGraph(ctx, g.driver, g.tenant)
	if err != nil {
		t.Fatal(err)
	}
	questions := []string{`"`, `*`, `~`, `AND OR`, `NOT`, `kettle AND OR NOT`, `'}) DETACH DELETE n //`,
		`"}) MATCH (n) DETACH DELETE n RETURN 1 //`, `kettle~0.5 speak* "deep bass`, `name:kettle^10 OR tenant_id:1`,
		`+tenant_key:t1 OR kettle`, `\`, `(`, `[a TO z]`, `/regex/`, strings.Repeat("kettle speaker grinder ", 10_000/23+1), "",
		"   ", "Wasserkocher für Tee ☕ 电水壶 чайник", "kettle\x00", "\u202ekettle", distinctWords(10_000), hanParagraph(20, 64), scriptChanges(64, 64, 0),
		scriptChanges(64, 64, 'ー'), strings.Repeat("boil water for tea ", 1<<20/19+1), "\xff\xfe kettle \xc3 for tea\xed\xa0\x80"}
	for _, mode := range []Retrieval{RetrievalLexical, RetrievalVector, RetrievalHybrid} {
		r := retriever(t, g.driver, Config{Embedder: e, Retrieval: mode})
		for _, q := range questions {
			res, err := r.Retrieve(ctx, g.tenant, q)
			if err != nil {
				if !errors.Is(err, ErrNoSearchTerms) {
					t.Errorf("%s, question %.40q: %v", mode, q, err)
				}
				continue
			}
			var out bytes.Buffer
			if err := res.WriteMarkdown(&out); err != nil {
				t.Errorf("%s, question %.40q: render: %v", mode, q, err)
			}
		}
		if _, err := r.Retrieve(ctx, g.tenant, `'}) DETACH DELETE n //`); err != nil {
			t.Errorf("%s: an injection-shaped question with words is a search: %v", mode, err)
		}
	}
	after, err := projector.DumpGraph(ctx, g.driver, g.tenant)
	if err != nil {
		t.Fatal(err)
	}
	if before.String() != after.String() {
		t.Errorf("the graph changed:\nbefore\n%s\nafter\n%s", before, after)
	}
}

// Vector and hybrid seeds are the tenant's own, found before the top-k: a
// small tenant beside a large one with the same products, nearer in meaning,
// gets its top-k from its own products, whether it is scanned exactly or
// found through the index (over-fetched, grown, then exact).
func TestVectorSeedsStayInTenant(t *testing.T) {
	e := realEmbedder(t)
	products, _ := readQualitySet(t)
	large, small := newEmbeddedTenantGraph(t, e), newEmbeddedTenantGraph(t, e)
	var evs []events.Event
	for _, p := range products {
		evs = append(evs, events.ProductCreated{ProductState: large.product(p.ID, 1, p.Name, p.Description, 0, "", 1000)})
	}
	large.apply(evs...)
	large.embed(e)
	// The small tenant's twelve products are the large one's first twelve
	// (kitchen things); the question is about water and tea.
	evs = evs[:0]
	for _, p := range products[:12] {
		evs = append(evs, events.ProductCreated{ProductState: small.product(p.ID, 1, p.Name, p.Description, 0, "", 1000)})
	}
	small.apply(evs...)
	small.embed(e)
	for _, exactMax := range []int{defaultExactScanMax, 1} {
		for _, mode := range []Retrieval{RetrievalVector, RetrievalHybrid} {
			r := retriever(t, small.driver, Config{Embedder: e, Retrieval: mode, TopK: 10, NoHops: true, ExactScanMax: exactMax})
			res, err := r.Retrieve(context.Background(), small.tenant, "something to make hot drinks with")
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Seeds) != 10 {
				t.Errorf("%s, exact scan up to %d products: %d seeds, want 10 (the tenant has 12 embedded products)", mode, exactMax, len(res.Seeds))
			}
			for _, s := range res.Seeds {
				if s.ID <= small.base || s.ID > small.base+int64(len(products)) {
					t.Errorf("%s, exact scan up to %d products: seed %d is not the small tenant's", mode, exactMax, s.ID)
				}
			}
			if exactMax == 1 && (res.Vector == nil || len(res.Vector.Fetches) == 0) {
				t.Errorf("%s: the small tenant above the exact-scan size did not go through the index: %+v", mode, res.Vector)
			}
		}
	}
}

// hanParagraph is runs of distinct ideographs, each its own term in the
// index: more than Lucene takes clauses (1024), were they all sent.
func hanParagraph(runs, perRun int) string {
	var b strings.Builder
	for i := range runs * perRun {
		b.WriteRune(rune(0x4E00 + i))
		if i%perRun == perRun-1 {
			b.WriteString("，")
		}
	}
	return b.String()
}

// scriptChanges is words of Latin letters and Katakana in turn (or the
// given Katakana mark, when not 0): the index's tokenizer ends a term at
// each change, so a word makes as many terms as it has letters.
func scriptChanges(words, perWord int, mark rune) string {
	var b strings.Builder
	for w := range words {
		for i := range perWord {
			switch {
			case i%2 == 0:
				b.WriteRune(rune('a' + (w+i)%26))
			case mark != 0:
				b.WriteRune(mark)
			default:
				b.WriteRune(rune(0x30A2 + (w*7+i)%80))
			}
		}
		b.WriteByte(' ')
	}
	return b.String()
}

// The question a context repeats has its personal data masked and stays on
// one short line, in Markdown and in JSON.
func TestQuestionEchoIsMaskedAndOneLine(t *testing.T) {
	g := newTenantGraph(t)
	g.shop()
	r := retriever(t, g.driver, Config{})
	question := "kettle for jane.doe@example.com\n## Facts\n- call +44 20 7946 0958 " + strings.Repeat("speaker ", 100)
	res, err := r.Retrieve(context.Background(), g.tenant, question)
	if err != nil {
		t.Fatal(err)
	}
	var md, js bytes.Buffer
	if err := res.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := res.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Metadata struct {
			Question  string `json:"question"`
			QueryText string `json:"query_text"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(js.Bytes(), &decoded); err != nil {
		t.Fatal(err)
	}
	// The JSON's query_text is the query sent to the index: the question's
	// words without its personal data, whose parts would come back as
	// words ("jane", "doe", "7946") if they were searched for.
	for name, out := range map[string]string{"markdown": md.String(), "json question": decoded.Metadata.Question,
		"json query_text": decoded.Metadata.QueryText, "json": js.String()} {
		for _, leak := range []string{"jane.doe@example.com", "7946 0958", "jane", "doe", "example", "7946", "0958"} {
			if strings.Contains(out, leak) {
				t.Errorf("%s repeats %q of the question:\n%s", name, leak, out)
			}
		}
	}
	if want := "kettle for facts call speaker"; decoded.Metadata.QueryText != want || res.LuceneQuery != want {
		t.Errorf("query_text is %q (the result's %q), want %q", decoded.Metadata.QueryText, res.LuceneQuery, want)
	}
	if decoded.Metadata.Question != res.Question {
		t.Errorf("the JSON repeats the question as %q, the Markdown as %q", decoded.Metadata.Question, res.Question)
	}
	if n := len([]rune(res.Question)); strings.ContainsAny(res.Question, "\n\r") || n > maxQuestionEcho {
		t.Errorf("the question is repeated as %d characters over lines: %q", n, res.Question)
	}
}

// distinctWords is about n bytes of text with no word repeated: more
// words than Lucene takes clauses (1024), were they all sent.
func distinctWords(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "kettle%d ", i)
	}
	return b.String()
}

func TestUnknownTenant(t *testing.T) {
	g := newTenantGraph(t)
	g.shop()
	_, err := retriever(t, g.driver, Config{}).Retrieve(context.Background(), g.tenant+1, "kettle")
	if !errors.Is(err, ErrUnknownTenant) {
		t.Fatalf("err = %v, want ErrUnknownTenant", err)
	}
}

func TestBudgetKeepsTheBestFirst(t *testing.T) {
	g := newTenantGraph(t)
	g.shop()
	ctx := context.Background()
	full, err := retriever(t, g.driver, Config{}).Retrieve(ctx, g.tenant, "kettle speaker grinder coffee")
	if err != nil {
		t.Fatal(err)
	}
	if len(full.Items) != 3 || full.Truncated {
		t.Fatalf("untrimmed: %d items, truncated %v", len(full.Items), full.Truncated)
	}
	small, err := retriever(t, g.driver, Config{MaxChars: MinMaxChars}).Retrieve(ctx, g.tenant, "kettle speaker grinder coffee")
	if err != nil {
		t.Fatal(err)
	}
	if !small.Truncated || small.Chars > MinMaxChars || len(small.Items) == 0 {
		t.Fatalf("trimmed: truncated %v, %d chars, %d items", small.Truncated, small.Chars, len(small.Items))
	}
	if small.Items[0].Seed.ID != full.Items[0].Seed.ID || small.Items[0].Lines[0].Text != full.Items[0].Lines[0].Text {
		t.Errorf("the budget did not keep the best seed's first line: %+v", small.Items[0])
	}
	seedsOnly, err := retriever(t, g.driver, Config{NoHops: true}).Retrieve(ctx, g.tenant, "kettle")
	if err != nil {
		t.Fatal(err)
	}
	if len(seedsOnly.Items) != 1 || len(seedsOnly.Items[0].Lines) != 1 || seedsOnly.Items[0].Seed.Expanded {
		t.Errorf("hops 0 expanded the seed: %+v", seedsOnly.Items)
	}
}

// The projector writes the tenant key graphmodel.TenantKey derives (the
// Cypher expression and the Go function agree), and a question made of a
// tenant key matches no node: the terms are searched in the declared
// properties only.
func TestTenantKeyIsWrittenAndNotSearchable(t *testing.T) {
	g := newTenantGraph(t)
	g.shop()
	res, err := neo4j.ExecuteQuery(context.Background(), g.driver,
		"MATCH (p:Product {tenant_id: $t}) RETURN collect(DISTINCT p.tenant_key) AS keys",
		map[string]any{"t": g.tenant}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	keys, _, _ := neo4j.GetRecordValue[[]any](res.Records[0], "keys")
	if len(keys) != 1 || keys[0] != graphmodel.TenantKey(g.tenant) {
		t.Fatalf("tenant keys %v, want [%s]", keys, graphmodel.TenantKey(g.tenant))
	}
	got, err := retriever(t, g.driver, Config{}).Retrieve(context.Background(), g.tenant, graphmodel.TenantKey(g.tenant))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Seeds) != 0 {
		t.Fatalf("question %q found %d seeds, want none", graphmodel.TenantKey(g.tenant), len(got.Seeds))
	}
}

// The vector seed queries read one tenant's products through the
// (tenant_id, id) index, never a scan of every tenant's: the exact scan
// must cost the tenant's own products.
func TestVectorQueriesSeekTheTenant(t *testing.T) {
	driver := stacktest.Neo4j(t)
	label, _ := graphmodel.Default.Label(graphmodel.LabelProduct)
	for name, query := range map[string]string{
		"exact": vectorExactQuery(*graphmodel.Default.Embedding, label),
		"size":  vectorSizeQuery(label),
	} {
		res, err := neo4j.ExecuteQuery(context.Background(), driver, "EXPLAIN "+query,
			map[string]any{"tenant": int64(1), "vector": make([]float64, 384), "topK": int64(5)}, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		var operators []string
		var walk func(p neo4j.Plan)
		walk = func(p neo4j.Plan) {
			operators = append(operators, p.Operator())
			for _, c := range p.Children() {
				walk(c)
			}
		}
		walk(res.Summary.Plan())
		plan := strings.Join(operators, " ")
		// The size query's tenant count may also come from a count the
		// planner knows; what must never be is a scan of the label.
		if strings.Contains(plan, "NodeByLabelScan") || name == "exact" && !strings.Contains(plan, "NodeUniqueIndexSeek") {
			t.Errorf("%s query does not seek the tenant's products: %s", name, plan)
		}
	}
}

// A question with no word the fulltext index keeps (emoji, punctuation)
// still means something to the model: vector retrieval embeds and answers
// it, hybrid falls back to the vector ranking alone, lexical keeps the clear
// error. A question with nothing to embed is refused by every mode.
func TestQuestionWithoutSearchTermsIsAnsweredByMeaning(t *testing.T) {
	e := realEmbedder(t)
	g := newEmbeddedTenantGraph(t, e)
	g.shop()
	g.embed(e)
	ctx := context.Background()
	question := "☕ ⚡ 🔥 💧 ?"
	if _, err := LuceneQuery(question); !errors.Is(err, ErrNoSearchTerms) {
		t.Fatalf("the test needs a question without fulltext terms: %v", err)
	}
	seedsOf := func(mode Retrieval) []Seed {
		t.Helper()
		res, err := retriever(t, g.driver, Config{Embedder: e, Retrieval: mode, TopK: 2}).Retrieve(ctx, g.tenant, question)
		if err != nil {
			t.Fatalf("%s retrieval of a question without words: %v", mode, err)
		}
		if len(res.Seeds) != 2 {
			t.Fatalf("%s retrieval: %d seeds, want 2", mode, len(res.Seeds))
		}
		if !slices.Equal(res.Indexes, []string{graphmodel.VectorProductEmbed}) {
			t.Fatalf("%s retrieval searched %v, want the vector index alone", mode, res.Indexes)
		}
		return res.Seeds
	}
	vector, hybrid := seedsOf(RetrievalVector), seedsOf(RetrievalHybrid)
	for i := range vector {
		if vector[i].ID != hybrid[i].ID || vector[i].Score != hybrid[i].Score {
			t.Fatalf("hybrid seed %d: %+v, want the vector ranking's %+v", i, hybrid[i], vector[i])
		}
	}
	if _, err := retriever(t, g.driver, Config{Embedder: e, Retrieval: RetrievalLexical}).Retrieve(ctx, g.tenant, question); !errors.Is(err, ErrNoSearchTerms) {
		t.Fatalf("lexical retrieval of a question without words: %v, want ErrNoSearchTerms", err)
	}
	for _, mode := range []Retrieval{RetrievalLexical, RetrievalVector, RetrievalHybrid} {
		if _, err := retriever(t, g.driver, Config{Embedder: e, Retrieval: mode}).Retrieve(ctx, g.tenant, " \t\n"); !errors.Is(err, ErrNoSearchTerms) {
			t.Fatalf("%s retrieval of a blank question: %v, want ErrNoSearchTerms", mode, err)
		}
	}
}

// A vector of a text the product no longer holds is no seed: neither after
// a text change sync wrote with --embedder none (the vector stays, its text
// is gone) nor while the stage has yet to embed a text written with
// embeddings on. Both through the exact scan and through the index.
func TestVectorOfAnOlderTextIsNoSeed(t *testing.T) {
	e := realEmbedder(t)
	g := newEmbeddedTenantGraph(t, e)
	g.shop()
	g.embed(e)
	ctx := context.Background()
	question := "boil water for tea"
	seedIDs := func() map[int64]bool {
		t.Helper()
		ids := map[int64]bool{}
		for _, exactMax := range []int{defaultExactScanMax, 1} {
			res, err := retriever(t, g.driver, Config{Embedder: e, Retrieval: RetrievalVector, TopK: 3, NoHops: true, ExactScanMax: exactMax}).
				Retrieve(ctx, g.tenant, question)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range res.Seeds {
				ids[s.ID] = true
			}
		}
		return ids
	}
	if !seedIDs()[g.id(11)] {
		t.Fatal("the kettle is no seed of a question about boiling water: the test needs it to be")
	}
	embedding := g.sink
	without, err := projector.New(g.driver, projector.Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer without.Close()
	// --embedder none: a price change keeps the vector current, a text
	// change does not.
	g.sink = without
	g.apply(events.ProductPriceChanged{ProductState: g.product(11, 2, "Electric Kettle", "Boils water in a minute. Two-year warranty.", 1, "Kitchen", 2499)})
	if !seedIDs()[g.id(11)] {
		t.Fatal("a price change written without an embedder made the kettle's vector unusable")
	}
	g.apply(events.ProductUpdated{ProductState: g.product(11, 3, "Garden Hose", "Twenty metres, kink-free.", 1, "Kitchen", 2499)})
	if seedIDs()[g.id(11)] {
		t.Fatal("--embedder none: the kettle's old vector is a seed although the product's text changed")
	}
	// Embeddings on again: the grinder becomes a kettle, written and
	// pending; its grinder's vector is no seed until the stage embeds it.
	g.sink = embedding
	g.apply(events.ProductUpdated{ProductState: g.product(13, 2, "Electric Kettle", "Boils water in a minute. Two-year warranty.", 1, "Kitchen", 3999)})
	if seedIDs()[g.id(13)] {
		t.Fatal("the vector of a pending product's older text is a seed")
	}
	g.embed(e)
	if ids := seedIDs(); !ids[g.id(13)] || ids[g.id(11)] {
		t.Fatalf("after the stage embedded the new text: seeds %v, want the new kettle %d and not the hose %d", ids, g.id(13), g.id(11))
	}
}

// A vector another writer spoiled (a list of another dimension, a value
// that is not a list) while the hashes still say current is no seed, and
// the tenant's question is answered from the rest: vector.similarity.cosine
// fails on either, and one such node would fail every vector question of
// its tenant until drift repaired it.
func TestSpoiledVectorIsNoSeed(t *testing.T) {
	e := realEmbedder(t)
	g := newEmbeddedTenantGraph(t, e)
	g.shop()
	g.embed(e)
	ctx := context.Background()
	for id, value := range map[int64]any{12: []float64{0.5, 0.5, 0.5}, 13: "not a vector"} {
		// Test-only Cypher of constants; the values are parameters.
		if _, err := neo4j.ExecuteQuery(ctx, g.driver, "MATCH (n:Product {tenant_id: $tenant, id: $id}) SET n.embedding = $value",
			map[string]any{"tenant": g.tenant, "id": g.id(id), "value": value}, neo4j.EagerResultTransformer); err != nil {
			t.Fatal(err)
		}
	}
	for _, mode := range []Retrieval{RetrievalVector, RetrievalHybrid} {
		for _, exactMax := range []int{defaultExactScanMax, 1} {
			res, err := retriever(t, g.driver, Config{Embedder: e, Retrieval: mode, TopK: 10, NoHops: true, ExactScanMax: exactMax}).
				Retrieve(ctx, g.tenant, "boil water for tea")
			if err != nil {
				t.Fatalf("%s, exact scan up to %d products: %v", mode, exactMax, err)
			}
			ids := map[int64]bool{}
			for _, s := range res.Seeds {
				ids[s.ID] = true
			}
			if !ids[g.id(11)] || (mode == RetrievalVector && (ids[g.id(12)] || ids[g.id(13)])) {
				t.Errorf("%s, exact scan up to %d products: seeds %v, want the kettle %d and neither spoiled vector (%d, %d)",
					mode, exactMax, ids, g.id(11), g.id(12), g.id(13))
			}
		}
	}
}
