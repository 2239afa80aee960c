package projector

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/cypher"
	"graphsync/events"
	"graphsync/graphmodel"
)

// Every statement that writes under a guard (an event's upsert, drift's
// repair, rebuild's snapshot write) must read the guard after taking the
// node's lock. Neo4j reads committed data without locks: a guard read while
// another transaction holds the node passes on the older state, waits at its
// SET, then overwrites the newer write. Each case holds a newer write open,
// runs an older write of a batch that mixes the contested node with another
// one beside it until Neo4j reports it waiting, commits the newer, and
// checks that the newer state stayed and the other node was written.
func TestGuardsSeeConcurrentWrites(t *testing.T) {
	_, driver := liveProjector(t)
	b, err := cypher.NewBuilder(graphmodel.Default)
	if err != nil {
		t.Fatal(err)
	}
	model := graphmodel.Default
	category := func(tenant, id, outbox int64, name string) graphmodel.NodeUpsert {
		return graphmodel.NodeUpsert{Label: graphmodel.LabelCategory, TenantID: tenant, ID: id,
			Guard: graphmodel.Guard{OutboxID: outbox}, Props: map[string]any{"name": name}}
	}
	product := func(tenant, id, version, outbox int64, name string) graphmodel.NodeUpsert {
		return graphmodel.NodeUpsert{Label: graphmodel.LabelProduct, TenantID: tenant, ID: id,
			Guard: graphmodel.Guard{Version: version, OutboxID: outbox}, Props: map[string]any{"name": name}}
	}
	order := func(tenant, id, version, outbox int64, status string) graphmodel.NodeUpsert {
		return graphmodel.NodeUpsert{Label: graphmodel.LabelOrder, TenantID: tenant, ID: id,
			Guard: graphmodel.Guard{Version: version, OutboxID: outbox}, Props: map[string]any{"status": status}}
	}
	events := func(t *testing.T, mut graphmodel.Mutations) []cypher.Statement {
		t.Helper()
		stmts, err := b.Statements(mut)
		if err != nil {
			t.Fatal(err)
		}
		return stmts
	}
	repair := func(t *testing.T, text string, err error, rows ...map[string]any) []cypher.Statement {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return []cypher.Statement{{Text: text, Params: map[string]any{"rows": rows}}}
	}
	state := `MATCH (n {tenant_id: $t}) WHERE n:Category OR n:Product OR n:Order
		OPTIONAL MATCH (n)-[:IN_CATEGORY]->(c)
		WITH n, c ORDER BY c.id
		WITH n, collect(c.id) AS cats ORDER BY labels(n)[0], n.id
		RETURN collect(labels(n)[0] + ' ' + toString(n.id) + ' ' + coalesce(n.name, n.status) + ' v' + toString(n.sync_version) +
		  ' o' + toString(n.sync_outbox_id) + ' [' +
		  reduce(s = '', c IN cats | s + CASE s WHEN '' THEN '' ELSE ',' END + toString(c)) + ']') AS state`

	cases := []struct {
		name string
		// setup is committed first; newer is held open while older runs.
		setup, newer, older func(t *testing.T, i *ids) []cypher.Statement
		want                string
	}{{
		name: "an older event beside a newer event of a shared category",
		setup: func(t *testing.T, i *ids) []cypher.Statement {
			return events(t, graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{category(i.tenant, i.id(10), 100, "first")}})
		},
		newer: func(t *testing.T, i *ids) []cypher.Statement {
			return events(t, graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{category(i.tenant, i.id(10), 201, "newest")}})
		},
		older: func(t *testing.T, i *ids) []cypher.Statement {
			return events(t, graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{
				category(i.tenant, i.id(10), 200, "older"), category(i.tenant, i.id(11), 200, "other")}})
		},
		want: "Category {C} newest v0 o201 [];Category {C2} other v0 o200 []",
	}, {
		name: "a rebuild's snapshot read beside the event committed after it",
		setup: func(t *testing.T, i *ids) []cypher.Statement {
			return events(t, graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{category(i.tenant, i.id(10), 100, "first")}})
		},
		newer: func(t *testing.T, i *ids) []cypher.Statement {
			return events(t, graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{category(i.tenant, i.id(10), 195, "held")}})
		},
		older: func(t *testing.T, i *ids) []cypher.Statement {
			text, err := cypher.RebuildReferenceText(model, graphmodel.LabelCategory)
			return repair(t, text, err,
				map[string]any{"tenant_id": i.tenant, "id": i.id(10), "props": map[string]any{"name": "first"}, "below": int64(195)},
				map[string]any{"tenant_id": i.tenant, "id": i.id(11), "props": map[string]any{"name": "other"}, "below": int64(195)})
		},
		want: "Category {C} held v0 o195 [];Category {C2} other v0 o194 []",
	}, {
		name: "a repair from older rows beside a newer event of the order",
		setup: func(t *testing.T, i *ids) []cypher.Statement {
			return events(t, graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{
				order(i.tenant, i.id(20), 1, 300, "placed"), order(i.tenant, i.id(21), 1, 100, "placed")}})
		},
		newer: func(t *testing.T, i *ids) []cypher.Statement {
			return events(t, graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{order(i.tenant, i.id(20), 2, 301, "confirmed")}})
		},
		older: func(t *testing.T, i *ids) []cypher.Statement {
			text, err := cypher.RepairNodeText(model, graphmodel.LabelOrder)
			return repair(t, text, err,
				map[string]any{"tenant_id": i.tenant, "id": i.id(20), "version": int64(1), "props": map[string]any{"status": "placed"}},
				map[string]any{"tenant_id": i.tenant, "id": i.id(21), "version": int64(1), "props": map[string]any{"status": "cancelled"}})
		},
		want: "Order {O1} confirmed v2 o301 [];Order {O2} cancelled v1 o100 []",
	}, {
		name: "a relationship repair from older rows beside the event that sets the product's category",
		setup: func(t *testing.T, i *ids) []cypher.Statement {
			return events(t, graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{
				category(i.tenant, i.id(10), 100, "c1"), category(i.tenant, i.id(11), 100, "c2"),
				product(i.tenant, i.id(1), 3, 300, "p1"), product(i.tenant, i.id(2), 1, 100, "p2")}})
		},
		newer: func(t *testing.T, i *ids) []cypher.Statement {
			return events(t, graphmodel.Mutations{
				Nodes: []graphmodel.NodeUpsert{product(i.tenant, i.id(1), 4, 301, "p1 v4")},
				Rels:  []graphmodel.RelUpsert{{Type: graphmodel.RelInCategory, TenantID: i.tenant, FromID: i.id(1), ToID: i.id(11), OutboxID: 301}},
			})
		},
		older: func(t *testing.T, i *ids) []cypher.Statement {
			text, err := cypher.RepairRelText(model, graphmodel.RelInCategory)
			return repair(t, text, err,
				map[string]any{"tenant_id": i.tenant, "from_id": i.id(1), "to_id": i.id(10), "version": int64(3), "props": map[string]any{}},
				map[string]any{"tenant_id": i.tenant, "from_id": i.id(2), "to_id": i.id(11), "version": int64(1), "props": map[string]any{}})
		},
		want: "Category {C} c1 v0 o100 [];Category {C2} c2 v0 o100 [];Product {P1} p1 v4 v4 o301 [{C2}];Product {P2} p2 v1 o100 [{C2}]",
	}, {
		name: "a repair from older rows beside the event that deletes the product",
		setup: func(t *testing.T, i *ids) []cypher.Statement {
			return events(t, graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{
				product(i.tenant, i.id(1), 3, 300, "p1"), product(i.tenant, i.id(2), 1, 100, "p2")}})
		},
		newer: func(t *testing.T, i *ids) []cypher.Statement {
			return events(t, graphmodel.Mutations{Deletes: []graphmodel.NodeDelete{{Label: graphmodel.LabelProduct, TenantID: i.tenant, ID: i.id(1),
				Guard: graphmodel.Guard{Version: 4, OutboxID: 301}}}})
		},
		older: func(t *testing.T, i *ids) []cypher.Statement {
			text, err := cypher.RepairNodeText(model, graphmodel.LabelProduct)
			return repair(t, text, err,
				map[string]any{"tenant_id": i.tenant, "id": i.id(1), "version": int64(3), "props": map[string]any{"name": "p1"}},
				map[string]any{"tenant_id": i.tenant, "id": i.id(2), "version": int64(2), "props": map[string]any{"name": "p2 v2"}})
		},
		want: "Product {P2} p2 v2 v2 o0 []",
	}, {
		name: "a repair that creates the product beside the event that deletes it",
		setup: func(t *testing.T, i *ids) []cypher.Statement {
			return events(t, graphmodel.Mutations{Nodes: []graphmodel.NodeUpsert{product(i.tenant, i.id(2), 1, 100, "p2")}})
		},
		newer: func(t *testing.T, i *ids) []cypher.Statement {
			return events(t, graphmodel.Mutations{Deletes: []graphmodel.NodeDelete{{Label: graphmodel.LabelProduct, TenantID: i.tenant, ID: i.id(1),
				Guard: graphmodel.Guard{Version: 4, OutboxID: 301}}}})
		},
		older: func(t *testing.T, i *ids) []cypher.Statement {
			rows := []map[string]any{
				{"tenant_id": i.tenant, "id": i.id(1), "version": int64(3), "props": map[string]any{"name": "p1"}},
				{"tenant_id": i.tenant, "id": i.id(2), "version": int64(2), "props": map[string]any{"name": "p2 v2"}}}
			text, err := cypher.RepairNodeText(model, graphmodel.LabelProduct)
			upsert := repair(t, text, err, rows...)
			text, err = cypher.RemoveTombstonedText(model, graphmodel.LabelProduct)
			return append(upsert, repair(t, text, err, rows...)...)
		},
		want: "Product {P2} p2 v2 v2 o0 []",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			i := newIDs(t, driver)
			run := func(ctx context.Context, tx neo4j.ManagedTransaction, stmts []cypher.Statement) error {
				for _, s := range stmts {
					res, err := tx.Run(ctx, s.Text, s.Params)
					if err != nil {
						return err
					}
					if _, err := res.Consume(ctx); err != nil {
						return err
					}
				}
				return nil
			}
			setup := driver.NewSession(ctx, neo4j.SessionConfig{})
			defer setup.Close(ctx)
			if _, err := setup.ExecuteWrite(ctx, func(tx neo4j.ManagedTransaction) (any, error) {
				return nil, run(ctx, tx, c.setup(t, i))
			}); err != nil {
				t.Fatal(err)
			}

			held := driver.NewSession(ctx, neo4j.SessionConfig{})
			defer held.Close(ctx)
			newer, err := held.BeginTransaction(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer newer.Close(ctx)
			if err := run(ctx, newer, c.newer(t, i)); err != nil {
				t.Fatal(err)
			}
			marker := fmt.Sprintf("guards-%d", i.tenant)
			olderStmts := c.older(t, i)
			older, ended := make(chan error, 1), make(chan struct{})
			olderCtx, stop := context.WithCancel(ctx)
			// A test that fails early stops the older write and waits for it
			// (after the newer one is rolled back by its deferred Close).
			t.Cleanup(func() { stop(); <-ended })
			go func() {
				defer close(ended)
				s := driver.NewSession(olderCtx, neo4j.SessionConfig{})
				defer s.Close(context.Background())
				_, err := s.ExecuteWrite(olderCtx, func(tx neo4j.ManagedTransaction) (any, error) {
					return nil, run(olderCtx, tx, olderStmts)
				}, neo4j.WithTxMetadata(map[string]any{"test": marker}))
				older <- err
			}()
			// The older write must come to wait for the newer one's lock.
			waitForLockThenCommit(t, driver, marker, newer, older)
			res, err := neo4j.ExecuteQuery(ctx, driver, state, map[string]any{"t": i.tenant}, neo4j.EagerResultTransformer)
			if err != nil {
				t.Fatal(err)
			}
			got, _, _ := neo4j.GetRecordValue[[]any](res.Records[0], "state")
			parts := make([]string, len(got))
			for k, g := range got {
				parts[k] = fmt.Sprint(g)
			}
			want := strings.NewReplacer(placeholders(i)...).Replace(c.want)
			if strings.Join(parts, ";") != want {
				t.Errorf("graph after both writes:\n%s\nwant:\n%s", strings.Join(parts, "\n"), strings.ReplaceAll(want, ";", "\n"))
			}
		})
	}
}

