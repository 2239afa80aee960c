package drift

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"graphsync/cypher"
	"graphsync/graphmodel"
	gsql "graphsync/sql"
)

// The snapshot trap for reference nodes, which have no version: a category
// renamed by a transaction that was running when its row was read (so the
// read saw the old name) and whose event sync applied before the rebuild
// wrote the read. The watermark is at most that event's outbox id, so the
// stale read leaves the node alone; a node no such event wrote is written
// and stamped below the watermark, so the event still applies after it.
func TestSnapshotWatermarkKeepsNewerReferenceState(t *testing.T) {
	pool, driver := stack(t)
	ctx := context.Background()
	var tenant int64
	if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('watermark') RETURNING id`).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	cleanGraph(t, driver, []int64{tenant})
	insertEvent := `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ($1, 'Product', 1, 'ProductUpdated', '{}') RETURNING id`
	// Events before the read, to make ids the watermark must not fall below.
	for range 3 {
		if _, err := pool.Exec(ctx, insertEvent, tenant); err != nil {
			t.Fatal(err)
		}
	}
	// The renaming transaction is running when the rows are read, and it
	// drew its event's id before others that committed before the read: so
	// the highest id drawn before the read is above its event, and only the
	// lookup of transactions running at the read can bring the watermark
	// down to it.
	rename, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rename.Rollback(ctx) //nolint:errcheck // committed below
	var renameEvent int64
	if err := rename.QueryRow(ctx, insertEvent, tenant).Scan(&renameEvent); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := pool.Exec(ctx, insertEvent, tenant); err != nil {
			t.Fatal(err)
		}
	}
	var lastDrawn int64
	if err := pool.QueryRow(ctx, gsql.Query("RebuildOutboxLastID")).Scan(&lastDrawn); err != nil {
		t.Fatal(err)
	}
	if lastDrawn <= renameEvent {
		t.Fatalf("ids drawn before the read end at %d, want above the running transaction's event %d", lastDrawn, renameEvent)
	}
	var snapshot string
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, gsql.Query("RebuildSnapshot")).Scan(&snapshot)
	})
	if err != nil {
		t.Fatal(err)
	}
	// The wait is said in the log (here after 100 ms, not 10 s): a
	// transaction left open would otherwise hold the rebuild silently.
	defer func(patience time.Duration) { watermarkPatience = patience }(watermarkPatience)
	watermarkPatience = 100 * time.Millisecond
	logCore, logged := observer.New(zap.WarnLevel)
	c, err := New(pool, driver, Config{TenantID: tenant}, zap.New(logCore))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		below int64
		err   error
	}
	got := make(chan result, 1)
	go func() {
		below, err := c.watermark(ctx, snapshot, lastDrawn)
		got <- result{below, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for logged.FilterMessageSnippet("waiting for transactions that were running").Len() == 0 {
		select {
		case r := <-got:
			t.Fatalf("the watermark did not wait for the transaction running at the read: %d, %v", r.below, r.err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the watermark waited without saying so in the log")
		}
	}
	if err := rename.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.below > renameEvent || r.below < 1 {
		t.Fatalf("watermark %d: want at most the running transaction's event %d (ids drawn before the read end at %d)",
			r.below, renameEvent, lastDrawn)
	}

	// Sync applied the rename (its outbox id on the node); another category
	// was last written by an event older than the read.
	cypherExec(t, driver, `CREATE (:Category {tenant_id: $t, id: 1, name: 'New', sync_version: 0, sync_outbox_id: $e}),
		(:Category {tenant_id: $t, id: 2, name: 'Old', sync_version: 0, sync_outbox_id: 1})`,
		map[string]any{"t": tenant, "e": renameEvent})
	text, err := cypher.RebuildReferenceText(graphmodel.Default, graphmodel.LabelCategory)
	if err != nil {
		t.Fatal(err)
	}
	cypherExec(t, driver, text, map[string]any{"rows": []map[string]any{
		{"tenant_id": tenant, "id": int64(1), "props": map[string]any{"name": "Old"}, "below": r.below},
		{"tenant_id": tenant, "id": int64(2), "props": map[string]any{"name": "Renamed"}, "below": r.below},
	}})
	res, err := neo4j.ExecuteQuery(ctx, driver, `MATCH (c:Category {tenant_id: $t}) RETURN c.id AS id, c.name AS name, c.sync_outbox_id AS outbox ORDER BY id`,
		map[string]any{"t": tenant}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name   string
		outbox int64
	}{{"New", renameEvent}, {"Renamed", r.below - 1}}
	if len(res.Records) != len(want) {
		t.Fatalf("%d categories, want %d", len(res.Records), len(want))
	}
	for i, rec := range res.Records {
		name, _, _ := neo4j.GetRecordValue[string](rec, "name")
		outbox, _, _ := neo4j.GetRecordValue[int64](rec, "outbox")
		if i >= len(want) || name != want[i].name || outbox != want[i].outbox {
			t.Errorf("category %d: name %q, sync_outbox_id %d; want %+v", i+1, name, outbox, want)
		}
	}
}

// A snapshot chunk that moves a product to another category removes the
// old edge in the same write: a rebuild deletes nothing else until its
// sweep, and meanwhile a reader saw the product in both categories. A
// product newer than its rows keeps its edge.
func TestSnapshotWriteMovesASingleRelationship(t *testing.T) {
	pool, driver := stack(t)
	ctx := context.Background()
	var tenant int64
	if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('moved') RETURNING id`).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	cleanGraph(t, driver, []int64{tenant})
	// Neo4j restored from an old backup: the product at version 1 in A.
	cypherExec(t, driver, `CREATE (p:Product {tenant_id: $t, id: 1, name: 'p', `+graphmodel.PropVersion+`: 1, `+graphmodel.PropOutboxID+`: 5})
		-[:IN_CATEGORY {tenant_id: $t}]->(:Category {tenant_id: $t, id: 10, name: 'A', `+graphmodel.PropOutboxID+`: 0})`, map[string]any{"t": tenant})
	// And a product sync moved on since the read: version 5, in A.
	cypherExec(t, driver, `MATCH (c:Category {tenant_id: $t, id: 10})
		CREATE (:Product {tenant_id: $t, id: 2, name: 'q', `+graphmodel.PropVersion+`: 5, `+graphmodel.PropOutboxID+`: 9})-[:IN_CATEGORY {tenant_id: $t}]->(c)`,
		map[string]any{"t": tenant})
	// Their rows: version 2, in B.
	inB := func(id int64) *node {
		return &node{label: graphmodel.LabelProduct, id: id, version: 2, required: true, mut: graphmodel.Mutations{
			Nodes: []graphmodel.NodeUpsert{
				{Label: graphmodel.LabelProduct, TenantID: tenant, ID: id, Guard: graphmodel.Guard{Version: 2}, Props: map[string]any{"name": "p"}},
				{Label: graphmodel.LabelCategory, TenantID: tenant, ID: 11, Props: map[string]any{"name": "B"}},
			},
			Rels: []graphmodel.RelUpsert{{Type: graphmodel.RelInCategory, TenantID: tenant, FromID: id, ToID: 11}},
		}}
	}
	stmts, err := projectionStatements(graphmodel.Default, []*node{inB(1), inB(2)}, 1)
	if err != nil {
		t.Fatal(err)
	}
	// One transaction, as WriteChunk writes a chunk.
	session := driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite})
	defer session.Close(ctx)
	if _, err := session.ExecuteWrite(ctx, func(tx neo4j.ManagedTransaction) (any, error) {
		for _, st := range stmts {
			if _, err := runTexts(ctx, tx, st.texts(), st.params); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[int64]int64{1: 11, 2: 10} {
		res, err := neo4j.ExecuteQuery(ctx, driver, `MATCH (:Product {tenant_id: $t, id: $id})-[:IN_CATEGORY]->(c) RETURN collect(c.id) AS ids`,
			map[string]any{"t": tenant, "id": id}, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		if ids, _, _ := neo4j.GetRecordValue[[]any](res.Records[0], "ids"); len(ids) != 1 || ids[0] != want {
			t.Errorf("product %d's categories after the write: %v, want [%d] (1 moved by its rows, 2 newer than them)", id, ids, want)
		}
	}
}
