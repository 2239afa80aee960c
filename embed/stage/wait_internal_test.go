package stage

import (
	"errors"
	"testing"
	"time"
)

// TestNextWait: Run (gather) waits Idle after a round that read less than
// a batch, so that sync's rounds gather texts; Beside does not; a full
// batch goes on at once; failures and rounds that changed nothing back off,
// doubling up to the cap; only texts refused before is idle.
func TestNextWait(t *testing.T) {
	s := &Stage{cfg: Config{BatchSize: 64, Idle: time.Second, Backoff: 2 * time.Second, BackoffMax: 5 * time.Second}}
	failed := errors.New("neo4j is down")
	for _, c := range []struct {
		name   string
		round  Round
		err    error
		last   time.Duration
		gather bool
		want   time.Duration
	}{
		{"a partial round gathers", Round{Read: 3, Written: 3}, nil, 0, true, time.Second},
		{"beside a replay it does not", Round{Read: 3, Written: 3}, nil, 0, false, 0},
		{"a full batch goes on", Round{Read: 64, Written: 60, Dropped: 4}, nil, 0, true, 0},
		{"nothing pending", Round{}, nil, 0, false, time.Second},
		{"only texts refused before", Round{Read: 2, KnownRefused: 2, Refused: 2}, nil, 2 * time.Second, false, time.Second},
		{"first failure", Round{}, failed, 0, true, 2 * time.Second},
		{"failure again", Round{}, failed, 2 * time.Second, true, 4 * time.Second},
		{"failure at the cap", Round{}, failed, 4 * time.Second, false, 5 * time.Second},
		{"pending, nothing changed", Round{Read: 5}, nil, 0, true, 2 * time.Second},
		{"and again", Round{Read: 5, KnownRefused: 1, Refused: 0}, nil, 2 * time.Second, false, 4 * time.Second},
		{"after a backoff, a round that wrote", Round{Read: 64, Written: 64}, nil, 4 * time.Second, true, 0},
	} {
		if got := s.nextWait(c.round, c.err, c.last, c.gather); got != c.want {
			t.Errorf("%s: waits %s, want %s", c.name, got, c.want)
		}
	}
}
