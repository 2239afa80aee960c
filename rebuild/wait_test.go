package rebuild

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"graphsync/outbox"
)

func waitMsg(id int64, aggregateType string, aggregateID int64) outbox.Message {
	return outbox.Message{ID: id, TenantID: 1, AggregateType: aggregateType, AggregateID: aggregateID, EventType: "E", EventVersion: 1}
}

func msgIDs(msgs []outbox.Message) []int64 {
	var out []int64
	for _, m := range msgs {
		out = append(out, m.ID)
	}
	return out
}

// The queue keeps a waiting event with the later events of its aggregate,
// in order, holds back that aggregate's events of later chunks, lets the
// rest go, counts real rejections at once and gives up the oldest
// aggregates past its limit.
func TestWaitQueueKeepsAggregatesInOrder(t *testing.T) {
	deferred := fmt.Errorf("product not there yet: %w", outbox.ErrDeferred)
	q := newWaitQueue(4)
	chunk := []outbox.Message{waitMsg(1, "Order", 10), waitMsg(2, "Order", 11), waitMsg(3, "Order", 10), waitMsg(4, "Order", 12)}
	final := q.add(chunk, map[int64]error{
		1: deferred,
		3: fmt.Errorf("behind 1: %w", outbox.ErrHeldBack),
		4: errors.New("invalid"),
	}, map[int64]bool{3: true}, nil)
	if len(final) != 1 || final[0].msg.ID != 4 {
		t.Fatalf("final rejections %+v, want event 4 alone", final)
	}
	if got := fmt.Sprint(msgIDs(q.msgs)); got != "[1 3]" {
		t.Fatalf("queued %s, want [1 3]", got)
	}
	rest, held, gaveUp := q.holdBack([]outbox.Message{waitMsg(5, "Order", 10), waitMsg(6, "Product", 7)}, nil, nil)
	if fmt.Sprint(msgIDs(rest)) != "[6]" || held != 1 || len(gaveUp) != 0 {
		t.Fatalf("hold back: rest %v, held %d, gave up %d; want [6], 1, 0", msgIDs(rest), held, len(gaveUp))
	}
	// Delivered again: 1 still waits, so 3 and 5 are held back behind it.
	batch := q.take()
	final = q.add(batch, map[int64]error{1: deferred, 3: outbox.ErrHeldBack, 5: outbox.ErrHeldBack}, q.pending, q.places)
	if len(final) != 0 || fmt.Sprint(msgIDs(q.msgs)) != "[1 3 5]" {
		t.Fatalf("after a retry: final %+v, queued %v; want none, [1 3 5]", final, msgIDs(q.msgs))
	}
	// Past the limit the oldest aggregate goes, all of it.
	final = q.add([]outbox.Message{waitMsg(7, "Order", 13), waitMsg(8, "Order", 13)}, map[int64]error{7: deferred, 8: outbox.ErrHeldBack}, nil, nil)
	if fmt.Sprint(msgIDs(q.msgs)) != "[7 8]" || len(final) != 3 {
		t.Fatalf("past the limit: queued %v, gave up %d; want [7 8], 3", msgIDs(q.msgs), len(final))
	}
	for _, r := range final {
		if r.pending != (r.msg.ID == 3) {
			t.Errorf("event %d given up with pending %v", r.msg.ID, r.pending)
		}
	}
	// Applied on the next try: the queue is empty.
	batch = q.take()
	if final = q.add(batch, map[int64]error{}, q.pending, q.places); len(final) != 0 || len(q.msgs) != 0 || len(q.giveUp()) != 0 {
		t.Fatalf("after all applied: final %+v, queued %v", final, msgIDs(q.msgs))
	}
}

// An aggregate given up past the limit stays given up: its events of later
// chunks are counted as not applied, never let through to apply without the
// earlier ones, and the queue names it. Before, the queue forgot it and its
// next event went to the sink. The checkpoint stays before the earliest
// event that waits or was given up, so a resumed replay reads it again.
func TestWaitQueueKeepsGivenUpAggregatesGivenUp(t *testing.T) {
	deferred := fmt.Errorf("product not there yet: %w", outbox.ErrDeferred)
	places := map[int64]place{}
	for id := int64(1); id <= 9; id++ {
		places[id] = place{xid: fmt.Sprint(100 + id), id: id, seen: 40 + id}
	}
	q := newWaitQueue(2)
	if _, ok := q.pin(); ok {
		t.Fatal("an empty queue pins the checkpoint")
	}
	// Three orders of two tenants wait; the oldest is given up.
	chunk := []outbox.Message{waitMsg(1, "Order", 10), waitMsg(2, "Order", 11), waitMsg(3, "Order", 12), waitMsg(4, "Product", 7)}
	chunk[2].TenantID = 2
	final := q.add(chunk, map[int64]error{1: deferred, 2: deferred, 3: deferred}, nil, places)
	if len(final) != 1 || final[0].msg.ID != 1 {
		t.Fatalf("given up %+v, want event 1", final)
	}
	cp := q.pinned(checkpoint{replayXID: "104", replayID: 4, done: 44})
	if cp.replayXID != "101" || cp.replayID != 0 || cp.done != 41 {
		t.Fatalf("checkpoint %s/%d after %d events, want 101/0 after 41: before the given-up event 1", cp.replayXID, cp.replayID, cp.done)
	}
	// The next chunk: Order 10's next event must not apply, nor be queued
	// to apply later; the product goes.
	rest, held, gaveUp := q.holdBack([]outbox.Message{waitMsg(5, "Order", 10), waitMsg(6, "Product", 8)}, map[int64]bool{5: true}, places)
	if fmt.Sprint(msgIDs(rest)) != "[6]" || held != 0 {
		t.Fatalf("hold back: rest %v, held %d; want [6], 0", msgIDs(rest), held)
	}
	if len(gaveUp) != 1 || gaveUp[0].msg.ID != 5 || !gaveUp[0].pending || !strings.Contains(gaveUp[0].reason.Error(), "an earlier event of tenant 1 Order 10 was given up") {
		t.Fatalf("given up %+v, want event 5 (pending), naming Order 10", gaveUp)
	}
	// What waited applies; Order 10 stays given up, the checkpoint with it.
	batch := q.take()
	if final = q.add(batch, map[int64]error{}, q.pending, q.places); len(final) != 0 || len(q.msgs) != 0 {
		t.Fatalf("after all applied: final %+v, queued %v", final, msgIDs(q.msgs))
	}
	if cp := q.pinned(checkpoint{replayXID: "107", replayID: 7, done: 47}); cp.replayXID != "101" || cp.done != 41 {
		t.Fatalf("checkpoint %s/%d after %d events once the queue emptied, want 101/0 after 41", cp.replayXID, cp.replayID, cp.done)
	}
	if rest, _, gaveUp = q.holdBack([]outbox.Message{waitMsg(8, "Order", 10), waitMsg(9, "Order", 11)}, nil, places); fmt.Sprint(msgIDs(rest)) != "[9]" || len(gaveUp) != 1 {
		t.Fatalf("a later chunk: rest %v, given up %d; want [9], 1", msgIDs(rest), len(gaveUp))
	}
	if got := fmt.Sprint(q.givenUp()); got != "[tenant 1 Order 10 (3 events)]" {
		t.Errorf("given up %s, want [tenant 1 Order 10 (3 events)]", got)
	}
}

