package relay

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	gsql "graphsync/sql"

	"graphsync/outbox"
)

// store holds the relay's statements against outbox_messages. Each method is
// one short transaction or statement; no lock is held across a delivery.
type store struct {
	pool *pgxpool.Pool
	// relayID names the worker (process/worker); each claim records its
	// batch as relayID#nonce.n, n counted by claims (nonce: this store's,
	// random, so that two processes given one --relay-id never share one).
	relayID   string
	nonce     string
	nonceOnce sync.Once
	claims    atomic.Uint64
	// fullWalk is when a poll claim last walked the whole claim index
	// (unix nanoseconds): see OutboxClaim.
	fullWalk atomic.Int64
	cfg      Config
	// stats is the relay's keeper of the planner's statistics (nil: none).
	stats *statistics
}

// nextHolder is the identity of one claim, its batch's key in
// outbox_batches. Every statement that ends, renews, records a failure in
// or dead-letters from a batch names it and locks its row first, so a batch
// whose lease ran out and was taken over (by another relay, or by this
// worker's next claim) can no longer mark, release, fail or dead-letter its
// rows: a late settle touches nothing.
func (s *store) nextHolder() string {
	s.nonceOnce.Do(func() { s.nonce = rand.Text()[:8] })
	return s.relayID + "#" + s.nonce + "." + strconv.FormatUint(s.claims.Add(1), 10)
}

// claimed is the result of a claim: messages to deliver, in delivery order,
// and rows that ran out of attempts without an answer (their relay died
// while delivering them) and were dead-lettered instead.
type claimed struct {
	messages     []outbox.Message
	deadLettered []int64
	// unreadable are rows the relay took but cannot hand to a sink (a
	// tenant PostgreSQL does not have, an infinite occurred_at): poison
	// events, recorded with unreadableErrs like a sink's rejections.
	unreadable     []outbox.Message
	unreadableErrs map[int64]error
	// holder is the claim's identity (store.nextHolder).
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
	for _, ms := range [][]outbox.Message{c.messages, c.unreadable} {
		for _, m := range ms {
			n += int64(len(m.Payload))
		}
	}
	return n
}

type aggregateKey struct {
	tenantID int64
	typ      string
	id       int64
}

// The claim statements: a window, then what the rules need of each row,
// which pick works out (sql/queries/outbox.sql, docs/adr/0012 and 0018).
var (
	claimPollSQL = gsql.Query("OutboxClaimPollWindow") + "\n" + gsql.Query("OutboxClaimRead")
	claimByIDSQL = gsql.Query("OutboxClaimByIDWindow") + "\n" + gsql.Query("OutboxClaimRead")
)

