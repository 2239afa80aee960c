package retrieve

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/embed"
	"graphsync/graphmodel"
)

// Limits of the settings.
const (
	MaxTopK     = 100
	MaxHops     = 2
	MinMaxChars = 200
)

// ErrUnknownTenant is returned for a tenant the graph holds nothing of.
var ErrUnknownTenant = errors.New("the graph has no such tenant")

// Config tunes a Retriever. The zero value is ready to use.
type Config struct {
	// TopK is how many seed nodes the fulltext indexes contribute, the best
	// scoring first. Default: 5; at most MaxTopK.
	TopK int
	// Hops is how far the seeds are expanded: 0, the seeds alone; 1, their
	// category and the orders that contain them (counted by status, with
	// units); 2, also the products bought together with them (through
	// orders) and their buyers' segments and countries (counted). Default: 2.
	// Use NoHops for 0.
	Hops int
	// NoHops asks for the seeds alone (Hops 0, which the zero value cannot say).
	NoHops bool
	// MaxChars bounds the characters of context (the items' content), most
	// relevant first. Default: 4000; at least MinMaxChars.
	MaxChars int
	// Related is how many products bought together are listed per seed.
	// Default: 5.
	Related int
	// Database is the Neo4j database read. Default: "" (the server's default).
	Database string
	// Model is the graph model whose fulltext indexes and allowlist are used.
	// Default: graphmodel.Default.
	Model *graphmodel.Model
	// Timeout bounds one retrieval. Default: 30s.
	Timeout time.Duration
	// Embedder turns the question into a vector for vector and hybrid
	// retrieval; it must be the model the graph's embeddings were made
	// with. Default: nil (lexical retrieval only).
	Embedder embed.Embedder
	// Retrieval is how seeds are found. Default: RetrievalHybrid with an
	// Embedder, RetrievalLexical without.
	Retrieval Retrieval
	// ExactScanMax is the largest tenant (in products) whose vector seeds
	// are found by scoring every product exactly; a larger tenant's come
	// from the vector index, over-fetched (ADR 0024). Default: 1000.
	ExactScanMax int
}

// Defaults of Config (and of the context command's flags).
const (
	DefaultTopK     = 5
	DefaultMaxChars = 4000
)

func (c Config) withDefaults() Config {
	if c.TopK == 0 {
		c.TopK = DefaultTopK
	}
	if c.NoHops {
		c.Hops = 0
	} else if c.Hops == 0 {
		c.Hops = MaxHops
	}
	if c.MaxChars == 0 {
		c.MaxChars = DefaultMaxChars
	}
	if c.Related == 0 {
		c.Related = 5
	}
	if c.Model == nil {
		c.Model = &graphmodel.Default
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.Retrieval == "" {
		c.Retrieval = RetrievalLexical
		if c.Embedder != nil {
			c.Retrieval = RetrievalHybrid
		}
	}
	if c.ExactScanMax == 0 {
		c.ExactScanMax = defaultExactScanMax
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.TopK < 1 || c.TopK > MaxTopK:
		return fmt.Errorf("top-k must be between 1 and %d, got %d", MaxTopK, c.TopK)
	case c.Hops < 0 || c.Hops > MaxHops:
		return fmt.Errorf("hops must be between 0 and %d, got %d", MaxHops, c.Hops)
	case c.MaxChars < MinMaxChars:
		return fmt.Errorf("max-chars must be at least %d, got %d", MinMaxChars, c.MaxChars)
	case c.Related < 1:
		return fmt.Errorf("related must be at least 1, got %d", c.Related)
	case c.ExactScanMax < 0:
		return fmt.Errorf("exact-scan-max must not be negative, got %d", c.ExactScanMax)
	}
	if _, err := ParseRetrieval(string(c.Retrieval)); err != nil {
		return err
	}
	if c.Retrieval != RetrievalLexical && c.Embedder == nil {
		return fmt.Errorf("%s retrieval needs an embedder (the model the graph's embeddings were made with)", c.Retrieval)
	}
	if c.Retrieval != RetrievalLexical && c.Model.Embedding == nil {
		return fmt.Errorf("%s retrieval needs a graph model that embeds a label", c.Retrieval)
	}
	if err := c.Model.Validate(); err != nil {
		return fmt.Errorf("graph model: %w", err)
	}
	if len(c.Model.Fulltext) == 0 {
		return errors.New("graph model declares no fulltext index to seed retrieval from")
	}
	return nil
}

// Retriever reads tenant-scoped context from the graph.
type Retriever struct {
	driver neo4j.DriverWithContext
	cfg    Config
}

// New returns a Retriever, or an error naming the setting that is wrong.
func New(driver neo4j.DriverWithContext, cfg Config) (*Retriever, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("retrieve config: %w", err)
	}
	return &Retriever{driver: driver, cfg: cfg}, nil
}

