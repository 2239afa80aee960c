package projector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/events"
	"graphsync/relay"
)

// The bisection is tested against a fake transaction (Neo4j cannot be made
// to refuse one event's data on demand): any batch holding a poisoned event
// fails as Neo4j would, with a Statement client error.
func TestDeliverIsolatesEventsNeo4jRefuses(t *testing.T) {
	p := newTestProjector(t)
	poisoned := map[int64]bool{3: true, 6: true, 7: true}
	var applied []int64
	transactions := 0
	p.applyBatch = func(_ context.Context, items []*item) (map[int64]error, error) {
		transactions++
		for _, it := range items {
			if poisoned[it.msg.ID] {
				return nil, &dataError{&neo4j.Neo4jError{Code: "Neo.ClientError.Statement.TypeError", Msg: "boom"}}
			}
		}
		for _, it := range items {
			applied = append(applied, it.msg.ID)
		}
		return map[int64]error{}, nil
	}
	a := &ids{tenant: 5}
	var batch []relay.Message
	for i := int64(1); i <= 10; i++ {
		batch = append(batch, a.message(t, events.ProductCreated{ProductState: product(i, 1, fmt.Sprint("P", i), 0, "", 100, "active")}))
	}
	rejected, err := p.Deliver(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{1, 2, 4, 5, 8, 9, 10}; !slices.Equal(applied, want) {
		t.Fatalf("applied %v, want %v in batch order", applied, want)
	}
	if len(rejected) != 3 {
		t.Fatalf("rejected %v, want outbox ids 3, 6, 7", rejected)
	}
	for id := range poisoned {
		if !errors.Is(rejected[id], ErrRefusedByNeo4j) {
			t.Fatalf("rejected[%d] = %v, want ErrRefusedByNeo4j", id, rejected[id])
		}
	}
	want := "ProductCreated v2 (outbox id 3): neo4j refused its writes: Neo4jError: Neo.ClientError.Statement.TypeError (boom)"
	if rejected[3].Error() != want {
		t.Fatalf("rejected[3] = %q, want %q", rejected[3], want)
	}
	if transactions > 20 {
		t.Fatalf("%d transactions for 10 events and 3 poisons", transactions)
	}
}

func TestDeliverReturnsUnavailabilityAsBatchError(t *testing.T) {
	p := newTestProjector(t)
	down := &neo4j.ConnectivityError{Inner: errors.New("connection refused")}
	p.applyBatch = func(context.Context, []*item) (map[int64]error, error) { return nil, down }
	a := &ids{tenant: 5}
	rejected, err := p.Deliver(context.Background(), []relay.Message{
		a.message(t, events.ProductCreated{ProductState: product(1, 1, "P", 0, "", 100, "active")}),
		a.raw("Product", 2, "ProductCreated", 2, `{`),
	})
	if err == nil || !errors.Is(err, down) || rejected != nil {
		t.Fatalf("Deliver = %v, %v; want no rejections and the connectivity error", rejected, err)
	}
}

func TestIsDataError(t *testing.T) {
	tests := map[string]bool{
		"Neo.ClientError.Statement.TypeError":                                true,
		"Neo.ClientError.Statement.SemanticError":                            true,
		"Neo.ClientError.Schema.ConstraintValidationFailed":                  true,
		"Neo.ClientError.Security.Unauthorized":                              false,
		"Neo.TransientError.Transaction.DeadlockDetected":                    false,
		"Neo.DatabaseError.General.UnknownError":                             false,
		"Neo.ClientError.Transaction.TransactionTimedOutClientConfiguration": false,
	}
	for code, want := range tests {
		if got := isDataError(fmt.Errorf("wrapped: %w", &neo4j.Neo4jError{Code: code})); got != want {
			t.Errorf("isDataError(%s) = %v, want %v", code, got, want)
		}
	}
	if isDataError(errors.New("plain")) {
		t.Error("a plain error is not a data error")
	}
}
