package retrieve

import (
	"context"
	"flag"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/cypher"
	"graphsync/graphmodel"
	"graphsync/internal/stacktest"
	"graphsync/projector"
)

var (
	seedProducts       = flag.Int("seed-products", 1_000_000, "BenchmarkSeedCost: products of the graph it builds")
	seedTenants        = flag.Int("seed-tenants", 1000, "BenchmarkSeedCost: tenants (Zipf-skewed sizes)")
	vectorProducts     = flag.Int("vector-products", 1_000_000, "BenchmarkVectorSeeds: products of the graph it builds")
	vectorTenants      = flag.Int("vector-tenants", 100, "BenchmarkVectorSeeds: tenants (Zipf-skewed sizes)")
	seedRounds         = flag.Int("seed-rounds", 50, "questions per measured case")
	vectorDimension    = 384
	syntheticCentres   = 200
	tenantOnlyWord     = "samovar"
	tenantOnlyCentreID = syntheticCentres // the extra centre only the smallest tenant uses
)

// syntheticGraph is a benchmark graph of products only (with tenant nodes),
// written straight into Neo4j: names from the benchmark vocabulary, and
// synthetic embeddings drawn around cluster centres.
//
// How the vectors are made: syntheticCentres centres are drawn uniformly on
// the unit sphere of vectorDimension dimensions (normalised Gaussian
// vectors), plus one more only the smallest tenant uses. Every product
// picks a centre (its noun's family: centre mod the nouns, so that a
// "meaning" is common to every catalogue, as a word is) and gets
// centre + Gaussian noise of norm about 0.9 (per dimension 0.9/sqrt(d)),
// normalised: clusters that overlap their neighbours, as sentence
// embeddings of one product family do. A question's vector is a centre
// plus noise of the same kind.
type syntheticGraph struct {
	tenants []int64 // smallest last
	sizes   []int
	centres [][]float32
}

func zipfSizes(total, tenants int) []int {
	h := 0.0
	for i := 1; i <= tenants; i++ {
		h += 1 / float64(i)
	}
	sizes := make([]int, tenants)
	for i := range sizes {
		sizes[i] = max(10, int(float64(total)/(h*float64(i+1))))
	}
	return sizes
}

func randomUnit(rng *rand.Rand, dim int) []float32 {
	v := make([]float32, dim)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return unitLength(v)
}

func unitLength(v []float32) []float32 {
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	n = math.Sqrt(n)
	for i := range v {
		v[i] = float32(float64(v[i]) / n)
	}
	return v
}

func nearCentre(rng *rand.Rand, centre []float32, noise float64) []float64 {
	v := make([]float32, len(centre))
	sigma := noise / math.Sqrt(float64(len(centre)))
	for i := range v {
		v[i] = centre[i] + float32(rng.NormFloat64()*sigma)
	}
	return float64s(unitLength(v))
}