// Seed is one node a fulltext index found, with what the expansion found
// around it.
type Seed struct {
	Index string
	Label string
	ID    int64
	Score float64
	// Props holds the node's allowlisted properties only.
	Props map[string]any
	// Expanded is true when the seed was expanded (Hops >= 1 and a product).
	Expanded bool
	Category *Ref
	// Orders counts the orders that contain the product; OrderStatus and
	// Units break them down.
	Orders      int64
	Units       int64
	OrderStatus []Count
	// Together lists products bought in the same orders, most orders first.
	Together []Related
	// Segments and Countries count the distinct customers who ordered it.
	Segments  []Count
	Countries []Count
}

// Ref names a node.
type Ref struct {
	Label string
	ID    int64
	Name  string
}

// Related is a product bought together with a seed, in Orders orders.
type Related struct {
	Ref
	Orders int64
}

// Count is a value and how often it occurs.
type Count struct {
	Value string
	N     int64
}

// maxQuestionEcho bounds the question a context repeats.
const maxQuestionEcho = 200

// Result is one retrieval: the seeds found, and the ranked, trimmed items.
type Result struct {
	TenantID int64
	// Question is the question as the context shows it: personal data
	// masked, on one line, at most maxQuestionEcho characters.
	Question string
	// LuceneQuery is the fulltext query sent to the index: the question's
	// words, its personal data taken out.
	LuceneQuery string
	// Retrieval is how the seeds were found.
	Retrieval Retrieval
	// Vector says how the vector seeds were found (nil without them).
	Vector   *VectorPlan
	Indexes  []string
	TopK     int
	Hops     int
	MaxChars int
	// Seeds are every seed found, best first, before trimming.
	Seeds []Seed
	// Items are what fits in MaxChars, most relevant first.
	Items []Item
	// Chars is the characters of context the items hold.
	Chars int
	// Truncated is true when the budget left something out.
	Truncated bool
}

// Retrieve returns the context of question for tenantID. The question can be
// any text: it reaches Neo4j only as an escaped Lucene query in a parameter.
//
// The index is searched for the question's words with its e-mail addresses
// and phone numbers taken out: the graph holds none in its text (the
// projection masks them), and the query is repeated to the caller
// (Result.LuceneQuery, the JSON's query_text), which must not echo them.
func (r *Retriever) Retrieve(ctx context.Context, tenantID int64, question string) (*Result, error) {
	stripped := graphmodel.StripPersonalData(question)
	if !askable(stripped, r.cfg.Retrieval) {
		return nil, ErrNoSearchTerms
	}
	query, err := LuceneQuery(stripped)
	if errors.Is(err, ErrNoSearchTerms) {
		// No word the fulltext index keeps, yet symbols the model can
		// embed (Askable): the vector ranking alone answers.
		query, err = "", nil
	}
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	res := &Result{TenantID: tenantID, Question: shorten(lineText(question), maxQuestionEcho), LuceneQuery: query,
		Retrieval: r.cfg.Retrieval, TopK: r.cfg.TopK, Hops: r.cfg.Hops, MaxChars: r.cfg.MaxChars}
	if r.cfg.Retrieval != RetrievalVector && query != "" {
		for _, f := range r.cfg.Model.Fulltext {
			res.Indexes = append(res.Indexes, f.Name)
		}
	}
	var vector []float32
	if r.cfg.Retrieval != RetrievalLexical {
		res.Indexes = append(res.Indexes, r.cfg.Model.Embedding.Index)
		if vector, err = r.questionVector(ctx, question); err != nil {
			return nil, err
		}
	}

	session := r.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeRead, DatabaseName: r.cfg.Database})
	defer func() {
		// The request's context may be done; closing must still return the
		// connection to the pool.
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = session.Close(closeCtx)
	}()
	_, err = session.ExecuteRead(ctx, func(tx neo4j.ManagedTransaction) (any, error) {
		res.Seeds, res.Vector = nil, nil
		if err := r.checkTenant(ctx, tx, tenantID); err != nil {
			return nil, err
		}
		seeds, plan, err := r.seeds(ctx, tx, tenantID, query, vector)
		if err != nil {
			return nil, err
		}
		if r.cfg.Hops > 0 {
			if err := r.expand(ctx, tx, tenantID, seeds); err != nil {
				return nil, err
			}
		}
		res.Seeds, res.Vector = seeds, plan
		return nil, nil
	})
	if err != nil {
		if errors.Is(err, ErrUnknownTenant) {
			return nil, fmt.Errorf("tenant %d: %w", tenantID, ErrUnknownTenant)
		}
		return nil, fmt.Errorf("read the graph: %w", err)
	}
	res.Items, res.Chars, res.Truncated = rank(res.Seeds, r.cfg.Hops, r.cfg.MaxChars)
	return res, nil
}

