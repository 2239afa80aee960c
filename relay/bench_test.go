package relay

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"graphsync/outbox"
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

func (s *nullSink) Deliver(_ context.Context, batch []outbox.Message) (map[int64]error, error) {
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

func startBenchRelay(b *testing.B, h *harness, sink outbox.Sink, cfg Config) func() {
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
var drainRounds = flag.Int("drain-rounds", 3, "BenchmarkRelayDrain: runs per system (the median is reported)")

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
					exec(`DELETE FROM outbox_batches`) // the claim's one write
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

// BenchmarkRelayDrain: the relay alone, draining a backlog. 200k pending
// rows of about 150 bytes over 20k aggregates, a null sink, batch 500,
// synchronous_commit on, in poll mode; with 1 and 2 workers, and beside it,
// in the same run, the bare loop every outbox relay is built around (claim
// 500 with FOR UPDATE SKIP LOCKED, mark them processed, one statement) with
// 1 and 2 connections: the floor of PostgreSQL's cost for the same drain;
// and with 1 connection claiming 2,000, the size the relay's backlog claims
// grow to (4 × the batch size), so that the ratio does not measure the
// batch size. And graphsync with 1 worker over the same rows in 20 aggregates 10k deep.
// Each figure is the median of -drain-rounds runs, alternating systems;
// each run gets a fresh database.
func BenchmarkRelayDrain(b *testing.B) {
	const rows, aggregates = 200_000, 20_000
	ctx := context.Background()
	// fill writes the rows over tenants × aggregates ids (aggregates a
	// multiple of tenants: that many aggregates in all).
	fill := func(h *harness, tenants, aggregates int) {
		if _, err := h.pool.Exec(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
			SELECT 1 + g % $3, 'Order', g % $2, 'OrderConfirmed',
			       jsonb_build_object('order_id', g % $2, 'status', 'confirmed', 'note', repeat('x', 80))
			FROM generate_series(1, $1) g`, rows, aggregates, tenants); err != nil {
			b.Fatal(err)
		}
		if _, err := h.pool.Exec(ctx, `VACUUM ANALYZE outbox_messages`); err != nil {
			b.Fatal(err)
		}
	}
	// deep is the same drain over 20 aggregates 10k events deep (hot
	// products after an outage): every batch holds all of them, so nothing
	// can be claimed ahead of a batch in delivery.
	graphsync := func(workers int, deep bool) float64 {
		h := newHarness(b, WakePoll)
		if deep {
			fill(h, 1, rows/10_000)
		} else {
			fill(h, 100, aggregates)
		}
		start := time.Now()
		stop := startBenchRelay(b, h, &nullSink{}, Config{Wake: WakePoll, Workers: workers, BatchSize: 500})
		waitDrained(b, h)
		took := time.Since(start)
		stop()
		return rows / took.Seconds()
	}
	bare := func(conns, limit int) float64 {
		h := newHarness(b, WakePoll)
		fill(h, 100, aggregates)
		start := time.Now()
		var wg sync.WaitGroup
		for c := 0; c < conns; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					tag, err := h.pool.Exec(ctx, `WITH c AS (
						SELECT id FROM outbox_messages WHERE processed_at IS NULL AND available_at <= now()
						ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
						UPDATE outbox_messages m SET processed_at = now() FROM c WHERE m.id = c.id`, limit)
					if err != nil {
						b.Error(err)
						return
					}
					if tag.RowsAffected() == 0 {
						return
					}
				}
			}()
		}
		wg.Wait()
		took := time.Since(start)
		waitDrained(b, h)
		return rows / took.Seconds()
	}
	median := func(xs []float64) float64 {
		sort.Float64s(xs)
		return xs[len(xs)/2]
	}
	for i := 0; i < b.N; i++ {
		var gs1, gs2, bare1, bare2, bareBacklog, deep1 []float64
		for r := 0; r < *drainRounds; r++ {
			gs1 = append(gs1, graphsync(1, false))
			deep1 = append(deep1, graphsync(1, true))
			bare1 = append(bare1, bare(1, 500))
			// The relay's backlog claims grow to 4 × the batch size
			// (Config.BacklogBatchSize): the bare loop at that size too.
			bareBacklog = append(bareBacklog, bare(1, 2000))
			gs2 = append(gs2, graphsync(2, false))
			bare2 = append(bare2, bare(2, 500))
		}
		b.Logf("events/s per round: graphsync 1 worker %.0f, 2 workers %.0f, 1 worker 10k-deep aggregates %.0f; bare loop 1 conn %.0f, 2 conns %.0f, 1 conn claiming 2000 %.0f",
			gs1, gs2, deep1, bare1, bare2, bareBacklog)
		b.ReportMetric(median(deep1), "graphsync_1w_deep_events/s")
		g1, g2, s1, s2 := median(gs1), median(gs2), median(bare1), median(bare2)
		b.ReportMetric(g1, "graphsync_1w_events/s")
		b.ReportMetric(g2, "graphsync_2w_events/s")
		b.ReportMetric(s1, "bare_1c_events/s")
		b.ReportMetric(s2, "bare_2c_events/s")
		b.ReportMetric(g1/s1, "graphsync/bare_1")
		b.ReportMetric(g2/s2, "graphsync/bare_2")
		b.ReportMetric(median(bareBacklog), "bare_1c_2000_events/s")
		b.ReportMetric(g1/median(bareBacklog), "graphsync/bare_1_2000")
	}
}

// BenchmarkClaimDepth: the median claim of 500 rows at a 10k backlog of
// shallow aggregates, against 1M pending rows in 100 aggregates 10k events
// deep, in one run. The claim's cost must not grow with the backlog nor with
// how many events an aggregate has pending (docs/adr/0012): the ratio is the
// figure to watch.
func BenchmarkClaimDepth(b *testing.B) {
	median := func(h *harness, pending, aggregates int) float64 {
		// Interleaved, as producers write: the first 500 ids hold a few
		// events of each deep aggregate, each behind its predecessor.
		h.exec(`INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload)
			SELECT 1, 'Product', g % $2, 'ProductRepriced', '{"price_cents": 100}' FROM generate_series(0, $1 - 1) g`, pending, aggregates)
		h.exec(`VACUUM ANALYZE outbox_messages`)
		s := &store{pool: h.pool, relayID: "bench", cfg: Config{BatchSize: 500, Lease: 15 * time.Second, MaxAttempts: 1 << 14}.withDefaults()}
		took := claimRounds(b, h, s, s.cfg.BatchSize)
		b.Logf("pending %d in %d aggregates, rounds (ms): %.1f", pending, aggregates, took)
		return percentile(took, 0.5)
	}
	for i := 0; i < b.N; i++ {
		shallow := median(newHarness(b, WakePoll), 10_000, 10_000)
		deep := median(newHarness(b, WakePoll), 1_000_000, 100)
		b.ReportMetric(shallow, "claim_ms_10k_backlog")
		b.ReportMetric(deep, "claim_ms_1M_pending_10k_deep")
		b.ReportMetric(deep/shallow, "deep/shallow")
	}
}

// claimRounds times 20 claims of limit rows by s, each of which must take
// limit rows; after each the rows and aggregates are released uncounted, so
// that every round claims the same backlog. The times come back sorted, in
// milliseconds.
func claimRounds(b *testing.B, h *harness, s *store, limit int) []float64 {
	var took []float64
	for r := 0; r < 20; r++ {
		start := time.Now()
		c, err := s.OutboxClaim(context.Background(), limit)
		took = append(took, float64(time.Since(start).Microseconds())/1000)
		if err != nil {
			b.Fatal(err)
		}
		if len(c.messages) != limit {
			b.Fatalf("claimed %d rows, want %d", len(c.messages), limit)
		}
		h.exec(`DELETE FROM outbox_batches WHERE holder = $1`, c.holder) // the claim's one write
	}
	s.stats.wait()
	sort.Float64s(took)
	return took
}

// BenchmarkClaimAfterOutage: statistics taken while a sync kept up (1M
// processed rows, none pending), then a backlog of 100k rows in 35k
// aggregates, as an outage leaves it; autovacuum is off, so that only the
// relay can bring the statistics up to date. The median of 20 claims of
// 2,000 rows by a relay that keeps the planner's statistics current
// (docs/adr/0015) and by one that does not, each on its own database.
func BenchmarkClaimAfterOutage(b *testing.B) {
	median := func(keep bool) float64 {
		h := newHarness(b, WakePoll)
		produce := func(rows int, processed bool) {
			h.exec(`INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload, processed_at)
				SELECT 1, 'Order', g % 35000, 'OrderConfirmed', '{"status": "confirmed"}', CASE WHEN $2 THEN now() END
				FROM generate_series(1, $1) g`, rows, processed)
		}
		h.exec(`ALTER TABLE outbox_messages SET (autovacuum_enabled = false)`)
		produce(1_000_000, true)
		h.exec(`VACUUM ANALYZE outbox_messages`)
		produce(100_000, false)
		cfg := Config{BatchSize: 500, Lease: 15 * time.Second, MaxAttempts: 1 << 14}.withDefaults()
		s := &store{pool: h.pool, relayID: "bench", cfg: cfg}
		if keep {
			s.stats = newStatistics(h.pool, zap.NewNop(), cfg)
		}
		took := claimRounds(b, h, s, cfg.BacklogBatchSize)
		b.Logf("statistics kept current %v, claims (ms, sorted): %.1f", keep, took)
		return percentile(took, 0.5)
	}
	for i := 0; i < b.N; i++ {
		stale := median(false)
		kept := median(true)
		b.ReportMetric(stale, "claim_ms_stale_statistics")
		b.ReportMetric(kept, "claim_ms_statistics_kept")
		b.ReportMetric(stale/kept, "stale/kept")
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

// waitDrained waits until no row is pending: one probe of the pending-only
// claim index, cheap enough not to disturb the drain it watches.
func waitDrained(b *testing.B, h *harness) {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var pending bool
		if err := h.pool.QueryRow(context.Background(),
			`SELECT EXISTS (SELECT 1 FROM outbox_messages WHERE processed_at IS NULL)`).Scan(&pending); err != nil {
			b.Fatal(err)
		}
		if !pending {
			return
		}
		if time.Now().After(deadline) {
			b.Fatal("rows still pending after 10 minutes")
		}
		<-time.After(20 * time.Millisecond)
	}
}

func waitTick() { <-time.After(10 * time.Millisecond) }

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}