// OutboxClaim claims up to limit due rows in id order.
func (s *store) OutboxClaim(ctx context.Context, limit int) (claimed, error) {
	// A claim passes over the ids between the batches in flight, unless the
	// last whole walk is a second old: a row left between them (behind a
	// batch of its aggregate, or committed late) waits a second at most,
	// however long a batch stays in flight.
	now := time.Now().UnixNano()
	pass := now-s.fullWalk.Load() < int64(time.Second)
	if !pass {
		s.fullWalk.Store(now)
	}
	c, err := s.claim(ctx, claimPollSQL, limit, pass)
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
func inIDOrderWithinAggregates(ms []outbox.Message) {
	places := map[aggregateKey][]int{}
	for i, m := range ms {
		k := aggregateKey{m.TenantID, m.AggregateType, m.AggregateID}
		places[k] = append(places[k], i)
	}
	for _, at := range places {
		if len(at) < 2 {
			continue
		}
		group := make([]outbox.Message, len(at))
		for j, i := range at {
			group[j] = ms[i]
		}
		sort.Slice(group, func(a, b int) bool { return group[a].ID < group[b].ID })
		for j, i := range at {
			ms[i] = group[j]
		}
	}
}

// claim runs one claim in one transaction: its planner settings, the claim
// lock, the takeover of batches whose lease ran out and the read of the
// window go in one round trip; pick works out what it takes, and the batch
// is recorded in one row (sql/queries/outbox.sql, docs/adr/0018). The lock
// is held to the claim's commit only, so claims take turns and every
// settle and delivery runs beside them.
//
// A row whose batch was taken over (orphaned) was in a batch whose relay
// died. Once is most likely not the row's fault (a deploy, a SIGKILL), so
// orphans are reclaimed in batches like any row. A row orphaned a second
// time is suspect: the claim takes it alone, so a row that crashes relays
// only burns its own attempts, not its batch-mates'.
//
// Once sent, a claim is not cancelled with ctx: PostgreSQL may commit it
// after the client gave up, leaving a batch in flight that nobody delivers
// or hands back until its lease runs out (a soft stop must leave nothing in
// flight). It is bounded by the lease instead, and the caller delivers or
// hands back what it took.
func (s *store) claim(ctx context.Context, statement string, args ...any) (claimed, error) {
	var result claimed
	if err := ctx.Err(); err != nil {
		return result, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Lease)
	defer cancel()
	result.holder = s.nextHolder()
	var window []windowRow
	var taken []windowRow
	// Read committed, whatever the role's default: each statement's snapshot
	// is taken after the claim lock, so the claim sees every batch recorded
	// before it.
	idle := strconv.FormatInt(max(s.cfg.Lease/3, time.Second).Milliseconds(), 10)
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		batch.Queue(gsql.Query("OutboxClaimSettings"), idle)
		batch.Queue(gsql.Query("OutboxClaimLock"))
		batch.Queue(gsql.Query("OutboxClaimTakeover"))
		batch.Queue(statement, args...)
		br := tx.SendBatch(ctx, batch)
		defer br.Close()
		for range 3 {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		if window, err = pgx.CollectRows(rows, scanWindowRow); err != nil {
			return err
		}
		if err := br.Close(); err != nil {
			return err
		}
		sort.Slice(window, func(i, j int) bool { return window[i].msg.ID < window[j].msg.ID })
		taken = pick(window, s.cfg.MaxBatchBytes)
		if len(taken) == 0 {
			return nil
		}
		ids := make([]int64, len(taken))
		keys := make([]int64, len(taken))
		for i, t := range taken {
			ids[i], keys[i] = t.msg.ID, t.aggregateKey
		}
		_, err = tx.Exec(ctx, gsql.Query("OutboxClaimRecord"), result.holder, s.cfg.Lease, ids[0], ids[len(ids)-1], ids, keys)
		return err
	})
	if err != nil {
		return claimed{holder: result.holder}, fmt.Errorf("claim outbox batch: %w", err)
	}
	if len(taken) > 0 {
		result.window = len(window)
	}
	var exhausted []int64
	var reasons []string
	for _, t := range taken {
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
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			moved, err := outboxMoveToDLQ(ctx, tx, exhausted, reasons, &result.holder)
			result.deadLettered = moved
			return err
		})
		if err != nil {
			// The exhausted rows stay in flight until the lease runs out;
			// the takeover then counts the attempt again and the next claim
			// retries the move. The rest of the batch goes back at once,
			// uncounted: it did nothing wrong (rows behind an exhausted one
			// still wait, their predecessor in flight). A claim that fails
			// takes nothing.
			err = fmt.Errorf("claim outbox batch: %w", err)
			rest := slices.Concat(messageIDs(result.messages), messageIDs(result.unreadable))
			if _, backErr := s.pool.Exec(ctx, gsql.Query("OutboxBatchKeep"), result.holder, exhausted, nonNil(rest)); backErr != nil {
				err = errors.Join(err, fmt.Errorf("hand back the rest of the batch (free again when its lease runs out): %w", backErr))
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

// windowRow is one row of a claim's window with what the rules need
// (sql/queries/outbox.sql, OutboxClaimRead).
type windowRow struct {
	msg outbox.Message
	// problem is set for a row that cannot be handed to a sink; lastError
	// is the error recorded for the row's previous attempt, if any.
	problem   error
	lastError string
	// suspect: orphaned more than once (taken alone).
	suspect bool
	// prevPending is the aggregate's pending row just before this one.
	prevPending pgtype.Int8
	// aggregateKey is its aggregate's key (outbox_aggregate_key), and
	// inFlight whether a batch in flight holds that aggregate.
	aggregateKey int64
	inFlight     bool
}

// scanWindowRow reads one row of a claim's window. Scanning cannot fail on a
// row PostgreSQL accepted: the payload is taken as bytes (decoding is the
// sink's job, per event) and the timestamp as a value that can be infinite;
// a row the sink could not take gets problem instead.
func scanWindowRow(row pgx.CollectableRow) (windowRow, error) {
	var w windowRow
	m := &w.msg
	var trace, last pgtype.Text
	var occurred pgtype.Timestamptz
	var payload []byte
	var tenantKnown bool
	if err := row.Scan(&m.ID, &m.TenantID, &m.AggregateType, &m.AggregateID, &m.EventType,
		&m.EventVersion, &payload, &occurred, &m.Attempts, &trace, &tenantKnown, &last,
		&w.suspect, &w.prevPending, &w.aggregateKey, &w.inFlight); err != nil {
		return w, err
	}
	m.Payload = payload
	m.TraceID = trace.String
	m.OccurredAt = occurred.Time
	w.lastError = last.String
	switch {
	case !tenantKnown:
		w.problem = fmt.Errorf("%s %d (%s): tenant %d does not exist in PostgreSQL (tenants table); the event is not applied",
			clip(m.EventType, 64), m.AggregateID, clip(m.AggregateType, 64), m.TenantID)
	case occurred.InfinityModifier != pgtype.Finite:
		w.problem = fmt.Errorf("%s %d (%s): occurred_at is %s, not a point in time",
			clip(m.EventType, 64), m.AggregateID, clip(m.AggregateType, 64), occurred.InfinityModifier)
	}
	return w, nil
}

// pick works out what a claim takes of its window (in id order), by the
// rules every claim keeps (docs/adr/0012, 0018):
//   - order and block-on-error: a row goes only with its predecessor (the
//     aggregate's pending row just before it); one that is not in the
//     window before it (in flight, waiting for a retry or a dependency, not
//     due yet, named by no stream batch) holds the row back, and with it
//     every later row of the aggregate;
//   - one batch in flight per aggregate: no row of an aggregate a batch in
//     flight holds (a lower id that committed late must not be delivered
//     beside a higher one in delivery);
//   - a suspect orphan goes alone, so a row that crashes relays burns only
//     its own attempts; the rows after it wait for the next claim;
//   - at most maxBytes of payload, and at least one row: rows are cut in id
//     order, so each aggregate keeps a prefix of its chain.
func pick(window []windowRow, maxBytes int64) []windowRow {
	type chain struct {
		last   int64 // its previous row in the window
		broken bool
	}
	chains := make(map[aggregateKey]*chain, len(window))
	var picked []windowRow
	var bytes int64
	for _, w := range window {
		m := w.msg
		k := aggregateKey{m.TenantID, m.AggregateType, m.AggregateID}
		c := chains[k]
		if c == nil {
			c = &chain{}
			chains[k] = c
		}
		inWindow := c.last == 0 && !w.prevPending.Valid || w.prevPending.Valid && w.prevPending.Int64 == c.last
		c.last = m.ID
		if c.broken || w.inFlight || !inWindow {
			c.broken = true
			continue
		}
		if w.suspect {
			if len(picked) == 0 {
				return []windowRow{w}
			}
			return picked
		}
		bytes += int64(len(m.Payload))
		if bytes > maxBytes && len(picked) > 0 {
			return picked
		}
		picked = append(picked, w)
	}
	return picked
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
// releases and defers its rows, and ends the batch. It returns how many
// applied rows were marked (none when the batch was taken over: its rows
// are another claim's) and, when rows were deferred, how long until the
// first of them is due.
func (s *store) OutboxSettle(ctx context.Context, holder string, st settlement) (marked int64, due time.Duration, err error) {
	var dueSeconds *float64
	err = s.pool.QueryRow(ctx, gsql.Query("OutboxSettle"), nonNil(st.applied), nonNil(st.released), nonNil(st.deferred),
		holder, s.cfg.DependencyWait, s.cfg.DependencyWaitMax).Scan(&marked, &dueSeconds)
	if err != nil {
		return 0, 0, fmt.Errorf("settle a batch of %d outbox rows (%d applied): %w",
			len(st.applied)+len(st.released)+len(st.deferred), len(st.applied), err)
	}
	if dueSeconds != nil {
		due = max(0, time.Duration(*dueSeconds*float64(time.Second)))
	}
	return marked, due, nil
}

// OutboxExtendLease renews the lease of the claim holder's batch (of n
// rows, for the error).
func (s *store) OutboxExtendLease(ctx context.Context, holder string, n int) error {
	if _, err := s.pool.Exec(ctx, gsql.Query("OutboxExtendLease"), holder, s.cfg.Lease); err != nil {
		return fmt.Errorf("extend lease of a batch of %d outbox rows: %w", n, err)
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
func (s *store) OutboxFail(ctx context.Context, holder string, failed []outbox.Message, reasons map[int64]error) ([]int64, error) {
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

func messageIDs(messages []outbox.Message) []int64 {
	ids := make([]int64, len(messages))
	for i, m := range messages {
		ids[i] = m.ID
	}
	return ids
}
