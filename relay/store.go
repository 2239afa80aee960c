package relay

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	gsql "graphsync/sql"
)

// store holds the relay's statements against outbox_messages. Each method is
// one short transaction or statement; no lock is held across a delivery.
type store struct {
	pool    *pgxpool.Pool
	relayID string
	cfg     Config
}

// claimed is the result of a claim: messages to deliver, in delivery order,
// and rows that ran out of attempts without an answer (their relay died
// while delivering them) and were dead-lettered instead.
type claimed struct {
	messages     []Message
	deadLettered []int64
	// unreadable are rows the relay took but cannot hand to a sink (a
	// tenant PostgreSQL does not have, an infinite occurred_at): poison
	// events, recorded with unreadableErrs like a sink's rejections.
	unreadable     []Message
	unreadableErrs map[int64]error
}

// OutboxClaim claims up to limit due rows in id order.
func (s *store) OutboxClaim(ctx context.Context, limit int) (claimed, error) {
	return s.claim(ctx, gsql.Query("OutboxClaimCandidates"), limit)
}

// OutboxClaimByID claims the rows a replication stream named; the messages come
// back in the order of ids (commit order).
func (s *store) OutboxClaimByID(ctx context.Context, ids []int64) (claimed, error) {
	c, err := s.claim(ctx, gsql.Query("OutboxClaimByIDCandidates"), ids)
	if err != nil {
		return c, err
	}
	rank := make(map[int64]int, len(ids))
	for i, id := range ids {
		if _, seen := rank[id]; !seen {
			rank[id] = i
		}
	}
	sort.SliceStable(c.messages, func(i, j int) bool { return rank[c.messages[i].ID] < rank[c.messages[j].ID] })
	return c, nil
}

// claim runs one claim transaction: serialise with other claims, pick the
// candidates, count the attempt and lease what it takes.
//
// A candidate whose last lease ran out unanswered (orphaned) was in a batch
// whose relay died. Once is most likely not the row's fault (a deploy, a
// SIGKILL), so orphans are reclaimed in batches like any row. A row orphaned
// a second time is suspect: it is taken alone, so a row that crashes relays
// only burns its own attempts, not its batch-mates'.
func (s *store) claim(ctx context.Context, candidates string, arg any) (claimed, error) {
	var result claimed
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, gsql.Query("OutboxClaimLock")); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, candidates, arg)
		if err != nil {
			return err
		}
		type candidate struct {
			id       int64
			orphaned bool
			attempts int16
		}
		found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (candidate, error) {
			var c candidate
			return c, row.Scan(&c.id, &c.orphaned, &c.attempts)
		})
		if err != nil {
			return err
		}
		if len(found) == 0 {
			return nil
		}
		sort.Slice(found, func(i, j int) bool { return found[i].id < found[j].id })
		take := make([]int64, 0, len(found))
		for _, c := range found {
			if c.orphaned && c.attempts >= 2 {
				if len(take) == 0 {
					take = append(take, c.id)
				}
				break
			}
			take = append(take, c.id)
		}
		rows, err = tx.Query(ctx, gsql.Query("OutboxClaimTake"), take, s.relayID, s.cfg.Lease)
		if err != nil {
			return err
		}
		type taken struct {
			msg       Message
			problem   error
			lastError string
		}
		// Scanning cannot fail on a row PostgreSQL accepted: the payload is
		// taken as bytes (decoding is the sink's job, per event) and the
		// timestamp as a value that can be infinite.
		takenRows, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (taken, error) {
			m, problem, lastError, err := scanMessage(row)
			return taken{m, problem, lastError}, err
		})
		if err != nil {
			return err
		}
		sort.Slice(takenRows, func(i, j int) bool { return takenRows[i].msg.ID < takenRows[j].msg.ID })
		var exhausted []int64
		var reasons []string
		for _, t := range takenRows {
			m := t.msg
			switch {
			case int(m.Attempts) > s.cfg.MaxAttempts:
				exhausted = append(exhausted, m.ID)
				reasons = append(reasons, exhaustedReason(s.cfg.MaxAttempts, t.lastError))
			case t.problem != nil:
				if result.unreadableErrs == nil {
					result.unreadableErrs = map[int64]error{}
				}
				result.unreadable = append(result.unreadable, m)
				result.unreadableErrs[m.ID] = t.problem
			default:
				result.messages = append(result.messages, m)
			}
		}
		if len(exhausted) > 0 {
			moved, err := outboxMoveToDLQ(ctx, tx, exhausted, reasons, &s.relayID)
			if err != nil {
				return err
			}
			result.deadLettered = moved
		}
		return nil
	})
	if err != nil {
		return claimed{}, fmt.Errorf("claim outbox batch: %w", err)
	}
	return result, nil
}

// exhaustedReason is the DLQ reason of a row whose last attempt recorded no
// outcome. The error of the attempt before it, if one was recorded, says
// what the row's trouble probably is.
func exhaustedReason(maxAttempts int, lastError string) string {
	reason := fmt.Sprintf("gave up after %d attempts: no outcome was recorded for the last one (its relay stopped, or lost PostgreSQL before marking it)", maxAttempts)
	if lastError != "" {
		reason += "; the attempt before it: " + lastError
	}
	return reason
}

