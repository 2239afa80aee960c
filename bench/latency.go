package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"graphsync/events"
	"graphsync/workload"
)

const (
	// latencyProducers commit the probes concurrently, so that one slow
	// commit does not hold back the offered rate. Each owns its own
	// products, so optimistic locking never conflicts.
	latencyProducers   = 4
	latencyTracePrefix = "bench-latency-"
	// latencyMeasure says what the latency figures are.
	latencyMeasure = "COMMIT sent by bench (bench clock) -> outbox processed_at (PostgreSQL clock, same machine); " +
		"the commit cannot be visible before it is sent, and processed_at is set by the transaction that begins after the Neo4j commit, " +
		"so the figure is an upper bound of commit-to-graph, by at most the commit call (producer_commit_p50_ms)"
)

// latencySetup is the warm-up of the latency scenario: it also creates the
// products the probes re-price.
var latencySetup = workload.Config{Seed: 5, Tenants: 3, ProductsPerTenant: 20, CustomersPerTenant: 10, Orders: 60, Writers: 2}

// latencyResult is scenario 2 for one wake mode.
type latencyResult struct {
	// Mode is the wake mode, with "+onnx" when sync ran with embeddings
	// (Embedder).
	Mode              string      `json:"mode"`
	Embedder          string      `json:"embedder"`
	TextChangeEvery   int         `json:"text_change_every,omitempty"`
	OfferedPerSec     int         `json:"offered_events_per_sec"`
	AchievedPerSec    float64     `json:"achieved_events_per_sec"`
	DurationSeconds   float64     `json:"duration_seconds"`
	Events            int         `json:"events"`
	P50Ms             float64     `json:"p50_ms"`
	P99Ms             float64     `json:"p99_ms"`
	MaxMs             float64     `json:"max_ms"`
	MeanMs            float64     `json:"mean_ms"`
	ProducerTxP50Ms   float64     `json:"producer_tx_p50_ms"`
	CommitP50Ms       float64     `json:"producer_commit_p50_ms"`
	Measure           string      `json:"measure"`
	ProbeEvent        string      `json:"probe_event"`
	NegativeLatencies int         `json:"negative_latencies,omitempty"`
	SyncTrouble       logTrouble  `json:"sync_log_trouble"`
	SyncMetrics       syncMetrics `json:"sync_metrics"`
	Error             string      `json:"error,omitempty"`
	// Neo4jFloor is the same run's floor under the latency: one-property
	// write transactions committed beside the probes.
	Neo4jFloor *neo4jFloor `json:"neo4j_write_floor,omitempty"`
}

// probeProduct is a product a producer re-prices; only its owner touches it.
type probeProduct struct {
	tenantID int64
	state    events.ProductState
}

