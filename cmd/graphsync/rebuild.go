package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/schollz/progressbar/v3"
	"go.uber.org/zap"
	"golang.org/x/term"

	"graphsync/drift"
	"graphsync/embed"
	"graphsync/embed/stage"
	"graphsync/events"
	"graphsync/projector"
	"graphsync/rebuild"
	"graphsync/redact"
)

// runRebuild is `graphsync rebuild`: the graph, or one tenant, from
// PostgreSQL, while sync keeps running. Exit 0 when the final drift check
// finds none, 1 when drift remains, 2 when the rebuild could not run or was
// stopped (it resumes on the next run).
func runRebuild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("rebuild", flag.ContinueOnError)
	var conn connFlags
	conn.register(fs, true)
	var embedCfg embed.Config
	embedCfg.RegisterFlags(fs)
	tenant := fs.Int64("tenant", 0, "rebuild one tenant only; every other tenant's nodes are left untouched")
	sourceName := fs.String("source", "auto", "auto (replay when the history is complete, else snapshot), replay or snapshot")
	chunk := fs.Int("chunk-size", rebuild.DefaultChunkSize, "rows or events per chunk read, written and checkpointed")
	progressMode := fs.String("progress", "auto", "auto (a bar on a terminal, else a log line every 5s), bar or log")
	recheck := fs.Duration("recheck-after", drift.DefaultRecheckAfter, "wait before the drift check's second look at differences")
	restart := fs.Bool("restart", false, "start anew even when an unfinished rebuild of this scope would be resumed")
	resumeWithin := fs.Duration("resume-within", rebuild.DefaultResumeWithin, "an unfinished rebuild of this scope that started longer ago is started anew, not resumed")
	// The replay applies what sync applied: with sync's limits (set them as
	// sync's, or by the same GRAPHSYNC_MAX_* variables), an event sync took
	// is not refused here.
	var limits events.Limits
	fs.IntVar(&limits.MaxPayloadBytes, "max-payload-bytes", events.DefaultMaxPayloadBytes, "replay: an event whose payload is larger is not applied (use sync's value)")
	fs.IntVar(&limits.MaxOrderLines, "max-order-lines", events.DefaultMaxOrderLines, "replay: an OrderPlaced with more lines is not applied (use sync's value)")
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return exitError{2, err.Error()}
	}
	if err := refuseZeros(zeroSetting{"max-payload-bytes", limits.MaxPayloadBytes == 0}, zeroSetting{"max-order-lines", limits.MaxOrderLines == 0}); err != nil {
		return exitError{2, err.Error()}
	}
	if err := limits.Validate(); err != nil {
		return exitError{2, "--max-payload-bytes, --max-order-lines: " + err.Error()}
	}
	source, err := rebuild.ParseSource(*sourceName)
	if err != nil {
		return exitError{2, err.Error()}
	}
	if *progressMode != "auto" && *progressMode != "bar" && *progressMode != "log" {
		return exitError{2, fmt.Sprintf("unknown --progress %q: want auto, bar or log", *progressMode)}
	}
	// rebuild.Config reads a zero chunk size as its default; on the command
	// line 0 is a mistake. Checked here, before anything is connected.
	if *chunk < 1 || *chunk > rebuild.MaxChunkSize {
		return exitError{2, fmt.Sprintf("--chunk-size must be in 1..%d, got %d", rebuild.MaxChunkSize, *chunk)}
	}
	if *tenant < 0 {
		return exitError{2, fmt.Sprintf("--tenant must be a tenant id (0: every tenant), got %d", *tenant)}
	}
	if *resumeWithin <= 0 {
		return exitError{2, fmt.Sprintf("--resume-within must be a positive duration (use --restart to never resume), got %s", *resumeWithin)}
	}
	recheckAfter, err := recheckWait(*recheck)
	if err != nil {
		return exitError{2, err.Error()}
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(rebuild.GCPercent)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	embedder, _, err := openEmbedder(embedCfg)
	if err != nil {
		return exitError{2, oneLine(err.Error())}
	}
	if embedder != nil {
		defer embedder.Close()
	}
	res, err := rebuildScope(ctx, conn, rebuild.Config{TenantID: *tenant, Source: source, ChunkSize: *chunk, RecheckAfter: recheckAfter,
		Restart: *restart, ResumeWithin: *resumeWithin},
		limits, embedder, *progressMode == "bar" || (*progressMode == "auto" && term.IsTerminal(int(os.Stderr.Fd()))))
	if err != nil {
		if ctx.Err() != nil {
			return exitError{2, "stopped; the checkpoint keeps what was done: run graphsync rebuild again with the same scope to resume"}
		}
		return exitError{2, oneLine(err.Error())}
	}
	if err := writeRebuildSummary(os.Stdout, *tenant, res); err != nil {
		return exitError{2, fmt.Sprintf("write the summary: %v", err)}
	}
	if res.Report.DriftTotal > 0 {
		return exitError{1, fmt.Sprintf("drift %d remains after the rebuild", res.Report.DriftTotal)}
	}
	return nil
}

