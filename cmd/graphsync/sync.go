package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sourcegraph/conc/pool"
	"go.uber.org/zap"

	"graphsync/embed"
	"graphsync/embed/stage"
	"graphsync/events"
	"graphsync/projector"
	"graphsync/redact"
	"graphsync/relay"
	gsql "graphsync/sql"
)

// syncFlags configure the sync service.
type syncFlags struct {
	conn           connFlags
	relay          relay.Config
	wake           string
	httpAddr       string
	retentionEvery time.Duration
	retention      relay.RetentionConfig
	untilCaughtUp  bool
	driftEvery     time.Duration
	driftSample    float64
	notifyTrigger  bool
	projector      projector.Config
	embedder       embed.Config
}

func (f *syncFlags) register(fs *flag.FlagSet) {
	d, rd := relay.DefaultConfig(), relay.DefaultRetentionConfig()
	f.conn.register(fs, true)
	f.embedder.RegisterFlags(fs)
	fs.StringVar(&f.wake, "wake", string(d.Wake), "wake mode: poll, notify or stream (env GRAPHSYNC_WAKE)")
	fs.StringVar(&f.httpAddr, "http-addr", ":8080", "address of /metrics, /healthz and /readyz; empty disables (env GRAPHSYNC_HTTP_ADDR)")
	fs.StringVar(&f.relay.ID, "relay-id", "", "this process's name in the batches it claims, outbox_batches.holder (default host-pid-random)")
	fs.IntVar(&f.relay.Workers, "workers", d.Workers, "concurrent claim-deliver loops in this process")
	fs.IntVar(&f.relay.BatchSize, "batch-size", d.BatchSize, "most rows per claim and per Neo4j transaction")
	fs.IntVar(&f.relay.BacklogBatchSize, "backlog-batch-size", 0, "most rows per claim and per Neo4j transaction while a backlog exists: full claims double the batch up to this (default 4 × --batch-size; equal to --batch-size keeps batches fixed)")
	fs.Int64Var(&f.relay.MaxBatchBytes, "max-batch-bytes", d.MaxBatchBytes, "most payload bytes per claim and per Neo4j transaction (a claim takes at least one event)")
	fs.DurationVar(&f.relay.PollInterval, "poll-interval", d.PollInterval, "poll period (poll mode) and safety net (notify mode)")
	fs.DurationVar(&f.relay.FallbackPollInterval, "fallback-poll-interval", d.FallbackPollInterval, "stream mode's poll for rows the stream missed")
	fs.DurationVar(&f.relay.Lease, "lease", d.Lease, "how long a claim holds rows before another relay may take them over")
	fs.DurationVar(&f.relay.RetryStep, "retry-step", d.RetryStep, "a failed event waits LEAST(attempts, retry-max-steps) * retry-step")
	fs.IntVar(&f.relay.RetryMaxSteps, "retry-max-steps", d.RetryMaxSteps, "cap of the retry multiplier")
	fs.IntVar(&f.relay.MaxAttempts, "max-attempts", d.MaxAttempts, "deliveries before an event moves to the DLQ")
	fs.DurationVar(&f.relay.DrainTimeout, "drain-timeout", d.DrainTimeout, "on SIGTERM, how long to let the batch in flight finish")
	fs.DurationVar(&f.relay.SinkBackoff, "sink-backoff", d.SinkBackoff, "first wait after Neo4j could not take a batch; doubles each time")
	fs.DurationVar(&f.relay.SinkBackoffMax, "sink-backoff-max", d.SinkBackoffMax, "longest wait between tries while Neo4j is unavailable")
	fs.DurationVar(&f.relay.StreamStallTimeout, "stream-stall-timeout", d.StreamStallTimeout, "stream mode: let go of a replication connection whose transactions cannot be delivered for this long")
	fs.StringVar(&f.relay.NotifyChannel, "notify-channel", d.NotifyChannel, "notify mode's LISTEN channel (and the channel the trigger is installed with)")
	fs.DurationVar(&f.relay.DependencyWait, "dependency-wait", d.DependencyWait, "how long an event waiting for another aggregate's events (an order whose product is not projected yet) is handed back, uncounted, the first time")
	fs.DurationVar(&f.relay.DependencyWaitMax, "dependency-wait-max", 0, "the longest such wait: it doubles while the event keeps waiting (0: 1m, or --dependency-wait if longer)")
	fs.StringVar(&f.relay.Slot, "slot", d.Slot, "stream mode's replication slot")
	fs.StringVar(&f.relay.Publication, "publication", d.Publication, "stream mode's publication")
	fs.DurationVar(&f.retentionEvery, "retention-every", time.Hour, "run the archive and partition job this often; 0 disables")
	fs.DurationVar(&f.retention.ArchiveAfter, "archive-after", rd.ArchiveAfter, "retention: move processed rows older than this to the archive (as graphsync retention)")
	fs.DurationVar(&f.retention.KeepArchive, "keep-archive", rd.KeepArchive, "retention: drop archive partitions wholly older than this (as graphsync retention); replay needs the history it keeps")
	fs.DurationVar(&f.driftEvery, "drift-check-every", 0, "run a sampled drift check this often and export graphsync_drift gauges; 0 disables")
	fs.Float64Var(&f.driftSample, "drift-sample", 0.1, "share of keys the periodic drift check compares, in (0, 1]")
	fs.BoolVar(&f.untilCaughtUp, "until-caught-up", false, "exit 0 once every event that can flow has been applied (for demos and batch runs); an event that has waited for another aggregate's for longer than --dependency-wait-max cannot")
	fs.BoolVar(&f.notifyTrigger, "notify-trigger", true, "notify mode: install the outbox NOTIFY trigger at start")
	fs.IntVar(&f.projector.Limits.MaxPayloadBytes, "max-payload-bytes", events.DefaultMaxPayloadBytes, "an event whose payload is larger is rejected (and ends in the DLQ) naming the limit")
	fs.IntVar(&f.projector.Limits.MaxOrderLines, "max-order-lines", events.DefaultMaxOrderLines, "an OrderPlaced with more lines is rejected (and ends in the DLQ) naming the limit")
	fs.DurationVar(&f.projector.TxTimeout, "neo4j-tx-timeout", projector.DefaultTxTimeout, "server-side timeout of each Neo4j write transaction; a batch that times out is retried in halves, uncounted, down to the event, whose attempt then counts")
}

