package relay

import (
	"context"
	"testing"
	"time"
)

// A connection is closed on a context of its own: not the caller's (which
// is often cancelled by then: the close would give up at once and leave the
// server side open) and bounded (a close to an unresponsive server must not
// hang a shutdown or a reconnect).
func TestCloseWithinOutlivesACancelledCallerAndIsBounded(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	cancel()
	var alive bool
	var deadline time.Time
	var hasDeadline bool
	start := time.Now()
	closeWithin(parent, func(ctx context.Context) error {
		alive = ctx.Err() == nil
		deadline, hasDeadline = ctx.Deadline()
		return nil
	})
	if !alive {
		t.Error("the close ran on the caller's cancelled context")
	}
	if !hasDeadline || deadline.Sub(start) > 5*time.Second+time.Second || !deadline.After(start) {
		t.Errorf("the close's context has deadline %v (set %v), want one within about 5s of %v", deadline, hasDeadline, start)
	}
}
