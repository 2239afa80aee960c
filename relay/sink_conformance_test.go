package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"graphsync/outbox"
	"graphsync/outbox/sinktest"
)

// The Sink conformance suite against the fake sink the relay's tests use
// the seam with: the rules are the suite's, not the fake's.
func TestFakeSinkConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Subject{NewScope: func(*testing.T) sinktest.Scope { return newFakeScope() }})
}

// fakeSink keeps, per aggregate, the last seq applied, under a version guard.
// A payload names its seq; "foreign" fails admission and "refuse" fails the
// store; a payload that is not JSON fails decoding.
type fakeSink struct {
	mu    sync.Mutex
	state map[int64]int
	down  bool
}

type fakePayload struct {
	Seq     int  `json:"seq"`
	Foreign bool `json:"foreign"`
	Refuse  bool `json:"refuse"`
}

func (s *fakeSink) Deliver(_ context.Context, batch []outbox.Message) (map[int64]error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, fmt.Errorf("%w: store down", outbox.ErrSinkUnavailable)
	}
	rejected := map[int64]error{}
	failing := map[int64]bool{}
	next := map[int64]int{}
	for _, m := range batch {
		if failing[m.AggregateID] {
			rejected[m.ID] = fmt.Errorf("event %d: %w", m.ID, outbox.ErrHeldBack)
			continue
		}
		var p fakePayload
		err := json.Unmarshal(m.Payload, &p)
		switch {
		case err != nil:
			err = fmt.Errorf("event %d does not decode: %w", m.ID, err)
		case p.Foreign:
			err = errors.New("names another tenant's id")
		case p.Refuse:
			err = errors.New("the store refused its writes")
		}
		if err != nil {
			rejected[m.ID] = err
			failing[m.AggregateID] = true
			continue
		}
		if p.Seq > max(s.state[m.AggregateID], next[m.AggregateID]) {
			next[m.AggregateID] = p.Seq
		}
	}
	for agg, seq := range next {
		s.state[agg] = seq
	}
	return rejected, nil
}

type fakeScope struct {
	sink   *fakeSink
	nextID int64
}

func newFakeScope() *fakeScope { return &fakeScope{sink: &fakeSink{state: map[int64]int{}}} }

func (s *fakeScope) message(agg int64, payload string) outbox.Message {
	s.nextID++
	return outbox.Message{ID: s.nextID, TenantID: 1, AggregateType: "Product", AggregateID: agg, EventType: "ProductUpdated",
		EventVersion: 1, Payload: json.RawMessage(payload), Attempts: 1}
}

func (s *fakeScope) Sink() outbox.Sink { return s.sink }
func (s *fakeScope) Valid(agg int64, seq int) outbox.Message {
	return s.message(agg, fmt.Sprintf(`{"seq": %d}`, seq))
}
func (s *fakeScope) Undecodable(agg int64, _ int) outbox.Message { return s.message(agg, `{"seq": `) }
func (s *fakeScope) Inadmissible(agg int64, seq int) outbox.Message {
	return s.message(agg, fmt.Sprintf(`{"seq": %d, "foreign": true}`, seq))
}
func (s *fakeScope) Refused(agg int64, seq int) outbox.Message {
	return s.message(agg, fmt.Sprintf(`{"seq": %d, "refuse": true}`, seq))
}

func (s *fakeScope) Applied(*testing.T) map[int64]int {
	s.sink.mu.Lock()
	defer s.sink.mu.Unlock()
	applied := map[int64]int{}
	for agg, seq := range s.sink.state {
		applied[agg] = seq
	}
	return applied
}

func (s *fakeScope) Outage(*testing.T) func() {
	s.sink.mu.Lock()
	s.sink.down = true
	s.sink.mu.Unlock()
	return func() {
		s.sink.mu.Lock()
		s.sink.down = false
		s.sink.mu.Unlock()
	}
}
