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
// are given up, counted as not applied, and left to the sweep. A given-up
// aggregate stays given up for the rest of the replay: its later events are
// counted as not applied too, never applied without the earlier ones.
//
// The replay's checkpoint must not pass what waits, nor what was given up
// (pin): a resumed replay reads the history again from there, so it
// delivers those events again and counts what it cannot apply.
type waitQueue struct {
	limit int
	msgs  []outbox.Message
	// reasons says why each queued event waits; pending marks those the
	// running sync had not processed at the read; places says where in
	// the history each was read.
	reasons map[int64]error
	pending map[int64]bool
	places  map[int64]place
	// queued counts the queued events of each aggregate.
	queued map[aggregate]int
	// gaveUp counts the events given up of each aggregate given up past
	// the limit, gaveUpOrder lists those aggregates as they were given up,
	// and gaveUpAt is where the earliest event given up was read.
	gaveUp      map[aggregate]int
	gaveUpOrder []aggregate
	gaveUpAt    *place
}

// place is where the replay read an event: its position in the history,
// (created_xid, id), and how many events the replay read before it.
type place struct {
	xid  string
	id   int64
	seen int64
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
	return &waitQueue{limit: max(limit, 1), reasons: map[int64]error{}, pending: map[int64]bool{}, places: map[int64]place{},
		queued: map[aggregate]int{}, gaveUp: map[aggregate]int{}}
}

// holdBack queues the events of batch whose aggregate has events queued
// (they come after those) and returns the rest, how many it held, and
// those it gave up: past the limit, and every event of an aggregate given
// up before (never applied without the earlier events).
func (q *waitQueue) holdBack(batch []outbox.Message, pending map[int64]bool, places map[int64]place) (rest []outbox.Message, held int, gaveUp []rejectedEvent) {
	if len(q.queued) == 0 && len(q.gaveUp) == 0 {
		return batch, 0, nil
	}
	rest = make([]outbox.Message, 0, len(batch))
	for _, m := range batch {
		agg := aggregateOf(m)
		switch {
		case q.gaveUp[agg] > 0:
			q.gaveUp[agg]++
			gaveUp = append(gaveUp, rejectedEvent{m, fmt.Errorf("%s v%d (outbox id %d): an earlier event of %s was given up "+
				"(the wait queue held %d events): %w", m.EventType, m.EventVersion, m.ID, agg, q.limit, outbox.ErrHeldBack), pending[m.ID]})
		case q.queued[agg] == 0:
			rest = append(rest, m)
		default:
			q.push(m, fmt.Errorf("%s v%d (outbox id %d): %w", m.EventType, m.EventVersion, m.ID, outbox.ErrHeldBack), pending[m.ID], places[m.ID])
			held++
		}
	}
	return rest, held, append(gaveUp, q.trim()...)
}

// mayApply says whether delivering the queue again may apply any of it,
// now that the events of the aggregates in written were applied: an event
// waits for an aggregate's events (outbox.AwaitedBy) and that aggregate was
// written, or it waits for something the sink did not name, or Neo4j left
// it unapplied. Events held back behind their aggregate's wait for that.
func (q *waitQueue) mayApply(written map[aggregate]bool) bool {
	for _, m := range q.msgs {
		reason := q.reasons[m.ID]
		switch {
		case errors.Is(reason, outbox.ErrNotApplied):
			return true
		case errors.Is(reason, outbox.ErrDeferred):
			awaited, named := outbox.AwaitedBy(reason)
			if !named || written[aggregate{awaited.TenantID, awaited.AggregateType, awaited.AggregateID}] {
				return true
			}
		}
	}
	return false
}

// pin is the earliest place of the history the replay's checkpoint may
// record as read: before the earliest event that waits or was given up.
func (q *waitQueue) pin() (place, bool) {
	var at place
	found := false
	if q.gaveUpAt != nil {
		at, found = *q.gaveUpAt, true
	}
	for _, m := range q.msgs {
		if p, ok := q.places[m.ID]; ok && p.xid != "" && (!found || p.seen < at.seen) {
			at, found = p, true
		}
	}
	return at, found
}

// pinned is cp as the checkpoint may record it: its position and count
// of events read moved back to just before the earliest event that waits
// or was given up, when one does, so a resumed replay reads it again. The
// history's order is (created_xid, id) and ids are integers, so (xid,
// id-1) is the position just before (xid, id).
func (q *waitQueue) pinned(cp checkpoint) *checkpoint {
	if at, ok := q.pin(); ok {
		cp.replayXID, cp.replayID, cp.done = at.xid, at.id-1, at.seen
	}
	return &cp
}

// givenUp lists the aggregates given up past the limit, in the order they
// were, and how many of their events were not applied.
func (q *waitQueue) givenUp() []string {
	out := make([]string, 0, len(q.gaveUpOrder))
	for _, agg := range q.gaveUpOrder {
		out = append(out, fmt.Sprintf("%s (%d events)", agg, q.gaveUp[agg]))
	}
	return out
}

func (a aggregate) String() string {
	return fmt.Sprintf("tenant %d %s %d", a.tenantID, a.aggregateType, a.aggregateID)
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
func (q *waitQueue) add(batch []outbox.Message, rejected map[int64]error, pending map[int64]bool, places map[int64]place) []rejectedEvent {
	var final []rejectedEvent
	for _, m := range batch {
		reason, isPending, at := rejected[m.ID], pending[m.ID], places[m.ID]
		delete(q.reasons, m.ID)
		delete(q.pending, m.ID)
		delete(q.places, m.ID)
		switch {
		case reason == nil:
		case errors.Is(reason, outbox.ErrDeferred), errors.Is(reason, outbox.ErrNotApplied),
			errors.Is(reason, outbox.ErrHeldBack) && q.queued[aggregateOf(m)] > 0:
			q.push(m, reason, isPending, at)
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
	clear(q.places)
	return out
}

func (q *waitQueue) push(m outbox.Message, reason error, pending bool, at place) {
	q.msgs = append(q.msgs, m)
	q.reasons[m.ID] = reason
	if pending {
		q.pending[m.ID] = true
	}
	q.places[m.ID] = at
	q.queued[aggregateOf(m)]++
}

// trim gives up the oldest aggregates' events while the queue is over its
// limit, and remembers those aggregates as given up.
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
			if at, ok := q.places[m.ID]; ok && at.xid != "" && (q.gaveUpAt == nil || at.seen < q.gaveUpAt.seen) {
				q.gaveUpAt = &at
			}
			if q.gaveUp[oldest] == 0 {
				q.gaveUpOrder = append(q.gaveUpOrder, oldest)
			}
			q.gaveUp[oldest]++
			delete(q.reasons, m.ID)
			delete(q.pending, m.ID)
			delete(q.places, m.ID)
		}
		q.msgs = kept
		delete(q.queued, oldest)
	}
	return out
}
