package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Outcomes a Sink gives single messages in its rejected map, besides a
// plain error (the event's own fault: its attempt counts, last_error records
// it, the retry schedule and then the DLQ follow).
var (
	// ErrHeldBack marks a message a sink did not apply because an earlier
	// message of its aggregate in the same batch failed. It is not the
	// message's fault: no attempt is counted and no last_error is recorded.
	ErrHeldBack = errors.New("held back behind an earlier failing event of its aggregate")
	// ErrDeferred marks a message that is valid but needs something another
	// aggregate's events have not put in place yet (an order naming a
	// product not projected yet). It is not the message's fault: it is
	// handed back uncounted, without last_error, and claimed again after
	// Config.DependencyWait.
	ErrDeferred = errors.New("waiting for another aggregate's events")
	// ErrNotApplied marks a message a sink did not get to: part of the batch
	// was applied and committed, then the sink became unavailable. It is
	// handed back uncounted and the relay backs off.
	ErrNotApplied = errors.New("not applied: the sink became unavailable part-way through the batch")
)

// Awaited names the aggregate whose events a deferred message (ErrDeferred)
// waits for: the node it needs is written by that aggregate's events.
type Awaited struct {
	TenantID      int64
	AggregateType string
	AggregateID   int64
}

// AwaitedBy says which aggregate the message rejected with err waits for,
// when err is ErrDeferred and the sink names it (a sink need not).
func AwaitedBy(err error) (Awaited, bool) {
	var w interface{ Awaits() (Awaited, bool) }
	if errors.As(err, &w) {
		return w.Awaits()
	}
	return Awaited{}, false
}

// Classes of the error Deliver returns for a whole batch (wrap one of them).
// Whatever the class, nothing of the batch was applied.
var (
	// ErrSinkUnavailable: the sink's store cannot be reached or is
	// overloaded; nothing is wrong with the batch. It is released uncounted
	// and the relay backs off.
	ErrSinkUnavailable = errors.New("sink unavailable")
	// ErrSinkBroken: the sink cannot apply anything until someone acts (its
	// server rejects a statement as a syntax error or a missing parameter,
	// refuses the credentials, or lacks the schema it needs). The batch is
	// released uncounted, the relay stops claiming, Health reports the reason,
	// and it tries again every SinkBackoffMax until it clears.
	ErrSinkBroken = errors.New("sink broken")
)

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
//   - err != nil: nothing of the batch was applied. err wraps
//     ErrSinkUnavailable or ErrSinkBroken (see those), or is any other
//     error: the batch failed and no single event could be blamed (a
//     transaction timeout, say). The relay releases the batch uncounted and
//     claims smaller and smaller batches; a batch of one event that still
//     fails that way counts an attempt against the event, so an event that
//     cannot be applied ends in the DLQ instead of stalling the relay.
//   - err == nil: every message not in rejected was applied and committed.
//     A rejected message wrapping ErrHeldBack, ErrDeferred or ErrNotApplied
//     is handed back uncounted (see those); any other rejection is the
//     event's fault: last_error, the retry schedule, past the limit the DLQ.
//
// When a sink rejects a message for any reason, it must not apply the later
// messages of the same aggregate in that batch: it rejects them with an
// error wrapping ErrHeldBack. The claim then keeps them behind the failing
// one until it succeeds or is dead-lettered (block-on-error).
// sinktest.Run (package outbox/sinktest) checks a Sink keeps these rules.
type Sink interface {
	Deliver(ctx context.Context, batch []Message) (rejected map[int64]error, err error)
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ctx context.Context, batch []Message) (map[int64]error, error)

// Deliver calls f.
func (f SinkFunc) Deliver(ctx context.Context, batch []Message) (map[int64]error, error) {
	return f(ctx, batch)
}
