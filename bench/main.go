// Command bench measures graphsync end to end: the real binary
// (bin/graphsync sync, a subprocess) against the real PostgreSQL and Neo4j of
// `make services-up`.
//
//  1. throughput: sustained events/s from commit to graph per wake mode, while
//     the workload writes about 50k events as fast as it can;
//  2. latency: p50/p99 commit-to-graph latency per wake mode at a fixed
//     offered rate of single-event transactions;
//  3. backlog: peak RSS of sync --until-caught-up over a backlog of 100k and
//     of 1M events (memory must stay flat);
//  4. ceiling: a plain UNWIND ... MERGE of the same graph as scenario 1, with
//     no decoding and no guards, in batches of the same size.
//
// It prints a table, writes bench/results/<UTC timestamp>.json and ends with
// the line "e2e/ceiling ratio: X.XX" (stream mode's sustained events/s over
// the ceiling's). Run it with `make bench`, or:
//
//	. .local/services.env && go run ./bench [-quick] [-scale 0.5] [-modes stream]
//
// A resident graph of other tenants (-resident-nodes, 100k nodes) stays in
// Neo4j for the whole run, as a production graph does (see resident.go).
//
// Every scenario gets its own PostgreSQL database (created from
// GRAPHSYNC_PG_URL, migrated by `graphsync migrate`, dropped at the end) and
// removes its tenants from Neo4j afterwards; tenant ids start at a random
// base per database, so nothing collides with tests sharing the services.
// Every wait is bounded by a deadline and the whole run by -timeout.
//
// bench must only talk to loopback services (it refuses any other host), and
// must not change anything but the databases and tenants it creates.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// benchConfig is what a run measures and how.
type benchConfig struct {
	quick bool
	// scale multiplies every event count (throughput and backlogs).
	scale        float64
	modes        []string
	backlogModes []string
	// backlogUntilCaughtUp runs the backlog's sync with --until-caught-up;
	// without it bench watches the outbox and stops sync itself.
	backlogUntilCaughtUp bool
	scenarios            map[string]bool
	throughputEvents     int64
	backlogEvents        []int64
	latencyRate          int
	// embedders are sync's --embedder values the latency scenario runs
	// with, each mode once per value, in the same run.
	embedders []string
	// latencyTextEvery: every this many probes also changes the product's
	// description (a text change the stage embeds); 0 never.
	latencyTextEvery int
	latencyDuration  time.Duration
	latencyWarmUp    time.Duration
	// residentNodes is the size of the graph of other tenants that stays in
	// Neo4j for the whole run (see resident.go).
	residentNodes int64
	batchSize     int
	// backlogBatchSize is sync's --backlog-batch-size, and the events per
	// transaction of the backlog ceiling: a backlog drain is compared with
	// plain MERGE at the batch size sync itself grew to.
	backlogBatchSize int
	workers          int
	writers          int
	ordersPerTx      int
	timeout          time.Duration
	binary           string
	outDir           string
	// latencyProbes, when set, is a CSV file that gets every measured
	// probe of the latency scenario (see writeProbes), each row marked
	// with probesRun, the run's start.
	latencyProbes string
	probesRun     string
}

var (
	allModes     = []string{"poll", "notify", "stream"}
	allScenarios = []string{"throughput", "ceiling", "latency", "backlog"}
)