// validate checks the flags before anything is connected, so a mistake
// is named as the flag it is (exit 2), and sets the wake mode.
func (f *syncFlags) validate() error {
	wake, err := relay.ParseWakeMode(f.wake)
	if err != nil {
		return usageError{err.Error()}
	}
	f.relay.Wake = wake
	// relay.Config, RetentionConfig and projector.Config read a zero as
	// "the default"; given on the command line or in the environment, a
	// zero is a mistake, and running with the default instead would hide it.
	if err := refuseZeros(
		zeroSetting{"workers", f.relay.Workers == 0}, zeroSetting{"batch-size", f.relay.BatchSize == 0},
		zeroSetting{"max-batch-bytes", f.relay.MaxBatchBytes == 0}, zeroSetting{"poll-interval", f.relay.PollInterval == 0},
		zeroSetting{"fallback-poll-interval", f.relay.FallbackPollInterval == 0}, zeroSetting{"lease", f.relay.Lease == 0},
		zeroSetting{"retry-step", f.relay.RetryStep == 0}, zeroSetting{"retry-max-steps", f.relay.RetryMaxSteps == 0},
		zeroSetting{"max-attempts", f.relay.MaxAttempts == 0}, zeroSetting{"drain-timeout", f.relay.DrainTimeout == 0},
		zeroSetting{"sink-backoff", f.relay.SinkBackoff == 0}, zeroSetting{"sink-backoff-max", f.relay.SinkBackoffMax == 0},
		zeroSetting{"stream-stall-timeout", f.relay.StreamStallTimeout == 0}, zeroSetting{"dependency-wait", f.relay.DependencyWait == 0},
		zeroSetting{"archive-after", f.retention.ArchiveAfter == 0}, zeroSetting{"keep-archive", f.retention.KeepArchive == 0},
		zeroSetting{"max-payload-bytes", f.projector.Limits.MaxPayloadBytes == 0}, zeroSetting{"max-order-lines", f.projector.Limits.MaxOrderLines == 0},
		zeroSetting{"neo4j-tx-timeout", f.projector.TxTimeout == 0},
	); err != nil {
		return err
	}
	if err := refuseNegatives(
		signSetting{"workers", f.relay.Workers, f.relay.Workers < 0}, signSetting{"batch-size", f.relay.BatchSize, f.relay.BatchSize < 0},
		signSetting{"backlog-batch-size", f.relay.BacklogBatchSize, f.relay.BacklogBatchSize < 0},
		signSetting{"max-batch-bytes", f.relay.MaxBatchBytes, f.relay.MaxBatchBytes < 0},
		signSetting{"poll-interval", f.relay.PollInterval, f.relay.PollInterval < 0},
		signSetting{"fallback-poll-interval", f.relay.FallbackPollInterval, f.relay.FallbackPollInterval < 0},
		signSetting{"lease", f.relay.Lease, f.relay.Lease < 0}, signSetting{"retry-step", f.relay.RetryStep, f.relay.RetryStep < 0},
		signSetting{"retry-max-steps", f.relay.RetryMaxSteps, f.relay.RetryMaxSteps < 0},
		signSetting{"max-attempts", f.relay.MaxAttempts, f.relay.MaxAttempts < 0},
		signSetting{"drain-timeout", f.relay.DrainTimeout, f.relay.DrainTimeout < 0},
		signSetting{"sink-backoff", f.relay.SinkBackoff, f.relay.SinkBackoff < 0},
		signSetting{"sink-backoff-max", f.relay.SinkBackoffMax, f.relay.SinkBackoffMax < 0},
		signSetting{"stream-stall-timeout", f.relay.StreamStallTimeout, f.relay.StreamStallTimeout < 0},
		signSetting{"dependency-wait", f.relay.DependencyWait, f.relay.DependencyWait < 0},
		signSetting{"dependency-wait-max", f.relay.DependencyWaitMax, f.relay.DependencyWaitMax < 0},
		signSetting{"archive-after", f.retention.ArchiveAfter, f.retention.ArchiveAfter < 0},
		signSetting{"keep-archive", f.retention.KeepArchive, f.retention.KeepArchive < 0},
		signSetting{"max-payload-bytes", f.projector.Limits.MaxPayloadBytes, f.projector.Limits.MaxPayloadBytes < 0},
		signSetting{"max-order-lines", f.projector.Limits.MaxOrderLines, f.projector.Limits.MaxOrderLines < 0},
	); err != nil {
		return err
	}
	if f.httpAddr != "" {
		if _, _, err := net.SplitHostPort(f.httpAddr); err != nil {
			return usageError{fmt.Sprintf("--http-addr %q: want host:port or :port (empty disables)", f.httpAddr)}
		}
	}
	// What the libraries check beyond the sign (one setting against
	// another, names), on one line.
	if err := f.retention.Validate(); err != nil {
		return usageError{joinedLine(err)}
	}
	if err := f.relay.Validate(); err != nil {
		return usageError{joinedLine(err)}
	}
	if f.retentionEvery < 0 || f.driftEvery < 0 {
		return usageError{fmt.Sprintf("--retention-every and --drift-check-every must not be negative (0 disables), got %s and %s", f.retentionEvery, f.driftEvery)}
	}
	if !(f.driftSample > 0 && f.driftSample <= 1) { // NaN too
		return usageError{fmt.Sprintf("--drift-sample must be in (0, 1], got %g", f.driftSample)}
	}
	if err := f.projector.Limits.Validate(); err != nil {
		return usageError{"--max-payload-bytes, --max-order-lines: " + err.Error()}
	}
	if f.projector.TxTimeout < 0 {
		return usageError{fmt.Sprintf("--neo4j-tx-timeout must not be negative, got %s", f.projector.TxTimeout)}
	}
	return nil
}

