package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap"

	"graphsync/drift"
	"graphsync/embed"
	"graphsync/embed/stage"
	"graphsync/redact"
)

// runDrift is `graphsync drift`: exit 0 when drift <= --threshold, 1 when
// more, 2 when the comparison could not run or a --repair stopped part way
// (one line says why; the report of a repair stopped part way is written).
func runDrift(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("drift", flag.ContinueOnError)
	var conn connFlags
	conn.register(fs, true)
	var embedCfg embed.Config
	embedCfg.RegisterFlags(fs)
	format := fs.String("format", "markdown", "markdown or json")
	out := fs.String("out", "", "write the report to FILE instead of standard output")
	tenant := fs.Int64("tenant", 0, "check one tenant only")
	threshold := fs.Int("threshold", 0, "exit 1 only when drift is above this")
	sampleShare := fs.Float64("sample", 1, "share of keys to compare, in (0, 1]: a quick check of a random sample")
	repair := fs.Bool("repair", false, "re-project drifted nodes from the rows and remove what no row backs (writes Neo4j only)")
	recheck := fs.Duration("recheck-after", drift.DefaultRecheckAfter, "wait before the second look at first-pass differences")
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return exitError{2, err.Error()}
	}
	if *format != "markdown" && *format != "md" && *format != "json" {
		return exitError{2, fmt.Sprintf("unknown format %q: want markdown or json", *format)}
	}
	// drift.Config reads a zero Sample as its default (every key); on the
	// command line 0 is a mistake, not a request for a full check.
	if !(*sampleShare > 0 && *sampleShare <= 1) {
		return exitError{2, fmt.Sprintf("--sample must be a fraction in (0, 1], got %g", *sampleShare)}
	}
	if *threshold < 0 {
		return exitError{2, fmt.Sprintf("--threshold must be >= 0, got %d", *threshold)}
	}
	if *tenant < 0 {
		return exitError{2, fmt.Sprintf("--tenant must be a tenant id (0: every tenant), got %d", *tenant)}
	}
	recheckAfter, err := recheckWait(*recheck)
	if err != nil {
		return exitError{2, err.Error()}
	}
	// The report's file is opened before anything is compared or repaired:
	// a --repair must not change Neo4j and only then find it cannot write
	// what it did.
	var file *reportFile
	if *out != "" {
		var err error
		if file, err = openReportFile(*out); err != nil {
			return exitError{2, fmt.Sprintf("write the report: %v", err)}
		}
		defer file.close() //nolint:errcheck // closed and checked below once written
	}
	embedder, _, err := openEmbedder(embedCfg)
	if err != nil {
		return exitError{2, oneLine(err.Error())}
	}
	cfg := drift.Config{TenantID: *tenant, Sample: *sampleShare, RecheckAfter: recheckAfter}
	if embedder != nil {
		defer embedder.Close()
		cfg.Vectors = &drift.VectorCheck{Model: embedder.Model(), Dimension: embedder.Dimension()}
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := checkDrift(ctx, conn, cfg, *repair, embedder)
	if err != nil && report == nil {
		// No report: the comparison did not finish, and a --repair starts
		// only after it.
		if ctx.Err() != nil {
			return exitError{2, "stopped before the comparison finished: nothing was changed and no report was written"}
		}
		return exitError{2, oneLine(err.Error())}
	}
	// From here err is a repair that stopped part way: the report, written
	// all the same, lists what it applied.
	repairErr := err
	var w io.Writer = os.Stdout
	if file != nil {
		if w, err = file.writer(); err != nil {
			return exitError{2, fmt.Sprintf("write the report: %v", err)}
		}
	}
	if *format == "json" {
		err = report.WriteJSON(w)
	} else {
		err = report.WriteMarkdown(w, *threshold)
	}
	if err == nil && file != nil {
		err = file.close()
	}
	if err != nil {
		return exitError{2, fmt.Sprintf("write the report: %v", err)}
	}
	if repairErr != nil {
		if ctx.Err() != nil {
			return exitError{2, "stopped: --repair applied part of its repairs, which the report lists; run graphsync drift again to see what is left"}
		}
		return exitError{2, "--repair stopped part way (the report lists what it applied): " + oneLine(repairErr.Error())}
	}
	if report.DriftTotal > *threshold {
		return exitError{1, fmt.Sprintf("drift %d is above the threshold of %d", report.DriftTotal, *threshold)}
	}
	return nil
}

func checkDrift(ctx context.Context, conn connFlags, cfg drift.Config, repair bool, embedder embed.Embedder) (report *drift.Report, err error) {
	log, err := conn.logger()
	if err != nil {
		return nil, err
	}
	err = conn.withServers(ctx, 4, func(pool *pgxpool.Pool, driver neo4j.DriverWithContext) error {
		checker, err := drift.New(pool, driver, cfg, log.Named("drift"))
		if err != nil {
			return err
		}
		// A repair that stopped part way returns its report too.
		report, err = checker.Run(ctx, repair)
		if report != nil {
			// graph_status reads it; a record that fails leaves the
			// report and the exit code as they are.
			if recErr := report.Record(ctx, pool, drift.SourceCommand); recErr != nil {
				log.Warn("drift check not recorded in PostgreSQL", zap.String("error", redact.Text(recErr.Error())))
			}
		}
		if err != nil {
			return fmt.Errorf("%s", redact.Text(err.Error()))
		}
		if !repair || embedder == nil {
			return nil
		}
		// The repair queued the nodes whose vectors drifted; the stage
		// writes their vectors now, from the cache first.
		scfg := stage.Config{BatchSize: 256}
		if cfg.TenantID != 0 {
			scfg.Tenants = []int64{cfg.TenantID}
		}
		s, err := stage.New(driver, stage.NewCache(pool), embedder, scfg, log.Named("embedding"))
		if err != nil {
			return err
		}
		round, err := s.Drain(ctx)
		if round.Written > 0 {
			report.Repaired = append(report.Repaired, fmt.Sprintf("wrote vectors: %d (%d texts from the cache, %d embedded)",
				round.Written, round.Cached, round.Embedded))
		}
		if round.Refused > 0 {
			report.Repaired = append(report.Repaired, fmt.Sprintf("vectors refused by the embedder: %d (left pending)", round.Refused))
		}
		if err != nil {
			return fmt.Errorf("write vectors: %s", redact.Text(err.Error()))
		}
		return nil
	})
	return report, err
}

// reportFile is --out: opened before the check, filled after it.
type reportFile struct {
	file    *os.File
	created bool // it did not exist: removed again if no report is written
	written bool
	closed  bool
}

// openReportFile opens path for writing without emptying it yet: a check
// that cannot run leaves an earlier report as it was.
func openReportFile(path string) (*reportFile, error) {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	return &reportFile{file: f, created: errors.Is(statErr, os.ErrNotExist)}, nil
}

// writer empties the file for the report. Only a regular file is emptied:
// --out /dev/null, a pipe or a terminal cannot be, and need not be.
func (r *reportFile) writer() (io.Writer, error) {
	r.written = true
	info, err := r.file.Stat()
	if err != nil {
		return nil, err
	}
	if info.Mode().IsRegular() {
		if err := r.file.Truncate(0); err != nil {
			return nil, err
		}
	}
	return r.file, nil
}

func (r *reportFile) close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.file.Close()
	if r.created && !r.written {
		_ = os.Remove(r.file.Name())
	}
	return err
}

// oneLine keeps an error to one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