// seeds finds the seeds the retrieval mode asks for. A hybrid retrieval
// of a question without fulltext terms (query "") is the vector one.
func (r *Retriever) seeds(ctx context.Context, tx neo4j.ManagedTransaction, tenantID int64, query string, vector []float32) ([]Seed, *VectorPlan, error) {
	switch {
	case r.cfg.Retrieval == RetrievalVector, r.cfg.Retrieval == RetrievalHybrid && query == "":
		seeds, plan, err := r.vectorSeeds(ctx, tx, tenantID, vector, r.cfg.TopK)
		return seeds, &plan, err
	case r.cfg.Retrieval == RetrievalHybrid:
		candidates := candidatesPerList(r.cfg.TopK)
		lexical, err := r.fulltextSeeds(ctx, tx, tenantID, query, candidates)
		if err != nil {
			return nil, nil, err
		}
		semantic, plan, err := r.vectorSeeds(ctx, tx, tenantID, vector, candidates)
		if err != nil {
			return nil, nil, err
		}
		return fuse(r.cfg.TopK, lexical, semantic), &plan, nil
	}
	seeds, err := r.fulltextSeeds(ctx, tx, tenantID, query, r.cfg.TopK)
	return seeds, nil, err
}

func (r *Retriever) checkTenant(ctx context.Context, tx neo4j.ManagedTransaction, tenantID int64) error {
	tenantLabel := ""
	for _, l := range r.cfg.Model.Labels {
		if l.Role == graphmodel.RoleTenant {
			tenantLabel = l.Name
		}
	}
	result, err := tx.Run(ctx, "MATCH (t:"+tenantLabel+" {tenant_id: $tenant, id: $tenant}) RETURN count(t) AS n",
		map[string]any{"tenant": tenantID})
	if err != nil {
		return err
	}
	rec, err := result.Single(ctx)
	if err != nil {
		return err
	}
	if n, _, _ := neo4j.GetRecordValue[int64](rec, "n"); n == 0 {
		return ErrUnknownTenant
	}
	return nil
}

// Askable reports whether retrieval mode can search for question, the one
// rule the context command, the MCP server and Retrieve apply: lexical
// retrieval needs a word (QuestionTerms); vector and hybrid retrieval also
// take a question of symbols with a meaning (emoji such as ☕, category
// So), which the model embeds and the vector ranking alone answers.
// Punctuation, white space and personal data alone are no question.
func Askable(question string, mode Retrieval) bool {
	return askable(graphmodel.StripPersonalData(question), mode)
}

// askable is Askable of a question with its personal data taken out.
func askable(q string, mode Retrieval) bool {
	if len(QuestionTerms(q)) > 0 {
		return true
	}
	return mode != RetrievalLexical && strings.ContainsFunc(q, func(r rune) bool { return unicode.Is(unicode.So, r) })
}

// fulltextSeedQuery finds a tenant's best matches in one fulltext index.
// The Lucene query requires the tenant's key (graphmodel.KeyTenantKey), so
// the index itself intersects the question's hits with the tenant's
// postings: a small tenant's question costs what its own matches cost, not
// every tenant's (ADR 0024). The WHERE on tenant_id repeats the filter on
// the key the graph's constraint holds, and runs before ORDER BY and LIMIT.
// Only the label's allowlisted properties are read (projection).
func fulltextSeedQuery(label graphmodel.Label) string {
	return `CALL db.index.fulltext.queryNodes($index, $query) YIELD node, score
WHERE node.tenant_id = $tenant
RETURN node.id AS id, ` + propsProjection("node", label) + ` AS props, score
ORDER BY score DESC, id ASC
LIMIT $topK`
}

// propsProjection is a map projection of the label's allowlisted
// properties: a seed never reads a vector or a property outside the
// allowlist. Keys passed graphmodel.Validate: plain identifiers.
func propsProjection(node string, label graphmodel.Label) string {
	keys := make([]string, len(label.Properties))
	for i, p := range label.Properties {
		keys[i] = "." + p.Key
	}
	return node + " {" + strings.Join(keys, ", ") + "}"
}

