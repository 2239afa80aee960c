package relay

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	gsql "graphsync/sql"
)

// store holds the relay's statements against outbox_messages. Each method is
// one short transaction or statement; no lock is held across a delivery.
type store struct {
	pool *pgxpool.Pool
	// relayID names the worker (process/worker); each claim leases its rows
	// and aggregates under relayID#n, n counted by claims.
	relayID string
	claims  atomic.Uint64
	cfg     Config
	// stats is the relay's keeper of the planner's statistics (nil: none).
	stats *statistics
}

// nextHolder is the lease identity of one claim. Every statement that ends
// or renews a batch's leases names it, so a batch whose lease ran out and
// whose rows or aggregates were claimed again (by another relay, or by this
// worker's next claim) can no longer mark, release or unlease them: a late
// settle touches nothing but its own claim's leases.
func (s *store) nextHolder() string {
	return s.relayID + "#" + strconv.FormatUint(s.claims.Add(1), 10)
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
	// aggregates are the aggregates the claim leased: every row it took
	// belongs to one. Settling the batch ends their leases.
	aggregates aggregates
	// holder is the claim's lease identity (store.nextHolder).
	holder string
	// limit is the most rows the claim could take (poll claims), and
	// window how many due rows it looked at (0 when it took nothing).
	limit, window int
}

// taken is how many rows the claim took (to deliver, failed or dead-lettered).
func (c claimed) taken() int { return len(c.messages) + len(c.deadLettered) + len(c.unreadable) }

// payloadBytes is the payload the claim took, as the claim's byte bound
// counts it.
func (c claimed) payloadBytes() int64 {
	var n int64
	for _, ms := range [][]Message{c.messages, c.unreadable} {
		for _, m := range ms {
			n += int64(len(m.Payload))
		}
	}
	return n
}

// aggregates is a set of aggregates as the parallel arrays the statements
// take (tenant ids, types, ids).
type aggregates struct {
	tenantIDs []int64
	types     []string
	ids       []int64
}

type aggregateKey struct {
	tenantID int64
	typ      string
	id       int64
}

func (a *aggregates) add(seen map[aggregateKey]bool, m Message) {
	k := aggregateKey{m.TenantID, m.AggregateType, m.AggregateID}
	if seen[k] {
		return
	}
	seen[k] = true
	a.tenantIDs = append(a.tenantIDs, k.tenantID)
	a.types = append(a.types, k.typ)
	a.ids = append(a.ids, k.id)
}

// The claim statements: a window, then the rules every claim shares
// (sql/queries/outbox.sql, docs/adr/0012).
var (
	claimPollSQL = gsql.Query("OutboxClaimPollWindow") + "\n" + gsql.Query("OutboxClaimTail")
	claimByIDSQL = gsql.Query("OutboxClaimByIDWindow") + "\n" + gsql.Query("OutboxClaimTail")
)

// OutboxClaim claims up to limit due rows in id order.
func (s *store) OutboxClaim(ctx context.Context, limit int) (claimed, error) {
	c, err := s.claim(ctx, claimPollSQL, limit)
	// A window of a batch or more is a backlog, as is a full one when the
	// limit was cut below a batch (large events, a suspect batch split
	// down). A lower bar than sizeForBacklog's (a window as large as the
	// limit, which may be BacklogBatchSize): growing the next claim needs
	// that much, a check of the statistics (at most every 30 s, and cheap
	// when they are right) only pending work beyond one batch.
	s.stats.afterClaim(ctx, err == nil && c.window >= min(limit, s.cfg.BatchSize))
	return c, err
}

// OutboxClaimByID claims the rows a replication stream named; the messages come
// back in the order of ids (commit order) across aggregates, and in id order
// within each aggregate. more: rows the stream named wait behind these (ids is
// a chunk of them).
func (s *store) OutboxClaimByID(ctx context.Context, ids []int64, more bool) (claimed, error) {
	c, err := s.claim(ctx, claimByIDSQL, ids)
	if err != nil {
		return c, err
	}
	// A backlog, as in OutboxClaim: a whole batch, or a chunk cut below one
	// that came back full.
	s.stats.afterClaim(ctx, c.window >= s.cfg.BatchSize || (more && c.window >= len(ids)))
	rank := make(map[int64]int, len(ids))
	for i, id := range ids {
		if _, seen := rank[id]; !seen {
			rank[id] = i
		}
	}
	sort.SliceStable(c.messages, func(i, j int) bool { return rank[c.messages[i].ID] < rank[c.messages[j].ID] })
	inIDOrderWithinAggregates(c.messages)
	return c, nil
}

