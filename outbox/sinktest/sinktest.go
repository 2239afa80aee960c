// Package sinktest is the conformance suite of the outbox.Sink seam: the
// rules every Sink must keep, written once and run against every
// implementation (the projector on real Neo4j, the relay tests' fake). In the
// spirit of watermill's pubsub test suite.
//
// The rules (outbox.Sink): an event that fails, whatever the reason (it does
// not decode, admission refuses it, the store refuses its writes), holds back
// the later events of its aggregate in the batch (outbox.ErrHeldBack) while
// other aggregates are applied; events of interleaved aggregates are applied
// in their aggregates' order; a batch that meets an outage reports an error
// wrapping outbox.ErrSinkUnavailable and applies nothing; delivering again
// what was applied changes nothing.
package sinktest

import (
	"context"
	"errors"
	"maps"
	"testing"

	"graphsync/outbox"
)

// Subject is a Sink under test and how to make events for it. Aggregates
// are small numbers within one Scope; seq numbers an aggregate's events from
// 1, in order.
type Subject struct {
	// NewScope returns a fresh, isolated scope (a tenant, say) for one test.
	NewScope func(t *testing.T) Scope
}

// Scope makes one test's events and reads back their effect.
type Scope interface {
	// Sink is the Sink under test.
	Sink() outbox.Sink
	// Valid is event seq of aggregate agg, which the sink applies.
	Valid(agg int64, seq int) outbox.Message
	// Undecodable is event seq of agg with a payload the sink cannot decode.
	Undecodable(agg int64, seq int) outbox.Message
	// Inadmissible is event seq of agg that decodes but that the sink's
	// admission refuses (it names another tenant's id, say).
	Inadmissible(agg int64, seq int) outbox.Message
	// Refused is event seq of agg that the sink's store refuses to write.
	Refused(agg int64, seq int) outbox.Message
	// Applied returns, per aggregate, the seq of the last event whose effect
	// the store holds (absent: none).
	Applied(t *testing.T) map[int64]int
	// Outage makes the store unavailable until restore is called: after it,
	// Sink returns a sink whose store cannot be reached.
	Outage(t *testing.T) (restore func())
}

// Run runs the suite.
func Run(t *testing.T, s Subject) {
	t.Run("HoldBackAfterDecodeFailure", func(t *testing.T) { testHoldBack(t, s, Scope.Undecodable) })
	t.Run("HoldBackAfterAdmissionFailure", func(t *testing.T) { testHoldBack(t, s, Scope.Inadmissible) })
	t.Run("HoldBackAfterRefusal", func(t *testing.T) { testHoldBack(t, s, Scope.Refused) })
	t.Run("InterleavedAggregates", func(t *testing.T) { testInterleaved(t, s) })
	t.Run("RedeliveryIsANoOp", func(t *testing.T) { testRedelivery(t, s) })
	t.Run("OutageMidBatch", func(t *testing.T) { testOutage(t, s) })
}

func deliver(t *testing.T, sc Scope, batch ...outbox.Message) map[int64]error {
	t.Helper()
	rejected, err := sc.Sink().Deliver(context.Background(), batch)
	if err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	return rejected
}

func expectApplied(t *testing.T, sc Scope, want map[int64]int) {
	t.Helper()
	if got := sc.Applied(t); !maps.Equal(got, want) {
		t.Fatalf("applied state per aggregate = %v, want %v", got, want)
	}
}

// [A1, B1, A2 failing, C1, A3, B2]: A2 is rejected as the event's own fault,
// A3 is held back, the other aggregates are applied whole.
func testHoldBack(t *testing.T, s Subject, failing func(Scope, int64, int) outbox.Message) {
	sc := s.NewScope(t)
	const a, b, c = 1, 2, 3
	bad := failing(sc, a, 2)
	a3 := sc.Valid(a, 3)
	rejected := deliver(t, sc, sc.Valid(a, 1), sc.Valid(b, 1), bad, sc.Valid(c, 1), a3, sc.Valid(b, 2))
	if err := rejected[bad.ID]; err == nil || errors.Is(err, outbox.ErrHeldBack) || errors.Is(err, outbox.ErrNotApplied) {
		t.Fatalf("the failing event: %v, want a rejection of its own", err)
	}
	if err := rejected[a3.ID]; !errors.Is(err, outbox.ErrHeldBack) {
		t.Fatalf("the event after the failing one: %v, want outbox.ErrHeldBack", err)
	}
	if len(rejected) != 2 {
		t.Fatalf("rejected %v, want only the failing event and the one it holds back", rejected)
	}
	expectApplied(t, sc, map[int64]int{a: 1, b: 2, c: 1})
}

func testInterleaved(t *testing.T, s Subject) {
	sc := s.NewScope(t)
	const a, b, c = 1, 2, 3
	rejected := deliver(t, sc, sc.Valid(a, 1), sc.Valid(b, 1), sc.Valid(a, 2), sc.Valid(c, 1), sc.Valid(b, 2), sc.Valid(a, 3))
	if len(rejected) != 0 {
		t.Fatalf("rejected %v", rejected)
	}
	expectApplied(t, sc, map[int64]int{a: 3, b: 2, c: 1})
	rejected = deliver(t, sc, sc.Valid(c, 2), sc.Valid(a, 4))
	if len(rejected) != 0 {
		t.Fatalf("second batch rejected %v", rejected)
	}
	expectApplied(t, sc, map[int64]int{a: 4, b: 2, c: 2})
}

// At-least-once delivery: the same batch again, a part of it, or an old
// event after a newer one leave the store as it was.
func testRedelivery(t *testing.T, s Subject) {
	sc := s.NewScope(t)
	const a, b = 1, 2
	a1, a2, b1 := sc.Valid(a, 1), sc.Valid(a, 2), sc.Valid(b, 1)
	deliver(t, sc, a1, a2, b1)
	want := map[int64]int{a: 2, b: 1}
	expectApplied(t, sc, want)
	for _, batch := range [][]outbox.Message{{a1, a2, b1}, {a1}, {b1, a1}} {
		if rejected := deliver(t, sc, batch...); len(rejected) != 0 {
			t.Fatalf("re-delivery rejected %v", rejected)
		}
		expectApplied(t, sc, want)
	}
}

func testOutage(t *testing.T, s Subject) {
	sc := s.NewScope(t)
	const a, b = 1, 2
	deliver(t, sc, sc.Valid(a, 1))
	restore := sc.Outage(t)
	batch := []outbox.Message{sc.Valid(a, 2), sc.Valid(b, 1)}
	rejected, err := sc.Sink().Deliver(context.Background(), batch)
	if !errors.Is(err, outbox.ErrSinkUnavailable) || rejected != nil {
		restore()
		t.Fatalf("Deliver during an outage = %v, %v; want no rejections and outbox.ErrSinkUnavailable", rejected, err)
	}
	restore()
	expectApplied(t, sc, map[int64]int{a: 1})
	deliver(t, sc, batch...)
	expectApplied(t, sc, map[int64]int{a: 2, b: 1})
}
