//go:build cgo && linux

package embed

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The model process (ADR 0032). Sync runs the local model in a child
// process of its own binary, in a session of its own at the lowest CPU
// priority, so that the relay, PostgreSQL and Neo4j go first whenever they
// want a core. Linux shares the CPU first between scheduling groups (an
// autogroup per session, a cgroup per container or service), then by nice
// value within one; a thread at nice 19 inside sync's process (ADR 0029)
// still took its group's full share from Neo4j's and PostgreSQL's groups.

// workerEnv, set to "1", makes a graphsync process serve as the model
// process (ServeWorkerIfAsked).
const workerEnv = "GRAPHSYNC_EMBED_WORKER"

// maxFrame bounds a frame's length: 64 texts of 1 MB are far below it.
const maxFrame = 1 << 30

// workerStart is the first frame to the model process: what to load.
type workerStart struct {
	ModelDir   string `json:"model_dir"`
	RuntimeLib string `json:"runtime_lib"`
	MaxTokens  int    `json:"max_tokens"`
	BatchSize  int    `json:"batch_size"`
	Threads    int    `json:"threads"`
}

// workerHello is the model process's first answer: the model it loaded,
// or why it could not (Kind "files" or "config" for a start error).
type workerHello struct {
	Model         string `json:"model,omitempty"`
	Dimension     int    `json:"dimension,omitempty"`
	PriorityError string `json:"priority_error,omitempty"`
	Error         string `json:"error,omitempty"`
	Kind          string `json:"kind,omitempty"`
}

type workerRequest struct {
	Texts []string `json:"texts"`
}

type workerAnswer struct {
	Vectors     [][]float32 `json:"vectors,omitempty"`
	Error       string      `json:"error,omitempty"`
	Unavailable bool        `json:"unavailable,omitempty"`
}

// ServeWorkerIfAsked serves as the model process and exits when the
// process was started as one; otherwise it returns at once. A binary whose
// commands open an embedder with Config.Background calls it first in main
// (and in TestMain).
func ServeWorkerIfAsked() {
	if os.Getenv(workerEnv) != "1" {
		return
	}
	if err := serveWorker(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "graphsync model process: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveWorker loads the model the first frame names, lowers the process's
// priority, says hello and answers requests until in closes.
func serveWorker(in io.Reader, out io.Writer) error {
	r := bufio.NewReader(in)
	var start workerStart
	if err := readFrame(r, &start); err != nil {
		return fmt.Errorf("read the start frame: %w", err)
	}
	cfg := Config{Kind: KindONNX, ModelDir: start.ModelDir, RuntimeLib: start.RuntimeLib,
		MaxTokens: start.MaxTokens, BatchSize: start.BatchSize, Threads: start.Threads}
	// The model loads at the priority the process started with: at nice 19
	// beside busy processes the load took minutes, and sync starts only
	// once it is loaded.
	e, err := openONNX(cfg.withDefaults())
	if err != nil {
		hello := workerHello{Error: err.Error()}
		switch {
		case errors.Is(err, ErrModelFiles):
			hello.Kind = "files"
		case errors.Is(err, ErrConfig):
			hello.Kind = "config"
		}
		return writeFrame(out, hello)
	}
	defer e.Close()
	hello := workerHello{Model: e.Model(), Dimension: e.Dimension()}
	if err := lowerProcessPriority(); err != nil {
		hello.PriorityError = err.Error()
	}
	if err := writeFrame(out, hello); err != nil {
		return err
	}
	for {
		var req workerRequest
		if err := readFrame(r, &req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil // the parent closed the pipe, or ended
			}
			return fmt.Errorf("read a request: %w", err)
		}
		var answer workerAnswer
		vectors, err := e.Embed(context.Background(), req.Texts)
		if err != nil {
			answer.Error = err.Error()
			answer.Unavailable = errors.Is(err, ErrUnavailable)
		} else {
			answer.Vectors = vectors
		}
		if err := writeFrame(out, answer); err != nil {
			return err
		}
	}
}

// backgroundNice is the model process's nice value: the lowest priority.
const backgroundNice = 19

// lowerProcessPriority sets the nice value of the calling process's
// session group (its autogroup, where Linux has them) and of each of its
// threads (Linux keeps one per thread; threads started later inherit it).
// Without autogroups (a process in a cgroup of its own: a container, a
// systemd service) the file is absent and the threads' nice orders the
// model after the other processes of that cgroup.
func lowerProcessPriority() error {
	if err := os.WriteFile("/proc/self/autogroup", []byte(strconv.Itoa(backgroundNice)), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("embed: lower the model process's scheduling group to nice %d: %w", backgroundNice, err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("embed: list the model process's threads: %w", err)
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		// A thread that has ended since the listing is not an error.
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, backgroundNice); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("embed: lower the model process's priority to nice %d: %w", backgroundNice, err)
		}
	}
	return nil
}

// workerEmbedder runs the local model in a model process. A process that
// ends (killed, out of memory) fails the call in flight as unavailable;
// the next call starts another.
type workerEmbedder struct {
	start       workerStart
	model       string
	dimension   int
	priorityErr error

	mu     sync.Mutex // one call at a time; guards proc and closed
	proc   *workerProc
	closed bool
}

// workerProc is one running model process.
type workerProc struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	done chan struct{} // closed once the process has been waited for
}