func parseConfig(args []string) (benchConfig, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "a fast run: -scale 0.2 (20k/200k backlogs, 10k throughput events), 10s of latency probes, a 20k-node resident graph, -timeout 20m, unless those are given")
	scale := fs.Float64("scale", 1, "multiplies every event count (throughput and backlog sizes)")
	events := fs.Int64("events", 50_000, "throughput scenario: events at scale 1")
	backlogs := fs.String("backlogs", "100000,1000000", "backlog sizes at scale 1, comma-separated")
	modes := fs.String("modes", strings.Join(allModes, ","), "wake modes of the throughput and latency scenarios")
	backlogModes := fs.String("backlog-modes", strings.Join(allModes, ","), "wake modes of the backlog scenario")
	backlogUntilCaughtUp := fs.Bool("backlog-until-caught-up", true, "backlog scenario: sync exits by itself (--until-caught-up); false: bench waits until the outbox is drained and stops sync "+
		"(--until-caught-up counts every pending row each 200ms, which slows a 1M backlog down)")
	scenarios := fs.String("scenarios", strings.Join(allScenarios, ","), "scenarios to run (the ceiling replays the throughput run's events)")
	rate := fs.Int("rate", 500, "latency scenario: offered events per second")
	embedders := fs.String("embedders", "none", "latency scenario: sync's --embedder values to run each mode with (none,onnx: embeddings off and on in the same run)")
	textEvery := fs.Int("latency-text-every", 0, "latency scenario: every this many probes also change the product's description (a text change the embedding stage embeds), each product's in turn; 0: price changes only")
	resident := fs.Int64("resident-nodes", 100_000, "nodes of other tenants kept in Neo4j for the whole run, as a production graph holds them (0: every scenario writes into a nearly empty graph)")
	latencyDuration := fs.Duration("latency-duration", 20*time.Second, "latency scenario: how long the rate is offered and measured")
	latencyWarmUp := fs.Duration("latency-warm-up", 0, "latency scenario: how long the rate is offered before the measured part (0: the first probe counts; sync plans its statements as it starts)")
	batchSize := fs.Int("batch-size", 500, "sync --batch-size, and the ceiling's events per transaction")
	backlogBatchSize := fs.Int("backlog-batch-size", 0, "sync --backlog-batch-size, and the backlog ceiling's events per transaction (default 4 × -batch-size, sync's own default)")
	workers := fs.Int("workers", 1, "sync --workers")
	writers := fs.Int("writers", 4, "throughput scenario: concurrent workload writers")
	ordersPerTx := fs.Int("orders-per-tx", 1, "throughput scenario: business changes (each with its event) per transaction")
	timeout := fs.Duration("timeout", 60*time.Minute, "bound of the whole run (clean-up runs past it, on its own deadlines)")
	binary := fs.String("binary", "", "a graphsync binary to measure as it is (relative paths from the repository root); default: bin/graphsync, built from the working tree first")
	outDir := fs.String("out", "bench/results", "where the JSON results go (relative paths from the repository root)")
	latencyProbes := fs.String("latency-probes", "", "latency scenario: a CSV file (relative paths from the repository root) to write every measured probe to, with its commit and mark times, to line the slow ones up with the services' logs")
	if err := fs.Parse(args); err != nil {
		return benchConfig{}, err
	}
	if fs.NArg() > 0 {
		return benchConfig{}, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if *quick {
		if !given["scale"] {
			*scale = 0.2
		}
		if !given["latency-duration"] {
			*latencyDuration = 10 * time.Second
		}
		if !given["timeout"] {
			*timeout = 20 * time.Minute
		}
		if !given["resident-nodes"] {
			*resident = 20_000
		}
	}
	cfg := benchConfig{
		quick: *quick, scale: *scale, latencyRate: *rate, latencyTextEvery: *textEvery, latencyDuration: *latencyDuration, latencyWarmUp: *latencyWarmUp,
		batchSize: *batchSize, backlogBatchSize: *backlogBatchSize, workers: *workers, writers: *writers, ordersPerTx: *ordersPerTx,
		timeout: *timeout, binary: *binary, outDir: *outDir, latencyProbes: *latencyProbes, scenarios: map[string]bool{},
		backlogUntilCaughtUp: *backlogUntilCaughtUp, residentNodes: max(*resident, 0),
	}
	var err error
	if cfg.modes, err = parseList(*modes, allModes, "-modes"); err != nil {
		return cfg, err
	}
	if cfg.backlogModes, err = parseList(*backlogModes, allModes, "-backlog-modes"); err != nil {
		return cfg, err
	}
	if cfg.embedders, err = parseList(*embedders, []string{"none", "onnx"}, "-embedders"); err != nil {
		return cfg, err
	}
	if cfg.latencyTextEvery < 0 {
		return cfg, errors.New("-latency-text-every must be >= 0")
	}
	names, err := parseList(*scenarios, allScenarios, "-scenarios")
	if err != nil {
		return cfg, err
	}
	for _, name := range names {
		cfg.scenarios[name] = true
	}
	if cfg.scenarios["ceiling"] && !cfg.scenarios["throughput"] {
		return cfg, errors.New("-scenarios: the ceiling replays the throughput scenario's events; add throughput")
	}
	if cfg.scale <= 0 {
		return cfg, fmt.Errorf("-scale must be > 0, got %g", cfg.scale)
	}
	cfg.throughputEvents = scaled(*events, cfg.scale)
	for _, field := range strings.Split(*backlogs, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(field), 10, 64)
		if err != nil || n <= 0 {
			return cfg, fmt.Errorf("-backlogs: %q is not a positive event count", field)
		}
		cfg.backlogEvents = append(cfg.backlogEvents, scaled(n, cfg.scale))
	}
	if cfg.backlogBatchSize == 0 {
		cfg.backlogBatchSize = 4 * cfg.batchSize
	}
	if cfg.backlogBatchSize < cfg.batchSize {
		return cfg, fmt.Errorf("-backlog-batch-size %d is smaller than -batch-size %d", cfg.backlogBatchSize, cfg.batchSize)
	}
	for _, p := range []struct {
		name  string
		value int
	}{{"-rate", cfg.latencyRate}, {"-batch-size", cfg.batchSize}, {"-workers", cfg.workers}, {"-writers", cfg.writers}, {"-orders-per-tx", cfg.ordersPerTx}} {
		if p.value < 1 {
			return cfg, fmt.Errorf("%s must be >= 1, got %d", p.name, p.value)
		}
	}
	if cfg.latencyWarmUp < 0 {
		return cfg, errors.New("-latency-warm-up must be >= 0")
	}
	if cfg.latencyDuration < time.Second || cfg.timeout <= 0 || cfg.throughputEvents < 1000 {
		return cfg, errors.New("-latency-duration must be >= 1s, -timeout > 0 and the throughput scenario at least 1000 events")
	}
	return cfg, nil
}