// buildSyntheticGraph builds the graph; withVectorIndex also (re)builds
// the vector index, in one population after the load (the exact scan needs
// none).
func buildSyntheticGraph(b *testing.B, driver neo4j.DriverWithContext, products, tenants int, withVectorIndex bool) *syntheticGraph {
	ctx := context.Background()
	if err := projector.EnsureSchema(ctx, driver); err != nil {
		b.Fatal(err)
	}
	// The vector index is built after the load, in one population, rather
	// than updated by every write batch.
	if _, err := neo4j.ExecuteQuery(ctx, driver, "DROP INDEX "+graphmodel.VectorProductEmbed+" IF EXISTS", nil, neo4j.EagerResultTransformer); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 5))
	g := &syntheticGraph{sizes: zipfSizes(products, tenants)}
	for range syntheticCentres + 1 {
		g.centres = append(g.centres, randomUnit(rng, vectorDimension))
	}
	base := 1<<53 + rand.Int64N(1<<40)*10_000_000
	for range tenants {
		g.tenants = append(g.tenants, 1<<51+rand.Int64N(1<<40))
	}
	b.Cleanup(func() { dropBenchGraph(b, driver, g.tenants) })
	start := time.Now()
	next := base
	for ti, tenant := range g.tenants {
		if _, err := neo4j.ExecuteQuery(ctx, driver, `CREATE (:Tenant {tenant_id: $t, id: $t})`, map[string]any{"t": tenant}, neo4j.EagerResultTransformer); err != nil {
			b.Fatal(err)
		}
		smallest := ti == len(g.tenants)-1
		var rows []map[string]any
		flush := func() {
			if len(rows) == 0 {
				return
			}
			if _, err := neo4j.ExecuteQuery(ctx, driver, `UNWIND $rows AS r
				CREATE (p:Product {tenant_id: r.t, tenant_key: r.k, id: r.id, sku: 'SKU-' + r.id, name: r.name, description: r.d,
					price_cents: 1000, currency: 'EUR', status: 'active', sync_version: 1,
					`+graphmodel.PropEmbeddingHash+`: 'synthetic-' + r.id, `+graphmodel.PropEmbeddingTextHash+`: 'synthetic-' + r.id})
				WITH p, r CALL db.create.setNodeVectorProperty(p, 'embedding', r.v)`,
				map[string]any{"rows": rows}, neo4j.EagerResultTransformer); err != nil {
				b.Fatalf("build the benchmark graph: %v", err)
			}
			rows = rows[:0]
		}
		for i := range g.sizes[ti] {
			next++
			centre := rng.IntN(syntheticCentres)
			name := benchAdjectives[rng.IntN(len(benchAdjectives))] + " " + benchNouns[centre%len(benchNouns)]
			if smallest && i%len(benchNouns) == 0 {
				// As many of the smallest tenant's products as hold any one
				// noun hold its own word, with its own meaning.
				centre, name = tenantOnlyCentreID, "Brass "+tenantOnlyWord
			}
			rows = append(rows, map[string]any{"t": tenant, "k": graphmodel.TenantKey(tenant), "id": next, "name": name,
				"d": benchBits[rng.IntN(len(benchBits))], "v": nearCentre(rng, g.centres[centre], 0.9)})
			if len(rows) == 2000 {
				flush()
			}
		}
		flush()
	}
	loaded := time.Since(start)
	if withVectorIndex {
		// Not stage.EnsureVectorIndex: its wait (300 s) is too short for a
		// million vectors on a small machine.
		if _, err := neo4j.ExecuteQuery(ctx, driver, cypher.VectorIndexText(graphmodel.DefaultEmbedding, vectorDimension), nil, neo4j.EagerResultTransformer); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := neo4j.ExecuteQuery(ctx, driver, "CALL db.awaitIndexes(3600)", nil, neo4j.EagerResultTransformer); err != nil {
		b.Fatal(err)
	}
	b.Logf("loaded in %s, vector index populated in %s", loaded.Round(time.Second), (time.Since(start) - loaded).Round(time.Second))
	b.Logf("graph: %d products in %d tenants (largest %d, smallest %d) in %s", products, tenants, g.sizes[0], g.sizes[len(g.sizes)-1],
		time.Since(start).Round(time.Second))
	return g
}

// timeRead runs one read query in a managed transaction and returns how
// long it took and its rows' ids.
func timeRead(b *testing.B, driver neo4j.DriverWithContext, query string, params map[string]any) (time.Duration, []int64) {
	ctx := context.Background()
	t0 := time.Now()
	res, err := neo4j.ExecuteQuery(ctx, driver, query, params, neo4j.EagerResultTransformer, neo4j.ExecuteQueryWithReadersRouting())
	if err != nil {
		b.Fatal(err)
	}
	took := time.Since(t0)
	var ids []int64
	for _, rec := range res.Records {
		id, _, _ := neo4j.GetRecordValue[int64](rec, "id")
		ids = append(ids, id)
	}
	return took, ids
}

func p50p99ms(d []time.Duration) (float64, float64) {
	p50, p99 := percentiles(d)
	return float64(p50.Microseconds()) / 1000, float64(p99.Microseconds()) / 1000
}