func rebuildScope(ctx context.Context, conn connFlags, cfg rebuild.Config, limits events.Limits, embedder embed.Embedder, bar bool) (res *rebuild.Result, err error) {
	log, err := conn.logger()
	if err != nil {
		return nil, err
	}
	err = conn.withServers(ctx, 6, func(pool *pgxpool.Pool, driver neo4j.DriverWithContext) error {
		pcfg := projector.Config{Limits: limits}
		if embedder != nil {
			pcfg.EmbeddingModel = embedder.Model()
			scfg := stage.Config{BatchSize: 256}
			if cfg.TenantID != 0 {
				scfg.Tenants = []int64{cfg.TenantID}
			}
			if cfg.Embedding, err = stage.New(driver, stage.NewCache(pool), embedder, scfg, log.Named("embedding")); err != nil {
				return err
			}
		}
		sink, err := projector.New(driver, pcfg, log.Named("projector"))
		if err != nil {
			return err
		}
		defer sink.Close()
		cfg.Sink = sink
		p := newRebuildProgress(bar, log.Named("rebuild"))
		defer p.finish()
		cfg.Progress = p.update
		b, err := rebuild.New(pool, driver, cfg, log.Named("rebuild"))
		if err != nil {
			return err
		}
		if res, err = b.Run(ctx); err != nil {
			return fmt.Errorf("%s", redact.Text(err.Error()))
		}
		return nil
	})
	return res, err
}

// rebuildProgress shows where a rebuild stands: a progress bar
// (schollz/progressbar) on a terminal, else a structured log line every 5s
// with the same fields.
type rebuildProgress struct {
	bar     *progressbar.ProgressBar
	phase   string
	log     *zap.Logger
	useBar  bool
	started time.Time
	first   int64
	lastLog time.Time
}

func newRebuildProgress(useBar bool, log *zap.Logger) *rebuildProgress {
	return &rebuildProgress{useBar: useBar, log: log}
}