// TenantLuceneQuery is the fulltext query of a question's terms (query,
// from LuceneQuery) for one tenant in index f: the tenant's key required
// with a zero boost (it filters and adds nothing to the score), the terms
// searched in the index's declared properties only, so that a question
// word shaped like a tenant key matches no tenant key.
func TenantLuceneQuery(f graphmodel.Fulltext, tenantID int64, query string) string {
	fields := make([]string, len(f.Properties))
	for i, key := range f.Properties {
		fields[i] = key + ":(" + query + ")"
	}
	return "+" + graphmodel.KeyTenantKey + ":" + graphmodel.TenantKey(tenantID) + "^0 +(" + strings.Join(fields, " ") + ")"
}

func (r *Retriever) fulltextSeeds(ctx context.Context, tx neo4j.ManagedTransaction, tenantID int64, query string, topK int) ([]Seed, error) {
	var seeds []Seed
	for _, f := range r.cfg.Model.Fulltext {
		label, _ := r.cfg.Model.Label(f.Label)
		result, err := tx.Run(ctx, fulltextSeedQuery(label), map[string]any{
			"index": f.Name, "query": TenantLuceneQuery(f, tenantID, query), "tenant": tenantID, "topK": int64(topK)})
		if err != nil {
			return nil, fmt.Errorf("fulltext index %s: %w", f.Name, err)
		}
		records, err := result.Collect(ctx)
		if err != nil {
			return nil, fmt.Errorf("fulltext index %s: %w", f.Name, err)
		}
		for _, rec := range records {
			seeds = append(seeds, seedOf(rec, f.Name, label))
		}
	}
	sortSeeds(seeds)
	if len(seeds) > topK {
		seeds = seeds[:topK]
	}
	return seeds, nil
}

// seedOf reads a seed query's record {id, props, score}.
func seedOf(rec *neo4j.Record, index string, label graphmodel.Label) Seed {
	id, _, _ := neo4j.GetRecordValue[int64](rec, "id")
	score, _, _ := neo4j.GetRecordValue[float64](rec, "score")
	props, _, _ := neo4j.GetRecordValue[map[string]any](rec, "props")
	return Seed{Index: index, Label: label.Name, ID: id, Score: score, Props: allowlisted(label, props)}
}

// sortSeeds orders seeds best first, then by id.
func sortSeeds(seeds []Seed) {
	sort.SliceStable(seeds, func(i, j int) bool {
		if seeds[i].Score != seeds[j].Score {
			return seeds[i].Score > seeds[j].Score
		}
		return seeds[i].ID < seeds[j].ID
	})
}

// allowlisted keeps the properties the model allowlists for label: a
// property that slipped into the graph outside the allowlist (personal data,
// say) is never read out.
func allowlisted(label graphmodel.Label, props map[string]any) map[string]any {
	kept := map[string]any{}
	for _, p := range label.Properties {
		if v, ok := props[p.Key]; ok && v != nil {
			kept[p.Key] = v
		}
	}
	return kept
}

// expandQuery aggregates what lies around product seeds, one row per seed.
// Every node and relationship is matched on the tenant too: relationships
// never cross tenants, and the read side does not rely on it.
var expandQuery = fmt.Sprintf(`UNWIND $ids AS productId
MATCH (p:%[1]s {tenant_id: $tenant, id: productId})
CALL (p) {
  OPTIONAL MATCH (p)-[:%[2]s {tenant_id: $tenant}]->(c:%[3]s {tenant_id: $tenant})
  RETURN c.id AS categoryId, c.name AS categoryName
  ORDER BY categoryId LIMIT 1
}
CALL (p) {
  OPTIONAL MATCH (o:%[4]s {tenant_id: $tenant})-[l:%[5]s {tenant_id: $tenant}]->(p)
  WITH o, sum(l.quantity) AS units
  WHERE o IS NOT NULL
  WITH o.status AS status, count(o) AS orders, sum(units) AS units
  RETURN collect({status: status, orders: orders, units: units}) AS byStatus
}
CALL (p) {
  OPTIONAL MATCH (p)<-[:%[5]s {tenant_id: $tenant}]-(o:%[4]s {tenant_id: $tenant})-[:%[5]s {tenant_id: $tenant}]->(q:%[1]s {tenant_id: $tenant})
  WHERE $hops >= 2 AND q <> p
  WITH q, count(DISTINCT o) AS orders
  WHERE q IS NOT NULL
  ORDER BY orders DESC, q.id ASC
  LIMIT $related
  RETURN collect({id: q.id, name: q.name, orders: orders}) AS together
}
CALL (p) {
  OPTIONAL MATCH (p)<-[:%[5]s {tenant_id: $tenant}]-(o:%[4]s {tenant_id: $tenant})<-[:%[6]s {tenant_id: $tenant}]-(c:%[7]s {tenant_id: $tenant})
  WHERE $hops >= 2
  WITH DISTINCT c
  WHERE c IS NOT NULL
  WITH c.segment AS segment, c.country_code AS country, count(*) AS customers
  RETURN collect({segment: segment, country: country, customers: customers}) AS buyers
}
RETURN p.id AS id, categoryId, categoryName, byStatus, together, buyers`,
	graphmodel.LabelProduct, graphmodel.RelInCategory, graphmodel.LabelCategory,
	graphmodel.LabelOrder, graphmodel.RelContains, graphmodel.RelPlaced, graphmodel.LabelCustomer)

