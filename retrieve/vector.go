package retrieve

import (
	"context"
	"fmt"
	"math"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/cypher"
	"graphsync/graphmodel"
)

// Defaults of the vector seed strategy (ADR 0024).
const (
	// defaultExactScanMax: a tenant with at most this many products is
	// searched exactly, every product's cosine computed (the tenant's own
	// cost, recall 1). Measured (ADR 0024): the exact scan costs about
	// 57 µs a product on the shared two-core machine (9,638 products: p50
	// 542 ms, against 47 ms through the index at recall@10 0.97; 96
	// products: 2.6 ms), so it passes the index's cost near 1,000 products;
	// and a tenant this small would need the index over-fetched past
	// maxVectorFetch in a graph of 1M products anyway.
	defaultExactScanMax = 1_000
	// overFetchFactor: a larger tenant asks the index for
	// k * (all products / the tenant's) * overFetchFactor neighbours, so that
	// k of the tenant are expected among them.
	overFetchFactor = 2
	// maxVectorFetch bounds one index query; past it the exact scan runs.
	maxVectorFetch = 10_000
)

// vectorExactQuery scores every one of the tenant's products against the
// question's vector: read through the (tenant_id, id) constraint index, so it
// costs what the tenant's own products cost, and the top-k is the tenant's
// exact top-k. "id IS NOT NULL" is what lets the planner seek the composite
// index on its first key; with tenant_id alone it scans every product of
// every tenant (TestVectorQueriesSeekTheTenant). A vector that is not a
// list of floats of the question's dimension (another writer's; drift
// reports it) is passed over: the cosine fails on it, and would fail the
// tenant's every question (TestSpoiledVectorIsNoSeed).
func vectorExactQuery(e graphmodel.Embedding, label graphmodel.Label) string {
	return `MATCH (node:` + label.Name + ` {tenant_id: $tenant})
WHERE node.id IS NOT NULL AND node.` + e.VectorProperty + ` IS NOT NULL AND ` + currentVector("node", e) + `
  AND ` + cypher.VectorSize("node", e) + ` = size($vector)
WITH node, vector.similarity.cosine(node.` + e.VectorProperty + `, $vector) AS score
ORDER BY score DESC, node.id ASC
LIMIT $topK
RETURN node.id AS id, ` + propsProjection("node", label) + ` AS props, score`
}

// vectorIndexQuery asks the index for $fetch neighbours of every tenant (the
// index of Neo4j 5 cannot filter) and keeps the tenant's, before the top-k.
func vectorIndexQuery(e graphmodel.Embedding, label graphmodel.Label) string {
	return `CALL db.index.vector.queryNodes($index, $fetch, $vector) YIELD node, score
WHERE node.tenant_id = $tenant AND ` + currentVector("node", e) + `
RETURN node.id AS id, ` + propsProjection("node", label) + ` AS props, score
ORDER BY score DESC, id ASC
LIMIT $topK`
}

// currentVector holds for a node whose vector was computed from the text it
// holds now (its hash equals the text hash the projector wrote with the
// text, which a projector without an embedder clears on a text change): a
// vector of an older text is no seed, whatever its score. Drift reports it
// stale until the stage embeds the text again.
func currentVector(node string, e graphmodel.Embedding) string {
	return node + "." + e.HashProperty + " = " + node + "." + e.TextHashProperty
}

// vectorSizeQuery counts the tenant's products (a seek of the constraint
// index, as vectorExactQuery's) and every product (the count store).
func vectorSizeQuery(label graphmodel.Label) string {
	return `CALL () { MATCH (n:` + label.Name + ` {tenant_id: $tenant}) WHERE n.id IS NOT NULL RETURN count(n) AS tenantNodes }
CALL () { MATCH (n:` + label.Name + `) RETURN count(n) AS allNodes }
RETURN tenantNodes, allNodes`
}

// VectorPlan says how the vector seeds of one question were found.
type VectorPlan struct {
	// Exact is true when every product of the tenant was scored.
	Exact bool
	// Fetches are the index queries' sizes, in order (empty when exact at once).
	Fetches []int
	// TenantNodes and AllNodes are the sizes the choice rested on.
	TenantNodes, AllNodes int64
}

// vectorSeeds returns the tenant's topK products nearest to vector, chosen
// per tenant by size: a tenant of at most ExactScanMax products is scored
// exactly; a larger one asks the index for enough neighbours that topK of
// its own are expected among them, grows the ask fourfold while fewer come
// back, and falls back to the exact scan past maxVectorFetch. A tenant with
// topK or more embedded products therefore always gets topK seeds.
func (r *Retriever) vectorSeeds(ctx context.Context, tx neo4j.ManagedTransaction, tenantID int64, vector []float32, topK int) ([]Seed, VectorPlan, error) {
	e := *r.cfg.Model.Embedding
	label, _ := r.cfg.Model.Label(e.Label)
	var plan VectorPlan
	params := map[string]any{"tenant": tenantID, "vector": float64s(vector), "topK": int64(topK), "index": e.Index}
	rec, err := singleRecord(ctx, tx, vectorSizeQuery(label), params)
	if err != nil {
		return nil, plan, fmt.Errorf("vector seeds: size the tenant: %w", err)
	}
	plan.TenantNodes, _, _ = neo4j.GetRecordValue[int64](rec, "tenantNodes")
	plan.AllNodes, _, _ = neo4j.GetRecordValue[int64](rec, "allNodes")
	if plan.TenantNodes > int64(r.cfg.ExactScanMax) {
		share := float64(plan.AllNodes) / float64(max(plan.TenantNodes, 1))
		fetch := max(topK, int(math.Min(math.Ceil(float64(topK)*share*overFetchFactor), maxVectorFetch+1)))
		for fetch <= maxVectorFetch {
			plan.Fetches = append(plan.Fetches, fetch)
			params["fetch"] = int64(fetch)
			seeds, err := collectSeeds(ctx, tx, vectorIndexQuery(e, label), params, e.Index, label)
			if err != nil {
				return nil, plan, fmt.Errorf("vector index %s (%d of the tenant's %d and all %d products): %w", e.Index, fetch, plan.TenantNodes, plan.AllNodes, err)
			}
			if len(seeds) >= topK {
				return seeds, plan, nil
			}
			fetch *= 4
		}
	}
	plan.Exact = true
	seeds, err := collectSeeds(ctx, tx, vectorExactQuery(e, label), params, e.Index, label)
	if err != nil {
		return nil, plan, fmt.Errorf("vector seeds: exact scan: %w", err)
	}
	return seeds, plan, nil
}

func collectSeeds(ctx context.Context, tx neo4j.ManagedTransaction, query string, params map[string]any, index string, label graphmodel.Label) ([]Seed, error) {
	result, err := tx.Run(ctx, query, params)
	if err != nil {
		return nil, err
	}
	records, err := result.Collect(ctx)
	if err != nil {
		return nil, err
	}
	seeds := make([]Seed, 0, len(records))
	for _, rec := range records {
		seeds = append(seeds, seedOf(rec, index, label))
	}
	return seeds, nil
}

func singleRecord(ctx context.Context, tx neo4j.ManagedTransaction, query string, params map[string]any) (*neo4j.Record, error) {
	result, err := tx.Run(ctx, query, params)
	if err != nil {
		return nil, err
	}
	return result.Single(ctx)
}

// float64s widens a vector for the driver, which packs []float64 natively.
func float64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
