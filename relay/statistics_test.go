package relay

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	gsql "graphsync/sql"
)

// TestClaimBringsStaleStatisticsUpToDate: the planner's statistics of the
// outbox were taken while nothing was pending (a sync that kept up), then a
// backlog arrives, as after an outage. The relay's first claims find it and
// ANALYZE the table once, so that the claim's plan knows of the backlog
// (docs/adr/0015); a smaller backlog later, with statistics that expect
// pending rows, analyzes nothing. Autovacuum is off for the test's outbox,
// so only the relay can bring the statistics up to date.
func TestClaimBringsStaleStatisticsUpToDate(t *testing.T) {
	for _, mode := range []WakeMode{WakePoll, WakeStream} {
		t.Run(string(mode), func(t *testing.T) { testClaimBringsStaleStatisticsUpToDate(t, mode) })
	}
}

func testClaimBringsStaleStatisticsUpToDate(t *testing.T, mode WakeMode) {
	h := newHarness(t, mode)
	ctx := context.Background()
	// How many times the outbox was analyzed, and how many rows were
	// pending at the last ANALYZE (the claim index's reltuples; nothing
	// here runs VACUUM).
	analyzed := func() int64 { return h.count(gsql.Query("OutboxAnalyzeCount")) }
	sawPending := func() float64 {
		var n float64
		if err := h.pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'outbox_messages_claim_idx'::regclass`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// produce writes n events of 40 aggregates, interleaved, in one
	// transaction; processed writes them as the relay's marks would leave them.
	produce := func(n int, processed bool) {
		t.Helper()
		h.exec(`INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload, processed_at)
			SELECT 1 + g % 2, 'Order', g % 40, 'OrderConfirmed', '{}', CASE WHEN $2 THEN now() END
			FROM generate_series(1, $1) g`, n, processed)
	}
	h.exec(`ALTER TABLE outbox_messages SET (autovacuum_enabled = false)`)
	produce(400, true)
	h.exec(`ANALYZE outbox_messages`)
	if got := sawPending(); got != 0 {
		t.Fatalf("before the backlog the last ANALYZE saw %.0f pending rows, want 0", got)
	}
	before := analyzed()

	cfg := h.config("stats")
	floor := statisticsBehindBatches * cfg.BatchSize // behind at 0 expected rows
	sink := newRecordingSink()
	first, stop := h.startRelay(sink, cfg)
	produce(10*floor, false)
	eventually(t, 60*time.Second, "the backlog applied", func() bool { return len(sink.applied()) == 10*floor })
	sink.checkOrder(t)
	sink.checkViolations(t)
	eventually(t, 30*time.Second, "the relay's check", func() bool { return first.stats.checks.Load() > 0 })
	stop()
	if got := analyzed(); got != before+1 {
		t.Fatalf("the outbox was analyzed %d times during a backlog the statistics did not know of, want once", got-before)
	}
	// The check runs beside the drain: its ANALYZE saw the backlog.
	if got := sawPending(); got < float64(2*floor) {
		t.Fatalf("the relay's ANALYZE saw %.0f pending rows of a backlog of %d", got, 10*floor)
	}

	// Statistics that expect a backlog are not behind a smaller one, even
	// one past the floor: a second check analyzes nothing. A relay checks
	// at most every statisticsCheckEvery, so a new relay makes it.
	again, stop := h.startRelay(sink, h.config("stats-again"))
	produce(floor+floor/5, false)
	eventually(t, 60*time.Second, "the second batch applied", func() bool { return len(sink.applied()) == 10*floor+floor+floor/5 })
	eventually(t, 30*time.Second, "the second relay's check", func() bool { return again.stats.checks.Load() > 0 })
	stop()
	if got := analyzed(); got != before+1 {
		t.Fatalf("a relay analyzed the outbox although its statistics expected more rows than were pending (%d analyses, want 1)", got-before)
	}
}

// TestStatisticsWarnOnlyWhenAnalyzeKeepsFailing: an ANALYZE that
// SKIP_LOCKED passes over (a VACUUM, or another relay's ANALYZE, holds the
// table) changes nothing, and PostgreSQL says so only in a notice. One such
// check is not worth a warning (another relay may be analyzing); a second
// in a row is. Once the table is free the check analyzes and says so.
func TestStatisticsWarnOnlyWhenAnalyzeKeepsFailing(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	h.exec(`ALTER TABLE outbox_messages SET (autovacuum_enabled = false)`)
	h.exec(`ANALYZE outbox_messages`)
	cfg := h.config("stats").withDefaults()
	h.exec(`INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT 1, 'Order', g % 40, 'OrderConfirmed', '{}' FROM generate_series(1, $1) g`, 2*statisticsBehindBatches*cfg.BatchSize)
	// Another session holds the lock an ANALYZE or VACUUM takes.
	holder, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `LOCK TABLE outbox_messages IN SHARE UPDATE EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	s := newStatistics(h.pool, zap.New(core), cfg)
	warned := func() int {
		return logs.FilterLevelExact(zap.WarnLevel).FilterMessageSnippet("ANALYZE did not run").Len()
	}
	analyzed := func() int { return logs.FilterMessageSnippet("analyzed the table").Len() }

	if err := s.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if warned() != 0 || analyzed() != 0 {
		t.Fatalf("after one check that could not analyze: %d warnings, %d analyses logged; want none", warned(), analyzed())
	}
	if err := s.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if warned() != 1 || analyzed() != 0 {
		t.Fatalf("after two checks in a row that could not analyze: %d warnings, %d analyses logged; want 1 warning", warned(), analyzed())
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if analyzed() != 1 || s.notAnalyzed != 0 {
		t.Fatalf("with the table free: %d analyses logged (want 1), %d failed checks counted (want 0)", analyzed(), s.notAnalyzed)
	}
}

// TestHoldsProbeIgnoresStaleStatistics: the statistics of
// outbox_aggregate_leases were taken while it held no hold (autovacuum
// analyzes the small table late, if at all), then an outage left thousands
// of aggregates held back. Each claim window must still read the holds
// through one index probe per row, keyed by the row's aggregate, in poll
// and in stream mode. As a NOT EXISTS the planner made the probe an
// anti-join that read every hold once and compared every row of the window
// with all of them (0.9 s for 2,000 rows and 5,000 holds).
func TestHoldsProbeIgnoresStaleStatistics(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	h.exec(`ALTER TABLE outbox_aggregate_leases SET (autovacuum_enabled = false)`)
	h.exec(`ANALYZE outbox_aggregate_leases`)
	h.exec(`INSERT INTO outbox_aggregate_leases (tenant_id, aggregate_type, aggregate_id, locked_by, locked_until)
		SELECT 1 + g % 10, 'Order', 100000 + g, 'held back', now() + interval '1 hour'
		FROM generate_series(1, 5000) g`)
	h.exec(`INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT 1 + g % 10, 'Order', g % 700, 'OrderConfirmed', '{}' FROM generate_series(1, 2000) g`)
	h.exec(`ANALYZE outbox_messages`)
	var ids []int64
	if err := h.pool.QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM outbox_messages`).Scan(&ids); err != nil {
		t.Fatal(err)
	}

	for _, claim := range []struct {
		name, statement string
		args            []any
	}{{"poll", claimPollSQL, []any{2000, true}}, {"stream", claimByIDSQL, []any{ids}}} {
		t.Run(claim.name, func(t *testing.T) {
			tx, err := h.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, gsql.Query("OutboxClaimSettings"), "5000"); err != nil {
				t.Fatal(err)
			}
			var plan []struct{ Plan planNode }
			if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+claim.statement, claim.args...).Scan(&plan); err != nil {
				t.Fatal(err)
			}
			probes := 0
			plan[0].Plan.walk(func(n planNode) {
				// anyhold: whether any hold is in place, read once a claim
				// (it stops at the first live hold).
				if n.Relation != "outbox_aggregate_leases" || n.Type == "ModifyTable" || n.Alias == "anyhold" {
					return
				}
				keyed := (n.Type == "Index Scan" || n.Type == "Index Only Scan") &&
					strings.Contains(n.IndexCond, "aggregate_id") && strings.Contains(n.IndexCond, "tenant_id")
				if !keyed {
					t.Errorf("the claim reads outbox_aggregate_leases with a %s (index %q, condition %q), not an index probe by the row's aggregate",
						n.Type, n.Index, n.IndexCond)
				}
				probes++
			})
			if probes == 0 {
				t.Error("the claim's plan reads no hold")
			}
		})
	}
}

// planNode is a node of PostgreSQL's EXPLAIN (FORMAT JSON).
type planNode struct {
	Type      string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	Index     string     `json:"Index Name"`
	IndexCond string     `json:"Index Cond"`
	Alias     string     `json:"Alias"`
	Plans     []planNode `json:"Plans"`
	// Under EXPLAIN ANALYZE: rows a node returned and those its filter
	// dropped, per loop, and how many loops it ran.
	ActualRows      float64 `json:"Actual Rows"`
	ActualLoops     float64 `json:"Actual Loops"`
	RemovedByFilter float64 `json:"Rows Removed by Filter"`
}

func (n planNode) walk(visit func(planNode)) {
	visit(n)
	for _, c := range n.Plans {
		c.walk(visit)
	}
}
