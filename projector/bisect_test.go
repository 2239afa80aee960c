package projector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/events"
	"graphsync/outbox"
)

// The bisection is tested against a fake transaction (Neo4j cannot be made
// to refuse one event's data on demand): any batch holding a poisoned event
// fails as Neo4j would, with a Statement client error.
func TestDeliverIsolatesEventsNeo4jRefuses(t *testing.T) {
	p := newTestProjector(t)
	poisoned := map[int64]bool{3: true, 6: true, 7: true}
	var applied []int64
	transactions := 0
	p.applyBatch = func(_ context.Context, items []*item, _ *lookAhead) (map[int64]error, error) {
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
	var batch []outbox.Message
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
	p.applyBatch = func(context.Context, []*item, *lookAhead) (map[int64]error, error) { return nil, down }
	a := &ids{tenant: 5}
	rejected, err := p.Deliver(context.Background(), []outbox.Message{
		a.message(t, events.ProductCreated{ProductState: product(1, 1, "P", 0, "", 100, "active")}),
		a.raw("Product", 2, "ProductCreated", 2, `{`),
	})
	if err == nil || !errors.Is(err, down) || rejected != nil {
		t.Fatalf("Deliver = %v, %v; want no rejections and the connectivity error", rejected, err)
	}
}

// Neo4j out of memory for a batch is no outage: the same batch fails the
// same way however often it is retried. Deliver reports it as a failure of
// the batch that names no event (suspect: the relay retries smaller
// batches), not as Neo4j unavailable (the same batch claimed again, for
// ever); a batch small enough goes through.
func TestOutOfMemoryIsNoOutage(t *testing.T) {
	p := newTestProjector(t)
	oom := &neo4j.Neo4jError{Code: "Neo.TransientError.General.MemoryPoolOutOfMemoryError", Msg: "the allocation of 4 MiB exceeds the limit"}
	p.applyBatch = func(_ context.Context, items []*item, _ *lookAhead) (map[int64]error, error) {
		if len(items) > 4 {
			return nil, oom
		}
		return nil, nil
	}
	a := &ids{tenant: 5}
	var batch []outbox.Message
	for i := int64(1); i <= 8; i++ {
		batch = append(batch, a.message(t, events.ProductCreated{ProductState: product(i, 1, "P", 0, "", 100, "active")}))
	}
	_, err := p.Deliver(context.Background(), batch)
	if err == nil || errors.Is(err, outbox.ErrSinkUnavailable) || errors.Is(err, outbox.ErrSinkBroken) {
		t.Fatalf("Deliver of a batch Neo4j has no memory for = %v; want a failure of the batch, neither unavailable nor broken", err)
	}
	if rejected, err := p.Deliver(context.Background(), batch[:4]); err != nil || len(rejected) > 0 {
		t.Fatalf("Deliver of half the batch = %v, %v; want it applied", rejected, err)
	}
	// One event Neo4j has no memory for: Neo4j is short of memory (other
	// load), not the event at fault; it must not be counted towards the DLQ.
	p.applyBatch = func(context.Context, []*item, *lookAhead) (map[int64]error, error) { return nil, &tooLarge{oom} }
	if _, err := p.Deliver(context.Background(), batch[:1]); !errors.Is(err, outbox.ErrSinkUnavailable) {
		t.Fatalf("Deliver of one event Neo4j has no memory for = %v; want Neo4j unavailable (uncounted)", err)
	}
}

func TestClassify(t *testing.T) {
	tests := map[string]failureClass{
		"Neo.ClientError.Statement.TypeError":                                classData,
		"Neo.ClientError.Schema.ConstraintValidationFailed":                  classData,
		"Neo.ClientError.Statement.SyntaxError":                              classBroken,
		"Neo.ClientError.Statement.ParameterMissing":                         classBroken,
		"Neo.ClientError.Statement.SemanticError":                            classBroken,
		"Neo.ClientError.Security.Unauthorized":                              classBroken,
		"Neo.ClientError.Procedure.ProcedureNotFound":                        classBroken,
		"Neo.TransientError.Transaction.DeadlockDetected":                    classUnavailable,
		"Neo.DatabaseError.General.UnknownError":                             classSuspect,
		"Neo.ClientError.Transaction.TransactionTimedOutClientConfiguration": classSuspect,
		"Neo.ClientError.Statement.ExecutionFailed":                          classSuspect,
		"Neo.TransientError.General.MemoryPoolOutOfMemoryError":              classSuspect,
		"Neo.TransientError.General.OutOfMemoryError":                        classSuspect,
	}
	for code, want := range tests {
		if got := classify(fmt.Errorf("wrapped: %w", &neo4j.Neo4jError{Code: code})); got != want {
			t.Errorf("classify(%s) = %v, want %v", code, got, want)
		}
	}
	for err, want := range map[error]failureClass{
		errors.New("plain"): classSuspect,
		&neo4j.ConnectivityError{Inner: errors.New("refused")}: classUnavailable,
		&neo4j.TransactionExecutionLimit{Cause: "timeout"}:     classUnavailable,
		&dataError{errors.New("endpoint missing")}:             classData,
		fmt.Errorf("apply: %w", context.DeadlineExceeded):      classUnavailable,
		&neo4j.TransactionExecutionLimit{Cause: "retries", Errors: []error{
			&neo4j.Neo4jError{Code: "Neo.TransientError.General.MemoryPoolOutOfMemoryError"}}}: classSuspect,
		&tooLarge{&neo4j.Neo4jError{Code: "Neo.TransientError.General.MemoryPoolOutOfMemoryError"}}: classSuspect,
	} {
		if got := classify(err); got != want {
			t.Errorf("classify(%v) = %v, want %v", err, got, want)
		}
	}
}

// The case that broke per-aggregate order: A v1 is refused by Neo4j in a
// batch [A v1, B, A v2, C]. Bisection splits only between aggregates'
// chains: A v2 is held back, B and C are applied, A v1 is rejected.
func TestBisectionKeepsAggregateOrder(t *testing.T) {
	p := newTestProjector(t)
	a := &ids{tenant: 5}
	av1 := a.message(t, events.ProductCreated{ProductState: product(1, 1, "A", 0, "", 100, "active")})
	b := a.message(t, events.ProductCreated{ProductState: product(2, 1, "B", 0, "", 100, "active")})
	av2 := a.message(t, events.ProductUpdated{ProductState: product(1, 2, "A2", 0, "", 100, "active")})
	c := a.message(t, events.ProductCreated{ProductState: product(3, 1, "C", 0, "", 100, "active")})
	var applied []int64
	p.applyBatch = func(_ context.Context, items []*item, _ *lookAhead) (map[int64]error, error) {
		for _, it := range items {
			if it.msg.ID == av1.ID {
				return nil, &neo4j.Neo4jError{Code: "Neo.ClientError.Statement.TypeError", Msg: "boom"}
			}
		}
		for _, it := range items {
			applied = append(applied, it.msg.ID)
		}
		return map[int64]error{}, nil
	}
	rejected, err := p.Deliver(context.Background(), []outbox.Message{av1, b, av2, c})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(rejected[av1.ID], ErrRefusedByNeo4j) || !errors.Is(rejected[av2.ID], outbox.ErrHeldBack) {
		t.Fatalf("A v1 -> %v, A v2 -> %v; want refused and held back", rejected[av1.ID], rejected[av2.ID])
	}
	if slices.Contains(applied, av2.ID) || !slices.Contains(applied, b.ID) || !slices.Contains(applied, c.ID) || len(rejected) != 2 {
		t.Fatalf("applied %v, rejected %v; want B and C applied, A v2 held back", applied, rejected)
	}
}

// A refusal deep in one aggregate's chain: the events before it are applied,
// the one refused is rejected, the ones after it held back.
func TestBisectionInsideAChain(t *testing.T) {
	p := newTestProjector(t)
	a := &ids{tenant: 5}
	var batch []outbox.Message
	for v := int64(1); v <= 6; v++ {
		batch = append(batch, a.message(t, events.ProductUpdated{ProductState: product(1, v, fmt.Sprint("A", v), 0, "", 100, "active")}))
	}
	other := a.message(t, events.ProductCreated{ProductState: product(2, 1, "B", 0, "", 100, "active")})
	batch = append(batch[:2], append([]outbox.Message{other}, batch[2:]...)...)
	refused := batch[4].ID // A v4
	var applied []int64
	p.applyBatch = func(_ context.Context, items []*item, _ *lookAhead) (map[int64]error, error) {
		for _, it := range items {
			if it.msg.ID == refused {
				return nil, &neo4j.Neo4jError{Code: "Neo.ClientError.Statement.TypeError", Msg: "boom"}
			}
		}
		for _, it := range items {
			applied = append(applied, it.msg.ID)
		}
		return map[int64]error{}, nil
	}
	rejected, err := p.Deliver(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{batch[0].ID, batch[1].ID, batch[3].ID, other.ID}
	got := append([]int64(nil), applied...)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("applied %v, want A v1-v3 and B", applied)
	}
	if !errors.Is(rejected[refused], ErrRefusedByNeo4j) || !errors.Is(rejected[batch[5].ID], outbox.ErrHeldBack) || !errors.Is(rejected[batch[6].ID], outbox.ErrHeldBack) {
		t.Fatalf("rejected %v: want A v4 refused, v5 and v6 held back", rejected)
	}
}

// Part of a batch commits, then Neo4j goes away: Deliver reports what it
// applied and hands the rest back as not applied, instead of an error that
// would say nothing was applied.
func TestOutageMidBisection(t *testing.T) {
	p := newTestProjector(t)
	a := &ids{tenant: 5}
	var batch []outbox.Message
	for i := int64(1); i <= 4; i++ {
		batch = append(batch, a.message(t, events.ProductCreated{ProductState: product(i, 1, fmt.Sprint("P", i), 0, "", 100, "active")}))
	}
	calls := 0
	var applied []int64
	p.applyBatch = func(_ context.Context, items []*item, _ *lookAhead) (map[int64]error, error) {
		calls++
		switch calls {
		case 1:
			return nil, &neo4j.Neo4jError{Code: "Neo.ClientError.Statement.TypeError", Msg: "boom"}
		case 2:
			for _, it := range items {
				applied = append(applied, it.msg.ID)
			}
			return map[int64]error{}, nil
		}
		return nil, &neo4j.ConnectivityError{Inner: errors.New("connection reset")}
	}
	rejected, err := p.Deliver(context.Background(), batch)
	if err != nil {
		t.Fatalf("Deliver returned %v although half the batch was applied", err)
	}
	if len(applied) != 2 {
		t.Fatalf("applied %v", applied)
	}
	for _, m := range batch {
		isApplied := slices.Contains(applied, m.ID)
		if isApplied == (rejected[m.ID] != nil) {
			t.Errorf("outbox id %d: applied %v, rejected %v", m.ID, isApplied, rejected[m.ID])
		}
		if !isApplied && !errors.Is(rejected[m.ID], outbox.ErrNotApplied) {
			t.Errorf("outbox id %d: %v, want ErrNotApplied", m.ID, rejected[m.ID])
		}
	}
}