// With nothing given up, the checkpoint stays before the earliest event
// still waiting, and moves on once it applied.
func TestWaitQueuePinsTheCheckpointBeforeWhatWaits(t *testing.T) {
	q := newWaitQueue(10)
	places := map[int64]place{5: {"900", 5, 12}, 6: {"901", 6, 13}, 9: {"899", 9, 20}}
	q.add([]outbox.Message{waitMsg(5, "Order", 1), waitMsg(6, "Order", 2)}, map[int64]error{5: outbox.ErrNotApplied, 6: outbox.ErrDeferred}, nil, places)
	if cp := q.pinned(checkpoint{replayXID: "950", replayID: 30, done: 30}); cp.replayXID != "900" || cp.replayID != 4 || cp.done != 12 {
		t.Fatalf("checkpoint %s/%d after %d, want 900/4 after 12", cp.replayXID, cp.replayID, cp.done)
	}
	batch := q.take()
	q.add(batch, map[int64]error{6: outbox.ErrDeferred}, q.pending, q.places)
	if cp := q.pinned(checkpoint{replayXID: "950", replayID: 30, done: 30}); cp.replayXID != "901" || cp.replayID != 5 || cp.done != 13 {
		t.Fatalf("checkpoint %s/%d after %d, want 901/5 after 13", cp.replayXID, cp.replayID, cp.done)
	}
	batch = q.take()
	q.add(batch, nil, q.pending, q.places)
	if cp := q.pinned(checkpoint{replayXID: "950", replayID: 30, done: 30}); cp.replayXID != "950" || cp.replayID != 30 || cp.done != 30 {
		t.Fatalf("checkpoint %s/%d after %d with nothing waiting, want 950/30 after 30", cp.replayXID, cp.replayID, cp.done)
	}
}

// The queue may apply again only when an aggregate it waits for was
// written, when it waits for what the sink did not name, or when Neo4j
// left events unapplied; held-back events wait for their own aggregate.
func TestWaitQueueMayApplyOnlyWhenWhatItAwaitsWasWritten(t *testing.T) {
	awaiting := func(tenant, product int64) error {
		return &awaitingError{outbox.Awaited{TenantID: tenant, AggregateType: "Product", AggregateID: product}}
	}
	q := newWaitQueue(10)
	q.add([]outbox.Message{waitMsg(1, "Order", 10), waitMsg(2, "Order", 10)}, map[int64]error{1: awaiting(1, 7), 2: outbox.ErrHeldBack}, nil, nil)
	for _, tc := range []struct {
		written map[aggregate]bool
		want    bool
	}{
		{map[aggregate]bool{}, false},
		{map[aggregate]bool{{1, "Product", 8}: true, {2, "Product", 7}: true, {1, "Order", 10}: true}, false},
		{map[aggregate]bool{{1, "Product", 7}: true}, true},
	} {
		if got := q.mayApply(tc.written); got != tc.want {
			t.Errorf("written %v: may apply %v, want %v", tc.written, got, tc.want)
		}
	}
	for _, reason := range []error{fmt.Errorf("unnamed: %w", outbox.ErrDeferred), outbox.ErrNotApplied} {
		q := newWaitQueue(10)
		q.add([]outbox.Message{waitMsg(3, "Order", 11)}, map[int64]error{3: reason}, nil, nil)
		if !q.mayApply(map[aggregate]bool{}) {
			t.Errorf("an event waiting with %q: may apply false, want true", reason)
		}
	}
}

// awaitingError is a deferral naming what it waits for, as the projector's.
type awaitingError struct{ awaited outbox.Awaited }

func (e *awaitingError) Error() string                  { return "waiting for a product" }
func (e *awaitingError) Unwrap() error                  { return outbox.ErrDeferred }
func (e *awaitingError) Awaits() (outbox.Awaited, bool) { return e.awaited, true }
