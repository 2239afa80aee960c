package drift

import (
	"bytes"
	"strings"
	"testing"

	"graphsync/workload"
)

// A property outside the allowlist is reported by its key and the kind of
// its value, never its value: a customer's name or a birth date copied onto
// an Order matches no e-mail or phone pattern, and neither the JSON nor the
// Markdown report may carry it. The repair removes them all.
func TestReportNamesPropertiesOutsideTheAllowlistWithoutTheirValues(t *testing.T) {
	pool, driver, tenants := syncedWorkload(t, workload.Config{Seed: 11, Tenants: 1, Orders: 12, DeleteEvery: -1}, "sync-allowlist")
	tenant := tenants[0]
	orders := ids(t, pool, `SELECT id FROM sales_orders WHERE tenant_id = $1 ORDER BY id`, tenant)
	order, relOrder := orders[0], orders[1]
	p := func(id int64) map[string]any { return map[string]any{"t": tenant, "id": id} }
	cypherExec(t, driver, `MATCH (n:Order {tenant_id: $t, id: $id})
		SET n.customer_name = 'Jane Quillfeather', n.birth_date = date('1984-02-29'), n.loyalty_points = 4711,
		    n.nicknames = ['Janie Q', 'JQ']`, p(order))
	cypherExec(t, driver, `MATCH (:Order {tenant_id: $t, id: $id})-[r:CONTAINS]->() SET r.gift_note = 'For Quillfeather, with love'`, p(relOrder))

	report := check(t, pool, driver, tenant, false)
	var js bytes.Buffer
	var md strings.Builder
	if err := report.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := report.WriteMarkdown(&md, 0); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		id     int64
		detail string
	}{
		{order, "property customer_name (text of 17 characters) is outside the allowlist"},
		{order, "property birth_date (a date) is outside the allowlist"},
		{order, "property loyalty_points (an integer) is outside the allowlist"},
		{order, "property nicknames (a list of 2) is outside the allowlist"},
		{relOrder, "property gift_note (text of 27 characters) is outside the allowlist"},
	} {
		found := false
		for _, f := range report.Examples[PropertyNotAllowed] {
			found = found || (f.Label == "Order" && f.ID == w.id && strings.Contains(f.Detail, w.detail))
		}
		if !found {
			t.Errorf("order %d: %q not reported:\n%s", w.id, w.detail, md.String())
		}
	}
	for name, out := range map[string]string{"JSON": js.String(), "Markdown": md.String()} {
		for _, value := range []string{"Quillfeather", "1984", "02-29", "4711", "Janie", "JQ"} {
			if strings.Contains(out, value) {
				t.Errorf("the %s report shows %q, a value outside the allowlist:\n%s", name, value, out)
			}
		}
	}

	if repaired := check(t, pool, driver, tenant, true); len(repaired.Repaired) == 0 {
		t.Fatal("repair changed nothing")
	}
	if after := check(t, pool, driver, tenant, false); after.DriftTotal != 0 {
		md.Reset()
		_ = after.WriteMarkdown(&md, 0)
		t.Fatalf("drift %d after repair:\n%s", after.DriftTotal, md.String())
	}
}
