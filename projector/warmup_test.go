package projector

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/sourcegraph/conc/pool"
	"go.uber.org/zap/zaptest"

	"graphsync/events"
	"graphsync/outbox"
)

// WarmUp runs every statement on rows of tenant -1 and rolls back: two
// processes warming up at once both succeed, every statement got as far as
// writing, nothing of tenant -1 (or with id -1) is left in the graph, and a
// batch delivered afterwards is applied as usual.
func TestWarmUpWritesNothing(t *testing.T) {
	p, driver := liveProjector(t)
	second, err := New(driver, Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	leftovers := func() int64 {
		t.Helper()
		res, err := neo4j.ExecuteQuery(ctx, driver, "MATCH (n) WHERE n.tenant_id = -1 OR n.id = -1 RETURN count(n) AS n",
			nil, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		n, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "n")
		return n
	}
	before := leftovers()
	warm := pool.New().WithErrors()
	var writes map[string]int
	warm.Go(func() (err error) {
		writes, err = p.warmUp(ctx)
		return err
	})
	warm.Go(func() error { return second.WarmUp(ctx) })
	if err := warm.Wait(); err != nil {
		t.Fatalf("WarmUp: %v", err)
	}
	// Each statement ran past its filters (it wrote, before the rollback),
	// except the stale-edge removal, which finds no stale edge.
	for _, text := range p.builder.Texts() {
		if writes[text] == 0 && !strings.HasSuffix(text, "DELETE r") {
			t.Errorf("the warm-up wrote nothing with:\n%s", text)
		}
	}
	if after := leftovers(); after != before {
		t.Fatalf("WarmUp left %d nodes of tenant -1 or id -1 in the graph", after-before)
	}

	i := newIDs(t, driver)
	deliverAll(t, p, i.message(t, events.ProductCreated{ProductState: product(i.id(1), 1, "Mug", 0, "", 1, "active")}))
	if got := dump(t, driver, i.tenant); len(got.Nodes) != 2 { // the tenant and the product
		t.Fatalf("after WarmUp the batch wrote %v", got.Nodes)
	}
}

// Neo4j unreachable: WarmUp fails as a batch would (unavailable, so sync
// starts all the same) and does not hang.
func TestWarmUpWithoutNeo4j(t *testing.T) {
	p := unreachableProjector(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.WarmUp(ctx); !errors.Is(err, outbox.ErrSinkUnavailable) {
		t.Fatalf("WarmUp = %v, want an error wrapping outbox.ErrSinkUnavailable", err)
	}
}
