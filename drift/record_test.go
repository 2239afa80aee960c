package drift

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"graphsync/internal/stacktest"
)

// Record writes one row per tenant the check covered, with that tenant's
// counts by kind alone; a finding of a tenant the check did not cover
// (nodes of a tenant PostgreSQL does not have) is nobody's record. A check
// that finished earlier does not replace a later one; a tenant removed
// takes its row along, and one removed before the record is skipped.
func TestRecordKeepsEachTenantsLastCheck(t *testing.T) {
	ctx := context.Background()
	_, pool := stacktest.FreshDatabase(t)
	var dirty, clean, gone int64
	for _, id := range []*int64{&dirty, &clean, &gone} {
		if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('recorded') RETURNING id`).Scan(id); err != nil {
			t.Fatal(err)
		}
	}
	report := func(started time.Time, sample float64, findings ...Finding) *Report {
		r := newReport(Config{Sample: sample}.withDefaults())
		r.StartedAt = started
		for _, id := range []int64{dirty, clean, gone} {
			r.tenant(id)
		}
		r.finish(findings, 1500*time.Millisecond)
		return r
	}
	// Mixed in one report: two kinds and two labels of one tenant, nothing
	// of another, a tenant not covered.
	later := time.Now().UTC().Truncate(time.Microsecond)
	r := report(later, 1,
		Finding{Kind: OrphanNode, TenantID: dirty, Label: "Product", ID: 1, Count: 1},
		Finding{Kind: OrphanNode, TenantID: dirty, Label: "Order", ID: 2, Count: 1},
		Finding{Kind: StaleNode, TenantID: dirty, Label: "Product", ID: 3, Count: 1},
		Finding{Kind: MissingNode, TenantID: 424242, Label: "Product", ID: 4, Count: 7})
	if _, err := pool.Exec(ctx, `DELETE FROM tenants WHERE id = $1`, gone); err != nil {
		t.Fatal(err)
	}
	if err := r.Record(ctx, pool, SourceCommand); err != nil {
		t.Fatalf("Record: %v", err)
	}
	type row struct {
		finished time.Time
		clean    bool
		total    int64
		counts   string
		source   string
	}
	read := func(tenant int64) (row, bool) {
		var got row
		err := pool.QueryRow(ctx, `SELECT finished_at, clean, drift_total, counts::text, source FROM drift_checks WHERE tenant_id = $1`, tenant).
			Scan(&got.finished, &got.clean, &got.total, &got.counts, &got.source)
		if errors.Is(err, pgx.ErrNoRows) {
			return row{}, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return got, true
	}
	wantFinished := later.Add(1500 * time.Millisecond)
	if got, ok := read(dirty); !ok || got.clean || got.total != 3 || got.counts != `{"stale_node": 1, "orphan_node": 2}` ||
		got.source != "drift" || !got.finished.Equal(wantFinished) {
		t.Errorf("dirty tenant's record = %+v (found %v), want 2 orphan and 1 stale node finished at %s", got, ok, wantFinished)
	}
	if got, ok := read(clean); !ok || !got.clean || got.total != 0 || got.counts != "{}" {
		t.Errorf("clean tenant's record = %+v (found %v), want clean with no counts", got, ok)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM drift_checks`).Scan(&rows); err != nil || rows != 2 {
		t.Errorf("drift_checks holds %d rows (%v), want the two tenants still there", rows, err)
	}

	// An earlier check recorded last (sync's, slower) leaves the later one.
	if err := report(later.Add(-time.Minute), 0.1).Record(ctx, pool, SourceSync); err != nil {
		t.Fatal(err)
	}
	if got, _ := read(dirty); got.clean || got.source != "drift" {
		t.Errorf("an earlier check replaced a later one: %+v", got)
	}
	// A later clean check replaces it.
	if err := report(later.Add(time.Minute), 0.1).Record(ctx, pool, SourceSync); err != nil {
		t.Fatal(err)
	}
	if got, _ := read(dirty); !got.clean || got.source != "sync" || got.counts != "{}" {
		t.Errorf("a later check did not replace the record: %+v", got)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM tenants WHERE id = $1`, clean); err != nil {
		t.Fatalf("remove a tenant with a recorded check: %v", err)
	}
	if _, ok := read(clean); ok {
		t.Error("a removed tenant's record is still there")
	}
}

// BenchmarkDriftCheckRecord records a check of 10,000 tenants, a tenth of
// them with drift of two kinds: the statement Report.Record runs after
// every check, against a table already holding each tenant's row.
func BenchmarkDriftCheckRecord(b *testing.B) {
	ctx := context.Background()
	_, pool := stacktest.FreshDatabase(b)
	const tenants = 10_000
	if _, err := pool.Exec(ctx, `INSERT INTO tenants (name) SELECT 'bench' FROM generate_series(1, $1)`, tenants); err != nil {
		b.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT id FROM tenants ORDER BY id`)
	if err != nil {
		b.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		b.Fatal(err)
	}
	r := newReport(Config{}.withDefaults())
	var findings []Finding
	for i, id := range ids {
		r.tenant(id)
		if i%10 == 0 {
			findings = append(findings, Finding{Kind: OrphanNode, TenantID: id, Label: "Product", Count: 3},
				Finding{Kind: StaleNode, TenantID: id, Label: "Order", Count: 1})
		}
	}
	r.finish(findings, time.Second)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.StartedAt = r.StartedAt.Add(time.Second)
		if err := r.Record(ctx, pool, SourceCommand); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	var recorded, bytes int64
	if err := pool.QueryRow(ctx, `SELECT count(*), pg_total_relation_size('drift_checks') FROM drift_checks`).Scan(&recorded, &bytes); err != nil || recorded != tenants {
		b.Fatalf("drift_checks holds %d rows (%v), want %d", recorded, err, tenants)
	}
	b.Logf("drift_checks after %d records of %d tenants: %d rows, %d kB with its index", b.N, tenants, recorded, bytes/1024)
}
