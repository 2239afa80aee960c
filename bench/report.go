package main

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"graphsync/internal/neo4jinfo"
)

// settings are what a reader needs to compare two result files.
type settings struct {
	BatchSize            int      `json:"batch_size"`
	BacklogBatchSize     int      `json:"backlog_batch_size"`
	Workers              int      `json:"workers"`
	SynchronousCommit    string   `json:"synchronous_commit"`
	GOMAXPROCS           int      `json:"gomaxprocs"`
	GOMAXPROCSEnv        string   `json:"gomaxprocs_env,omitempty"`
	MachineCores         int      `json:"machine_cores"`
	Scale                float64  `json:"scale"`
	Quick                bool     `json:"quick"`
	WakeModes            []string `json:"wake_modes"`
	BacklogModes         []string `json:"backlog_modes"`
	ThroughputEvents     int64    `json:"throughput_target_events"`
	BacklogEvents        []int64  `json:"backlog_target_events"`
	WorkloadWriters      int      `json:"workload_writers"`
	WorkloadOrdersPerTx  int      `json:"workload_orders_per_tx"`
	BacklogOrdersPerTx   int      `json:"backlog_orders_per_tx"`
	BacklogUntilCaughtUp bool     `json:"backlog_until_caught_up"`
	LatencyRate          int      `json:"latency_offered_events_per_sec"`
	LatencySeconds       float64  `json:"latency_seconds"`
	LatencyWarmUpSeconds float64  `json:"latency_warm_up_seconds"`
	ResidentNodes        int64    `json:"resident_nodes"`
	Neo4jPageCache       string   `json:"neo4j_page_cache"`
	Neo4jHeapInitial     int64    `json:"neo4j_heap_initial_bytes,omitempty"`
	Neo4jHeapLargest     int64    `json:"neo4j_heap_max_bytes,omitempty"`
	SyncFlags            string   `json:"sync_flags"`
	PostgresVersion      string   `json:"postgres_version"`
	SharedBuffers        string   `json:"shared_buffers"`
	WALLevel             string   `json:"wal_level"`
	Neo4jVersion         string   `json:"neo4j_version"`
	GoVersion            string   `json:"go_version"`
	Binary               string   `json:"binary"`
	BinaryModified       string   `json:"binary_modified"`
	BinaryVCS            string   `json:"binary_vcs,omitempty"`
	GitRevision          string   `json:"git_revision"`
	LoadAvgStart         string   `json:"loadavg_start"`
	LoadAvgEnd           string   `json:"loadavg_end"`
}

func collectSettings(ctx context.Context, st *stack, cfg benchConfig, root string) settings {
	s := settings{
		BatchSize: cfg.batchSize, BacklogBatchSize: cfg.backlogBatchSize, Workers: cfg.workers,
		GOMAXPROCS: gomaxprocs(), GOMAXPROCSEnv: os.Getenv("GOMAXPROCS"), MachineCores: runtime.NumCPU(),
		Scale: cfg.scale, Quick: cfg.quick, WakeModes: cfg.modes, BacklogModes: cfg.backlogModes,
		ThroughputEvents: cfg.throughputEvents, BacklogEvents: cfg.backlogEvents,
		WorkloadWriters: cfg.writers, WorkloadOrdersPerTx: cfg.ordersPerTx, BacklogOrdersPerTx: backlogOrdersPerTx,
		BacklogUntilCaughtUp: cfg.backlogUntilCaughtUp,
		LatencyRate:          cfg.latencyRate, LatencySeconds: cfg.latencyDuration.Seconds(),
		LatencyWarmUpSeconds: cfg.latencyWarmUp.Seconds(),
		ResidentNodes:        cfg.residentNodes,
		SyncFlags: fmt.Sprintf("--batch-size %d --workers %d --http-addr 127.0.0.1:0 --retention-every 0 (other flags at their defaults: poll-interval 500ms, fallback-poll-interval 30s, lease 15s)",
			cfg.batchSize, cfg.workers),
		GoVersion: runtime.Version(), Binary: cfg.binary, LoadAvgStart: loadAverage(),
	}
	if info, err := os.Stat(cfg.binary); err == nil {
		s.BinaryModified = info.ModTime().UTC().Format(time.RFC3339)
	}
	s.BinaryVCS = binaryVCS(cfg.binary)
	queryCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(queryCtx, st.adminURL); err == nil {
		_ = conn.QueryRow(queryCtx, query("settings")).Scan(&s.SynchronousCommit, &s.PostgresVersion, &s.SharedBuffers, &s.WALLevel)
		conn.Close(queryCtx)
	}
	s.Neo4jVersion = st.neo4jVersion(queryCtx)
	if pageCache, err := neo4jinfo.PageCache(queryCtx, st.driver); err == nil {
		s.Neo4jPageCache = pageCache
	}
	if initial, largest, err := neo4jinfo.Heap(queryCtx, st.driver); err == nil {
		s.Neo4jHeapInitial, s.Neo4jHeapLargest = initial, largest
	}
	git := exec.CommandContext(queryCtx, "git", "describe", "--always", "--dirty")
	git.Dir = root
	if out, err := git.Output(); err == nil {
		s.GitRevision = strings.TrimSpace(string(out))
	}
	return s
}

