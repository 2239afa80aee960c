package rebuild

import (
	"errors"
	"fmt"

	"graphsync/outbox"
)

// waitQueue holds, in history order, the replayed events that wait for
// another aggregate's events (outbox.ErrDeferred: an order whose product is
// not in the graph yet), those Neo4j left unapplied, and the later events of
// their aggregates, which must not be applied before them. The replay
// delivers the queue again after every chunk (the chunk may have written
// what they wait for).
//
// The replay's order is the history's, (created_xid, id), and an event can
// come before what it needs there: a product event moved back from the DLQ
// (`graphsync dlq retry` gives it a new created_xid), or an order whose
// transaction took its id before the product's committed. Sync defers such
// an event and applies it once the product is there; the replay does the
// same instead of leaving it to the sweep.
//
// It holds at most limit events (a chunk, and at least DefaultChunkSize: the
// queue is delivered as one batch); past that the oldest aggregates' events
// are given up, counted as not applied, and left to the sweep.
type waitQueue struct {
	limit int
	msgs  []outbox.Message
	// reasons says why each queued event waits; pending marks those the
	// running sync had not processed at the read.
	reasons map[int64]error
	pending map[int64]bool
	// queued counts the queued events of each aggregate.
	queued map[aggregate]int
}

// aggregate names an aggregate of the history.
type aggregate struct {
	tenantID      int64
	aggregateType string
	aggregateID   int64
}

func aggregateOf(m outbox.Message) aggregate {
	return aggregate{m.TenantID, m.AggregateType, m.AggregateID}
}

// rejectedEvent is an event the replay could not apply, and why.
type rejectedEvent struct {
	msg     outbox.Message
	reason  error
	pending bool
}

func newWaitQueue(limit int) *waitQueue {
	return &waitQueue{limit: max(limit, 1), reasons: map[int64]error{}, pending: map[int64]bool{}, queued: map[aggregate]int{}}
}

// holdBack queues the events of batch whose aggregate has events queued
// (they come after those) and returns the rest, and how many it held and
// gave up.
func (q *waitQueue) holdBack(batch []outbox.Message, pending map[int64]bool) (rest []outbox.Message, held int, gaveUp []rejectedEvent) {
	if len(q.queued) == 0 {
		return batch, 0, nil
	}
	rest = make([]outbox.Message, 0, len(batch))
	for _, m := range batch {
		if q.queued[aggregateOf(m)] == 0 {
			rest = append(rest, m)
			continue
		}
		q.push(m, fmt.Errorf("%s v%d (outbox id %d): %w", m.EventType, m.EventVersion, m.ID, outbox.ErrHeldBack), pending[m.ID])
		held++
	}
	return rest, held, q.trim()
}

// take empties the queue and returns its events, in order, for delivery;
// add them back with the outcome.
func (q *waitQueue) take() []outbox.Message {
	msgs := q.msgs
	q.msgs = nil
	clear(q.queued)
	return msgs
}

// add takes the outcome of delivering batch (rejected by id; pending marks
// what sync had not processed): events that wait, or that Neo4j left
// unapplied, are queued with the later events of their aggregates; it
// returns the events rejected for good (and those given up past the
// limit).
func (q *waitQueue) add(batch []outbox.Message, rejected map[int64]error, pending map[int64]bool) []rejectedEvent {
	var final []rejectedEvent
	for _, m := range batch {
		reason, isPending := rejected[m.ID], pending[m.ID]
		delete(q.reasons, m.ID)
		delete(q.pending, m.ID)
		switch {
		case reason == nil:
		case errors.Is(reason, outbox.ErrDeferred), errors.Is(reason, outbox.ErrNotApplied),
			errors.Is(reason, outbox.ErrHeldBack) && q.queued[aggregateOf(m)] > 0:
			q.push(m, reason, isPending)
		default:
			final = append(final, rejectedEvent{m, reason, isPending})
		}
	}
	return append(final, q.trim()...)
}

// giveUp empties the queue and returns its events as not applied.
func (q *waitQueue) giveUp() []rejectedEvent {
	out := make([]rejectedEvent, 0, len(q.msgs))
	for _, m := range q.take() {
		out = append(out, rejectedEvent{m, q.reasons[m.ID], q.pending[m.ID]})
	}
	clear(q.reasons)
	clear(q.pending)
	return out
}

func (q *waitQueue) push(m outbox.Message, reason error, pending bool) {
	q.msgs = append(q.msgs, m)
	q.reasons[m.ID] = reason
	if pending {
		q.pending[m.ID] = true
	}
	q.queued[aggregateOf(m)]++
}

// trim gives up the oldest aggregates' events while the queue is over its
// limit.
func (q *waitQueue) trim() []rejectedEvent {
	var out []rejectedEvent
	for len(q.msgs) > q.limit {
		oldest := aggregateOf(q.msgs[0])
		kept := q.msgs[:0]
		for _, m := range q.msgs {
			if aggregateOf(m) != oldest {
				kept = append(kept, m)
				continue
			}
			out = append(out, rejectedEvent{m, q.reasons[m.ID], q.pending[m.ID]})
			delete(q.reasons, m.ID)
			delete(q.pending, m.ID)
		}
		q.msgs = kept
		delete(q.queued, oldest)
	}
	return out
}
