//go:build cgo && linux

package embed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"graphsync/internal/proctest"
)

// TestModelProcessRunsAtTheLowestPriority: with Background the model runs
// in a process of its own, leader of its own session (so of its own
// autogroup), every thread of it at nice 19 and its autogroup too, while
// this process keeps its priority; its vectors, model and dimension are
// those of the model in process.
func TestModelProcessRunsAtTheLowestPriority(t *testing.T) {
	e := openTestEmbedder(t, Config{ModelDir: modelDir(DefaultModel), BatchSize: 16, Threads: 1, Background: true})
	if err := BackgroundError(e); err != nil {
		t.Fatalf("the model runs at the usual priority: %v", err)
	}
	w, ok := e.(*workerEmbedder)
	if !ok {
		t.Fatalf("Background opened a %T, want the model process", e)
	}
	pid := w.proc.cmd.Process.Pid
	fields, err := proctest.StatFields(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	if sid, _ := strconv.Atoi(fields[proctest.Session]); sid != pid {
		t.Errorf("the model process is in session %d, want a session of its own (%d)", sid, pid)
	}
	for tid, nice := range threadNices(t, pid) {
		if nice != backgroundNice {
			t.Errorf("thread %d of the model process runs at nice %d, want %d", tid, nice, backgroundNice)
		}
	}
	if group, err := os.ReadFile(fmt.Sprintf("/proc/%d/autogroup", pid)); err == nil && !strings.Contains(string(group), "nice 19") {
		t.Errorf("the model process's autogroup: %q, want nice 19", strings.TrimSpace(string(group)))
	}
	ours := threadNices(t, os.Getpid())
	for tid, nice := range ours {
		if nice != ours[os.Getpid()] {
			t.Errorf("thread %d of this process runs at nice %d, its main thread at %d: the model process's priority leaked", tid, nice, ours[os.Getpid()])
		}
	}
	texts, _ := loadFixture(t, DefaultModel)
	got, err := e.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	sameAsLocalModel(t, texts, got)
	local := sharedEmbedder(t)
	if e.Model() != local.Model() || e.Dimension() != local.Dimension() {
		t.Errorf("model process: %s of %d dimensions; in process: %s of %d", e.Model(), e.Dimension(), local.Model(), local.Dimension())
	}
}

// TestModelProcessThatEndsIsStartedAgain: a model process killed between
// calls fails the next call of several texts as a refusal, not as
// unavailable (the stage halves the batch, and the halves find a new
// process); a call of one text is tried again in a new process at once.
// Close ends the process.
func TestModelProcessThatEndsIsStartedAgain(t *testing.T) {
	e, err := Open(Config{ModelDir: modelDir(DefaultModel), BatchSize: 16, Threads: 1, Background: true})
	if err != nil {
		t.Fatalf("open embedder (run make model first): %v", err)
	}
	defer e.Close()
	w := e.(*workerEmbedder)
	texts, _ := loadFixture(t, DefaultModel)
	texts = texts[:8]
	kill := func() int {
		t.Helper()
		p := w.proc
		if p == nil {
			t.Fatalf("no model process runs")
		}
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.done
		return p.cmd.Process.Pid
	}
	first := kill()
	_, err = e.Embed(context.Background(), texts)
	if err == nil || errors.Is(err, ErrUnavailable) || !errors.Is(err, errProcessEnded) {
		t.Fatalf("8 texts after the model process was killed: %v, want the process's end (not unavailable)", err)
	}
	got, err := e.Embed(context.Background(), texts)
	if err != nil {
		t.Fatalf("the call after that: %v, want a model process started again", err)
	}
	sameAsLocalModel(t, texts, got)
	if w.proc.cmd.Process.Pid == first {
		t.Fatalf("no new model process")
	}
	kill()
	one, err := e.Embed(context.Background(), texts[:1])
	if err != nil {
		t.Fatalf("one text after the model process was killed: %v, want it embedded by a new process", err)
	}
	sameAsLocalModel(t, texts[:1], one)
	last := w.proc
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-last.done:
	default:
		t.Fatalf("the model process %d still runs after Close", last.cmd.Process.Pid)
	}
}

// TestModelProcessTextThatCrashesItIsRefusedAlone: a text on which the
// model process ends (here by the test's exit hook, as a crash of the
// native runtime would) fails its batch as a refusal, never as
// unavailable, and fails alone too; every other text is embedded.
//
// What the process wrote to its standard error before it ended reaches
// OnProcessLog, line by line.
func TestModelProcessTextThatCrashesItIsRefusedAlone(t *testing.T) {
	const poison = "a text the model process dies on"
	t.Setenv(workerExitOnEnv, poison)
	var logged struct {
		sync.Mutex
		lines []string
	}
	onLog := func(line string) {
		logged.Lock()
		defer logged.Unlock()
		logged.lines = append(logged.lines, line)
	}
	e := openTestEmbedder(t, Config{ModelDir: modelDir(DefaultModel), BatchSize: 16, Threads: 1, Background: true, OnProcessLog: onLog})
	texts, _ := loadFixture(t, DefaultModel)
	batch := []string{texts[0], poison, texts[1]}
	if _, err := e.Embed(context.Background(), batch); err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("a batch holding the text: %v, want a refusal the stage halves", err)
	}
	if _, err := e.Embed(context.Background(), []string{poison}); err == nil || errors.Is(err, ErrUnavailable) || !errors.Is(err, errProcessEnded) {
		t.Fatalf("the text alone: %v, want a refusal naming the process's end", err)
	}
	// The process wrote one line before each of its three ends (the batch,
	// the text alone and its one retry), each handed on before the call
	// that ended it returned.
	const want = "graphsync model process: exits on the test's text, as on a crash"
	logged.Lock()
	lines := slices.Clone(logged.lines)
	logged.Unlock()
	// Other lines (a runtime's warnings) may come too.
	if n := len(slices.DeleteFunc(slices.Clone(lines), func(l string) bool { return l != want })); n != 3 {
		t.Fatalf("OnProcessLog got %q, want %q three times when the call returned", lines, want)
	}
	got, err := e.Embed(context.Background(), []string{texts[0], texts[1]})
	if err != nil {
		t.Fatal(err)
	}
	sameAsLocalModel(t, []string{texts[0], texts[1]}, got)
}