// results is the JSON document and the source of the table.
type results struct {
	StartedAt       time.Time          `json:"started_at"`
	FinishedAt      time.Time          `json:"finished_at"`
	DurationSeconds float64            `json:"duration_seconds"`
	Command         string             `json:"command"`
	Settings        settings           `json:"settings"`
	Throughput      []throughputResult `json:"throughput,omitempty"`
	Ceiling         *ceilingResult     `json:"ceiling,omitempty"`
	// BacklogCeiling is the same replay in transactions of sync's
	// --backlog-batch-size: the yardstick of the backlog drains.
	BacklogCeiling *ceilingResult  `json:"backlog_ceiling,omitempty"`
	Latency        []latencyResult `json:"latency,omitempty"`
	Backlog        []backlogResult `json:"backlog,omitempty"`
	// BacklogRSSRatio is, per mode, the peak RSS of the largest backlog over
	// that of the smallest: flat memory keeps it near 1.
	BacklogRSSRatio map[string]float64 `json:"backlog_peak_rss_ratio,omitempty"`
	// StreamToCeiling is stream's sustained events/s over the ceiling's.
	StreamToCeiling *float64 `json:"e2e_ceiling_ratio,omitempty"`
	SyncLogs        string   `json:"sync_logs"`
}

// finish computes the ratios.
func (r *results) finish() {
	r.FinishedAt = time.Now().UTC()
	r.DurationSeconds = r.FinishedAt.Sub(r.StartedAt).Seconds()
	if r.Ceiling != nil && r.Ceiling.Error == "" && r.Ceiling.EventsPerSec > 0 {
		for i := range r.Throughput {
			t := &r.Throughput[i]
			if t.Error != "" {
				continue
			}
			ratio := t.EventsPerSec / r.Ceiling.EventsPerSec
			t.RatioToCeiling = &ratio
			if t.Mode == "stream" {
				r.StreamToCeiling = &ratio
			}
		}
	}
	smallest, largest := map[string]backlogResult{}, map[string]backlogResult{}
	for _, b := range r.Backlog {
		if b.Error != "" || b.SyncRSS.PeakBytes == 0 {
			continue
		}
		if s, ok := smallest[b.Mode]; !ok || b.Events < s.Events {
			smallest[b.Mode] = b
		}
		if l, ok := largest[b.Mode]; !ok || b.Events > l.Events {
			largest[b.Mode] = b
		}
	}
	for mode, s := range smallest {
		if l := largest[mode]; l.Events > s.Events {
			if r.BacklogRSSRatio == nil {
				r.BacklogRSSRatio = map[string]float64{}
			}
			r.BacklogRSSRatio[mode] = float64(l.SyncRSS.PeakBytes) / float64(s.SyncRSS.PeakBytes)
		}
	}
}

