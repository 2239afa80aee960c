package e2e

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
)

// checkMarkedWereApplied checks that every outbox row marked processed had
// its effect in the graph: for each Product and Order aggregate, the node's
// sync_outbox_id is at least the highest processed row of that aggregate
// (or the product's tombstone is there). PostgreSQL is read before Neo4j and
// the graph only moves forward, so this holds even while relays keep
// running. It may be called at any moment Neo4j is up.
func (s *stack) checkMarkedWereApplied(when string) {
	s.t.Helper()
	ctx, cancel := queryCtx()
	defer cancel()
	type aggregate struct {
		tenantID      int64
		aggregateType string
		id            int64
	}
	processed := map[aggregate]int64{}
	var tenants []int64
	rows, err := s.pool.Query(ctx, `
		SELECT tenant_id, aggregate_type, aggregate_id, max(id)
		FROM outbox_messages
		WHERE processed_at IS NOT NULL AND aggregate_type IN ('Product', 'Order')
		GROUP BY tenant_id, aggregate_type, aggregate_id`)
	if err != nil {
		s.t.Fatalf("%s: read processed aggregates: %v", when, err)
	}
	for rows.Next() {
		var a aggregate
		var maxID int64
		if err := rows.Scan(&a.tenantID, &a.aggregateType, &a.id, &maxID); err != nil {
			s.t.Fatalf("%s: scan processed aggregate: %v", when, err)
		}
		processed[a] = maxID
		if !slices.Contains(tenants, a.tenantID) {
			tenants = append(tenants, a.tenantID)
		}
	}
	if err := rows.Err(); err != nil {
		s.t.Fatalf("%s: read processed aggregates: %v", when, err)
	}
	result, err := neo4j.ExecuteQuery(ctx, s.neo4j, `
		MATCH (n) WHERE n.tenant_id IN $tenants AND (n:Product OR n:Order OR n:DeletedProduct)
		RETURN labels(n)[0] AS label, n.tenant_id AS tenantID, n.id AS id, n.sync_outbox_id AS outboxID`,
		map[string]any{"tenants": tenants}, neo4j.EagerResultTransformer)
	if err != nil {
		s.t.Fatalf("%s: read aggregate nodes: %v", when, err)
	}
	applied := map[aggregate]int64{}
	tombstones := map[aggregate]bool{}
	for _, rec := range result.Records {
		m := rec.AsMap()
		tenantID, _ := m["tenantID"].(int64)
		id, _ := m["id"].(int64)
		outboxID, _ := m["outboxID"].(int64)
		switch m["label"] {
		case "Product":
			applied[aggregate{tenantID, "Product", id}] = outboxID
		case "Order":
			applied[aggregate{tenantID, "Order", id}] = outboxID
		case "DeletedProduct":
			tombstones[aggregate{tenantID, "Product", id}] = true
		}
	}
	var violations []string
	for a, maxID := range processed {
		if a.aggregateType == "Product" && tombstones[a] {
			continue
		}
		got, ok := applied[a]
		switch {
		case !ok:
			violations = append(violations, fmt.Sprintf("%s %d of tenant %d: rows up to outbox id %d are marked processed but the graph has no node",
				a.aggregateType, a.id, a.tenantID, maxID))
		case got < maxID:
			violations = append(violations, fmt.Sprintf("%s %d of tenant %d: rows up to outbox id %d are marked processed but the node was last written by outbox id %d",
				a.aggregateType, a.id, a.tenantID, maxID, got))
		}
	}
	if len(violations) > 0 {
		sort.Strings(violations)
		if len(violations) > 20 {
			violations = append(violations[:20], fmt.Sprintf("... and %d more", len(violations)-20))
		}
		s.t.Fatalf("%s: rows marked processed whose effect is not in the graph:\n%s", when, strings.Join(violations, "\n"))
	}
	s.logf("%s: every one of %d aggregates' processed rows is in the graph", when, len(processed))
}

