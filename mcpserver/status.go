package mcpserver

import (
	"context"
	"fmt"

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
	// LastDriftCheck is nil: PostgreSQL holds no record of drift checks.
	LastDriftCheck *string `json:"last_drift_check" jsonschema:"when PostgreSQL and the graph were last compared (RFC 3339); null when not recorded"`
	Note           string  `json:"note" jsonschema:"what the figures mean, in a sentence"`
}

// driftNote says why last_drift_check is null.
const driftNote = "last_drift_check is not recorded in PostgreSQL; sync's drift watch exports it as the metric graphsync_drift_last_check_timestamp_seconds."

// readStatus reads tenantID's status in one read-only transaction under the
// row-level security scope of that tenant, every statement filtered on it
// too.
func readStatus(ctx context.Context, pool *pgxpool.Pool, tenantID int64) (Status, error) {
	var st Status
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, gsql.Query("MCPTenantScope"), tenantID); err != nil {
			return err
		}
		return tx.QueryRow(ctx, gsql.Query("MCPTenantStatus"), tenantID).Scan(&st.PendingEvents, &st.OldestPendingAgeSeconds, &st.DeadLetters)
	})
	if err != nil {
		return Status{}, fmt.Errorf("read the projection status: %w", err)
	}
	st.Note = driftNote
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
	return s + " " + driftNote
}
