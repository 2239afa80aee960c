package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// syncSettings are the `graphsync sync` flags bench varies.
type syncSettings struct {
	mode      string
	batchSize int
	// backlogBatchSize is --backlog-batch-size (at least batchSize).
	backlogBatchSize int
	workers          int
	untilCaughtUp    bool
	// embedder is sync's --embedder: "none" (the default, as every figure
	// before embeddings) or "onnx" (the stage runs beside the relay).
	embedder string
}

const (
	// rssSampleEvery is how often VmRSS is read while sync runs.
	rssSampleEvery = 100 * time.Millisecond
	// stopGrace is how long sync may take to finish its batch after SIGTERM
	// (its drain timeout is 10s) before it is killed.
	stopGrace = 30 * time.Second
)

// syncProcess is one running `graphsync sync`.
type syncProcess struct {
	cmd     *exec.Cmd
	started time.Time
	logPath string
	exited  chan struct{}
	// Set before exited is closed.
	waitErr error
	ended   time.Time
	// stopRequested is when bench sent SIGTERM (zero: never); log lines
	// after it are the stop's, not trouble.
	stopRequested time.Time

	mu         sync.Mutex
	maxVmRSSKB int64
	lastHWMKB  int64
}

// startSync starts bin/graphsync sync against db. The retention job is off:
// nothing is old enough to archive, it would only add load at start.
func (s *stack) startSync(db *scenarioDB, settings syncSettings) (*syncProcess, error) {
	args := []string{"sync",
		"--wake", settings.mode,
		// Loopback and an ephemeral port: bench reads /metrics before it
		// stops sync (see scrape), and parallel runs cannot clash.
		"--http-addr", "127.0.0.1:0",
		"--batch-size", strconv.Itoa(settings.batchSize),
		"--backlog-batch-size", strconv.Itoa(settings.backlogBatchSize),
		"--workers", strconv.Itoa(settings.workers),
		"--slot", db.slot,
		"--publication", db.slot,
		"--retention-every", "0",
		"--log-format", "json",
		"--log-level", "info",
	}
	if settings.untilCaughtUp {
		args = append(args, "--until-caught-up")
	}
	embedder := settings.embedder
	if embedder == "" {
		embedder = "none"
	}
	args = append(args, "--embedder", embedder)
	logPath := filepath.Join(s.logDir, db.name+".sync.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create sync log: %w", err)
	}
	cmd := exec.Command(s.binary, args...)
	cmd.Env = s.childEnv(db.url)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// If bench dies without stopping it, sync is told to stop too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s sync: %w", s.binary, err)
	}
	p := &syncProcess{cmd: cmd, started: time.Now(), logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		p.ended = time.Now()
		logFile.Close()
		close(p.exited)
	}()
	go p.sampleRSS()
	return p, nil
}

// sampleRSS records the largest VmRSS and the latest VmHWM until sync
// exits. VmHWM is the kernel's high-water mark of sync's own address space,
// so a peak between two samples is not missed; only the last 100ms before
// exit are.
func (p *syncProcess) sampleRSS() {
	ticker := time.NewTicker(rssSampleEvery)
	defer ticker.Stop()
	statusPath := fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid)
	for {
		rss, hwm, ok := readProcStatus(statusPath)
		if ok {
			p.mu.Lock()
			p.maxVmRSSKB = max(p.maxVmRSSKB, rss)
			p.lastHWMKB = max(p.lastHWMKB, hwm)
			p.mu.Unlock()
		}
		select {
		case <-p.exited:
			return
		case <-ticker.C:
		}
	}
}

// readProcStatus returns VmRSS and VmHWM in KiB; ok is false once the
// process is gone (a zombie has no Vm lines).
func readProcStatus(path string) (rssKB, hwmKB int64, ok bool) {
	file, err := os.Open(path)
	if err != nil {
		return 0, 0, false
	}
	defer file.Close()
	scanner := bufio.NewScanner(file)
	for scanner.Scan() {
		name, value, found := strings.Cut(scanner.Text(), ":")
		if !found || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		fields := strings.Fields(value)
		if len(fields) == 0 {
			continue
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			continue
		}
		if name == "VmRSS" {
			rssKB, ok = kb, true
		} else {
			hwmKB = kb
		}
	}
	return rssKB, hwmKB, ok
}

