package workload

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"graphsync/events"
)

// Report is what a Run committed.
type Report struct {
	// TenantIDs are the tenants the run created, in creation order.
	TenantIDs []int64
	// Events is the number of outbox rows written (the sum of ByType).
	Events int64
	// Orders is the number of sales orders placed.
	Orders int64
	// Products is the number of products left in the database (created minus deleted).
	Products int64
	// Customers is the number of customers created.
	Customers int64
	// ByType counts the events written by event type.
	ByType map[string]int64
}

func (r *Report) add(byType map[string]int64) {
	for eventType, n := range byType {
		r.ByType[eventType] += n
		r.Events += n
	}
	r.Orders = r.ByType[events.TypeOrderPlaced]
	r.Products = r.ByType[events.TypeProductCreated] - r.ByType[events.TypeProductDeleted]
}

// progressEvery is how often a running workload logs its progress.
const progressEvery = 5 * time.Second

// Run creates cfg.Tenants new tenants with their categories, customers and
// products, then has cfg.Writers concurrent writers place cfg.Orders orders
// and drive them and the products through their lifecycles. Every change is
// committed together with its event (see the package doc). On error, the
// Report still counts what was committed.
//
// The pool's user must be able to insert tenants (a superuser, or the relay
// role) and to SET ROLE cfg.AppRole; business writes run as cfg.AppRole.
func Run(ctx context.Context, pool *pgxpool.Pool, cfg Config, log *zap.Logger) (Report, error) {
	cfg = cfg.withDefaults()
	report := Report{ByType: map[string]int64{}}
	if err := cfg.validate(); err != nil {
		return report, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	started := time.Now()
	var written atomic.Int64
	onCommit := func(n int64) { written.Add(n) }

	stopProgress := logProgress(log, &written, started)
	defer stopProgress()

	tenants, setupCounts, err := setup(ctx, pool, cfg, onCommit)
	for _, tenant := range tenants {
		report.TenantIDs = append(report.TenantIDs, tenant.id)
		report.Customers += int64(len(tenant.customers))
	}
	report.add(setupCounts)
	if err != nil {
		return report, fmt.Errorf("workload setup: %w", err)
	}
	log.Info("workload tenants ready", zap.Int64s("tenant_ids", report.TenantIDs),
		zap.Int64("customers", report.Customers), zap.Int64("products", report.Products),
		zap.Int("writers", cfg.Writers), zap.Int("orders", cfg.Orders), zap.Int("orders_per_tx", cfg.OrdersPerTx))

	writers := newWriters(pool, cfg, tenants, onCommit)
	group, groupCtx := errgroup.WithContext(ctx)
	for _, w := range writers {
		group.Go(func() error { return w.run(groupCtx) })
	}
	err = group.Wait()
	for _, w := range writers {
		report.add(w.batch.committed)
	}
	if err != nil {
		return report, fmt.Errorf("workload writers: %w", err)
	}
	log.Info("workload written", zap.Int64("events", report.Events), zap.Int64("orders", report.Orders),
		zap.Any("by_type", maps.Clone(report.ByType)), zap.Duration("elapsed", time.Since(started)))
	return report, nil
}

// logProgress logs the committed event count every progressEvery until stopped.
func logProgress(log *zap.Logger, written *atomic.Int64, started time.Time) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		ticker := time.NewTicker(progressEvery)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
				n := written.Load()
				elapsed := time.Since(started)
				log.Info("workload progress", zap.Int64("events", n),
					zap.Float64("events_per_second", float64(n)/elapsed.Seconds()))
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
