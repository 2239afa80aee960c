package projector

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/cypher"
	"graphsync/events"
	"graphsync/graphmodel"
	"graphsync/outbox"
)

// A product's category edge follows the newest event also when another
// writer moved it after this batch read the graph and before it took the
// product's lock: a relay whose lease ran out mid-delivery while another
// took the aggregate over, or a repair or rebuild beside sync. The other
// writer (version 5, category 2) is held open while the batch (version 6,
// category 3, where the graph read before the lock says the product is
// already) waits for the product's lock; the product must end in category
// 3 alone.
func TestSingleRelationshipFollowsAWriteCommittedDuringTheBatch(t *testing.T) {
	p, driver := liveProjector(t)
	i := newIDs(t, driver)
	ctx := context.Background()
	productID, cat2, cat3 := i.id(1), i.id(902), i.id(903)
	deliverAll(t, p,
		i.message(t, events.ProductCreated{ProductState: product(i.id(2), 1, "other", cat2, "Two", 100, "active")}),
		i.message(t, events.ProductCreated{ProductState: product(productID, 4, "kettle", cat3, "Three", 100, "active")}),
	)
	held := driver.NewSession(ctx, neo4j.SessionConfig{})
	defer held.Close(ctx)
	other, err := held.BeginTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	// The other writer's batch for its event, as the projector builds it:
	// the category and the product under their locks, the old edge
	// removed, the new one merged.
	b, err := cypher.NewBuilder(graphmodel.Default)
	if err != nil {
		t.Fatal(err)
	}
	o5 := i.outboxID + 1
	stmts, err := b.Statements(graphmodel.Mutations{
		Nodes: []graphmodel.NodeUpsert{
			{Label: graphmodel.LabelCategory, TenantID: i.tenant, ID: cat2, Guard: graphmodel.Guard{OutboxID: o5}, Props: map[string]any{"name": "Two"}},
			// Another event of its batch names category 3: the batch
			// below waits for it there, before it locks anything the
			// other writer's commit needs.
			{Label: graphmodel.LabelCategory, TenantID: i.tenant, ID: cat3, Guard: graphmodel.Guard{OutboxID: o5}, Props: map[string]any{"name": "Three"}},
			{Label: graphmodel.LabelProduct, TenantID: i.tenant, ID: productID, Guard: graphmodel.Guard{Version: 5, OutboxID: o5}, Props: map[string]any{"name": "kettle"}},
		},
		Rels: []graphmodel.RelUpsert{{Type: graphmodel.RelInCategory, TenantID: i.tenant, FromID: productID, ToID: cat2, OutboxID: o5}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range stmts {
		res, err := other.Run(ctx, stmt.Text, stmt.Params)
		if err == nil {
			_, err = res.Consume(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	i.outboxID++
	newest := i.message(t, events.ProductUpdated{ProductState: product(productID, 6, "kettle", cat3, "Three", 100, "active")})
	done := make(chan error, 1)
	go func() {
		rejected, err := p.Deliver(ctx, []outbox.Message{newest})
		if err == nil && len(rejected) > 0 {
			err = fmt.Errorf("rejected: %v", rejected)
		}
		done <- err
	}()
	waitForLockThenCommit(t, driver, "", other, done)
	res, err := neo4j.ExecuteQuery(ctx, driver, `MATCH (:Product {tenant_id: $t, id: $id})-[:IN_CATEGORY]->(c) RETURN collect(c.id) AS cats`,
		map[string]any{"t": i.tenant, "id": productID}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	cats, _, _ := neo4j.GetRecordValue[[]any](res.Records[0], "cats")
	if !slices.Equal(cats, []any{cat3}) {
		t.Errorf("the product is in categories %v, want only %d", cats, cat3)
	}
}
