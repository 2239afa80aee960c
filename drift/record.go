package drift

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	gsql "graphsync/sql"
)

// Source says which check a record comes from.
type Source string

// Sources of a recorded check.
const (
	// SourceCommand is `graphsync drift`.
	SourceCommand Source = "drift"
	// SourceSync is sync's periodic drift watch.
	SourceSync Source = "sync"
)

// recordTimeout bounds Record, which does not end with its caller's context.
const recordTimeout = 10 * time.Second

// FinishedAt is when the comparison ended (a repair after it not counted).
func (r *Report) FinishedAt() time.Time {
	return r.StartedAt.Add(time.Duration(r.Seconds * float64(time.Second)))
}

// Record writes in PostgreSQL, for every tenant the check covered, that it
// finished, with what share of keys, and the tenant's drift by kind (counts,
// never keys or values); graph_status reads it back for one tenant. A
// tenant's earlier record is replaced, unless it is of a check that finished
// later. A check that finished is recorded even while its caller stops: ctx
// ends the wait only after recordTimeout.
func (r *Report) Record(ctx context.Context, pool *pgxpool.Pool, source Source) error {
	if len(r.Tenants) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	byTenant := map[int64]map[Kind]int{}
	for _, c := range r.Counts {
		if byTenant[c.TenantID] == nil {
			byTenant[c.TenantID] = map[Kind]int{}
		}
		byTenant[c.TenantID][c.Kind] += c.Count
	}
	tenants := make([]int64, 0, len(r.Tenants))
	totals := make([]int64, 0, len(r.Tenants))
	counts := make([]string, 0, len(r.Tenants))
	for _, t := range r.Tenants {
		kinds := byTenant[t.TenantID]
		if kinds == nil {
			kinds = map[Kind]int{}
		}
		total := 0
		for _, n := range kinds {
			total += n
		}
		text, err := json.Marshal(kinds)
		if err != nil {
			return fmt.Errorf("record the drift check: %w", err)
		}
		tenants, totals, counts = append(tenants, t.TenantID), append(totals, int64(total)), append(counts, string(text))
	}
	if _, err := pool.Exec(ctx, gsql.Query("DriftCheckRecord"), tenants, totals, counts, r.FinishedAt(), r.Sample, string(source)); err != nil {
		return fmt.Errorf("record the drift check: %w", err)
	}
	return nil
}