// checkNothingLost checks that no outbox row is pending: each was processed
// or dead-lettered (archived rows were processed), and that the outbox,
// the DLQ and the archive together hold every event the writers committed:
// exactly committed when no write was cut off, else between committed and
// committed+uncertain (a commit whose acknowledgement a restart swallowed).
func (s *stack) checkNothingLost(committed, uncertain int64) {
	s.t.Helper()
	ctx, cancel := queryCtx()
	defer cancel()
	var pending, processed, dlq, archived int64
	err := s.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE processed_at IS NULL),
		       count(*) FILTER (WHERE processed_at IS NOT NULL),
		       (SELECT count(*) FROM outbox_messages_dlq),
		       (SELECT count(*) FROM outbox_messages_archive)
		FROM outbox_messages`).Scan(&pending, &processed, &dlq, &archived)
	if err != nil {
		s.t.Fatalf("count outbox rows: %v", err)
	}
	if pending != 0 {
		s.t.Errorf("%d outbox rows are still pending (neither processed nor in the DLQ)", pending)
	}
	total := processed + dlq + archived + pending
	if total < committed || total > committed+uncertain {
		s.t.Errorf("outbox (%d processed, %d pending) + DLQ (%d) + archive (%d) = %d rows, but %d events were committed (%d more uncertain)",
			processed, pending, dlq, archived, total, committed, uncertain)
		return
	}
	s.logf("no event lost: %d processed, %d archived, %d dead-lettered; %d committed (+%d uncertain)",
		processed, archived, dlq, committed, uncertain)
}

// checkDLQHoldsExactly checks that the DLQ holds exactly the planted poison
// rows, each with a last_error that says which attempt gave up and why.
func (s *stack) checkDLQHoldsExactly(poison []int64, maxAttempts int) {
	s.t.Helper()
	ctx, cancel := queryCtx()
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT id, event_type, coalesce(last_error, ''), attempts FROM outbox_messages_dlq ORDER BY id`)
	if err != nil {
		s.t.Fatalf("read the DLQ: %v", err)
	}
	type deadLetter struct {
		id        int64
		eventType string
		lastError string
		attempts  int16
	}
	letters, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (deadLetter, error) {
		var d deadLetter
		return d, row.Scan(&d.id, &d.eventType, &d.lastError, &d.attempts)
	})
	if err != nil {
		s.t.Fatalf("read the DLQ: %v", err)
	}
	var ids []int64
	for _, d := range letters {
		ids = append(ids, d.id)
	}
	want := slices.Clone(poison)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		s.t.Errorf("the DLQ holds outbox ids %v, want exactly the planted poison %v", ids, want)
	}
	attempt := fmt.Sprintf("attempt %d of %d", maxAttempts, maxAttempts)
	// A SIGKILL can hit a poison row's last attempt: it then goes to the DLQ
	// unanswered, with the error of the attempt before.
	unanswered := fmt.Sprintf("gave up after %d attempts: no outcome was recorded for the last one", maxAttempts)
	for _, d := range letters {
		// The error must say it was the last attempt, and name the event and
		// the reason (graphsync's own wording names the outbox id).
		last := strings.Contains(d.lastError, attempt) || strings.Contains(d.lastError, unanswered)
		if !last || !strings.Contains(d.lastError, fmt.Sprintf("outbox id %d", d.id)) {
			s.t.Errorf("DLQ row %d (%s, %d attempts): last_error %q does not say %q (or %q) and name its outbox id",
				d.id, d.eventType, d.attempts, d.lastError, attempt, unanswered)
		}
	}
	if !s.t.Failed() {
		for _, d := range letters {
			s.logf("DLQ row %d (%s): %s", d.id, d.eventType, d.lastError)
		}
	}
}