func runSync(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sync", flag.ContinueOnError)
	var f syncFlags
	f.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := f.validate(); err != nil {
		return err
	}
	log, err := f.conn.logger()
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck

	// First signal: soft stop (finish the batch in flight). Second: exit now;
	// nothing unapplied was marked, so the leases simply run out.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)
	go func() {
		sig := <-signals
		log.Info("stopping: finishing the batch in flight", zap.String("signal", sig.String()), zap.Duration("drain_timeout", f.relay.DrainTimeout))
		stop()
		sig = <-signals
		log.Warn("second signal: stopping at once", zap.String("signal", sig.String()))
		os.Exit(1)
	}()
	err = serveSync(ctx, f, log)
	if errors.Is(err, errStoppedBeforeRelaying) {
		log.Info("stopped before it started relaying: nothing was claimed or applied")
		return nil
	}
	return err
}

// errStoppedBeforeRelaying is serveSync's answer to a stop that came while
// it was still connecting and preparing: a stop, not a failure.
var errStoppedBeforeRelaying = errors.New("stopped before it started relaying")

// serveSync runs the service until ctx is done.
func serveSync(ctx context.Context, f syncFlags, log *zap.Logger) (err error) {
	relaying := false
	defer func() {
		// A stop while connecting comes back as the connection's error
		// ("context canceled"); what was interrupted then holds nothing.
		if err != nil && !relaying && ctx.Err() != nil {
			err = errStoppedBeforeRelaying
		}
	}()
	// The HTTP address first: a busy or bad one stops the service before
	// it connects to anything or changes anything (a trigger, a slot).
	var listener net.Listener
	if f.httpAddr != "" {
		if listener, err = net.Listen("tcp", f.httpAddr); err != nil {
			return fmt.Errorf("listen on %s for /metrics: %w", f.httpAddr, err)
		}
		defer listener.Close() // Serve closes it too; a second Close does nothing
	}
	// The model before any connection: missing files stop the service at
	// once (exit 2), naming the file and make model.
	f.embedder.Threads = embed.SyncThreads(f.embedder.Threads, runtime.GOMAXPROCS(0))
	f.embedder.Background = true
	// The line is the message: zap samples entries by message, and a
	// crash's trace of many lines under one message would lose most.
	modelLog := log.Named("model")
	f.embedder.OnProcessLog = func(line string) { modelLog.Warn(redact.ErrorText(line)) }
	embedder, modelLoad, err := openEmbedder(f.embedder)
	if err != nil {
		return err
	}
	if embedder != nil {
		defer embedder.Close()
		f.projector.EmbeddingModel = embedder.Model()
		log.Info("embedding model loaded", zap.String("model", embedder.Model()), zap.Int("dimension", embedder.Dimension()), zap.Duration("took", modelLoad))
		if err := embed.BackgroundError(embedder); err != nil {
			log.Warn("the model runs at the usual CPU priority, not the lowest", zap.Error(err))
		}
	}
	pgPool, err := f.conn.openPostgres(ctx, int32(f.relay.Workers*2+8))
	if err != nil {
		return err
	}
	defer pgPool.Close()
	if err := requireRelayRole(ctx, pgPool, "sync would claim nothing and relay nothing, with every gauge at zero"); err != nil {
		return err
	}
	driver, err := f.conn.openNeo4j(ctx, false)
	var unreachable errNeo4jUnreachable
	if errors.As(err, &unreachable) {
		log.Warn("starting without Neo4j; batches wait until it answers", zap.String("error", redact.Text(err.Error())))
	} else if err != nil {
		return err
	}
	defer driver.Close(context.WithoutCancel(ctx))

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	neo4jErr := err
	sink, err := projector.New(driver, f.projector, log.Named("projector"))
	if err != nil {
		return err
	}
	defer sink.Close() // before the driver closes
	registry.MustRegister(sink.Collectors()...)
	metrics := relay.NewMetrics()
	registry.MustRegister(metrics.Collectors(pgPool)...)
	var embedding *stage.Stage
	if embedder != nil {
		if embedding, err = stage.New(driver, stage.NewCache(pgPool), embedder, stage.Config{}, log.Named("embedding")); err != nil {
			return err
		}
		embedding.SetModelLoad(modelLoad)
		registry.MustRegister(embedding.Collectors()...)
	}
	rel, err := relay.New(pgPool, sink, f.relay, log.Named("relay"), metrics)
	if err != nil {
		return usageError{err.Error()}
	}
	if neo4jErr == nil {
		stopWarmUp := warmUp(ctx, sink.WarmUp, warmUpWait, log)
		defer stopWarmUp() // before the sink and the driver close
	}
	if f.relay.Wake == relay.WakeNotify && f.notifyTrigger {
		if err := relay.NotifyTriggerEnable(ctx, pgPool, rel.Config().NotifyChannel); err != nil {
			return err
		}
	}
	cfg := rel.Config()
	log.Info("graphsync sync starting", zap.String("wake", string(cfg.Wake)), zap.String("relay_id", cfg.ID),
		zap.Int("batch_size", cfg.BatchSize), zap.Int("backlog_batch_size", cfg.BacklogBatchSize), zap.Int("workers", cfg.Workers),
		zap.String("postgres", redact.URL(f.conn.pgURL)), zap.String("neo4j", redact.URL(f.conn.neo4jURI)))

	// A batch run says at its end how much the DLQ grew meanwhile: read
	// before the relay can dead-letter anything (-1: could not say).
	dlqBefore := int64(-1)
	if f.untilCaughtUp {
		if stats, err := relay.ReadStats(ctx, pgPool); err == nil {
			dlqBefore = stats.DLQDepth
		}
	}
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	tasks := pool.New().WithErrors().WithContext(context.WithoutCancel(ctx))
	relaying = true
	tasks.Go(func(context.Context) error {
		defer cancelRun() // the relay ending ends the service
		return rel.Run(runCtx)
	})
	if listener != nil {
		log.Info("serving /metrics, /healthz and /readyz", zap.String("addr", listener.Addr().String()))
		server := &http.Server{Handler: httpHandler(registry, readiness{pool: pgPool, driver: driver, cfg: cfg, relay: rel}), ReadHeaderTimeout: 5 * time.Second}
		tasks.Go(func(context.Context) error {
			if err := server.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
				cancelRun() // a service without /metrics and /readyz must not run on silently
				return fmt.Errorf("http server: %w", err)
			}
			return nil
		})
		tasks.Go(func(context.Context) error {
			<-runCtx.Done()
			shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			return server.Shutdown(shutdownCtx)
		})
	}
	if embedding != nil {
		// Off the write path: the relay and the projector never wait for
		// it, and its failures are retried with backoff inside Run.
		tasks.Go(func(context.Context) error { return embedding.Run(runCtx) })
	}
	if f.driftEvery > 0 {
		watch := newDriftWatch()
		registry.MustRegister(watch.collectors()...)
		tasks.Go(func(context.Context) error {
			watch.run(runCtx, pgPool, driver, f.driftEvery, f.driftSample, log.Named("drift"))
			return nil
		})
	}
	if f.retentionEvery > 0 {
		tasks.Go(func(context.Context) error {
			retainEvery(runCtx, pgPool, f.retentionEvery, f.retention, log.Named("retention"))
			return nil
		})
	}
	if f.untilCaughtUp {
		tasks.Go(func(context.Context) error {
			waitCaughtUp(runCtx, pgPool, rel.Config().DependencyWaitMax, dlqBefore, log)
			cancelRun()
			return nil
		})
	}
	err = tasks.Wait()
	stages := prometheus.NewRegistry()
	stages.MustRegister(metrics.StageCollectors()...)
	stages.MustRegister(sink.Collectors()...)
	log.Info("graphsync sync stopped", stageFields(stages)...)
	return err
}