func (r *results) failed() bool {
	for _, t := range r.Throughput {
		if t.Error != "" {
			return true
		}
	}
	for _, l := range r.Latency {
		if l.Error != "" {
			return true
		}
	}
	for _, b := range r.Backlog {
		if b.Error != "" {
			return true
		}
	}
	return (r.Ceiling != nil && r.Ceiling.Error != "") || (r.BacklogCeiling != nil && r.BacklogCeiling.Error != "")
}

// write stores the results as <dir>/<UTC timestamp>.json.
func (r *results) write(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("results directory: %w", err)
	}
	body, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode results: %w", err)
	}
	path := filepath.Join(dir, r.StartedAt.Format("20060102T150405Z")+".json")
	if err := os.WriteFile(path, append(body, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("write results: %w", err)
	}
	return path, nil
}

// print writes the table and ends with the one e2e/ceiling line.
func (r *results) print(out io.Writer, path string, writeErr error) {
	s := r.Settings
	built := "binary " + s.Binary + " (modified " + s.BinaryModified + ")"
	if s.BinaryVCS != "" {
		built = "binary built from " + s.BinaryVCS
	}
	fmt.Fprintf(out, "\ngraphsync end-to-end benchmark: scale %g, batch %d (backlog %d), workers %d, synchronous_commit %s, GOMAXPROCS %d, %d cores, PostgreSQL %s, Neo4j %s (page cache %s, heap %s, resident graph %d nodes)\n  %s; bench from tree %s\n",
		s.Scale, s.BatchSize, s.BacklogBatchSize, s.Workers, s.SynchronousCommit, s.GOMAXPROCS, s.MachineCores, s.PostgresVersion, s.Neo4jVersion, s.Neo4jPageCache, heapText(s.Neo4jHeapInitial, s.Neo4jHeapLargest), s.ResidentNodes, built, s.GitRevision)

	if len(r.Throughput) > 0 || len(r.Latency) > 0 || r.Ceiling != nil {
		fmt.Fprintln(out, "\ncommit to graph, per wake mode")
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "mode\tevents\tevents/s\tproducer ev/s\ttail lag\tp50\tp99\tmax\tratio to ceiling\tsync peak RSS\t")
		for _, mode := range r.modes() {
			t, hasT := r.throughputOf(mode)
			l, hasL := r.latencyOf(mode)
			row := []string{mode, "-", "-", "-", "-", "-", "-", "-", "-", "-"}
			if hasT && t.Error == "" {
				row[1], row[2] = fmt.Sprint(t.Events), fmt.Sprintf("%.0f", t.EventsPerSec)
				row[3], row[4] = fmt.Sprintf("%.0f", t.ProducerEventsPerSec), fmt.Sprintf("%.2fs", t.TailLagSeconds)
				if t.RatioToCeiling != nil {
					row[8] = fmt.Sprintf("%.2f", *t.RatioToCeiling)
				}
				row[9] = mib(t.SyncRSS.PeakBytes)
			} else if hasT {
				row[2] = "failed"
			}
			if hasL && l.Error == "" {
				row[5], row[6], row[7] = ms(l.P50Ms), ms(l.P99Ms), ms(l.MaxMs)
			} else if hasL {
				row[5] = "failed"
			}
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
		if c := r.Ceiling; c != nil {
			if c.Error == "" {
				fmt.Fprintf(tw, "ceiling\t%d\t%.0f\t-\t-\t-\t-\t-\t1.00\t-\t\n", c.Events, c.EventsPerSec)
			} else {
				fmt.Fprintln(tw, "ceiling\t-\tfailed\t-\t-\t-\t-\t-\t-\t-\t")
			}
		}
		tw.Flush()
		if len(r.Throughput) > 0 {
			fmt.Fprintf(out, "  events/s: %d writers, %d change(s) and event(s) per transaction, as fast as they can; from the first event's occurred_at (its transaction's start) to the last processed_at.\n",
				s.WorkloadWriters, s.WorkloadOrdersPerTx)
			fmt.Fprintln(out, "  tail lag: last processed_at - last occurred_at; near 0 means sync kept up and events/s is bounded by the producer.")
		}
		if len(r.Latency) > 0 {
			l := r.Latency[0]
			fmt.Fprintf(out, "  p50/p99/max: %d events/s offered for %s, measured after %s at the same rate (%s); latency = %s.\n",
				l.OfferedPerSec, durationSeconds(s.LatencySeconds), durationSeconds(s.LatencyWarmUpSeconds), r.achievedRates(), latencyMeasure)
		}
		if c := r.Ceiling; c != nil && c.Error == "" {
			fmt.Fprintf(out, "  ceiling: %s's %d events replayed in %d transactions of %d, median of %d rounds (%s events/s); graph matches sync's: %t (%s).\n",
				c.EventsFrom, c.Events, c.Batches, c.BatchSize, len(c.RoundsEventsPerSec), roundsText(c.RoundsEventsPerSec), c.GraphMatchesSync, c.Graph)
		}
		for _, l := range r.Latency {
			if m := l.SyncMetrics; l.Error == "" && m.Batches > 0 {
				fmt.Fprintf(out, "  sync internals, latency %s: %d batches of %.1f rows on average; %d claims of %.1fms; projector apply %.0fms per batch (probe COMMIT call p50 %.2fms).\n",
					l.Mode, m.Batches, m.MeanBatchSize, m.Claims, m.MeanClaimMs, m.MeanApplyMs, l.CommitP50Ms)
			}
			if f := l.Neo4jFloor; l.Error == "" && f != nil {
				fmt.Fprintf(out, "  neo4j write floor, latency %s: %d one-property write transactions, %d a second beside the probes: p50 %.1fms, p99 %.1fms (commit-to-graph p99 %.1f times it).\n",
					l.Mode, f.Transactions, f.PerSec, f.P50Ms, f.P99Ms, l.P99Ms/f.P99Ms)
			}
		}
		for _, l := range r.Latency {
			base, ok := r.latencyOf(strings.TrimSuffix(l.Mode, "+"+l.Embedder))
			if l.Embedder == "none" || l.Embedder == "" || l.Error != "" || !ok || base.Error != "" || base.P99Ms == 0 {
				continue
			}
			fmt.Fprintf(out, "  embeddings on against off, latency %s: p99 %.1fms against %.1fms (%.2fx), p50 %.1fms against %.1fms; same run, same probes; the stage obtained %.0f vectors and wrote %.0f meanwhile.\n",
				l.Mode, l.P99Ms, base.P99Ms, l.P99Ms/base.P99Ms, l.P50Ms, base.P50Ms, l.SyncMetrics.Embeddings, l.SyncMetrics.EmbeddingsWritten)
		}
		for _, t := range r.Throughput {
			if m := t.SyncMetrics; t.Error == "" && m.Batches > 0 {
				fmt.Fprintf(out, "  sync internals, throughput %s: %d batches of %.0f rows on average; %d claims of %.1fms; projector apply %.0fms per batch, %s in all; mark %.1fms per batch (run: %s).\n",
					t.Mode, m.Batches, m.MeanBatchSize, m.Claims, m.MeanClaimMs, m.MeanApplyMs, durationSeconds(m.ApplySeconds), m.MeanSettleMs, durationSeconds(t.Seconds))
			}
		}
	}

	if len(r.Backlog) > 0 {
		if r.Settings.BacklogUntilCaughtUp {
			fmt.Fprintln(out, "\nsync --until-caught-up over a backlog")
		} else {
			fmt.Fprintln(out, "\nsync over a backlog, stopped by bench once the outbox was drained (-backlog-until-caught-up=false)")
		}
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "mode\tevents\twrite\tsync\tsync ev/s\tto ceiling\tpeak RSS\tmax VmRSS sampled\t")
		toCeiling := func(b backlogResult) string {
			c := r.BacklogCeiling
			if c == nil || c.Error != "" || c.EventsPerSec <= 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", b.SyncEventsPerSec/c.EventsPerSec)
		}
		for _, b := range r.Backlog {
			if b.Error != "" && b.SyncRSS.PeakBytes > 0 {
				fmt.Fprintf(tw, "%s\t%d\t%s\tout of time after %s, %d applied\t%.0f\t%s\t%s\t%s\t\n", b.Mode, b.Events, durationSeconds(b.WriteSeconds),
					durationSeconds(b.SyncSeconds), b.Processed, b.SyncEventsPerSec, toCeiling(b), mib(b.SyncRSS.PeakBytes), mib(b.SyncRSS.MaxSampledBytes))
				continue
			}
			if b.Error != "" {
				fmt.Fprintf(tw, "%s\t%d\tfailed\t-\t-\t-\t-\t-\t\n", b.Mode, b.TargetEvents)
				continue
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.0f\t%s\t%s\t%s\t\n", b.Mode, b.Events, durationSeconds(b.WriteSeconds),
				durationSeconds(b.SyncSeconds), b.SyncEventsPerSec, toCeiling(b), mib(b.SyncRSS.PeakBytes), mib(b.SyncRSS.MaxSampledBytes))
		}
		tw.Flush()
		fmt.Fprintln(out, "  peak RSS: the sync process's VmHWM (/proc, read every 100ms until it exited); the backlog was written first, 500 changes per transaction.")
		if c := r.BacklogCeiling; c != nil && c.Error == "" {
			fmt.Fprintf(out, "  to ceiling: sync ev/s (from its start, so including start-up) over the same run's ceiling at sync's backlog batch size: %s's %d events replayed in %d transactions of %d, median of %d rounds (%s events/s).\n",
				c.EventsFrom, c.Events, c.Batches, c.BatchSize, len(c.RoundsEventsPerSec), roundsText(c.RoundsEventsPerSec))
		} else {
			fmt.Fprintln(out, "  to ceiling: not measured (the ceiling at sync's backlog batch size needs the throughput and ceiling scenarios).")
		}
		for _, b := range r.Backlog {
			if m := b.SyncStages; m != nil && m.Batches > 0 {
				fmt.Fprintf(out, "  stages, %s %d: %d batches of %.0f rows; claim p50 %.1fms, p99 %.1fms, %s in all; Neo4j apply %.0fms per batch (p99 %.0fms), %s in all; mark %.1fms per batch (p99 %.1fms), %s in all (sync: %s).\n",
					b.Mode, b.Events, m.Batches, m.MeanBatchSize, m.ClaimP50Ms, m.ClaimP99Ms, durationSeconds(m.ClaimSeconds),
					m.MeanApplyMs, m.ApplyP99Ms, durationSeconds(m.ApplySeconds), m.MeanSettleMs, m.SettleP99Ms, durationSeconds(m.SettleSeconds), durationSeconds(b.SyncSeconds))
			}
		}
		for _, mode := range s.BacklogModes {
			if ratio, ok := r.BacklogRSSRatio[mode]; ok {
				fmt.Fprintf(out, "  peak RSS ratio, largest/smallest backlog (%s): %.2f\n", mode, ratio)
			}
		}
	}

	var troubles []string
	note := func(what string, t logTrouble) {
		if t.Lines > 0 {
			troubles = append(troubles, fmt.Sprintf("%s: %d warn/error lines in the sync log, e.g. %q", what, t.Lines, t.Messages))
		}
	}
	for _, t := range r.Throughput {
		note("throughput "+t.Mode, t.SyncTrouble)
	}
	for _, l := range r.Latency {
		note("latency "+l.Mode, l.SyncTrouble)
	}
	for _, b := range r.Backlog {
		note(fmt.Sprintf("backlog %s %d", b.Mode, b.Events), b.SyncTrouble)
	}
	if len(troubles) > 0 {
		fmt.Fprintln(out, "\ndisturbed runs (their figures are suspect):")
		for _, t := range troubles {
			fmt.Fprintln(out, "  "+t)
		}
	}

	var failures []string
	for _, t := range r.Throughput {
		if t.Error != "" {
			failures = append(failures, fmt.Sprintf("throughput %s: %s", t.Mode, t.Error))
		}
	}
	if r.BacklogCeiling != nil && r.BacklogCeiling != r.Ceiling && r.BacklogCeiling.Error != "" {
		failures = append(failures, "backlog ceiling: "+r.BacklogCeiling.Error)
	}
	if r.Ceiling != nil && r.Ceiling.Error != "" {
		failures = append(failures, "ceiling: "+r.Ceiling.Error)
	}
	for _, l := range r.Latency {
		if l.Error != "" {
			failures = append(failures, fmt.Sprintf("latency %s: %s", l.Mode, l.Error))
		}
	}
	for _, b := range r.Backlog {
		if b.Error != "" {
			failures = append(failures, fmt.Sprintf("backlog %s %d: %s", b.Mode, b.TargetEvents, b.Error))
		}
	}
	if len(failures) > 0 {
		fmt.Fprintln(out, "\nFAILED:")
		for _, f := range failures {
			fmt.Fprintln(out, "  "+f)
		}
	}
	fmt.Fprintf(out, "\ntook %s; load average %s at start, %s at end; sync logs in %s\n",
		durationSeconds(r.DurationSeconds), s.LoadAvgStart, s.LoadAvgEnd, r.SyncLogs)
	if writeErr != nil {
		fmt.Fprintf(out, "results NOT written: %v\n", writeErr)
	} else {
		fmt.Fprintf(out, "results: %s\n", path)
	}
	if r.StreamToCeiling != nil {
		fmt.Fprintf(out, "e2e/ceiling ratio: %.2f\n", *r.StreamToCeiling)
	} else {
		fmt.Fprintln(out, "e2e/ceiling ratio: n/a")
	}
}