// inIDOrderWithinAggregates puts each aggregate's messages in id order, in
// the places its messages hold, and leaves the order across aggregates as it
// is. Two transactions that wrote one aggregate without a lock between them
// can commit in the opposite order of their ids; when the stream names both
// in one chunk, the claim takes both (the lower id is the higher one's
// predecessor), and they must reach the sink in id order, as a poll's claim
// of the same rows would hand them over.
func inIDOrderWithinAggregates(ms []Message) {
	places := map[aggregateKey][]int{}
	for i, m := range ms {
		k := aggregateKey{m.TenantID, m.AggregateType, m.AggregateID}
		places[k] = append(places[k], i)
	}
	for _, at := range places {
		if len(at) < 2 {
			continue
		}
		group := make([]Message, len(at))
		for j, i := range at {
			group[j] = ms[i]
		}
		sort.Slice(group, func(a, b int) bool { return group[a].ID < group[b].ID })
		for j, i := range at {
			ms[i] = group[j]
		}
	}
}

// claim runs one claim: its planner settings and the claim statement go in
// one round trip and one (implicit) transaction. The statement picks, leases
// and counts the attempt of what it takes (sql/queries/outbox.sql); no lock
// is held between claims, so the workers of every relay claim concurrently.
//
// A row whose last lease ran out unanswered (orphaned) was in a batch whose
// relay died. Once is most likely not the row's fault (a deploy, a SIGKILL),
// so orphans are reclaimed in batches like any row. A row orphaned a second
// time is suspect: the statement takes it alone, so a row that crashes
// relays only burns its own attempts, not its batch-mates'.
//
// Once sent, a claim is not cancelled with ctx: PostgreSQL may commit it
// after the client gave up, leaving rows leased that nobody delivers or
// hands back until the lease runs out (a soft stop must leave nothing
// leased). It is bounded by the lease instead, and the caller delivers or
// hands back what it took.
func (s *store) claim(ctx context.Context, statement string, arg any) (claimed, error) {
	var result claimed
	if err := ctx.Err(); err != nil {
		return result, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Lease)
	defer cancel()
	result.holder = s.nextHolder()
	batch := &pgx.Batch{}
	batch.Queue(gsql.Query("OutboxClaimSettings"))
	batch.Queue(statement, arg, result.holder, s.cfg.Lease, s.cfg.MaxBatchBytes)
	type taken struct {
		msg       Message
		problem   error
		lastError string
		window    int64
	}
	var takenRows []taken
	err := func() error {
		br := s.pool.SendBatch(ctx, batch)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		// Scanning cannot fail on a row PostgreSQL accepted: the payload is
		// taken as bytes (decoding is the sink's job, per event) and the
		// timestamp as a value that can be infinite.
		takenRows, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (taken, error) {
			var t taken
			var err error
			t.msg, t.problem, t.lastError, err = scanMessage(row, &t.window)
			return t, err
		})
		if err != nil {
			return err
		}
		return br.Close()
	}()
	if err != nil {
		return claimed{holder: result.holder}, fmt.Errorf("claim outbox batch: %w", err)
	}
	sort.Slice(takenRows, func(i, j int) bool { return takenRows[i].msg.ID < takenRows[j].msg.ID })
	seen := make(map[aggregateKey]bool, len(takenRows))
	var exhausted []int64
	var reasons []string
	for _, t := range takenRows {
		m := t.msg
		result.window = int(t.window)
		result.aggregates.add(seen, m)
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
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			moved, err := outboxMoveToDLQ(ctx, tx, exhausted, reasons, &result.holder)
			result.deadLettered = moved
			return err
		})
		if err != nil {
			// The exhausted rows stay leased until their lease runs out; the
			// next claim after that counts the attempt again and retries the
			// move. The rest of the batch goes back at once, uncounted: it
			// did nothing wrong (rows behind an exhausted one still wait, as
			// their predecessor is leased). A claim that fails takes nothing.
			err = fmt.Errorf("claim outbox batch: %w", err)
			rest := settlement{released: append(messageIDs(result.messages), messageIDs(result.unreadable)...)}
			if len(rest.released) > 0 {
				if _, _, backErr := s.OutboxSettle(ctx, result.holder, rest, result.aggregates); backErr != nil {
					err = errors.Join(err, fmt.Errorf("hand back the rest of the batch (free again when its lease runs out): %w", backErr))
				}
			}
			return claimed{holder: result.holder}, err
		}
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
func scanMessage(row pgx.CollectableRow, window *int64) (m Message, problem error, lastError string, err error) {
	var trace, last pgtype.Text
	var occurred pgtype.Timestamptz
	var payload []byte
	var tenantKnown bool
	err = row.Scan(&m.ID, &m.TenantID, &m.AggregateType, &m.AggregateID, &m.EventType,
		&m.EventVersion, &payload, &occurred, &m.Attempts, &trace, &tenantKnown, &last, window)
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

// NextHoldEnds says how long until the first hold of an aggregate runs out
// (false when none is in place).
func (s *store) NextHoldEnds(ctx context.Context) (time.Duration, bool, error) {
	var seconds *float64
	if err := s.pool.QueryRow(ctx, gsql.Query("OutboxNextHoldEnds")).Scan(&seconds); err != nil {
		return 0, false, fmt.Errorf("read when the next hold runs out: %w", err)
	}
	if seconds == nil {
		return 0, false, nil
	}
	return max(0, time.Duration(*seconds*float64(time.Second))), true, nil
}

// OutboxNotVisible returns the ids this snapshot cannot see (yet).
func (s *store) OutboxNotVisible(ctx context.Context, ids []int64) ([]int64, error) {
	var unseen []int64
	if err := s.pool.QueryRow(ctx, gsql.Query("OutboxNotVisible"), ids).Scan(&unseen); err != nil {
		return nil, fmt.Errorf("check visibility of streamed rows: %w", err)
	}
	return unseen, nil
}

// settlement is what became of a batch's rows, besides failures (which
// OutboxFail records first).
type settlement struct {
	// applied rows are marked processed.
	applied []int64
	// released rows are handed back uncounted.
	released []int64
	// deferred rows are handed back uncounted, due again after DependencyWait,
	// doubling while their aggregate keeps waiting, up to DependencyWaitMax:
	// they wait for another aggregate's events, which is not their fault.
	deferred []int64
}

// OutboxSettle ends the batch of the claim holder in one statement: marks,
// releases and defers its rows and ends the leases of its aggregates. It
// returns how many applied rows were marked (a row whose lease was taken
// over is left to its new holder) and, when rows were deferred, how long
// until the first of them is due.
func (s *store) OutboxSettle(ctx context.Context, holder string, st settlement, aggs aggregates) (marked int64, due time.Duration, err error) {
	var dueSeconds *float64
	err = s.pool.QueryRow(ctx, gsql.Query("OutboxSettle"), nonNil(st.applied), nonNil(st.released), nonNil(st.deferred),
		holder, s.cfg.DependencyWait, nonNil(aggs.tenantIDs), nonNil(aggs.types), nonNil(aggs.ids), s.cfg.DependencyWaitMax).Scan(&marked, &dueSeconds)
	if err != nil {
		return 0, 0, fmt.Errorf("settle a batch of %d outbox rows (%d applied): %w",
			len(st.applied)+len(st.released)+len(st.deferred), len(st.applied), err)
	}
	if dueSeconds != nil {
		due = max(0, time.Duration(*dueSeconds*float64(time.Second)))
	}
	return marked, due, nil
}

// OutboxExtendLease renews the lease of the claim holder's rows in delivery
// and of their aggregates.
func (s *store) OutboxExtendLease(ctx context.Context, holder string, ids []int64, aggs aggregates) error {
	if _, err := s.pool.Exec(ctx, gsql.Query("OutboxExtendLease"), ids, holder, s.cfg.Lease,
		nonNil(aggs.tenantIDs), nonNil(aggs.types), nonNil(aggs.ids)); err != nil {
		return fmt.Errorf("extend lease of %d outbox rows: %w", len(ids), err)
	}
	return nil
}

// nonNil makes an empty array of a nil slice (pgx sends nil as NULL, and
// "id = ANY(NULL)" is NULL, not false).
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// maxRecordedError is how much of a rejection last_error keeps: a sink's
// error can quote a whole statement or payload.
const maxRecordedError = 4096

// OutboxFail records the sink's rejections of rows the claim holder still
// holds: rows that used their last attempt move to the DLQ, the others wait
// for their retry. It returns the ids dead-lettered. A reason is stored as
// the logs show it (passwords redacted), cut to maxRecordedError bytes:
// last_error reaches operators through graphsync dlq list.
func (s *store) OutboxFail(ctx context.Context, holder string, failed []Message, reasons map[int64]error) ([]int64, error) {
	var retryIDs, deadIDs []int64
	var retryErrs, deadErrs []string
	for _, m := range failed {
		reason := clip(fmt.Sprintf("attempt %d of %d: %s", m.Attempts, s.cfg.MaxAttempts, redactLog(reasons[m.ID].Error())), maxRecordedError)
		if int(m.Attempts) >= s.cfg.MaxAttempts {
			deadIDs = append(deadIDs, m.ID)
			deadErrs = append(deadErrs, reason)
		} else {
			retryIDs = append(retryIDs, m.ID)
			retryErrs = append(retryErrs, reason)
		}
	}
	var moved []int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if len(retryIDs) > 0 {
			if _, err := tx.Exec(ctx, gsql.Query("OutboxRecordFailure"), retryIDs, retryErrs, holder,
				s.cfg.RetryStep, s.cfg.RetryMaxSteps); err != nil {
				return err
			}
		}
		if len(deadIDs) > 0 {
			var err error
			moved, err = outboxMoveToDLQ(ctx, tx, deadIDs, deadErrs, &holder)
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