// checkNoPersonalData checks that no property of any node or relationship
// of the test's tenants (nor of any node without a tenant) equals a
// customer's email, full name, phone or address or an order's shipping
// address, and that no string property contains an email.
func (s *stack) checkNoPersonalData(g graphSnapshot) {
	s.t.Helper()
	ctx, cancel := queryCtx()
	defer cancel()
	rows, err := s.pool.Query(ctx, `
		SELECT v FROM (
		  SELECT unnest(ARRAY[email, full_name, phone, address]) AS v FROM customers
		  UNION SELECT shipping_address FROM sales_orders) personal
		WHERE v IS NOT NULL AND v <> ''`)
	if err != nil {
		s.t.Fatalf("read personal data: %v", err)
	}
	values, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		s.t.Fatalf("read personal data: %v", err)
	}
	personal := map[string]bool{}
	var emails []string
	for _, v := range values {
		personal[v] = true
		if strings.Contains(v, "@") {
			emails = append(emails, strings.ToLower(v))
		}
	}
	if len(personal) == 0 {
		s.t.Fatalf("no personal data in PostgreSQL to look for: the workload wrote no customers")
	}
	// Nodes without a tenant are not the test's, but a leak could hide there.
	result, err := neo4j.ExecuteQuery(ctx, s.neo4j, `MATCH (n) WHERE n.tenant_id IS NULL RETURN labels(n) AS labels, properties(n) AS props`,
		nil, neo4j.EagerResultTransformer)
	if err != nil {
		s.t.Fatalf("read nodes without a tenant: %v", err)
	}
	type owner struct {
		what  string
		props map[string]any
	}
	var owners []owner
	for _, rec := range result.Records {
		m := rec.AsMap()
		owners = append(owners, owner{fmt.Sprint(toStrings(m["labels"])), toMap(m["props"])})
	}
	for _, n := range g.nodes {
		owners = append(owners, owner{fmt.Sprint(n.labels), n.props})
	}
	for _, r := range g.rels {
		owners = append(owners, owner{"[:" + r.typ + "]", r.props})
	}
	var leaks []string
	var scanned int
	for _, o := range owners {
		for key, value := range o.props {
			for _, str := range stringsIn(value) {
				scanned++
				lower := strings.ToLower(str)
				leaked := personal[str]
				for _, email := range emails {
					leaked = leaked || strings.Contains(lower, email)
				}
				if leaked {
					leaks = append(leaks, fmt.Sprintf("%s.%s = %q", o.what, key, str))
				}
			}
		}
	}
	if len(leaks) > 0 {
		sort.Strings(leaks)
		s.t.Errorf("personal data in the graph (%d properties):\n%s", len(leaks), strings.Join(leaks, "\n"))
		return
	}
	s.logf("no personal data: %d string properties checked against %d personal values", scanned, len(personal))
}

// stringsIn returns the strings in a property value (a string or a list).
func stringsIn(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, item := range x {
			out = append(out, stringsIn(item)...)
		}
		return out
	}
	return nil
}

// checkNoCrossTenantRels checks that every relationship touching the test's
// tenants joins two nodes of one tenant and carries that tenant's id.
func (s *stack) checkNoCrossTenantRels(g graphSnapshot) {
	s.t.Helper()
	var crossing []string
	for _, r := range g.rels {
		relTenant := r.props["tenant_id"]
		if r.fromTenant == nil || r.fromTenant != r.toTenant || relTenant != r.fromTenant {
			crossing = append(crossing, fmt.Sprintf("%v %v -[:%s tenant %v]-> %v %v of tenant %v",
				r.fromLabels, r.fromID, r.typ, renderValue(relTenant), r.toLabels, r.toID, r.toTenant))
		}
	}
	if len(crossing) > 0 {
		s.t.Errorf("%d relationships cross tenants:\n%s", len(crossing), strings.Join(crossing, "\n"))
		return
	}
	s.logf("no relationship crosses tenants (%d checked)", len(g.rels))
}

// checkFinal runs every end-of-test check on a caught-up database.
func (s *stack) checkFinal(poison []int64, committed, uncertain int64) {
	s.t.Helper()
	s.checkNothingLost(committed+int64(len(poison)), uncertain)
	s.checkDLQHoldsExactly(poison, maxAttempts)
	graph := s.snapshotGraph()
	s.checkGraphMatchesPostgres(graph)
	s.checkNoPersonalData(graph)
	s.checkNoCrossTenantRels(graph)
}
