package drift

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap/zaptest"
)

// A node of a projected label whose tenant_id is not an integer (a string,
// a list, set by another writer) is no tenant's: it is reported as what it
// is, never as a node of "tenant 0" (the zero value of a failed read, which
// no repair matched), and a whole-graph repair removes it, as it removes a
// node without a tenant_id.
func TestNodesWithATenantIDThatIsNoIntegerAreFoundAndRemoved(t *testing.T) {
	pool, driver := stack(t)
	ctx := context.Background()
	marker := 9_000_000_000 + time.Now().UnixNano()%1_000_000_000
	cypherExec(t, driver, `CREATE (:Customer {tenant_id: toString($m), id: $m, segment: 'a text tenant'}),
		(:Product {tenant_id: [$m], id: $m, name: 'a list tenant'})`, map[string]any{"m": marker})
	t.Cleanup(func() { cypherExec(t, driver, `MATCH (n {id: $m}) DETACH DELETE n`, map[string]any{"m": marker}) })
	c, err := New(pool, driver, Config{RecheckAfter: 100 * time.Millisecond}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	tenants, err := c.Tenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := &run{c: c, model: *c.cfg.Model, report: newReport(c.cfg)}
	if err := r.scanForeign(ctx, tenants); err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, f := range r.findings {
		if f.TenantID == 0 && f.Kind != NodeWithoutTenant {
			t.Errorf("a node was reported as tenant 0's: %s %s %q", f.Kind, f.Label, f.Detail)
		}
		if f.Kind == NodeWithoutTenant && f.ID == marker {
			found = append(found, f.Label+": "+f.Detail)
		}
	}
	want := fmt.Sprintf("[Customer: 1 Customer nodes have a tenant_id that is not an integer (text of %d characters) Product: 1 Product nodes have a tenant_id that is not an integer (a list of 1)]",
		len(fmt.Sprint(marker)))
	if fmt.Sprint(found) != want {
		t.Errorf("findings %v, want %s", found, want)
	}
	changes, err := r.repair(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := neo4j.ExecuteQuery(ctx, driver, `MATCH (n {id: $m}) RETURN count(n) AS n`, map[string]any{"m": marker}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	if n, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "n"); n != 0 {
		t.Errorf("%d nodes with a tenant_id that is no integer left after the repair (%s)", n, strings.Join(changes, "; "))
	}
}