// BenchmarkSeedCost measures the seed queries of the smallest tenant of a
// graph of -seed-products products in -seed-tenants Zipf-sized tenants: a
// word (and a meaning) common to every catalogue against one only that
// tenant has. A query that costs the tenant's own data costs the same for
// both (ratio near 1); one that filters every tenant's hits after the index
// pays for the common word's hits in every other tenant. Fulltext: before
// (queryNodes then WHERE tenant_id) and now (tenant_key inside the Lucene
// query); vector: the exact in-tenant scan the smallest tenant gets.
// `make bench-context` runs it; SEED_PRODUCTS scales it.
func BenchmarkSeedCost(b *testing.B) {
	driver := stacktest.Neo4j(b)
	g := buildSyntheticGraph(b, driver, *seedProducts, *seedTenants, false)
	tenant := g.tenants[len(g.tenants)-1]
	label, _ := graphmodel.Default.Label(graphmodel.LabelProduct)
	text := graphmodel.Default.Fulltext[0]
	const before = `CALL db.index.fulltext.queryNodes($index, $query) YIELD node, score
WHERE node.tenant_id = $tenant
RETURN node.id AS id, score ORDER BY score DESC, id ASC LIMIT $topK`
	common := "kettle"
	rng := rand.New(rand.NewPCG(9, 9))
	kettleCentre := slices.Index(benchNouns, "Kettle") // centre mod nouns == the noun
	for range b.N {
		cases := []struct {
			name  string
			query string
			param func() map[string]any
		}{
			{"fulltext-before-common", before, func() map[string]any {
				return map[string]any{"index": text.Name, "query": common, "tenant": tenant, "topK": int64(5)}
			}},
			{"fulltext-before-only", before, func() map[string]any {
				return map[string]any{"index": text.Name, "query": tenantOnlyWord, "tenant": tenant, "topK": int64(5)}
			}},
			{"fulltext-common", fulltextSeedQuery(label), func() map[string]any {
				return map[string]any{"index": text.Name, "query": TenantLuceneQuery(text, tenant, common), "tenant": tenant, "topK": int64(5)}
			}},
			{"fulltext-only", fulltextSeedQuery(label), func() map[string]any {
				return map[string]any{"index": text.Name, "query": TenantLuceneQuery(text, tenant, tenantOnlyWord), "tenant": tenant, "topK": int64(5)}
			}},
			{"vector-exact-common", vectorExactQuery(graphmodel.DefaultEmbedding, label), func() map[string]any {
				return map[string]any{"vector": nearCentre(rng, g.centres[kettleCentre], 0.5), "tenant": tenant, "topK": int64(5)}
			}},
			{"vector-exact-only", vectorExactQuery(graphmodel.DefaultEmbedding, label), func() map[string]any {
				return map[string]any{"vector": nearCentre(rng, g.centres[tenantOnlyCentreID], 0.5), "tenant": tenant, "topK": int64(5)}
			}},
		}
		p50 := map[string]float64{}
		times := make([][]time.Duration, len(cases))
		for round := range *seedRounds + 3 {
			for i, c := range cases { // alternating, so drift in the machine's load hits all alike
				took, ids := timeRead(b, driver, c.query, c.param())
				if len(ids) == 0 {
					b.Fatalf("%s found no seed: the timing would be of an empty answer", c.name)
				}
				if round >= 3 { // three warm-up rounds
					times[i] = append(times[i], took)
				}
			}
		}
		for i, c := range cases {
			m50, m99 := p50p99ms(times[i])
			p50[c.name] = m50
			b.ReportMetric(m50, c.name+"-p50-ms")
			b.Logf("%-24s p50 %7.2f ms  p99 %7.2f ms", c.name, m50, m99)
		}
		for _, kind := range []string{"fulltext-before", "fulltext", "vector-exact"} {
			ratio := p50[kind+"-common"] / p50[kind+"-only"]
			b.ReportMetric(ratio, kind+"-ratio")
			b.Logf("%s: common / tenant-only p50 ratio %.2f (target <= 1.5)", kind, ratio)
		}
	}
}