// Each read a lock rests on (a tombstone's, read by an event's upsert and by
// a repair; a delete's of its node; the removal after a repair) seeks the
// key's uniqueness constraint, which Neo4j does under the key's lock in a
// statement that writes. Through the index on id alone the same read takes
// no lock, and an open delete no longer holds back a repair of its node
// (TestGuardsSeeConcurrentWrites failed now and then in CI, whenever the
// planner's statistics made it take that index).
func TestKeyLookupsTakeTheKeysLock(t *testing.T) {
	_, driver := liveProjector(t)
	model := graphmodel.Default
	b, err := cypher.NewBuilder(model)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, l := range model.Labels {
		if l.Tombstone == "" {
			continue
		}
		var texts []string
		for _, text := range b.Texts() {
			if strings.Contains(text, ":"+l.Tombstone+" ") {
				texts = append(texts, text) // the delete, the upsert
			}
		}
		for _, f := range []func(graphmodel.Model, string) (string, error){cypher.RepairNodeText, cypher.RemoveTombstonedText} {
			text, err := f(model, l.Name)
			if err != nil {
				t.Fatal(err)
			}
			texts = append(texts, text)
		}
		if len(texts) != 4 {
			t.Fatalf("%s: %d statements read its tombstone, want 4 (delete, upsert, repair, removal)", l.Name, len(texts))
		}
		for _, text := range texts {
			plan := explainOnNoRows(t, driver, text)
			// Each statement reads or merges two keys (the tombstone's and
			// the node's), each by a locking seek of its own.
			locking := 0
			for _, op := range planOperators(plan) {
				switch {
				case op == "NodeUniqueIndexSeek(Locking)@neo4j":
					locking++
				case strings.Contains(op, "IndexSeek") || strings.Contains(op, "Scan"):
					t.Errorf("plan reads a node by %s, without the key's lock:\n%s", op, text)
				}
			}
			if locking != 2 {
				t.Errorf("plan reads %d keys by a locking seek, want 2 (the tombstone's and the node's):\n%s", locking, text)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("the model has no label with a tombstone")
	}
}

// A relationship statement reads both its ends by their id, and its plan
// must not depend on Neo4j's statistics: the batch keeps its cached plan
// (replan=skip), and a plan made while a rebuild filled an emptied graph (an
// index sampled empty beside a label count of tens of thousands) scanned an
// index for every row, so that a replay chunk of a second took 10 to 37 s
// (ADR 0030). Every end is read through the index on id alone by a seek the
// statement asks for (USING INDEX SEEK: with USING INDEX, that plan scanned
// the named index), without a lock (the relationship MERGE takes the lock,
// ADR 0003): never a scan, and never the key's locking seek, which the
// planner took for some statements and not for others. The statistics of
// that rebuild cannot be made on demand, so the test also wants the seek
// asked for, as well as found in the plan of the statistics at hand.
func TestRelationshipEndsSeekTheIDIndex(t *testing.T) {
	_, driver := liveProjector(t)
	model := graphmodel.Default
	b, err := cypher.NewBuilder(model)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, text := range b.Texts() {
		if strings.Contains(text, "]->(b") {
			texts = append(texts, text) // a Single relationship's clear, every merge
		}
	}
	want := 0 // a merge and a repair of each type, a clear and a repair clear of each Single one
	for _, r := range model.Relationships {
		want += 2
		text, err := cypher.RepairRelText(model, r.Type)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, text)
		if r.Single {
			want += 2
			if text, err = cypher.RepairRelClearText(model, r.Type); err != nil {
				t.Fatal(err)
			}
			texts = append(texts, text)
		}
	}
	if len(texts) != want {
		t.Fatalf("%d relationship statements, want %d (a merge and a repair of each type, a clear and a repair clear of each Single one)", len(texts), want)
	}
	for _, text := range texts {
		seeks := 0
		for _, step := range planSteps(explainOnNoRows(t, driver, text)) {
			switch {
			case strings.HasPrefix(step, "NodeIndexSeek@") && strings.Contains(step, "(id) WHERE id = row."):
				seeks++
			case strings.Contains(step, "Seek") || strings.Contains(step, "Scan"):
				t.Errorf("plan reads a relationship's end by %s, not by its id's index:\n%s", step, text)
			}
		}
		ends := strings.Count(text, "MATCH (a:") + strings.Count(text, "MATCH (b:")
		if seeks != ends {
			t.Errorf("plan seeks the id index %d times, want %d (one for each end the statement reads):\n%s", seeks, ends, text)
		}
		if asked := strings.Count(text, "USING INDEX SEEK "); asked != ends {
			t.Errorf("statement asks for %d seeks, want %d (one for each end it reads):\n%s", asked, ends, text)
		}
	}
}

// A repair writes the rows' state, which no event wrote: a replay of the
// event that wrote the node before (a rebuild's replay, a redelivery) must
// change nothing, its Single relationship included. The relationship's
// statements act for the event whose outbox id the node holds, so the
// repair must not leave that event's id on the node.
func TestReplayAfterARepairMovesNoEdgeBack(t *testing.T) {
	p, driver := liveProjector(t)
	i := newIDs(t, driver)
	placed := i.message(t, events.ProductCreated{ProductState: product(i.id(1), 1, "Mug", i.id(10), "Kitchen", 500, "active")})
	deliverAll(t, p, placed, i.message(t, events.ProductCreated{ProductState: product(i.id(2), 1, "Cup", i.id(11), "Garden", 500, "active")}))
	model := graphmodel.Default
	repairs := []struct {
		text func() (string, error)
		row  map[string]any
	}{
		{func() (string, error) { return cypher.RepairNodeText(model, graphmodel.LabelProduct) },
			map[string]any{"tenant_id": i.tenant, "id": i.id(1), "version": int64(2), "props": map[string]any{"name": "Mug", "sku": nil,
				"description": nil, "price_cents": int64(500), "currency": "EUR", "status": "active"}}},
		{func() (string, error) { return cypher.RepairRelText(model, graphmodel.RelInCategory) },
			map[string]any{"tenant_id": i.tenant, "from_id": i.id(1), "to_id": i.id(11), "version": int64(2), "props": map[string]any{}}},
	}
	for _, r := range repairs {
		text, err := r.text()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := neo4j.ExecuteQuery(context.Background(), driver, text, map[string]any{"rows": []any{r.row}}, neo4j.EagerResultTransformer); err != nil {
			t.Fatal(err)
		}
	}
	// The repair's own edge removal, as drift's would: the product in Garden only.
	if _, err := neo4j.ExecuteQuery(context.Background(), driver, `MATCH (:Product {tenant_id: $t, id: $p})-[r:IN_CATEGORY]->(c:Category) WHERE c.id <> $c DELETE r`,
		map[string]any{"t": i.tenant, "p": i.id(1), "c": i.id(11)}, neo4j.EagerResultTransformer); err != nil {
		t.Fatal(err)
	}
	deliverAll(t, p, placed) // the replay
	res, err := neo4j.ExecuteQuery(context.Background(), driver, `MATCH (:Product {tenant_id: $t, id: $p})-[:IN_CATEGORY]->(c:Category) RETURN collect(c.id) AS cats`,
		map[string]any{"t": i.tenant, "p": i.id(1)}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	cats, _, _ := neo4j.GetRecordValue[[]any](res.Records[0], "cats")
	if fmt.Sprint(cats) != fmt.Sprint([]any{i.id(11)}) {
		t.Errorf("the product's categories after the replay: %v, want only %d (the repair's); the replayed event moved the edge back", cats, i.id(11))
	}
}

// waitForLockThenCommit waits until a transaction waits for a lock (one
// whose metadata "test" is marker; any, for an empty marker), commits held,
// and waits for the waiting writer to end without error: it reports on
// ended. A writer that ends before it waited fails the test.
func waitForLockThenCommit(t *testing.T, driver neo4j.DriverWithContext, marker string, held neo4j.ExplicitTransaction, ended <-chan error) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := neo4j.ExecuteQuery(ctx, driver, `SHOW TRANSACTIONS YIELD metaData, status
			WHERE ($marker = '' OR metaData.test = $marker) AND status STARTS WITH 'Blocked' RETURN count(*) AS n`,
			map[string]any{"marker": marker}, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		if n, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "n"); n > 0 {
			break
		}
		select {
		case err := <-ended:
			t.Fatalf("the write ended (%v) without waiting for the held transaction's lock", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the write did not wait for the held transaction's lock within 30s")
		}
	}
	if err := held.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the write did not end within 30s of the held transaction's commit")
	}
}
