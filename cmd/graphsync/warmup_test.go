package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// Planning the projector's statements before the first batch is worth a
// second: on a busy machine Neo4j took 30 s and more, and sync held its
// relay and /readyz back for all of it (an e2e chaos run's restarted
// relay missed its 30 s readiness deadline). warmUp waits at most its wait
// and lets the planning go on beside the first batches; stop ends it.
func TestWarmUpDoesNotHoldTheStart(t *testing.T) {
	log := zaptest.NewLogger(t)
	planning := make(chan struct{})
	var ended atomic.Bool
	slow := func(ctx context.Context) error {
		close(planning)
		<-ctx.Done()
		ended.Store(true)
		return ctx.Err()
	}
	returned := make(chan func(), 1)
	go func() { returned <- warmUp(context.Background(), slow, 20*time.Millisecond, log) }()
	select {
	case stop := <-returned:
		<-planning
		if ended.Load() {
			t.Fatal("the planning was stopped when the service started")
		}
		stop()
		if !ended.Load() {
			t.Fatal("stop returned before the planning ended")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("warmUp held the start for as long as Neo4j planned")
	}

	// A planning that ends within the wait is waited for.
	var planned atomic.Bool
	stop := warmUp(context.Background(), func(context.Context) error {
		planned.Store(true)
		return nil
	}, time.Minute, log)
	if !planned.Load() {
		t.Error("warmUp did not wait for a planning that ended at once")
	}
	stop()
}
