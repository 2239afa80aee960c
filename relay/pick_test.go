package relay

import (
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"graphsync/outbox"
)

// pick is the one place the claim's rules are worked out; the conformance
// suite proves them against PostgreSQL, this each rule alone, in a window
// that mixes aggregates.
func TestPickKeepsTheClaimRules(t *testing.T) {
	row := func(id, agg, prev int64, payload string) windowRow {
		w := windowRow{msg: outbox.Message{ID: id, TenantID: 1, AggregateType: "Order", AggregateID: agg, Payload: []byte(payload)}}
		if prev > 0 {
			w.prevPending = pgtype.Int8{Int64: prev, Valid: true}
		}
		return w
	}
	suspect := func(w windowRow) windowRow { w.suspect = true; return w }
	inFlight := func(w windowRow) windowRow { w.inFlight = true; return w }
	for _, tc := range []struct {
		name     string
		window   []windowRow
		maxBytes int64
		want     []int64
	}{
		{"chains of two aggregates", []windowRow{row(1, 7, 0, "a"), row(2, 8, 0, "b"), row(3, 7, 1, "c"), row(4, 8, 2, "d")}, 100, []int64{1, 2, 3, 4}},
		{"a predecessor outside the window holds its aggregate back", []windowRow{row(2, 7, 1, "a"), row(3, 8, 0, "b"), row(4, 7, 2, "c")}, 100, []int64{3}},
		{"a pending row between two window rows breaks the chain there", []windowRow{row(1, 7, 0, "a"), row(3, 7, 2, "b"), row(4, 8, 0, "c"), row(5, 7, 3, "d")}, 100, []int64{1, 4}},
		{"an aggregate in flight keeps its late-committed lower id", []windowRow{inFlight(row(1, 7, 0, "a")), row(2, 8, 0, "b"), inFlight(row(3, 7, 1, "c"))}, 100, []int64{2}},
		{"a suspect orphan first goes alone", []windowRow{suspect(row(1, 7, 0, "a")), row(2, 8, 0, "b")}, 100, []int64{1}},
		{"a suspect orphan later waits for the next claim", []windowRow{row(1, 7, 0, "a"), suspect(row(2, 8, 0, "b")), row(3, 9, 0, "c")}, 100, []int64{1}},
		{"the byte bound cuts in id order", []windowRow{row(1, 7, 0, "aaaa"), row(2, 8, 0, "bbbb"), row(3, 9, 0, "c")}, 6, []int64{1}},
		{"the first row goes whatever its size", []windowRow{row(1, 7, 0, "aaaaaaaa"), row(2, 8, 0, "b")}, 6, []int64{1}},
		{"an empty window takes nothing", nil, 100, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int64
			for _, w := range pick(tc.window, tc.maxBytes) {
				got = append(got, w.msg.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("picked %v, want %v", got, tc.want)
			}
		})
	}
}
