package outbox

import (
	"slices"
	"testing"
)

func msg(id, tenant int64, typ string, agg int64) Message {
	return Message{ID: id, TenantID: tenant, AggregateType: typ, AggregateID: agg}
}

// TestHoldBackMixedAggregates: in one batch of interleaved aggregates, a
// failure holds back only the later messages of its own aggregate (same
// tenant, type and id), and a held message holds back those after it.
func TestHoldBackMixedAggregates(t *testing.T) {
	batch := []Message{
		msg(1, 1, "Order", 7), msg(2, 1, "Product", 7), msg(3, 2, "Order", 7),
		msg(4, 1, "Order", 7), msg(5, 1, "Order", 8), msg(6, 1, "Order", 7),
		msg(7, 1, "Product", 7),
	}
	var h HoldBack
	var held []int64
	for _, m := range batch {
		if h.Holds(m) {
			h.Hold(m)
			held = append(held, m.ID)
			continue
		}
		if m.ID == 2 || m.ID == 4 { // fail
			h.Hold(m)
		}
	}
	if want := []int64{6, 7}; !slices.Equal(held, want) {
		t.Fatalf("held %v, want %v", held, want)
	}
	if h.Holds(msg(1, 1, "Order", 7)) {
		t.Fatal("a message before the failure is held back")
	}
}

func TestBehind(t *testing.T) {
	messages := []Message{msg(1, 1, "Order", 7), msg(3, 1, "Order", 7), msg(4, 1, "Product", 7), msg(5, 2, "Order", 7), msg(6, 1, "Order", 7)}
	failed := []Message{msg(2, 1, "Order", 7), msg(5, 1, "Product", 7)}
	deliver, held := Behind(messages, failed)
	var ids []int64
	for _, m := range deliver {
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, []int64{1, 4, 5}) || !slices.Equal(held, []int64{3, 6}) {
		t.Fatalf("deliver %v held %v, want [1 4 5] and [3 6]", ids, held)
	}
}
