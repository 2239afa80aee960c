package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	gsql "graphsync/sql"

	"graphsync/outbox"
)

// OffsetReader reads outbox rows in a stable order from a stored position
// without ever skipping a row, which "id > last offset" cannot promise: ids
// are drawn at insert but become visible at commit, so a row with a lower id
// can appear after a higher one was read.
//
// The reader orders rows by (created_xid, id), the inserting transaction
// first, and reads only rows of transactions older than the oldest one still
// running (pg_snapshot_xmin). Every transaction below that horizon has ended,
// so no row can appear behind the cursor later. A long-running writing
// transaction holds the horizon back: it delays readers, it never makes them
// skip. Readers that want processed rows only (the seed's consumer) stop at
// the first row not yet processed instead of passing it.
//
// Use: Load the position, Read a batch, apply it, and Store the new position
// in the same transaction as the effect when the effect lives in PostgreSQL.
type OffsetReader struct {
	pool *pgxpool.Pool
	// Consumer and Partition key the position in consumer_offsets.
	Consumer  string
	Partition string
	// ProcessedOnly stops at the first row not yet marked processed.
	ProcessedOnly bool
}

// Position is a cursor into the outbox.
type Position struct {
	XID string // created_xid of the last row read, as text ("0" before the first)
	ID  int64
}

// NewOffsetReader returns a reader keyed by consumer and partition.
func NewOffsetReader(pool *pgxpool.Pool, consumer, partition string) *OffsetReader {
	return &OffsetReader{pool: pool, Consumer: consumer, Partition: partition}
}

// Load returns the stored position, or the start when there is none.
func (r *OffsetReader) Load(ctx context.Context) (Position, error) {
	var p Position
	err := r.pool.QueryRow(ctx, gsql.Query("OffsetLoad"), r.Consumer, r.Partition).Scan(&p.XID, &p.ID)
	if errors.Is(err, pgx.ErrNoRows) {
		return Position{XID: "0"}, nil
	}
	if err != nil {
		return Position{}, fmt.Errorf("load offset of %s/%s: %w", r.Consumer, r.Partition, err)
	}
	return p, nil
}

// Read returns up to limit rows after from and the position after the last.
func (r *OffsetReader) Read(ctx context.Context, from Position, limit int) ([]outbox.Message, Position, error) {
	rows, err := r.pool.Query(ctx, gsql.Query("OffsetRead"), from.XID, from.ID, limit, nil)
	if err != nil {
		return nil, from, fmt.Errorf("read outbox from offset: %w", err)
	}
	defer rows.Close()
	var messages []outbox.Message
	next := from
	for rows.Next() {
		var m outbox.Message
		var trace pgtype.Text
		// occurred_at may be ±infinity, which time.Time cannot hold (the
		// relay dead-letters such a row): OccurredAt is then zero.
		var occurred pgtype.Timestamptz
		var xid string
		var processed bool
		if err := rows.Scan(&m.ID, &m.TenantID, &m.AggregateType, &m.AggregateID, &m.EventType, &m.EventVersion,
			&m.Payload, &occurred, &m.Attempts, &trace, &xid, &processed); err != nil {
			return nil, from, fmt.Errorf("read outbox from offset: %w", err)
		}
		if r.ProcessedOnly && !processed {
			break
		}
		m.TraceID = trace.String
		m.OccurredAt = occurred.Time
		messages = append(messages, m)
		next = Position{XID: xid, ID: m.ID}
	}
	if err := rows.Err(); err != nil {
		return nil, from, fmt.Errorf("read outbox from offset: %w", err)
	}
	return messages, next, nil
}

// Store saves p; pass the transaction that applied the rows when the effect
// lives in PostgreSQL, so position and effect commit together.
func (r *OffsetReader) Store(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, p Position) error {
	if _, err := db.Exec(ctx, gsql.Query("OffsetStore"), r.Consumer, r.Partition, p.XID, p.ID); err != nil {
		return fmt.Errorf("store offset of %s/%s: %w", r.Consumer, r.Partition, err)
	}
	return nil
}