func (p *rebuildProgress) update(pr rebuild.Progress) {
	if pr.Phase != p.phase {
		p.finish()
		p.phase, p.started, p.first, p.lastLog = pr.Phase, time.Now(), pr.Done, time.Time{}
		if p.useBar && pr.Phase == "embed" {
			fmt.Fprintln(os.Stderr, "embed: writing vectors (from the embedding cache first)")
			return
		}
		if p.useBar && (pr.Phase == "sweep" || pr.Phase == "check") {
			// One drift pass each: no count to show, only what runs.
			fmt.Fprintf(os.Stderr, "%s: comparing PostgreSQL with the graph (drift check%s)\n", pr.Phase,
				map[bool]string{true: " with repair", false: ""}[pr.Phase == "sweep"])
			return
		}
		if p.useBar {
			unit := "rows"
			if pr.Phase == "replay" {
				unit = "events"
			}
			p.bar = progressbar.NewOptions64(pr.Total,
				progressbar.OptionSetWriter(os.Stderr),
				progressbar.OptionSetDescription(pr.Phase),
				progressbar.OptionShowCount(),
				progressbar.OptionShowIts(),
				progressbar.OptionSetItsString(unit),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionThrottle(200*time.Millisecond),
				progressbar.OptionSetWidth(30),
				progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }))
		}
	}
	if p.bar != nil {
		p.bar.ChangeMax64(max(pr.Total, 1))
		_ = p.bar.Set64(pr.Done)
		return
	}
	if !p.useBar && (time.Since(p.lastLog) >= 5*time.Second || pr.Done == pr.Total) {
		p.lastLog = time.Now()
		elapsed := time.Since(p.started).Seconds()
		rate := 0.0
		if elapsed > 0 {
			rate = float64(pr.Done-p.first) / elapsed
		}
		eta := time.Duration(0)
		if rate > 0 && pr.Total > pr.Done {
			eta = time.Duration(float64(pr.Total-pr.Done) / rate * float64(time.Second)).Round(time.Second)
		}
		p.log.Info("rebuild progress", zap.String("phase", pr.Phase), zap.Int64("done", pr.Done), zap.Int64("total", pr.Total),
			zap.Int64("chunks", pr.Chunks), zap.Float64("rate_per_second", float64(int64(rate*10))/10), zap.Duration("eta", eta),
			zap.Bool("resumed", pr.Resumed))
	}
}

func (p *rebuildProgress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
		p.bar = nil
	}
}

func writeRebuildSummary(w io.Writer, tenant int64, res *rebuild.Result) error {
	scope := "every tenant"
	if tenant != 0 {
		scope = fmt.Sprintf("tenant %d", tenant)
	}
	unit := "rows"
	if res.Source == rebuild.SourceReplay {
		unit = "events"
	}
	fmt.Fprintf(w, "# graphsync rebuild: %s\n\n", scope)
	fmt.Fprintf(w, "- source: %s (%s)\n", res.Source, res.Why)
	fmt.Fprintf(w, "- base: %d %s in %d chunks", res.Done, unit, res.Chunks)
	if res.NotApplied > 0 {
		fmt.Fprintf(w, "; %d events not applied (first: %s), re-projected from the rows by the sweep", res.NotApplied, res.FirstRejection)
	}
	fmt.Fprintln(w)
	if len(res.GivenUp) > 0 {
		shown := res.GivenUp[:min(len(res.GivenUp), 10)]
		more := ""
		if len(res.GivenUp) > len(shown) {
			more = fmt.Sprintf(" and %d more", len(res.GivenUp)-len(shown))
		}
		fmt.Fprintf(w, "- given up: %d aggregates waited past the replay's wait queue bound; none of their later events were applied (counted above): %s%s\n",
			len(res.GivenUp), strings.Join(shown, ", "), more)
	}
	if len(res.Repaired) == 0 {
		fmt.Fprintln(w, "- sweep: nothing to repair")
	}
	for _, r := range res.Repaired {
		fmt.Fprintf(w, "- sweep: %s\n", r)
	}
	if res.Embedded+res.EmbeddedFromCache > 0 {
		fmt.Fprintf(w, "- embed: %d texts from the cache, %d embedded\n", res.EmbeddedFromCache, res.Embedded)
	}
	if res.EmbeddingRefused > 0 {
		fmt.Fprintf(w, "- embed: %d products whose text the embedder refused, left pending (drift reports them)\n", res.EmbeddingRefused)
	}
	fmt.Fprintf(w, "- took: %s\n\n", res.Took.Round(time.Millisecond))
	return res.Report.WriteMarkdown(w, 0)
}
