package main

import (
	"fmt"
	"strings"
	"testing"

	"graphsync/drift"
	"graphsync/rebuild"
)

// The summary names the aggregates a replay gave up past its wait queue's
// bound (the first ten, then how many more), so an operator knows which
// orders the sweep wrote from the rows rather than from their events.
func TestRebuildSummaryNamesGivenUpAggregates(t *testing.T) {
	res := &rebuild.Result{Source: rebuild.SourceReplay, Why: "replay requested", Done: 40, Chunks: 3, NotApplied: 14,
		FirstRejection: "outbox id 9: waiting", Report: &drift.Report{Sample: 1}}
	for i := 1; i <= 12; i++ {
		res.GivenUp = append(res.GivenUp, fmt.Sprintf("tenant 3 Order %d (1 events)", i))
	}
	var out strings.Builder
	if err := writeRebuildSummary(&out, 3, res); err != nil {
		t.Fatal(err)
	}
	want := "- given up: 12 aggregates waited past the replay's wait queue bound; none of their later events were applied (counted above): " +
		"tenant 3 Order 1 (1 events), "
	if got := out.String(); !strings.Contains(got, want) || !strings.Contains(got, "tenant 3 Order 10 (1 events) and 2 more\n") ||
		strings.Contains(got, "Order 11") {
		t.Errorf("summary:\n%s\nwant a line starting %q, ten aggregates and 2 more", got, want)
	}
}
