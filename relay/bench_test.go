package relay

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// The relay benchmarks run with `make bench-relay`:
//
//	go test -run '^$' -bench . -benchtime 1x ./relay
//
// Settings: the service's defaults (batch 500, poll interval 500ms, lease 15s),
// synchronous_commit on, a null sink. Each figure is reported with
// b.ReportMetric; the machine is noisy, so compare figures of one run.

// nullSink accepts everything and records when each row arrived.
type nullSink struct {
	mu      sync.Mutex
	arrived map[int64]time.Time
}

func (s *nullSink) Deliver(_ context.Context, batch []Message) (map[int64]error, error) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.arrived != nil {
		for _, m := range batch {
			if _, seen := s.arrived[m.ID]; !seen {
				s.arrived[m.ID] = now
			}
		}
	}
	return nil, nil
}

func benchConfig(h *harness, mode WakeMode, workers int) Config {
	return Config{Wake: mode, Workers: workers, Slot: h.slot, Publication: h.slot}
}

func startBenchRelay(b *testing.B, h *harness, sink Sink, cfg Config) func() {
	relayPool, err := pgxpool.New(context.Background(), h.url)
	if err != nil {
		b.Fatal(err)
	}
	r, err := New(relayPool, sink, cfg, zap.NewNop(), nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
		relayPool.Close()
	}
}

// BenchmarkRelayThroughput: events/s from commit to marked, per wake mode and
// worker count. Producers commit 100-row transactions as fast as they can
// while the relay runs; producer_events/s is the insert rate alone, the
// ceiling the relay can be held against.
func BenchmarkRelayThroughput(b *testing.B) {
	const events, rowsPerTx, producers = 20000, 100, 4
	for _, mode := range []WakeMode{WakePoll, WakeNotify, WakeStream} {
		for _, workers := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("mode=%s/workers=%d", mode, workers), func(b *testing.B) {
				h := newHarness(b, mode)
				for i := 0; i < b.N; i++ {
					stop := startBenchRelay(b, h, &nullSink{}, benchConfig(h, mode, workers))
					start := time.Now()
					produced := produce(b, h, events, rowsPerTx, producers)
					insertRate := float64(events) / produced.Seconds()
					waitProcessed(b, h, events*(i+1))
					elapsed := time.Since(start)
					stop()
					b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
					b.ReportMetric(insertRate, "producer_events/s")
				}
			})
		}
	}
}

// BenchmarkRelayLatency: p50 and p99 from commit to sink at a fixed offered
// rate of single-row transactions.
func BenchmarkRelayLatency(b *testing.B) {
	const rate, seconds = 200, 5
	for _, mode := range []WakeMode{WakePoll, WakeNotify, WakeStream} {
		b.Run("mode="+string(mode), func(b *testing.B) {
			h := newHarness(b, mode)
			for i := 0; i < b.N; i++ {
				sink := &nullSink{arrived: map[int64]time.Time{}}
				stop := startBenchRelay(b, h, sink, benchConfig(h, mode, 1))
				committed := map[int64]time.Time{}
				ticker := time.NewTicker(time.Second / rate)
				for n := 0; n < rate*seconds; n++ {
					<-ticker.C
					var id int64
					err := pgx.BeginFunc(context.Background(), h.pool, func(tx pgx.Tx) error {
						var err error
						id, err = insert(context.Background(), tx, event{1, "Order", int64(n % 50), "OrderConfirmed", `{}`})
						return err
					})
					if err != nil {
						b.Fatal(err)
					}
					committed[id] = time.Now()
				}
				ticker.Stop()
				deadline := time.Now().Add(30 * time.Second)
				var latencies []float64
				for {
					sink.mu.Lock()
					arrivedAll := len(sink.arrived) >= len(committed)
					if arrivedAll || time.Now().After(deadline) {
						for id, at := range committed {
							if got, ok := sink.arrived[id]; ok {
								latencies = append(latencies, float64(got.Sub(at).Microseconds())/1000)
							}
						}
						sink.mu.Unlock()
						break
					}
					sink.mu.Unlock()
					waitTick()
				}
				stop()
				if len(latencies) < len(committed) {
					b.Fatalf("%d of %d rows arrived", len(latencies), len(committed))
				}
				sort.Float64s(latencies)
				b.ReportMetric(percentile(latencies, 0.50), "p50_ms")
				b.ReportMetric(percentile(latencies, 0.99), "p99_ms")
				b.ReportMetric(rate, "offered_events/s")
			}
		})
	}
}