func scaled(n int64, scale float64) int64 { return max(1, int64(float64(n)*scale)) }

func parseList(value string, allowed []string, flagName string) ([]string, error) {
	var list []string
	for _, field := range strings.Split(value, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		if !slices.Contains(allowed, field) {
			return nil, fmt.Errorf("%s: %q is not one of %s", flagName, field, strings.Join(allowed, ", "))
		}
		if !slices.Contains(list, field) {
			list = append(list, field)
		}
	}
	return list, nil
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg, err := parseConfig(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	logConfig := zap.NewDevelopmentConfig()
	logConfig.Level = zap.NewAtomicLevelAt(zapcore.InfoLevel)
	logConfig.DisableStacktrace = true
	logConfig.DisableCaller = true
	log, err := logConfig.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: logger:", err)
		return 1
	}
	defer log.Sync() //nolint:errcheck

	ctx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	res, err := measure(ctx, cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	if res.failed() {
		return 1
	}
	return 0
}

// measure runs the scenarios, prints the table and writes the JSON. A failed
// scenario is recorded and the others still run.
func measure(ctx context.Context, cfg benchConfig, log *zap.Logger) (*results, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	if cfg.binary == "" {
		// A binary left by an earlier build would measure the code it was
		// built from, not the tree the report names: build it every time
		// (go build does nothing when nothing changed).
		cfg.binary = filepath.Join(root, "bin", "graphsync")
		if err := buildBinary(ctx, root, cfg.binary); err != nil {
			return nil, err
		}
	} else if !filepath.IsAbs(cfg.binary) {
		cfg.binary = filepath.Join(root, cfg.binary)
	}
	if _, err := os.Stat(cfg.binary); err != nil {
		return nil, fmt.Errorf("the graphsync binary: %w", err)
	}
	if !filepath.IsAbs(cfg.outDir) {
		cfg.outDir = filepath.Join(root, cfg.outDir)
	}
	if cfg.latencyProbes != "" {
		if !filepath.IsAbs(cfg.latencyProbes) {
			cfg.latencyProbes = filepath.Join(root, cfg.latencyProbes)
		}
		// A path that cannot be written fails now, not after the
		// scenarios before the latency one have run.
		if err := startProbes(cfg.latencyProbes); err != nil {
			return nil, err
		}
		cfg.probesRun = time.Now().UTC().Format(time.RFC3339)
	}
	logDir, err := os.MkdirTemp("", "graphsync-bench-")
	if err != nil {
		return nil, fmt.Errorf("log directory: %w", err)
	}
	st, err := stackFromEnv(ctx, cfg.binary, logDir, log)
	if err != nil {
		return nil, err
	}
	defer st.close(context.WithoutCancel(ctx))

	res := &results{StartedAt: time.Now().UTC(), Command: commandLine(), SyncLogs: logDir}
	res.Settings = collectSettings(ctx, st, cfg, root)
	log.Info("graphsync bench starting", zap.Float64("scale", cfg.scale), zap.Strings("modes", cfg.modes),
		zap.Int64("throughput_events", cfg.throughputEvents), zap.Int64s("backlogs", cfg.backlogEvents),
		zap.String("binary", cfg.binary), zap.String("sync_logs", logDir), zap.Duration("timeout", cfg.timeout))

	resident, err := st.loadResident(ctx, cfg.residentNodes, log)
	defer func() {
		if err := st.cleanGraph(context.WithoutCancel(ctx), resident); err != nil {
			log.Error("could not remove the resident graph", zap.Error(err))
		}
	}()
	if err != nil {
		return nil, err
	}

	if cfg.scenarios["throughput"] {
		// The ceiling replays the stream run's events (any run's would do:
		// the workload is deterministic).
		source := cfg.modes[len(cfg.modes)-1]
		if slices.Contains(cfg.modes, "stream") {
			source = "stream"
		}
		var replay throughputRun
		for _, mode := range cfg.modes {
			run, err := runThroughput(ctx, st, cfg, mode, cfg.scenarios["ceiling"] && mode == source, log)
			if err != nil {
				run.result.Error = err.Error()
				log.Error("throughput scenario failed", zap.String("mode", mode), zap.Error(err))
			} else if mode == source {
				replay = run
			}
			res.Throughput = append(res.Throughput, run.result)
		}
		if cfg.scenarios["ceiling"] {
			// Two yardsticks: transactions of sync's --batch-size for the
			// throughput runs, and of its --backlog-batch-size for the
			// backlog drains, whose batches grow to that size.
			ceiling, err := runCeiling(ctx, st, cfg.batchSize, replay, log)
			if err != nil {
				ceiling.Error = err.Error()
				log.Error("ceiling scenario failed", zap.Int("batch_size", cfg.batchSize), zap.Error(err))
			}
			res.Ceiling = &ceiling
			if cfg.scenarios["backlog"] && cfg.backlogBatchSize != cfg.batchSize {
				backlogCeiling, err := runCeiling(ctx, st, cfg.backlogBatchSize, replay, log)
				if err != nil {
					backlogCeiling.Error = err.Error()
					log.Error("ceiling scenario failed", zap.Int("batch_size", cfg.backlogBatchSize), zap.Error(err))
				}
				res.BacklogCeiling = &backlogCeiling
			} else {
				res.BacklogCeiling = res.Ceiling
			}
		}
	}
	if cfg.scenarios["latency"] {
		for _, mode := range cfg.modes {
			for _, embedder := range cfg.embedders {
				result, err := runLatency(ctx, st, cfg, mode, embedder, log)
				if err != nil {
					result.Error = err.Error()
					log.Error("latency scenario failed", zap.String("mode", mode), zap.String("embedder", embedder), zap.Error(err))
				}
				res.Latency = append(res.Latency, result)
			}
		}
	}
	if cfg.scenarios["backlog"] {
		// Every mode's smaller backlog first: a scenario run just after the
		// removal of a 1M-event graph (some 370k nodes) drained 30 to 50 %
		// slower while Neo4j replanned and reused the freed records.
		for _, events := range cfg.backlogEvents {
			for _, mode := range cfg.backlogModes {
				result, err := runBacklog(ctx, st, cfg, mode, events, log)
				if err != nil {
					result.Error = err.Error()
					log.Error("backlog scenario failed", zap.String("mode", mode), zap.Int64("events", events), zap.Error(err))
				}
				res.Backlog = append(res.Backlog, result)
			}
		}
	}
	res.finish()
	res.Settings.LoadAvgEnd = loadAverage()
	path, writeErr := res.write(cfg.outDir)
	res.print(os.Stdout, path, writeErr)
	return res, nil
}

func commandLine() string {
	return "go run ./bench " + strings.Join(os.Args[1:], " ")
}

// loadAverage is /proc/loadavg's first three fields: other work on the
// machine skews every figure.
func loadAverage() string {
	body, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	fields := strings.Fields(string(body))
	return strings.Join(fields[:min(3, len(fields))], " ")
}

func gomaxprocs() int { return runtime.GOMAXPROCS(0) }