// runLatency offers single-event transactions at a fixed rate while sync
// runs and measures each one's commit-to-graph latency.
func runLatency(ctx context.Context, st *stack, cfg benchConfig, mode, embedder string, log *zap.Logger) (result latencyResult, err error) {
	label := mode
	if embedder != "none" {
		label = mode + "+" + embedder
	}
	result = latencyResult{Mode: label, Embedder: embedder, TextChangeEvery: cfg.latencyTextEvery, OfferedPerSec: cfg.latencyRate, Measure: latencyMeasure,
		ProbeEvent: events.TypeProductPriceChanged + " (UPDATE products ... version+1 and events.Enqueue, one per transaction, as graphsync_app)"}
	if cfg.latencyTextEvery > 0 {
		result.ProbeEvent += fmt.Sprintf("; every %dth a %s that also changes the description, of each product in turn", cfg.latencyTextEvery, events.TypeProductUpdated)
	}
	log = log.With(zap.String("scenario", "latency"), zap.String("mode", mode), zap.String("embedder", embedder))
	sc, err := st.newScenario(ctx, "lat_"+mode+"_"+embedder, log)
	if err != nil {
		return result, err
	}
	defer func() {
		// A failed clean-up leaves a database or tenants behind: always
		// reported, beside the scenario's own error if it has one.
		if cleanErr := sc.finish(ctx); cleanErr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cleanErr))
		}
	}()
	if err := sc.startSync(ctx, syncSettings{mode: mode, batchSize: cfg.batchSize, backlogBatchSize: cfg.backlogBatchSize, workers: cfg.workers, embedder: embedder}); err != nil {
		return result, err
	}
	if _, err := sc.warmUp(ctx, latencySetup); err != nil {
		return result, err
	}
	// The baseline leaves the workload's set-up out; probes offered during
	// -latency-warm-up are counted in the sync figures (not in the latencies).
	baseline, err := sc.sync.scrape(ctx)
	if err != nil {
		log.Warn("no sync metrics", zap.Error(err))
	}
	products, err := loadProducts(ctx, sc)
	if err != nil {
		return result, err
	}
	// The rate is offered without a break from the warm-up into the
	// measured part; only the measured part's probes count.
	warm := int(float64(cfg.latencyRate) * cfg.latencyWarmUp.Seconds())
	total := warm + int(float64(cfg.latencyRate)*cfg.latencyDuration.Seconds())
	log.Info("offering", zap.Int("rate", cfg.latencyRate), zap.Duration("warm_up", cfg.latencyWarmUp),
		zap.Duration("for", cfg.latencyDuration), zap.Int("products", len(products)))
	// The floor is measured beside the probes, under the same load.
	floorCtx, stopFloor := context.WithCancel(ctx)
	defer stopFloor()
	floorDone := make(chan floorOutcome, 1)
	go func() {
		floor, err := measureNeo4jFloor(floorCtx, sc.st.driver, cfg.latencyDuration)
		floorDone <- floorOutcome{floor, err}
	}()
	committed, txTook, commitTook, err := offer(ctx, sc, products, cfg.latencyRate, total, cfg.latencyTextEvery, cfg.latencyWarmUp+cfg.latencyDuration)
	if err != nil {
		stopFloor()
		<-floorDone
		return result, err
	}
	if err := sc.waitApplied(ctx, 2*time.Minute); err != nil {
		return result, err
	}
	if final, err := sc.sync.scrape(ctx); err != nil {
		log.Warn("no sync metrics", zap.Error(err))
	} else {
		result.SyncMetrics = final.since(baseline)
	}
	result.SyncTrouble = sc.sync.trouble()
	applied, err := probeAppliedAt(ctx, sc)
	if err != nil {
		return result, err
	}
	var latencies []float64
	var probes []probe
	committed, txTook, commitTook = committed[warm:], txTook[warm:], commitTook[warm:]
	for i, at := range committed {
		n := warm + i
		processed, ok := applied[n]
		if !ok {
			return result, fmt.Errorf("probe %d was committed but is not marked processed", n)
		}
		ms := float64(processed.Sub(at).Microseconds()) / 1000
		if ms < 0 {
			result.NegativeLatencies++
		}
		latencies = append(latencies, ms)
		probes = append(probes, probe{number: n, commitSent: at, processedAt: processed, latencyMs: ms})
	}
	if cfg.latencyProbes != "" {
		// The figures stand without the file: a failed write is reported,
		// not the scenario's error.
		if err := writeProbes(cfg.latencyProbes, cfg.probesRun, mode, probes); err != nil {
			log.Warn("could not write the latency probes", zap.Error(err))
		}
	}
	slices.Sort(latencies)
	slices.Sort(txTook)
	slices.Sort(commitTook)
	first, last := committed[0], committed[0]
	for _, at := range committed {
		if at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	result.Events = len(committed)
	result.DurationSeconds = last.Sub(first).Seconds()
	result.AchievedPerSec = float64(len(committed)-1) / result.DurationSeconds
	result.P50Ms = percentile(latencies, 0.50)
	result.P99Ms = percentile(latencies, 0.99)
	result.MaxMs = latencies[len(latencies)-1]
	result.MeanMs = mean(latencies)
	result.ProducerTxP50Ms = percentile(txTook, 0.50)
	result.CommitP50Ms = percentile(commitTook, 0.50)
	if outcome := <-floorDone; outcome.err != nil {
		log.Warn("no neo4j write floor", zap.Error(outcome.err))
	} else {
		result.Neo4jFloor = &outcome.floor
	}
	log.Info("measured", zap.Float64("p50_ms", result.P50Ms), zap.Float64("p99_ms", result.P99Ms),
		zap.Float64("achieved_per_sec", result.AchievedPerSec))
	return result, nil
}