// waitCaughtUp returns once no pending event can flow (every one left is
// failing or behind a failing one, or its aggregate has waited for another
// aggregate's events for longer than waited) or ctx is done.
func waitCaughtUp(ctx context.Context, pgPool *pgxpool.Pool, waited time.Duration, dlqBefore int64, log *zap.Logger) {
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		flowing, err := relay.PendingFlowing(ctx, pgPool, waited)
		if err != nil {
			log.Warn("could not check progress", zap.String("error", redact.Text(err.Error())))
			continue
		}
		if !flowing {
			logCaughtUp(ctx, pgPool, dlqBefore, log)
			return
		}
	}
}

// logCaughtUp says that sync caught up, and what it left: aggregates held
// by a failing event, aggregates waiting for another aggregate's events,
// the DLQ's depth and how much it grew since dlqBefore (when not -1). A
// batch run that left events behind or dead-lettered some says so as a
// warning; the exit code stays 0 (the flag's contract): the operator reads
// the log, `graphsync dlq list` and /metrics.
func logCaughtUp(ctx context.Context, pgPool *pgxpool.Pool, dlqBefore int64, log *zap.Logger) {
	stats, err := relay.ReadStats(ctx, pgPool)
	if err != nil {
		log.Info("caught up: every event that can flow was applied")
		log.Warn("could not count the events left", zap.String("error", redact.Text(err.Error())))
		return
	}
	fields := []zap.Field{zap.Int64("failing_aggregates", stats.BlockedAggregates),
		zap.Int64("waiting_aggregates", stats.WaitingAggregates), zap.Int64("dlq_depth", stats.DLQDepth)}
	var deadLettered int64
	if dlqBefore >= 0 {
		// The growth: a dlq retry or discard meanwhile takes from it.
		deadLettered = max(stats.DLQDepth-dlqBefore, 0)
		fields = append(fields, zap.Int64("dead_lettered", deadLettered))
	}
	if stats.BlockedAggregates+stats.WaitingAggregates > 0 {
		log.Warn("caught up, with events left that cannot flow: failing, behind a failing event, or waiting for another aggregate's events", fields...)
		return
	}
	if deadLettered > 0 {
		log.Warn("caught up, with events moved to the DLQ during the run", fields...)
		return
	}
	log.Info("caught up: every event that can flow was applied", fields...)
}