func (r *results) modes() []string {
	var modes []string
	add := func(mode string) {
		for _, m := range modes {
			if m == mode {
				return
			}
		}
		modes = append(modes, mode)
	}
	for _, t := range r.Throughput {
		add(t.Mode)
	}
	for _, l := range r.Latency {
		add(l.Mode)
	}
	return modes
}

func (r *results) throughputOf(mode string) (throughputResult, bool) {
	for _, t := range r.Throughput {
		if t.Mode == mode {
			return t, true
		}
	}
	return throughputResult{}, false
}

func (r *results) latencyOf(mode string) (latencyResult, bool) {
	for _, l := range r.Latency {
		if l.Mode == mode {
			return l, true
		}
	}
	return latencyResult{}, false
}

func (r *results) achievedRates() string {
	var parts []string
	for _, l := range r.Latency {
		if l.Error == "" {
			parts = append(parts, fmt.Sprintf("%s achieved %.1f/s", l.Mode, l.AchievedPerSec))
		}
	}
	return strings.Join(parts, ", ")
}

func ms(v float64) string { return fmt.Sprintf("%.1fms", v) }

func mib(bytes int64) string {
	if bytes <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f MiB", float64(bytes)/(1<<20))
}

// durationSeconds formats seconds for the table.
func durationSeconds(seconds float64) string {
	return time.Duration(seconds * float64(time.Second)).Round(time.Millisecond).String()
}

// binaryVCS is the revision the binary was built from, as the Go toolchain
// stamped it (empty when built outside a git checkout).
func binaryVCS(path string) string {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return ""
	}
	var revision, modified string
	for _, setting := range info.Settings {
		switch setting.Key {
		case "vcs.revision":
			revision = setting.Value
		case "vcs.modified":
			modified = setting.Value
		}
	}
	if revision == "" {
		return ""
	}
	if modified == "true" {
		return revision + " (modified)"
	}
	return revision
}

func roundsText(rates []float64) string {
	parts := make([]string, len(rates))
	for i, rate := range rates {
		parts[i] = fmt.Sprintf("%.0f", rate)
	}
	return strings.Join(parts, ", ")
}

// heapText is Neo4j's heap for the header: one size when it is fixed, the
// initial and the largest when it may grow, "unknown" when it was not read.
func heapText(initial, largest int64) string {
	gib := func(b int64) string { return fmt.Sprintf("%.2fGiB", float64(b)/(1<<30)) }
	switch {
	case largest <= 0:
		return "unknown"
	case initial == largest:
		return gib(largest) + " fixed"
	default:
		return gib(initial) + " growing to " + gib(largest)
	}
}