func loadProducts(ctx context.Context, sc *scenario) ([]*probeProduct, error) {
	rows, err := sc.db.pool.Query(ctx, query("products_active"))
	if err != nil {
		return nil, fmt.Errorf("read products: %w", err)
	}
	products, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*probeProduct, error) {
		var p probeProduct
		var categoryID *int64
		var categoryName *string
		err := row.Scan(&p.tenantID, &p.state.ID, &p.state.Version, &p.state.SKU, &p.state.Name, &p.state.Description,
			&categoryID, &categoryName, &p.state.PriceCents, &p.state.Currency, &p.state.Status)
		if categoryID != nil && categoryName != nil {
			p.state.Category = &events.CategoryRef{ID: *categoryID, Name: *categoryName}
		}
		return &p, err
	})
	if err != nil {
		return nil, fmt.Errorf("read products: %w", err)
	}
	if len(products) < latencyProducers {
		return nil, fmt.Errorf("only %d active products to re-price", len(products))
	}
	return products, nil
}

// offer commits total probes at rate per second, open loop: probe n is due
// at n/rate whether or not earlier ones have committed. It returns when
// each probe's COMMIT was sent, and how long each transaction and each
// commit call took, in ms.
func offer(ctx context.Context, sc *scenario, products []*probeProduct, rate, total, textEvery int, duration time.Duration) (committed []time.Time, txTook, commitTook []float64, err error) {
	committed = make([]time.Time, total)
	txTook = make([]float64, total)
	commitTook = make([]float64, total)
	queues := make([]chan int, latencyProducers)
	for i := range queues {
		queues[i] = make(chan int, total)
	}
	ctx, cancel := context.WithTimeout(ctx, duration+2*time.Minute)
	defer cancel()
	group, groupCtx := errgroup.WithContext(ctx)
	for w := range queues {
		group.Go(func() error {
			for n := range queues[w] {
				at, changeText := probeTarget(n, len(products), textEvery)
				timing, err := reprice(groupCtx, sc, products[at], n, changeText)
				if err != nil {
					return err
				}
				committed[n] = timing.commitSent
				txTook[n] = float64(timing.tx.Microseconds()) / 1000
				commitTook[n] = float64(timing.commit.Microseconds()) / 1000
			}
			return nil
		})
	}
	ticker := time.NewTicker(time.Second / time.Duration(rate))
	defer ticker.Stop()
	var offerErr error
dispatch:
	for n := 0; n < total; n++ {
		select {
		case <-groupCtx.Done():
			offerErr = fmt.Errorf("offering probes: %w", context.Cause(groupCtx))
			break dispatch
		case <-ticker.C:
		}
		// A product always goes to the same producer, which alone changes it.
		at, _ := probeTarget(n, len(products), textEvery)
		queues[at%latencyProducers] <- n
	}
	for _, q := range queues {
		close(q)
	}
	if err := group.Wait(); err != nil {
		return nil, nil, nil, err
	}
	if offerErr != nil {
		return nil, nil, nil, offerErr
	}
	return committed, txTook, commitTook, nil
}

// probeTarget is the product (its index among products) probe n
// changes, and whether it also changes its description: one probe in
// every textEvery does, on each product in turn. Every textEvery-th probe
// on product n%products would change the texts of the same few products
// only (textEvery 20 over 60 products: 3), each several times a second,
// which no catalogue does: most vectors were of a text already replaced,
// and the stage locked the same few nodes the probes wrote (ADR 0032).
func probeTarget(n, products, textEvery int) (at int, changeText bool) {
	if textEvery > 0 && n%textEvery == 0 {
		return (n / textEvery) % products, true
	}
	return n % products, false
}

// probeTiming is when a probe's COMMIT was sent and how long its
// transaction and its commit call took.
type probeTiming struct {
	commitSent time.Time
	tx, commit time.Duration
}

// reprice changes a product's price and enqueues its ProductPriceChanged in
// one transaction, as an application does, tagged with the probe's number.
// With changeText it also rewrites the description and enqueues a
// ProductUpdated: a text change the embedding stage embeds.
func reprice(ctx context.Context, sc *scenario, product *probeProduct, n int, changeText bool) (probeTiming, error) {
	var timing probeTiming
	oldPrice := product.state.PriceCents
	newPrice := oldPrice + 100
	if oldPrice >= 10_000 {
		newPrice = oldPrice - 100
	}
	started := time.Now()
	tx, err := sc.db.pool.Begin(ctx)
	if err != nil {
		return timing, fmt.Errorf("probe %d: begin: %w", n, err)
	}
	// A no-op once committed.
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	state, err := repriceIn(ctx, tx, product, newPrice, oldPrice, n, changeText)
	if err != nil {
		return timing, fmt.Errorf("probe %d: %w", n, err)
	}
	// Latency counts from here: the commit cannot be visible to sync
	// before COMMIT is sent, however late this goroutine is scheduled after
	// it returns.
	timing.commitSent = time.Now()
	if err := tx.Commit(ctx); err != nil {
		return timing, fmt.Errorf("probe %d: commit: %w", n, err)
	}
	timing.commit = time.Since(timing.commitSent)
	timing.tx = time.Since(started)
	product.state = state
	return timing, nil
}