func retainEvery(ctx context.Context, pgPool *pgxpool.Pool, every time.Duration, cfg relay.RetentionConfig, log *zap.Logger) {
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		report, err := relay.Retain(ctx, pgPool, cfg)
		if err != nil && ctx.Err() == nil {
			log.Warn("retention run failed", zap.String("error", redact.Text(err.Error())))
		} else if report.Archived > 0 || len(report.PartitionsCreated) > 0 || len(report.PartitionsDropped) > 0 || report.LeasesRemoved > 0 {
			log.Info("retention run", zap.Int64("archived", report.Archived),
				zap.Strings("partitions_created", report.PartitionsCreated), zap.Strings("partitions_dropped", report.PartitionsDropped),
				zap.Int64("aggregate_leases_removed", report.LeasesRemoved))
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func httpHandler(registry *prometheus.Registry, ready readiness) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		problems := ready.check(r.Context())
		if len(problems) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			for _, p := range problems {
				fmt.Fprintln(w, p)
			}
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// readiness checks what /readyz reports: PostgreSQL and Neo4j reachable,
// migrations current, and in stream mode a usable slot.
type readiness struct {
	pool   *pgxpool.Pool
	driver neo4j.DriverWithContext
	cfg    relay.Config
	relay  *relay.Relay
}

func (r readiness) check(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var problems []string
	// Raw driver errors can carry hosts, users and more: /readyz says what
	// is wrong in its own words; the logs have the details.
	if err := r.pool.Ping(ctx); err != nil {
		problems = append(problems, "postgresql: not reachable")
	} else if pending, err := gsql.Pending(ctx, r.pool); errors.Is(err, gsql.ErrSchemaNewer) {
		problems = append(problems, "migrations: the database schema is newer than this binary: run the release that migrated it")
	} else if errors.Is(err, gsql.ErrMigrationEdited) {
		problems = append(problems, "migrations: an applied migration's text differs from this binary's: run the release that applied it")
	} else if err != nil {
		problems = append(problems, "migrations: cannot read the applied migrations")
	} else if len(pending) > 0 {
		problems = append(problems, fmt.Sprintf("migrations: %d pending: run graphsync migrate", len(pending)))
	} else if r.cfg.Wake == relay.WakeStream {
		var walStatus string
		err := r.pool.QueryRow(ctx, gsql.Query("ReplicationSlotWALStatus"), r.cfg.Slot).Scan(&walStatus)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("replication slot %s: cannot be read", r.cfg.Slot))
		case walStatus == "lost":
			problems = append(problems, fmt.Sprintf("replication slot %s lost its WAL: drop it (graphsync stream drop) and restart", r.cfg.Slot))
		}
	}
	if err := r.driver.VerifyConnectivity(ctx); err != nil {
		problems = append(problems, "neo4j: not reachable")
	}
	if r.relay != nil {
		problems = append(problems, r.relay.Health()...)
	}
	return problems
}

