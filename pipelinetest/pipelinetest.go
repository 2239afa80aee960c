// Package pipelinetest runs graphsync's sync (relay + projector) inside a test,
// against the real services stacktest reaches.
package pipelinetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap/zaptest"

	"graphsync/internal/stacktest"
	"graphsync/projector"
	"graphsync/relay"
	"graphsync/workload"
)

var (
	schemaOnce sync.Once
	schemaErr  error
)

// Stack returns a fresh PostgreSQL database and the shared Neo4j, its
// constraints and indexes in place.
func Stack(t *testing.T) (*pgxpool.Pool, neo4j.DriverWithContext) {
	t.Helper()
	_, pool := stacktest.FreshDatabase(t)
	driver := stacktest.Neo4j(t)
	schemaOnce.Do(func() { schemaErr = projector.EnsureSchema(context.Background(), driver) })
	if schemaErr != nil {
		t.Fatal(schemaErr)
	}
	return pool, driver
}

// StartSync runs one sync (relay + projector) in this process until the
// test ends, with short poll and retry intervals.
func StartSync(t *testing.T, pool *pgxpool.Pool, driver neo4j.DriverWithContext, id string) {
	t.Helper()
	sink, err := projector.New(driver, projector.Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := relay.New(pool, sink, relay.Config{ID: id, PollInterval: 50 * time.Millisecond, DependencyWait: 50 * time.Millisecond,
		RetryStep: 50 * time.Millisecond, SinkBackoff: 50 * time.Millisecond}, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rel.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		sink.Close()
	})
}

// WaitCaughtUp waits until no pending outbox row can flow, or fails the
// test after within.
func WaitCaughtUp(t *testing.T, pool *pgxpool.Pool, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		// An aggregate waiting for another aggregate's events still flows here:
		// a test waits for every event its workload wrote.
		flowing, err := relay.PendingFlowing(context.Background(), pool, 24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if !flowing {
			return
		}
		<-time.After(50 * time.Millisecond)
	}
	t.Fatalf("sync did not catch up within %s", within)
}

// StartWorkload writes cfg in the background. It returns once the
// workload's first cfg.Tenants tenants each have an order, with their ids,
// and a channel that receives the workload's tenants when it is done.
func StartWorkload(t *testing.T, pool *pgxpool.Pool, cfg workload.Config) (tenants []int64, done chan []int64) {
	t.Helper()
	done = make(chan []int64, 1)
	go func() {
		report, err := workload.Run(context.Background(), pool, cfg, zaptest.NewLogger(t))
		if err != nil {
			t.Error(err)
		}
		done <- report.TenantIDs
	}()
	deadline := time.Now().Add(30 * time.Second)
	for len(tenants) < cfg.Tenants && time.Now().Before(deadline) {
		rows, err := pool.Query(context.Background(),
			`SELECT id FROM tenants WHERE EXISTS (SELECT 1 FROM sales_orders o WHERE o.tenant_id = tenants.id) ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		if tenants, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			t.Fatal(err)
		}
		<-time.After(20 * time.Millisecond)
	}
	if len(tenants) < cfg.Tenants {
		t.Fatalf("the workload made no %d tenants with orders within 30s", cfg.Tenants)
	}
	return tenants, done
}