func (r *Retriever) expand(ctx context.Context, tx neo4j.ManagedTransaction, tenantID int64, seeds []Seed) error {
	var ids []int64
	byID := map[int64]*Seed{}
	for i := range seeds {
		if seeds[i].Label == graphmodel.LabelProduct {
			ids = append(ids, seeds[i].ID)
			byID[seeds[i].ID] = &seeds[i]
		}
	}
	if len(ids) == 0 {
		return nil
	}
	result, err := tx.Run(ctx, expandQuery, map[string]any{
		"ids": ids, "tenant": tenantID, "hops": int64(r.cfg.Hops), "related": int64(r.cfg.Related)})
	if err != nil {
		return fmt.Errorf("expand seeds: %w", err)
	}
	records, err := result.Collect(ctx)
	if err != nil {
		return fmt.Errorf("expand seeds: %w", err)
	}
	for _, rec := range records {
		id, _, _ := neo4j.GetRecordValue[int64](rec, "id")
		seed := byID[id]
		if seed == nil {
			continue
		}
		seed.Expanded = true
		if categoryID, isNil, _ := neo4j.GetRecordValue[int64](rec, "categoryId"); !isNil {
			name, _, _ := neo4j.GetRecordValue[string](rec, "categoryName")
			seed.Category = &Ref{Label: graphmodel.LabelCategory, ID: categoryID, Name: name}
		}
		byStatus, _, _ := neo4j.GetRecordValue[[]any](rec, "byStatus")
		for _, v := range byStatus {
			m, _ := v.(map[string]any)
			orders := asInt(m["orders"])
			seed.Orders += orders
			seed.Units += asInt(m["units"])
			seed.OrderStatus = append(seed.OrderStatus, Count{Value: asString(m["status"]), N: orders})
		}
		sortCounts(seed.OrderStatus)
		together, _, _ := neo4j.GetRecordValue[[]any](rec, "together")
		for _, v := range together {
			m, _ := v.(map[string]any)
			seed.Together = append(seed.Together, Related{
				Ref:    Ref{Label: graphmodel.LabelProduct, ID: asInt(m["id"]), Name: asString(m["name"])},
				Orders: asInt(m["orders"])})
		}
		sort.SliceStable(seed.Together, func(i, j int) bool {
			if seed.Together[i].Orders != seed.Together[j].Orders {
				return seed.Together[i].Orders > seed.Together[j].Orders
			}
			return seed.Together[i].ID < seed.Together[j].ID
		})
		buyers, _, _ := neo4j.GetRecordValue[[]any](rec, "buyers")
		segments, countries := map[string]int64{}, map[string]int64{}
		for _, v := range buyers {
			m, _ := v.(map[string]any)
			n := asInt(m["customers"])
			segments[asString(m["segment"])] += n
			countries[asString(m["country"])] += n
		}
		seed.Segments, seed.Countries = counts(segments), counts(countries)
	}
	return nil
}

func asInt(v any) int64 {
	n, _ := v.(int64)
	return n
}

// asString returns a string value, or "unknown" for a missing one.
func asString(v any) string {
	if s, ok := v.(string); ok && s != "" {
		return s
	}
	return "unknown"
}

func counts(m map[string]int64) []Count {
	var out []Count
	for value, n := range m {
		out = append(out, Count{Value: value, N: n})
	}
	sortCounts(out)
	return out
}

// sortCounts orders the most frequent first, then by value.
func sortCounts(c []Count) {
	sort.Slice(c, func(i, j int) bool {
		if c[i].N != c[j].N {
			return c[i].N > c[j].N
		}
		return c[i].Value < c[j].Value
	})
}
