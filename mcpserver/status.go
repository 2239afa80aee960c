package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	gsql "graphsync/sql"
)

// Status is a tenant's projection freshness, as graph_status reports it.
type Status struct {
	PendingEvents int64 `json:"pending_events" jsonschema:"events written in PostgreSQL and not yet applied to the graph"`
	// OldestPendingAgeSeconds is nil when nothing is pending.
	OldestPendingAgeSeconds *float64 `json:"oldest_pending_age_seconds" jsonschema:"how long the oldest pending event has waited, in seconds; null when nothing is pending"`
	DeadLetters             int64    `json:"dead_letters" jsonschema:"events that could not be applied and wait for an operator (dead-letter queue)"`
	// LastDriftCheck, LastDriftCheckClean and LastDriftCheckSample are nil
	// when no drift check that covered the tenant is recorded.
	LastDriftCheck       *string  `json:"last_drift_check" jsonschema:"when PostgreSQL and this shop's graph were last compared (a drift check), RFC 3339; null when none is recorded"`
	LastDriftCheckClean  *bool    `json:"last_drift_check_clean" jsonschema:"true when that check found the graph saying what PostgreSQL says for this shop; null when none is recorded"`
	LastDriftCheckSample *float64 `json:"last_drift_check_sample" jsonschema:"share of keys that check compared, 1 for every key; null when none is recorded"`
	Note                 string   `json:"note" jsonschema:"what the figures mean, in a sentence"`
}

// statusNote says what the figures are.
const statusNote = "Pending events and dead letters are counted now; the drift check is the last recorded comparison of the graph with PostgreSQL for this shop (graphsync drift, or sync's periodic check)."

// readStatus reads tenantID's status in one read-only transaction under the
// row-level security scope of that tenant, every statement filtered on it
// too.
func readStatus(ctx context.Context, pool *pgxpool.Pool, tenantID int64) (Status, error) {
	var st Status
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, gsql.Query("MCPTenantScope"), tenantID); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, gsql.Query("MCPTenantStatus"), tenantID).Scan(&st.PendingEvents, &st.OldestPendingAgeSeconds, &st.DeadLetters); err != nil {
			return err
		}
		var finished time.Time
		var clean bool
		var sample float64
		err := tx.QueryRow(ctx, gsql.Query("MCPTenantLastDriftCheck"), tenantID).Scan(&finished, &clean, &sample)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		at := finished.UTC().Format(time.RFC3339)
		st.LastDriftCheck, st.LastDriftCheckClean, st.LastDriftCheckSample = &at, &clean, &sample
		return nil
	})
	if err != nil {
		return Status{}, fmt.Errorf("read the projection status: %w", err)
	}
	st.Note = statusNote
	return st, nil
}

// Sentence is the status as an agent can repeat it.
func (st Status) Sentence() string {
	s := "The graph is up to date with PostgreSQL: no event is waiting."
	if st.PendingEvents > 0 {
		s = fmt.Sprintf("The graph is %d event(s) behind PostgreSQL", st.PendingEvents)
		if st.OldestPendingAgeSeconds != nil {
			s += fmt.Sprintf("; the oldest has waited %.1f s", *st.OldestPendingAgeSeconds)
		}
		s += "."
	}
	if st.DeadLetters > 0 {
		s += fmt.Sprintf(" %d event(s) could not be applied and wait in the dead-letter queue: the graph may miss them.", st.DeadLetters)
	}
	if st.LastDriftCheck == nil {
		return s + " No drift check (a comparison of the graph with PostgreSQL) is recorded for this shop."
	}
	scope := "every key"
	if *st.LastDriftCheckSample < 1 {
		scope = fmt.Sprintf("a %.1f%% sample of keys", *st.LastDriftCheckSample*100)
	}
	verdict := "found differences between the graph and PostgreSQL (drift)"
	if *st.LastDriftCheckClean {
		verdict = "found the graph saying what PostgreSQL says"
	}
	return s + fmt.Sprintf(" The last drift check, of %s, finished at %s and %s.", scope, *st.LastDriftCheck, verdict)
}
