package main

import (
	"encoding/json"
	"testing"

	"graphsync/events"
)

// TestCeilingRowsForEveryRegisteredEvent: the ceiling's rows come from the
// projector's translation of every registered event kind, and every
// ceiling statement receives rows from them.
func TestCeilingRowsForEveryRegisteredEvent(t *testing.T) {
	var rows []outboxRow
	for i, k := range events.Kinds() {
		payload, err := json.Marshal(k.Sample)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, outboxRow{id: int64(i + 1), tenantID: 7, aggregateType: k.AggregateType, aggregateID: k.Sample.AggregateID(),
			eventType: k.EventType, eventVersion: k.Version, payload: payload})
	}
	batches, err := ceilingBatches(rows, len(rows))
	if err != nil {
		t.Fatal(err)
	}
	if len(batches) != 1 {
		t.Fatalf("%d batches, want 1", len(batches))
	}
	for _, statement := range ceilingOrderOfStatements {
		if len(batches[0][statement]) == 0 {
			t.Errorf("no rows for %s", ceilingStatementNames[statement])
		}
	}
	if n := len(batches[0][ceilingTenant]); n != 1 {
		t.Errorf("%d tenant rows for one tenant, want 1", n)
	}
}