// scanMessage reads one taken row. problem is set for a row that cannot be
// handed to a sink; err only for a failure of the scan itself. lastError is
// the error recorded for the row's previous attempt, if any.
func scanMessage(row pgx.CollectableRow) (m Message, problem error, lastError string, err error) {
	var trace, last pgtype.Text
	var occurred pgtype.Timestamptz
	var payload []byte
	var tenantKnown bool
	err = row.Scan(&m.ID, &m.TenantID, &m.AggregateType, &m.AggregateID, &m.EventType,
		&m.EventVersion, &payload, &occurred, &m.Attempts, &trace, &tenantKnown, &last)
	if err != nil {
		return m, nil, "", err
	}
	m.Payload = payload
	m.TraceID = trace.String
	m.OccurredAt = occurred.Time
	switch {
	case !tenantKnown:
		problem = fmt.Errorf("%s %d (%s): tenant %d does not exist in PostgreSQL (tenants table); the event is not applied",
			clip(m.EventType, 64), m.AggregateID, clip(m.AggregateType, 64), m.TenantID)
	case occurred.InfinityModifier != pgtype.Finite:
		problem = fmt.Errorf("%s %d (%s): occurred_at is %s, not a point in time",
			clip(m.EventType, 64), m.AggregateID, clip(m.AggregateType, 64), occurred.InfinityModifier)
	}
	return m, problem, last.String, nil
}

// OutboxNotVisible returns the ids this snapshot cannot see (yet).
func (s *store) OutboxNotVisible(ctx context.Context, ids []int64) ([]int64, error) {
	var unseen []int64
	if err := s.pool.QueryRow(ctx, gsql.Query("OutboxNotVisible"), ids).Scan(&unseen); err != nil {
		return nil, fmt.Errorf("check visibility of streamed rows: %w", err)
	}
	return unseen, nil
}

// OutboxMarkProcessed marks delivered rows; it returns how many were still
// leased by this relay.
func (s *store) OutboxMarkProcessed(ctx context.Context, ids []int64) (int64, error) {
	tag, err := s.pool.Exec(ctx, gsql.Query("OutboxMarkProcessed"), ids, s.relayID)
	if err != nil {
		return 0, fmt.Errorf("mark %d outbox rows processed: %w", len(ids), err)
	}
	return tag.RowsAffected(), nil
}

// OutboxExtendLease renews the lease of rows in delivery.
func (s *store) OutboxExtendLease(ctx context.Context, ids []int64) error {
	if _, err := s.pool.Exec(ctx, gsql.Query("OutboxExtendLease"), ids, s.relayID, s.cfg.Lease); err != nil {
		return fmt.Errorf("extend lease of %d outbox rows: %w", len(ids), err)
	}
	return nil
}

// OutboxDefer hands rows back uncounted, due again after DependencyWait:
// they wait for another aggregate's events, which is not their fault.
func (s *store) OutboxDefer(ctx context.Context, ids []int64) error {
	if _, err := s.pool.Exec(ctx, gsql.Query("OutboxDefer"), ids, s.relayID, s.cfg.DependencyWait); err != nil {
		return fmt.Errorf("defer %d outbox rows: %w", len(ids), err)
	}
	return nil
}

// OutboxRelease hands rows back uncounted.
func (s *store) OutboxRelease(ctx context.Context, ids []int64) error {
	if _, err := s.pool.Exec(ctx, gsql.Query("OutboxRelease"), ids, s.relayID); err != nil {
		return fmt.Errorf("release %d outbox rows: %w", len(ids), err)
	}
	return nil
}

// OutboxFail records the sink's rejections: rows that used their last attempt
// move to the DLQ, the others wait for their retry. It returns the ids
// dead-lettered.
func (s *store) OutboxFail(ctx context.Context, failed []Message, reasons map[int64]error) ([]int64, error) {
	var retryIDs, deadIDs []int64
	var retryErrs, deadErrs []string
	for _, m := range failed {
		reason := reasons[m.ID].Error()
		if int(m.Attempts) >= s.cfg.MaxAttempts {
			deadIDs = append(deadIDs, m.ID)
			deadErrs = append(deadErrs, fmt.Sprintf("attempt %d of %d: %s", m.Attempts, s.cfg.MaxAttempts, reason))
		} else {
			retryIDs = append(retryIDs, m.ID)
			retryErrs = append(retryErrs, fmt.Sprintf("attempt %d of %d: %s", m.Attempts, s.cfg.MaxAttempts, reason))
		}
	}
	var moved []int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if len(retryIDs) > 0 {
			if _, err := tx.Exec(ctx, gsql.Query("OutboxRecordFailure"), retryIDs, retryErrs, s.relayID,
				s.cfg.RetryStep, s.cfg.RetryMaxSteps); err != nil {
				return err
			}
		}
		if len(deadIDs) > 0 {
			var err error
			moved, err = outboxMoveToDLQ(ctx, tx, deadIDs, deadErrs, &s.relayID)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record %d failed outbox rows: %w", len(failed), err)
	}
	return moved, nil
}

// outboxMoveToDLQ moves rows to outbox_messages_dlq with their final error.
// A nil holder moves them whoever holds them (admin use).
func outboxMoveToDLQ(ctx context.Context, tx pgx.Tx, ids []int64, reasons []string, holder *string) ([]int64, error) {
	rows, err := tx.Query(ctx, gsql.Query("OutboxMoveToDLQ"), ids, reasons, holder)
	if err != nil {
		return nil, err
	}
	moved, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("move %d rows to the DLQ: %w", len(ids), err)
	}
	return moved, nil
}

func messageIDs(messages []Message) []int64 {
	ids := make([]int64, len(messages))
	for i, m := range messages {
		ids[i] = m.ID
	}
	return ids
}