// warmUpWait is how long sync waits for Neo4j to plan the projector's
// statements before it starts relaying: planning takes about a second on
// a quiet machine. On a busy one (16 s and more were seen with three test
// suites beside two busy loops) the service starts all the same, and the
// planning goes on beside the first batches, which would otherwise wait
// for it and delay /readyz by up to warmUpTimeout.
const warmUpWait = 5 * time.Second

// warmUpTimeout bounds the planning itself.
const warmUpTimeout = 30 * time.Second

// warmUp has Neo4j plan the projector's statements before the first batch
// (plan is projector.WarmUp) and waits for it at most wait. It is worth a
// second at most: a failure is logged and the service starts all the same,
// its first batches paying instead. The returned func stops a planning
// still under way and waits for it to end.
func warmUp(ctx context.Context, plan func(context.Context) error, wait time.Duration, log *zap.Logger) (stop func()) {
	ctx, cancel := context.WithTimeout(ctx, warmUpTimeout)
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		if err := plan(ctx); err != nil {
			if !errors.Is(ctx.Err(), context.Canceled) { // not stopped
				log.Warn("Neo4j did not plan the statements ahead; the first batches will", zap.String("error", redact.ErrorText(err.Error())))
			}
			return
		}
		log.Info("Neo4j planned the projector's statements", zap.Duration("took", time.Since(start)))
	}()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-done:
	case <-ctx.Done():
	case <-timer.C:
		log.Info("Neo4j is still planning the projector's statements; relaying beside it", zap.Duration("waited", wait))
	}
	return func() {
		cancel()
		<-done
	}
}