func repriceIn(ctx context.Context, tx pgx.Tx, product *probeProduct, newPrice, oldPrice int64, n int, changeText bool) (events.ProductState, error) {
	var state events.ProductState
	if _, err := tx.Exec(ctx, query("tx_scope"), "graphsync_app", strconv.FormatInt(product.tenantID, 10)); err != nil {
		return state, fmt.Errorf("scope transaction: %w", err)
	}
	var categoryID *int64
	var categoryName *string
	var description *string
	if changeText {
		text := fmt.Sprintf("Revised for probe %d: a sturdy product for the kitchen, the garden or the desk, in colour %d.", n, n%17)
		description = &text
	}
	err := tx.QueryRow(ctx, query("product_set_price"), product.state.ID, product.state.Version, newPrice, description).Scan(
		&state.ID, &state.Version, &state.SKU, &state.Name, &state.Description, &categoryID, &categoryName,
		&state.PriceCents, &state.Currency, &state.Status)
	if errors.Is(err, pgx.ErrNoRows) {
		return state, fmt.Errorf("product %d is no longer at version %d", product.state.ID, product.state.Version)
	}
	if err != nil {
		return state, fmt.Errorf("re-price product %d: %w", product.state.ID, err)
	}
	if categoryID != nil && categoryName != nil {
		state.Category = &events.CategoryRef{ID: *categoryID, Name: *categoryName}
	}
	var ev events.Event = events.ProductPriceChanged{ProductState: state, OldPriceCents: &oldPrice}
	if changeText {
		ev = events.ProductUpdated{ProductState: state}
	}
	err = events.Enqueue(ctx, tx, product.tenantID, ev, events.WithTraceID(latencyTracePrefix+strconv.Itoa(n)))
	return state, err
}

// probeAppliedAt maps probe number to its processed_at.
func probeAppliedAt(ctx context.Context, sc *scenario) (map[int]time.Time, error) {
	rows, err := sc.db.pool.Query(ctx, query("outbox_latency"), latencyTracePrefix+"%")
	if err != nil {
		return nil, fmt.Errorf("read probe processed_at: %w", err)
	}
	defer rows.Close()
	applied := map[int]time.Time{}
	for rows.Next() {
		var trace string
		var at time.Time
		if err := rows.Scan(&trace, &at); err != nil {
			return nil, fmt.Errorf("read probe processed_at: %w", err)
		}
		n, err := strconv.Atoi(strings.TrimPrefix(trace, latencyTracePrefix))
		if err != nil {
			return nil, fmt.Errorf("probe trace id %q: %w", trace, err)
		}
		applied[n] = at
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read probe processed_at: %w", err)
	}
	return applied, nil
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func mean(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	var sum float64
	for _, v := range values {
		sum += v
	}
	return sum / float64(len(values))
}

// neo4jFloorRate is how many floor transactions a second
// measureNeo4jFloor commits beside the probes: a few percent of Neo4j's
// transactions at the offered rate, so the floor shares the load without
// adding much to it.
const neo4jFloorRate = 25

// neo4jFloor is how long the smallest write transaction takes on this
// machine under the latency scenario's load, from the driver: sync's apply
// is one such transaction (with more statements in it), so commit-to-graph
// cannot be faster, and its tail shows what the machine adds.
type neo4jFloor struct {
	Transactions int     `json:"transactions"`
	PerSec       int     `json:"per_sec"`
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
	Statement    string  `json:"statement"`
}

type floorOutcome struct {
	floor neo4jFloor
	err   error
}

// neo4jFloorStatement sets one property of a node of its own, which
// nothing else reads or writes (so it waits for no lock sync holds), as its
// own write transaction (a session each, as the projector opens one for
// each batch); measureNeo4jFloor deletes the node afterwards, however it
// ends.
const neo4jFloorStatement = "MERGE (f:BenchWriteFloor {run: $run}) SET f.n = $n RETURN count(f) AS n"

// measureNeo4jFloor commits neo4jFloorRate write transactions a second,
// one at a time, for about the given duration (longer if they fall behind
// the rate), and reports their p50 and p99,
// each timed from opening its session to its commit returning.
func measureNeo4jFloor(ctx context.Context, driver neo4j.DriverWithContext, duration time.Duration) (_ neo4jFloor, err error) {
	run := time.Now().UnixNano()
	// The node goes also when the measurement is cut short.
	defer func() {
		cleanCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if _, cleanErr := neo4j.ExecuteQuery(cleanCtx, driver, "MATCH (f:BenchWriteFloor {run: $run}) DELETE f",
			map[string]any{"run": run}, neo4j.EagerResultTransformer); cleanErr != nil {
			err = errors.Join(err, fmt.Errorf("neo4j write floor: clean up: %w", cleanErr))
		}
	}()
	n := int(duration.Seconds() * neo4jFloorRate)
	took := make([]float64, 0, n)
	ticker := time.NewTicker(time.Second / neo4jFloorRate)
	defer ticker.Stop()
	for i := range n {
		select {
		case <-ctx.Done():
			return neo4jFloor{}, ctx.Err()
		case <-ticker.C:
		}
		start := time.Now()
		session := driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite})
		matched, err := session.ExecuteWrite(ctx, func(tx neo4j.ManagedTransaction) (any, error) {
			result, err := tx.Run(ctx, neo4jFloorStatement, map[string]any{"run": run, "n": i})
			if err != nil {
				return nil, err
			}
			record, err := result.Single(ctx)
			if err != nil {
				return nil, err
			}
			count, _, err := neo4j.GetRecordValue[int64](record, "n")
			return count, err
		})
		closeErr := session.Close(ctx)
		took = append(took, float64(time.Since(start).Microseconds())/1000)
		if err = errors.Join(err, closeErr); err != nil {
			return neo4jFloor{}, fmt.Errorf("neo4j write floor: %w", err)
		}
		if matched != int64(1) {
			return neo4jFloor{}, fmt.Errorf("neo4j write floor: wrote %v nodes, want 1", matched)
		}
	}
	slices.Sort(took)
	return neo4jFloor{Transactions: n, PerSec: neo4jFloorRate, P50Ms: percentile(took, 0.50), P99Ms: percentile(took, 0.99), Statement: neo4jFloorStatement}, nil
}