// TestModelProcessGetsNoSecrets: the model process is handed none of this
// process's variables but those the runtimes, the allocator and the
// loader read: not a password, a database URL or an API key.
func TestModelProcessGetsNoSecrets(t *testing.T) {
	t.Setenv("GRAPHSYNC_NEO4J_PASSWORD", "a-password-the-model-needs-not")
	t.Setenv(EnvAPIKey, "an-api-key-the-model-needs-not")
	t.Setenv("GOGC", "150")
	t.Setenv("MALLOC_ARENA_MAX", "2")
	e := openTestEmbedder(t, Config{ModelDir: modelDir(DefaultModel), BatchSize: 16, Threads: 1, Background: true})
	pid := e.(*workerEmbedder).proc.cmd.Process.Pid
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	for _, kv := range env {
		if strings.Contains(kv, "needs-not") {
			t.Errorf("the model process has %q in its environment", kv)
		}
	}
	for _, want := range []string{workerEnv + "=1", "GOGC=150", "MALLOC_ARENA_MAX=2"} {
		if !slices.Contains(env, want) {
			t.Errorf("the model process's environment %q lacks %s", env, want)
		}
	}
	if extra := len(env) - len(workerEnviron(os.Environ())); extra != 0 {
		t.Errorf("the model process's environment %q: %d variables more than workerEnviron gives", env, extra)
	}
}

// TestForwardLines: each line of the model process's standard error
// reaches the callback without its line end; a line longer than
// maxLogLine is cut, and the next line is whole.
func TestForwardLines(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", maxLogLine+100)
	go func() {
		fmt.Fprintf(w, "first\r\n%s\nlast without an end", long)
		w.Close()
	}()
	var lines []string
	forwardLines(r, func(line string) { lines = append(lines, line) })
	want := []string{"first", long[:maxLogLine], "last without an end"}
	if !slices.Equal(lines, want) {
		t.Fatalf("forwarded %d lines %.80q, want %d %.80q", len(lines), lines, len(want), want)
	}
}

// TestModelProcessCallEndsWithItsContext: a call whose context ends while
// the model runs returns the context's error without waiting for the run
// (the process is killed); the next call is answered by another process.
func TestModelProcessCallEndsWithItsContext(t *testing.T) {
	e := openTestEmbedder(t, Config{ModelDir: modelDir(DefaultModel), BatchSize: 16, Threads: 1, Background: true})
	w := e.(*workerEmbedder)
	first := w.proc
	// 400 texts of 256 tokens: a run of many seconds at nice 19.
	long := strings.Repeat("a wireless speaker with a kettle beside it ", 40)
	texts := make([]string, 400)
	for i := range texts {
		texts[i] = fmt.Sprintf("%d %s", i, long)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	started := time.Now()
	if _, err := e.Embed(ctx, texts); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call past its deadline: %v, want the deadline's error", err)
	}
	if took := time.Since(started); took > 10*time.Second {
		t.Errorf("the call took %s after its deadline of 200ms", took)
	}
	select {
	case <-first.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the model process still runs 10s after its call's deadline")
	}
	short, _ := loadFixture(t, DefaultModel)
	got, err := e.Embed(context.Background(), short[:4])
	if err != nil {
		t.Fatal(err)
	}
	sameAsLocalModel(t, short[:4], got)
}

// TestModelProcessStartErrors: a missing file is named before any process
// starts; a corrupt model is found by the model process and said as the
// model in process says it. Both are start errors (exit 2).
func TestModelProcessStartErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(Config{ModelDir: dir, Background: true})
	if !IsStartError(err) || !strings.Contains(err.Error(), filepath.Join(dir, modelFileName)+" is missing") || !strings.Contains(err.Error(), FetchTarget) {
		t.Fatalf("missing model: %v, want a start error naming %s and %s", err, modelFileName, FetchTarget)
	}
	tokenizer, err := os.ReadFile(filepath.Join(modelDir(DefaultModel), tokenizerFileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, tokenizerFileName), tokenizer, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, modelFileName), []byte("not a model"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, inProcess := Open(Config{ModelDir: dir})
	_, err = Open(Config{ModelDir: dir, Background: true})
	if !IsStartError(err) || !errors.Is(err, ErrModelFiles) || inProcess == nil || err.Error() != inProcess.Error() {
		t.Fatalf("corrupt model: %v\nin process: %v\nwant the same start error", err, inProcess)
	}
}

// threadNices reads the nice value of every thread of process pid (the
// 19th field of its stat line).
func threadNices(t *testing.T, pid int) map[int]int {
	t.Helper()
	threads, err := proctest.ThreadStats(pid)
	if err != nil {
		t.Fatal(err)
	}
	nices := map[int]int{}
	for tid, fields := range threads {
		nice, err := strconv.Atoi(fields[proctest.Nice])
		if err != nil {
			t.Fatal(err)
		}
		nices[tid] = nice
	}
	return nices
}