// BenchmarkClaim: one claim of 500 due rows behind 10k and 1M processed
// rows, in a state a busy outbox is often in: column statistics were taken
// while a backlog was pending, then it drained and was vacuumed (autovacuum's
// vacuum runs more often than its analyze). The
// seed's claim query, with the seed's indexes only, then walks the primary
// key through every processed row; graphsync's claim rides its pending-only
// claim index and stays flat.
func BenchmarkClaim(b *testing.B) {
	for _, processed := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("processed=%d", processed), func(b *testing.B) {
			h := newHarness(b, WakePoll)
			ctx := context.Background()
			exec := func(sql string, args ...any) {
				if _, err := h.pool.Exec(ctx, sql, args...); err != nil {
					b.Fatalf("%s: %v", sql, err)
				}
			}
			exec(`ALTER TABLE outbox_messages SET (autovacuum_enabled = false)`)
			exec(`INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
				SELECT 1, 'Order', g % 5000, 'OrderConfirmed', '{}' FROM generate_series(1, $1) g`, processed)
			exec(`ANALYZE outbox_messages`)
			exec(`UPDATE outbox_messages SET processed_at = now()`)
			exec(`VACUUM outbox_messages`)
			exec(`INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
				SELECT 2, 'Order', g, 'OrderConfirmed', '{}' FROM generate_series(1, 500) g`)
			s := &store{pool: h.pool, relayID: "bench", cfg: Config{BatchSize: 500, Lease: 15 * time.Second, MaxAttempts: 1 << 14}.withDefaults()}
			const rounds = 20
			// The median of the rounds: the first round pays for cold caches,
			// and the machine is noisy.
			measure := func(claim func() (int, error)) float64 {
				var took []float64
				for r := 0; r < rounds; r++ {
					start := time.Now()
					n, err := claim()
					took = append(took, float64(time.Since(start).Microseconds())/1000)
					if err != nil {
						b.Fatal(err)
					}
					if n != 500 {
						b.Fatalf("claimed %d rows, want 500", n)
					}
					exec(`UPDATE outbox_messages SET locked_by = NULL, locked_until = NULL, attempts = 0 WHERE processed_at IS NULL`)
				}
				b.Logf("rounds (ms): %.1f", took)
				sort.Float64s(took)
				return percentile(took, 0.5)
			}
			seedClaim := func() (int, error) {
				rows, err := h.pool.Query(ctx, `WITH claimed AS (
					SELECT id FROM outbox_messages WHERE processed_at IS NULL AND available_at <= now()
					ORDER BY id LIMIT 500 FOR UPDATE SKIP LOCKED)
					SELECT m.* FROM outbox_messages m JOIN claimed c ON c.id = m.id`)
				if err != nil {
					return 0, err
				}
				defer rows.Close()
				n := 0
				for rows.Next() {
					n++
				}
				return n, rows.Err()
			}
			for i := 0; i < b.N; i++ {
				ours := measure(func() (int, error) {
					c, err := s.OutboxClaim(ctx, s.cfg.BatchSize)
					return len(c.messages), err
				})
				seedWithOurIndexes := measure(seedClaim)
				exec(`DROP INDEX outbox_messages_claim_idx`)
				exec(`DROP INDEX outbox_messages_aggregate_pending_idx`)
				seedAlone := measure(seedClaim)
				b.ReportMetric(ours, "graphsync_claim_ms")
				b.ReportMetric(seedWithOurIndexes, "seed_query_our_indexes_ms")
				b.ReportMetric(seedAlone, "seed_query_seed_indexes_ms")
			}
		})
	}
}

func produce(b *testing.B, h *harness, events, rowsPerTx, producers int) time.Duration {
	start := time.Now()
	var wg sync.WaitGroup
	perProducer := events / producers
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done := 0; done < perProducer; done += rowsPerTx {
				_, err := h.pool.Exec(context.Background(), `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
					SELECT $1, 'Order', g % 1000, 'OrderConfirmed', '{}' FROM generate_series(1, $2) g`, p+1, rowsPerTx)
				if err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

func waitProcessed(b *testing.B, h *harness, want int) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var n int
		if err := h.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_messages WHERE processed_at IS NOT NULL`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		if n >= want {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d rows processed after 5 minutes", n, want)
		}
		waitTick()
	}
}

func waitTick() { <-time.After(10 * time.Millisecond) }

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}