// openWorker checks the model files as openONNX does (the same one-line
// error names the first missing one), then starts the model process and
// waits until it has loaded the model.
func openWorker(cfg Config) (Embedder, error) {
	if err := checkModelFiles(cfg); err != nil {
		return nil, err
	}
	e := &workerEmbedder{start: workerStart{ModelDir: cfg.ModelDir, RuntimeLib: cfg.RuntimeLib,
		MaxTokens: cfg.MaxTokens, BatchSize: cfg.BatchSize, Threads: cfg.Threads}}
	proc, hello, err := startWorker(e.start)
	if err != nil {
		return nil, err
	}
	e.proc, e.model, e.dimension = proc, hello.Model, hello.Dimension
	if hello.PriorityError != "" {
		e.priorityErr = errors.New(hello.PriorityError)
	}
	return e, nil
}

// startWorker starts the model process, sends it start and reads its
// hello. The process runs this binary in a session of its own: its own
// autogroup, whose priority it lowers once the model is loaded.
func startWorker(start workerStart) (*workerProc, workerHello, error) {
	var hello workerHello
	exe, err := os.Executable()
	if err != nil {
		return nil, hello, fmt.Errorf("embed: find this binary to start the model process: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Args = []string{filepath.Base(exe) + " (model process)"}
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, hello, fmt.Errorf("embed: model process: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, hello, fmt.Errorf("embed: model process: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, hello, fmt.Errorf("embed: start the model process: %w", err)
	}
	p := &workerProc{cmd: cmd, in: in, out: bufio.NewReader(out), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	err = writeFrame(in, start)
	if err == nil {
		err = readFrame(p.out, &hello)
	}
	if err != nil {
		p.kill()
		return nil, hello, fmt.Errorf("embed: the model process ended before it loaded the model: %w", err)
	}
	if hello.Error != "" {
		p.kill()
		return nil, hello, &workerStartError{msg: hello.Error, kind: hello.Kind}
	}
	return p, hello, nil
}

// workerStartError is the model process's own start error, said as it
// said it; a missing or corrupt file wraps ErrModelFiles, as in process.
type workerStartError struct{ msg, kind string }

func (e *workerStartError) Error() string { return e.msg }

func (e *workerStartError) Unwrap() error {
	switch e.kind {
	case "files":
		return ErrModelFiles
	case "config":
		return ErrConfig
	}
	return nil
}

// kill ends the process and waits for it.
func (p *workerProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop closes the process's input, so that it ends once its call in
// flight is answered, and kills it if it has not ended within wait.
func (p *workerProc) stop(wait time.Duration) {
	_ = p.in.Close()
	select {
	case <-p.done:
	case <-time.After(wait):
		p.kill()
	}
}

func (e *workerEmbedder) backgroundError() error { return e.priorityErr }

func (e *workerEmbedder) Model() string  { return e.model }
func (e *workerEmbedder) Dimension() int { return e.dimension }

// Close ends the model process once its call in flight is answered.
func (e *workerEmbedder) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	if e.proc != nil {
		e.proc.stop(10 * time.Second)
		e.proc = nil
	}
	return nil
}

// Embed sends texts to the model process and waits for its vectors. A call
// whose ctx ends first kills the process (a model run cannot be
// interrupted); the next call starts another.
func (e *workerEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if len(texts) == 0 {
		return [][]float32{}, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errors.New("embed: embedder is closed")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if e.proc == nil {
		proc, hello, err := startWorker(e.start)
		if err != nil {
			return nil, fmt.Errorf("%w: start the model process again: %w", ErrUnavailable, err)
		}
		if hello.Model != e.model || hello.Dimension != e.dimension {
			proc.kill()
			return nil, fmt.Errorf("%w: the model process loaded %s (%d dimensions), not %s (%d)",
				ErrUnavailable, hello.Model, hello.Dimension, e.model, e.dimension)
		}
		e.proc = proc
	}
	type result struct {
		answer workerAnswer
		err    error
	}
	proc := e.proc
	answered := make(chan result, 1)
	go func() {
		var r result
		r.err = writeFrame(proc.in, workerRequest{Texts: texts})
		if r.err == nil {
			r.err = readFrame(proc.out, &r.answer)
		}
		answered <- r
	}()
	var r result
	select {
	case r = <-answered:
	case <-ctx.Done():
		proc.kill()
		<-answered
		e.proc = nil
		return nil, ctx.Err()
	}
	if r.err != nil {
		proc.kill()
		e.proc = nil
		return nil, fmt.Errorf("%w: the model process ended: %w", ErrUnavailable, r.err)
	}
	switch {
	case r.answer.Unavailable:
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, r.answer.Error)
	case r.answer.Error != "":
		return nil, errors.New(r.answer.Error)
	case len(r.answer.Vectors) != len(texts):
		return nil, fmt.Errorf("embed: the model process answered %d vectors for %d texts", len(r.answer.Vectors), len(texts))
	}
	return r.answer.Vectors, nil
}

// writeFrame writes v as JSON after its length (4 bytes, big-endian).
func writeFrame(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	frame := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(frame, uint32(len(body)))
	_, err = w.Write(append(frame, body...))
	return err
}

// readFrame reads one frame into v. A stream that ends before a frame
// begins gives io.EOF; one that ends inside it, io.ErrUnexpectedEOF.
func readFrame(r *bufio.Reader, v any) error {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n > maxFrame {
		return fmt.Errorf("a frame of %d bytes", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	return json.Unmarshal(body, v)
}

// openBackground opens the local model in a model process.
func openBackground(cfg Config) (Embedder, error) { return openWorker(cfg) }
