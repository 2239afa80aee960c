package rebuild

import (
	"errors"
	"fmt"
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
	}, map[int64]bool{3: true})
	if len(final) != 1 || final[0].msg.ID != 4 {
		t.Fatalf("final rejections %+v, want event 4 alone", final)
	}
	if got := fmt.Sprint(msgIDs(q.msgs)); got != "[1 3]" {
		t.Fatalf("queued %s, want [1 3]", got)
	}
	rest, held, gaveUp := q.holdBack([]outbox.Message{waitMsg(5, "Order", 10), waitMsg(6, "Product", 7)}, nil)
	if fmt.Sprint(msgIDs(rest)) != "[6]" || held != 1 || len(gaveUp) != 0 {
		t.Fatalf("hold back: rest %v, held %d, gave up %d; want [6], 1, 0", msgIDs(rest), held, len(gaveUp))
	}
	// Delivered again: 1 still waits, so 3 and 5 are held back behind it.
	batch := q.take()
	final = q.add(batch, map[int64]error{1: deferred, 3: outbox.ErrHeldBack, 5: outbox.ErrHeldBack}, q.pending)
	if len(final) != 0 || fmt.Sprint(msgIDs(q.msgs)) != "[1 3 5]" {
		t.Fatalf("after a retry: final %+v, queued %v; want none, [1 3 5]", final, msgIDs(q.msgs))
	}
	// Past the limit the oldest aggregate goes, all of it.
	final = q.add([]outbox.Message{waitMsg(7, "Order", 13), waitMsg(8, "Order", 13)}, map[int64]error{7: deferred, 8: outbox.ErrHeldBack}, nil)
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
	if final = q.add(batch, map[int64]error{}, q.pending); len(final) != 0 || len(q.msgs) != 0 || len(q.giveUp()) != 0 {
		t.Fatalf("after all applied: final %+v, queued %v", final, msgIDs(q.msgs))
	}
}