// stop asks sync to finish its batch and exit (SIGTERM), and kills it after
// stopGrace. It returns the process's exit error, if any.
func (p *syncProcess) stop() error {
	select {
	case <-p.exited:
		return p.waitErr
	default:
	}
	p.stopRequested = time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(stopGrace)
	defer timer.Stop()
	select {
	case <-p.exited:
		return p.waitErr
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("sync did not stop within %s of SIGTERM and was killed (log %s)", stopGrace, p.logPath)
	}
}

// waitExit waits for sync to exit by itself (--until-caught-up); when ctx
// ends first it is stopped and that is an error.
func (p *syncProcess) waitExit(ctx context.Context) error {
	select {
	case <-p.exited:
		if p.waitErr != nil {
			return fmt.Errorf("sync exited with %w (log %s)", p.waitErr, p.logPath)
		}
		return nil
	case <-ctx.Done():
		stopErr := p.stop()
		return errors.Join(fmt.Errorf("sync did not catch up in time: %w (log %s)", ctx.Err(), p.logPath), stopErr)
	}
}

// alive reports an error when sync has already exited: a scenario waiting
// for it to apply rows would otherwise wait for its deadline.
func (p *syncProcess) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("sync exited unexpectedly (%v); log %s", p.waitErr, p.logPath)
	default:
		return nil
	}
}

// rssFigures are sync's memory after it exited.
type rssFigures struct {
	// PeakBytes is sync's own high-water mark: the last VmHWM read from
	// /proc (every 100ms while it ran), or the largest VmRSS sampled if
	// larger.
	PeakBytes int64 `json:"peak_rss_bytes"`
	// MaxSampledBytes is the largest VmRSS sampled.
	MaxSampledBytes int64 `json:"max_sampled_vmrss_bytes"`
	// RusageMaxRSSBytes is wait4's ru_maxrss. It is not sync's figure:
	// os/exec starts the child with vfork semantics, sharing bench's
	// address space until exec, and at exec Linux records that address
	// space's high-water mark into the child's maxrss, so this is at least
	// bench's own RSS. Kept to show why it is not used.
	RusageMaxRSSBytes int64 `json:"rusage_maxrss_bytes"`
}

