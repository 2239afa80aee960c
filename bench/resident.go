package main

import (
	"context"
	"fmt"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap"

	"graphsync/projector"
)

// A resident graph: nodes of other tenants that stay in Neo4j for the whole
// run, as a production graph holds them. Without it every scenario writes
// into a nearly empty graph, where a few dozen nodes move a label's or an
// index's statistics by more than Neo4j's replan threshold (75 %): Neo4j
// then plans each statement again when it next runs (debug.log: "Discarded
// stale query from the query cache"), 15 to 110 ms a statement on the
// 2-core machine, and a batch whose statements are all replanned stalls for
// 100 to 450 ms. That is a property of an empty graph, not of the sync, and
// it dominated the latency scenario's p99 (docs/adr/0012).
//
// The resident graph has the model's labels, keys, tombstones and
// relationship types, in the proportions of the workload: per tenant 1 %
// categories, 22 % products, 22 % customers, 55 % orders (each placed by a
// customer and holding one product), and a few product tombstones. It is
// written with plain UNWIND ... MERGE, not through graphsync, and removed at
// the end of the run.
//
// Well over ten tenants: Neo4j's planner takes a label with ten nodes or
// fewer as exactly ten, with a fixed 10 % of them in each of its indexes
// (MinimumGraphStatistics), and the real figure (all of them) once it has
// more. With ten resident tenants, every scenario's new tenants took the
// label across that line and back, and Neo4j planned the batch query again
// each time, about 14 s into each latency scenario (docs/adr/0013, stop
// 36). A production graph crosses it once, with its eleventh tenant.
const residentTenants = 50

// residentStatements build one resident tenant; $t is its id, $n its node
// count.
var residentStatements = []string{
	`MERGE (:Tenant {tenant_id: $t, id: $t})`,
	`UNWIND range(1, toInteger($n * 0.01) + 1) AS i
	 MERGE (c:Category {tenant_id: $t, id: i}) SET c.name = 'category ' + i`,
	`UNWIND range(1, toInteger($n * 0.22)) AS i
	 MATCH (c:Category {tenant_id: $t, id: 1 + i % (toInteger($n * 0.01) + 1)})
	 MERGE (p:Product {tenant_id: $t, id: i})
	 SET p.name = 'product ' + i, p.description = 'a resident product', p.price_cents = 100 + i % 9000,
	     p.status = 'active', p.version = 1
	 MERGE (p)-[:IN_CATEGORY {tenant_id: $t}]->(c)`,
	`UNWIND range(1, toInteger($n * 0.002) + 1) AS i
	 MERGE (:DeletedProduct {tenant_id: $t, id: toInteger($n) + i})`,
	`UNWIND range(1, toInteger($n * 0.22)) AS i
	 MERGE (c:Customer {tenant_id: $t, id: i}) SET c.segment = 'retail', c.version = 1`,
	`UNWIND range(1, toInteger($n * 0.55)) AS i
	 MATCH (c:Customer {tenant_id: $t, id: 1 + i % toInteger($n * 0.22)})
	 MATCH (p:Product {tenant_id: $t, id: 1 + i % toInteger($n * 0.22)})
	 MERGE (o:Order {tenant_id: $t, id: i})
	 SET o.status = 'confirmed', o.total_cents = 100 + i % 9000, o.version = 2
	 MERGE (c)-[:PLACED {tenant_id: $t}]->(o)
	 MERGE (o)-[r:CONTAINS {tenant_id: $t, line_no: 1}]->(p)
	 SET r.quantity = 1, r.unit_price_cents = p.price_cents`,
}

// loadResident writes a resident graph of about nodes nodes, has Neo4j
// sample its indexes again, waits for the samples and drops the plans made
// on the graph before it, so that no scenario pays for replanning what the
// load changed. It returns the resident tenants, for removal.
func (s *stack) loadResident(ctx context.Context, nodes int64, log *zap.Logger) ([]int64, error) {
	if nodes <= 0 {
		return nil, nil
	}
	start := time.Now()
	// The model's constraints first: each MERGE below finds its node through
	// them. On a Neo4j that no graphsync has written to yet (a fresh
	// machine's first make bench) they did not exist until the first
	// scenario's migrate, and the load scanned every node of the label per
	// row: 19 minutes of a core for 100k nodes instead of seconds.
	if err := projector.EnsureSchema(ctx, s.driver); err != nil {
		return nil, fmt.Errorf("resident graph: the model's constraints and indexes: %w", err)
	}
	base := time.Now().UnixNano()%1_000_000_000*1000 + 7_000_000_000_000
	perTenant := max(nodes/residentTenants, 100)
	var tenants []int64
	for i := int64(0); i < residentTenants; i++ {
		tenant := base + i
		tenants = append(tenants, tenant)
		for _, statement := range residentStatements {
			_, err := neo4j.ExecuteQuery(ctx, s.driver, statement, map[string]any{"t": tenant, "n": perTenant},
				neo4j.EagerResultTransformer, neo4j.ExecuteQueryWithWritersRouting())
			if err != nil {
				return tenants, fmt.Errorf("resident graph, tenant %d: %w", tenant, err)
			}
		}
	}
	// The samples are awaited before the plans go (db.prepareForReplanning):
	// db.resampleOutdatedIndexes only schedules them, so plans made just
	// after it could still read the statistics of the empty indexes, and
	// Neo4j would plan them again, whole, when the samples landed, in the
	// middle of a scenario.
	const replan = `CALL db.prepareForReplanning()`
	if _, err := neo4j.ExecuteQuery(ctx, s.driver, replan, nil, neo4j.EagerResultTransformer); err != nil {
		return tenants, fmt.Errorf("resident graph: %s: %w", replan, err)
	}
	counts, err := s.countGraph(ctx, tenants)
	if err != nil {
		return tenants, err
	}
	log.Info("resident graph loaded", zap.Int("tenants", len(tenants)), zap.Stringer("graph", counts),
		zap.Duration("took", time.Since(start)))
	return tenants, nil
}