// probe is one measured probe: when its transaction's COMMIT was sent,
// when sync marked its event processed (processed_at), and the latency
// between them.
type probe struct {
	number                  int
	commitSent, processedAt time.Time
	latencyMs               float64
}

// probesHeader names the columns of a -latency-probes file: the run (its
// start), the wake mode, the probe's number in its scenario, the two times
// (UTC, on the clock the services' logs use; they print milliseconds) and
// the latency in ms. Runs append to the same file.
var probesHeader = []string{"run", "mode", "probe", "commit_sent", "processed_at", "latency_ms"}

// startProbes makes sure path can be written, creating its folder, and
// gives a new file its header.
func startProbes(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("latency probes: %w", err)
	}
	return appendProbes(path, func(w *csv.Writer, empty bool) error {
		if !empty {
			return nil
		}
		return w.Write(probesHeader)
	})
}

// writeProbes appends the measured probes of one wake mode to path, so
// that a slow probe can be lined up with what the services logged at that
// instant.
func writeProbes(path, run, mode string, probes []probe) error {
	const stamp = "2006-01-02T15:04:05.000000Z07:00"
	return appendProbes(path, func(w *csv.Writer, _ bool) error {
		for _, p := range probes {
			record := []string{run, mode, strconv.Itoa(p.number), p.commitSent.UTC().Format(stamp),
				p.processedAt.UTC().Format(stamp), strconv.FormatFloat(p.latencyMs, 'f', 3, 64)}
			if err := w.Write(record); err != nil {
				return err
			}
		}
		return nil
	})
}

// appendProbes opens path for appending (creating it) and runs write on a
// CSV writer over it, telling it whether the file was empty.
func appendProbes(path string, write func(w *csv.Writer, empty bool) error) (err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("latency probes: %w", err)
	}
	defer func() {
		if closeErr := f.Close(); closeErr != nil && err == nil {
			err = fmt.Errorf("latency probes: %w", closeErr)
		}
	}()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("latency probes: %w", err)
	}
	w := csv.NewWriter(f)
	if err := write(w, info.Size() == 0); err != nil {
		return fmt.Errorf("latency probes: %w", err)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return fmt.Errorf("latency probes: %w", err)
	}
	return nil
}