// rss returns sync's memory figures once it has exited (zero before).
func (p *syncProcess) rss() rssFigures {
	var r rssFigures
	select {
	case <-p.exited:
	default:
		return r
	}
	if state := p.cmd.ProcessState; state != nil {
		if usage, ok := state.SysUsage().(*syscall.Rusage); ok {
			r.RusageMaxRSSBytes = usage.Maxrss * 1024 // KiB on Linux
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r.MaxSampledBytes = p.maxVmRSSKB * 1024
	r.PeakBytes = max(p.lastHWMKB, p.maxVmRSSKB) * 1024
	return r
}

// logTrouble is what the sync log says went wrong: the number of warn and
// error lines and the first few distinct messages. A Neo4j restart by
// another test, a retried batch or a lost lease all show up here, and all
// of them distort the figures of that run.
type logTrouble struct {
	Lines    int      `json:"lines"`
	Messages []string `json:"messages,omitempty"`
}

const troubleMessages = 3

// trouble reads the sync log up to the stop request (the stop's own
// warnings are not trouble).
func (p *syncProcess) trouble() logTrouble {
	var t logTrouble
	_ = p.eachLogLine(func(raw []byte) bool {
		var line struct {
			Level string  `json:"level"`
			TS    float64 `json:"ts"`
			Msg   string  `json:"msg"`
			Error string  `json:"error"`
		}
		if json.Unmarshal(raw, &line) != nil || (line.Level != "warn" && line.Level != "error") {
			return true
		}
		if !p.stopRequested.IsZero() && line.TS >= float64(p.stopRequested.UnixNano())/1e9 {
			return true
		}
		t.Lines++
		message := line.Msg
		if line.Error != "" {
			message += ": " + line.Error
		}
		if len(message) > 300 {
			message = message[:300] + "..."
		}
		if len(t.Messages) < troubleMessages && !slices.Contains(t.Messages, message) {
			t.Messages = append(t.Messages, message)
		}
		return true
	})
	return t
}

// eachLogLine hands each line of sync's log to fn until fn returns false.
func (p *syncProcess) eachLogLine(fn func(raw []byte) bool) error {
	file, err := os.Open(p.logPath)
	if err != nil {
		return err
	}
	defer file.Close()
	scanner := bufio.NewScanner(file)
	scanner.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for scanner.Scan() {
		if !fn(scanner.Bytes()) {
			return nil
		}
	}
	return scanner.Err()
}

// syncMetrics are sync's own histograms, summed: they say where its time
// went. since subtracts an earlier scrape, so a scenario can leave its
// warm-up out.
type syncMetrics struct {
	// Processed is outbox_throughput: the events marked so far.
	Processed     float64 `json:"processed"`
	Batches       int64   `json:"batches"`
	BatchRows     float64 `json:"batch_rows"`
	MeanBatchSize float64 `json:"mean_batch_size"`
	Claims        int64   `json:"claims"`
	ClaimSeconds  float64 `json:"claim_seconds"`
	MeanClaimMs   float64 `json:"mean_claim_ms"`
	// ClaimP50Ms and ClaimP99Ms are sync's own estimate from its claim
	// histogram, in the line it logs as it stops (backlog scenario only).
	ClaimP50Ms float64 `json:"claim_p50_ms,omitempty"`
	ClaimP99Ms float64 `json:"claim_p99_ms,omitempty"`
	// ApplyP99Ms and SettleP99Ms likewise, for a stage's tail.
	ApplyP99Ms   float64 `json:"projector_apply_p99_ms,omitempty"`
	SettleP99Ms  float64 `json:"settle_p99_ms,omitempty"`
	Applies      int64   `json:"projector_applies"`
	ApplySeconds float64 `json:"projector_apply_seconds"`
	MeanApplyMs  float64 `json:"mean_projector_apply_ms"`
	Settles      int64   `json:"settles"`
	// SettleSeconds is the time spent marking batches (OutboxSettle).
	SettleSeconds float64 `json:"settle_seconds"`
	MeanSettleMs  float64 `json:"mean_settle_ms"`
	// Embeddings is graphsync_embeddings_total (model and cache) and
	// EmbeddingsWritten graphsync_embedding_written_total: the embedding
	// stage's work beside the relay (0 with --embedder none).
	Embeddings        float64 `json:"embeddings,omitempty"`
	EmbeddingsWritten float64 `json:"embeddings_written,omitempty"`
}

func (m syncMetrics) since(base syncMetrics) syncMetrics {
	d := syncMetrics{
		Processed: m.Processed - base.Processed,
		Batches:   m.Batches - base.Batches, BatchRows: m.BatchRows - base.BatchRows,
		Claims: m.Claims - base.Claims, ClaimSeconds: m.ClaimSeconds - base.ClaimSeconds,
		Applies: m.Applies - base.Applies, ApplySeconds: m.ApplySeconds - base.ApplySeconds,
		Settles: m.Settles - base.Settles, SettleSeconds: m.SettleSeconds - base.SettleSeconds,
		Embeddings: m.Embeddings - base.Embeddings, EmbeddingsWritten: m.EmbeddingsWritten - base.EmbeddingsWritten,
	}
	return d.withMeans()
}

func (m syncMetrics) withMeans() syncMetrics {
	if m.Batches > 0 {
		m.MeanBatchSize = m.BatchRows / float64(m.Batches)
	}
	if m.Claims > 0 {
		m.MeanClaimMs = 1000 * m.ClaimSeconds / float64(m.Claims)
	}
	if m.Applies > 0 {
		m.MeanApplyMs = 1000 * m.ApplySeconds / float64(m.Applies)
	}
	if m.Settles > 0 {
		m.MeanSettleMs = 1000 * m.SettleSeconds / float64(m.Settles)
	}
	return m
}

// metricsAddr is the address sync logged for /metrics.
func (p *syncProcess) metricsAddr() (string, error) {
	var addr string
	err := p.eachLogLine(func(raw []byte) bool {
		var line struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(raw, &line) == nil && strings.HasPrefix(line.Msg, "serving /metrics") && line.Addr != "" {
			addr = line.Addr
			return false
		}
		return true
	})
	if addr == "" {
		return "", errors.Join(errors.New("sync did not log its /metrics address"), err)
	}
	return addr, nil
}

// scrape reads sync's /metrics (plain Prometheus text; histograms are
// summed over their label sets).
func (p *syncProcess) scrape(ctx context.Context) (syncMetrics, error) {
	var m syncMetrics
	addr, err := p.metricsAddr()
	if err != nil {
		return m, err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil || !net.ParseIP(host).IsLoopback() {
		return m, fmt.Errorf("sync serves /metrics on %q, not loopback", addr)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	request, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return m, err
	}
	response, err := http.DefaultClient.Do(request)
	if err != nil {
		return m, fmt.Errorf("scrape sync /metrics: %w", err)
	}
	defer response.Body.Close()
	if response.StatusCode != http.StatusOK {
		return m, fmt.Errorf("scrape sync /metrics: %s", response.Status)
	}
	values := map[string]float64{}
	scanner := bufio.NewScanner(response.Body)
	scanner.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for scanner.Scan() {
		line := scanner.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		name, _, _ := strings.Cut(fields[0], "{")
		value, err := strconv.ParseFloat(fields[1], 64)
		if err != nil {
			continue
		}
		values[name] += value
	}
	if err := scanner.Err(); err != nil {
		return m, fmt.Errorf("scrape sync /metrics: %w", err)
	}
	m = syncMetrics{
		Processed: values["outbox_throughput"],
		Settles:   int64(values["outbox_settle_duration_seconds_count"]), SettleSeconds: values["outbox_settle_duration_seconds_sum"],
		Batches: int64(values["outbox_batch_size_count"]), BatchRows: values["outbox_batch_size_sum"],
		Claims: int64(values["outbox_claim_duration_seconds_count"]), ClaimSeconds: values["outbox_claim_duration_seconds_sum"],
		Applies: int64(values["graphsync_projector_apply_seconds_count"]), ApplySeconds: values["graphsync_projector_apply_seconds_sum"],
		Embeddings: values["graphsync_embeddings_total"], EmbeddingsWritten: values["graphsync_embedding_written_total"],
	}
	return m.withMeans(), nil
}

// stoppedStages reads the stage totals sync logs as it stops ("graphsync
// sync stopped"): the whole run's, where a scrape would miss the end.
func (p *syncProcess) stoppedStages() (syncMetrics, error) {
	var stages *syncMetrics
	err := p.eachLogLine(func(raw []byte) bool {
		var line struct {
			Msg          string  `json:"msg"`
			ClaimCount   int64   `json:"claim_count"`
			ClaimSum     float64 `json:"claim_sum"`
			ClaimP50     float64 `json:"claim_p50_seconds"`
			ClaimP99     float64 `json:"claim_p99_seconds"`
			ApplyP99     float64 `json:"apply_p99_seconds"`
			MarkP99      float64 `json:"mark_p99_seconds"`
			ApplyCount   int64   `json:"apply_count"`
			ApplySum     float64 `json:"apply_sum"`
			MarkCount    int64   `json:"mark_count"`
			MarkSum      float64 `json:"mark_sum"`
			BatchCount   int64   `json:"batch_size_count"`
			BatchRowsSum float64 `json:"batch_size_sum"`
		}
		if json.Unmarshal(raw, &line) != nil || line.Msg != "graphsync sync stopped" {
			return true
		}
		m := syncMetrics{
			Batches: line.BatchCount, BatchRows: line.BatchRowsSum,
			Claims: line.ClaimCount, ClaimSeconds: line.ClaimSum, ClaimP50Ms: 1000 * line.ClaimP50, ClaimP99Ms: 1000 * line.ClaimP99,
			Applies: line.ApplyCount, ApplySeconds: line.ApplySum, Settles: line.MarkCount, SettleSeconds: line.MarkSum,
			ApplyP99Ms: 1000 * line.ApplyP99, SettleP99Ms: 1000 * line.MarkP99,
		}.withMeans()
		stages = &m
		return false
	})
	if stages == nil {
		return syncMetrics{}, errors.Join(errors.New("sync logged no stage totals as it stopped"), err)
	}
	return *stages, nil
}
