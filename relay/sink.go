package relay

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// ErrHeldBack marks a message a sink did not apply because an earlier message
// of its aggregate in the same batch was rejected. It is not the message's
// fault: no attempt is counted and no last_error is recorded.
var ErrHeldBack = errors.New("held back behind an earlier failing event of its aggregate")

// Message is one outbox row as the relay hands it to a Sink.
type Message struct {
	ID            int64
	TenantID      int64
	AggregateType string
	AggregateID   int64
	EventType     string
	EventVersion  int16
	Payload       json.RawMessage
	OccurredAt    time.Time
	// Attempts counts deliveries begun, this one included (counted at claim).
	Attempts int16
	// TraceID is empty when the producer gave none.
	TraceID string
}

// Sink receives claimed batches. Messages of one aggregate arrive in order and
// never in two concurrent Deliver calls.
//
// Deliver returns:
//   - err != nil: the sink could not apply the batch at all (its store is
//     unreachable, say). Nothing is marked; the batch is released without
//     counting the attempt against its messages, and the relay backs off.
//   - err == nil: every message not in rejected was applied and committed.
//     Each rejected message (a poison event) gets its error recorded as
//     last_error, is retried on the schedule, and past the limit goes to the DLQ.
//
// When a sink rejects a message, it must not apply the later messages of the
// same aggregate in that batch: it rejects them with an error wrapping
// ErrHeldBack, and the relay hands them back without counting an attempt.
// The claim then keeps them behind the failing one until it succeeds or is
// dead-lettered (block-on-error).
type Sink interface {
	Deliver(ctx context.Context, batch []Message) (rejected map[int64]error, err error)
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ctx context.Context, batch []Message) (map[int64]error, error)

// Deliver calls f.
func (f SinkFunc) Deliver(ctx context.Context, batch []Message) (map[int64]error, error) {
	return f(ctx, batch)
}
