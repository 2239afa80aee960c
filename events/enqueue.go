package events

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	gsql "graphsync/sql"
)

// EnqueueOption tunes one Enqueue call.
type EnqueueOption func(*enqueueOptions)

type enqueueOptions struct {
	traceID string
}

// WithTraceID stores a trace id with the event (outbox_messages.trace_id);
// without it the column is NULL.
func WithTraceID(traceID string) EnqueueOption {
	return func(o *enqueueOptions) { o.traceID = traceID }
}

// outboxInsert is the producer's insert (sql/queries/outbox.sql).
var outboxInsert = gsql.Query("OutboxEnqueue")

// Enqueue validates ev and inserts it into outbox_messages within tx, the
// caller's transaction, so the event commits or rolls back with the business
// change. It writes the event's current EventVersion. Under row-level
// security the transaction must have set app.tenant_id to tenantID.
//
// Enqueue does not return the outbox id: the application role may insert into
// the outbox but not read it (RETURNING would need SELECT).
func Enqueue(ctx context.Context, tx pgx.Tx, tenantID int64, ev Event, opts ...EnqueueOption) error {
	var o enqueueOptions
	for _, opt := range opts {
		opt(&o)
	}
	if tenantID <= 0 {
		return fmt.Errorf("enqueue %s: tenant id must be > 0, got %d", ev.EventType(), tenantID)
	}
	if ev.AggregateID() <= 0 {
		return fmt.Errorf("enqueue %s: aggregate id must be > 0, got %d", ev.EventType(), ev.AggregateID())
	}
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("enqueue %s v%d for %s %d: %w", ev.EventType(), ev.EventVersion(), ev.AggregateType(), ev.AggregateID(), &eventError{kind: ErrInvalidPayload, msg: err.Error()})
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("enqueue %s: encode payload: %w", ev.EventType(), err)
	}
	var traceID *string
	if o.traceID != "" {
		traceID = &o.traceID
	}
	if _, err := tx.Exec(ctx, outboxInsert, tenantID, ev.AggregateType(), ev.AggregateID(),
		ev.EventType(), ev.EventVersion(), string(payload), traceID); err != nil {
		return fmt.Errorf("enqueue %s for %s %d: insert outbox row: %w", ev.EventType(), ev.AggregateType(), ev.AggregateID(), err)
	}
	return nil
}
