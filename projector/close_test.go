package projector

import (
	"context"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
)

// closeRecorder is a session whose Close records the context it was given;
// every other method is the (nil) embedded interface's and is never called.
type closeRecorder struct {
	neo4j.SessionWithContext
	alive       bool
	deadline    time.Time
	hasDeadline bool
}

func (s *closeRecorder) Close(ctx context.Context) error {
	s.alive = ctx.Err() == nil
	s.deadline, s.hasDeadline = ctx.Deadline()
	return nil
}

// A Neo4j session is closed on a context of its own: a delivery cancelled
// by a stopping relay still returns its connection to the pool (closing on
// the cancelled context gives up at once), and the close is bounded.
func TestCloseSessionOutlivesACancelledCallerAndIsBounded(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	cancel()
	s := &closeRecorder{}
	start := time.Now()
	closeSession(parent, s)
	if !s.alive {
		t.Error("the session was closed on the caller's cancelled context")
	}
	if !s.hasDeadline || !s.deadline.After(start) || s.deadline.Sub(start) > 11*time.Second {
		t.Errorf("the close's context has deadline %v (set %v), want one within about 10s of %v", s.deadline, s.hasDeadline, start)
	}
}
