package projector

import (
	"context"
	"errors"
	"testing"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/graphmodel"
)

// A relationship whose endpoint is not in the graph when the batch's one
// query runs (admission saw it, something removed it since) is a data error
// of the whole transaction: the count the query reports for its statement
// falls short, and nothing of the batch is written, not even the nodes the
// same query wrote before it.
func TestBatchReportsAMissingEndpoint(t *testing.T) {
	p, driver := liveProjector(t)
	i := newIDs(t, driver)
	ctx := context.Background()
	order, product, missing := i.id(1), i.id(2), i.id(3)
	line := func(n, to int64) graphmodel.RelUpsert {
		return graphmodel.RelUpsert{Type: graphmodel.RelContains, TenantID: i.tenant, FromID: order, ToID: to, OutboxID: 1,
			Props: map[string]any{"line_no": n, "quantity": int64(1), "unit_price_cents": int64(100)}}
	}
	stmts, err := p.builder.Statements(graphmodel.Mutations{
		Nodes: []graphmodel.NodeUpsert{
			{Label: graphmodel.LabelTenant, TenantID: i.tenant, ID: i.tenant},
			{Label: graphmodel.LabelProduct, TenantID: i.tenant, ID: product, Guard: graphmodel.Guard{Version: 1, OutboxID: 1},
				Props: map[string]any{"sku": "S", "name": "Mug", "description": "", "price_cents": int64(100), "currency": "EUR", "status": "active"}},
			{Label: graphmodel.LabelOrder, TenantID: i.tenant, ID: order, Guard: graphmodel.Guard{Version: 1, OutboxID: 1},
				Props: map[string]any{"status": "placed", "currency": "EUR", "total_cents": int64(200)}},
		},
		Rels: []graphmodel.RelUpsert{line(1, product), line(2, missing)},
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := p.builder.Batch(stmts)
	if err != nil {
		t.Fatal(err)
	}
	session := driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite})
	defer closeSession(ctx, session)
	_, err = session.ExecuteWrite(ctx, func(tx neo4j.ManagedTransaction) (any, error) {
		return nil, runBatch(ctx, tx, batch)
	})
	var data *dataError
	if !errors.As(err, &data) {
		t.Fatalf("a line to a product not in the graph gave %v, want a data error", err)
	}
	if got := dump(t, driver, i.tenant); len(got.Nodes) != 0 {
		t.Fatalf("the failed batch left %v in the graph", got.Nodes)
	}
}