// BenchmarkVectorSeeds measures tenant-filtered vector search on
// -vector-products products in -vector-tenants Zipf-sized tenants, for the
// smallest and the largest tenant: p50/p99 and recall@10 against the exact
// in-tenant answer, of the exact scan, of the index over-fetched
// (k * all/tenant * 2, growing fourfold, then exact) and of the per-tenant
// choice graphsync makes (vectorSeeds). `make bench-context` runs it;
// VECTOR_PRODUCTS scales it.
func BenchmarkVectorSeeds(b *testing.B) {
	ctx := context.Background()
	driver := stacktest.Neo4j(b)
	g := buildSyntheticGraph(b, driver, *vectorProducts, *vectorTenants, true)
	label, _ := graphmodel.Default.Label(graphmodel.LabelProduct)
	const k = 10
	rng := rand.New(rand.NewPCG(4, 4))
	for range b.N {
		for _, which := range []struct {
			name   string
			tenant int64
		}{{"largest", g.tenants[0]}, {"smallest", g.tenants[len(g.tenants)-1]}} {
			strategies := []struct {
				name     string
				exactMax int
			}{
				{"exact", math.MaxInt32},
				{"over-fetch", -1}, // always the index first
				{"chosen", defaultExactScanMax},
			}
			times := make([][]time.Duration, len(strategies))
			recall := make([]float64, len(strategies))
			plans := make([]VectorPlan, len(strategies))
			for round := range *seedRounds + 3 {
				vector := nearCentre(rng, g.centres[rng.IntN(syntheticCentres)], 0.5)
				_, want := timeRead(b, driver, vectorExactQuery(graphmodel.DefaultEmbedding, label), map[string]any{"vector": vector, "tenant": which.tenant, "topK": int64(k)})
				if len(want) < k {
					// A graph the seed queries cannot see (its vectors not
					// current, say) would report timings of empty answers.
					b.Fatalf("the exact answer has %d seeds, want %d", len(want), k)
				}
				for i, s := range strategies {
					r := retriever(b, driver, Config{})
					r.cfg.ExactScanMax = s.exactMax
					t0 := time.Now()
					seeds, plan := vectorSeedsOnce(ctx, b, r, which.tenant, vector, k)
					took := time.Since(t0)
					if round < 3 {
						continue
					}
					times[i] = append(times[i], took)
					plans[i] = plan
					found := 0
					for _, s := range seeds {
						if slices.Contains(want, s.ID) {
							found++
						}
					}
					recall[i] += float64(found) / float64(min(k, len(want))) / float64(*seedRounds)
				}
			}
			for i, s := range strategies {
				m50, m99 := p50p99ms(times[i])
				b.ReportMetric(m50, which.name+"-"+s.name+"-p50-ms")
				b.ReportMetric(m99, which.name+"-"+s.name+"-p99-ms")
				b.ReportMetric(recall[i], which.name+"-"+s.name+"-recall@10")
				b.Logf("%-8s tenant (%d products) %-10s p50 %7.2f ms  p99 %7.2f ms  recall@10 %.3f  (last plan: exact %v, fetches %v)",
					which.name, plans[i].TenantNodes, s.name, m50, m99, recall[i], plans[i].Exact, plans[i].Fetches)
			}
		}
	}
}

// vectorSeedsOnce runs vectorSeeds in its own read transaction.
func vectorSeedsOnce(ctx context.Context, b *testing.B, r *Retriever, tenant int64, vector []float64, k int) ([]Seed, VectorPlan) {
	session := r.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeRead})
	defer session.Close(ctx)
	v32 := make([]float32, len(vector))
	for i, x := range vector {
		v32[i] = float32(x)
	}
	var plan VectorPlan
	out, err := session.ExecuteRead(ctx, func(tx neo4j.ManagedTransaction) (any, error) {
		seeds, p, err := r.vectorSeeds(ctx, tx, tenant, v32, k)
		plan = p
		return seeds, err
	})
	if err != nil {
		b.Fatal(err)
	}
	seeds := out.([]Seed)
	sort.Slice(seeds, func(i, j int) bool { return seeds[i].Score > seeds[j].Score })
	return seeds, plan
}
