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
	"slices"
	"strconv"
	"strings"
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
	exitOn := os.Getenv(workerExitOnEnv)
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
		if exitOn != "" && slices.Contains(req.Texts, exitOn) {
			fmt.Fprintln(os.Stderr, "graphsync model process: exits on the test's text, as on a crash")
			os.Exit(3)
		}
		var answer workerAnswer
		vectors, err := e.Embed(context.Background(), req.Texts)
		if err != nil {
			answer.Error = err.Error()
			answer.Unavailable = errors.Is(err, ErrUnavailable)
		} else {
			answer.Vectors = vectors
		}
		err = writeFrame(out, answer)
		var unsupported *json.UnsupportedValueError
		if errors.As(err, &unsupported) {
			// A NaN or an infinity in a vector: the call fails, not the
			// process.
			err = writeFrame(out, workerAnswer{Error: "embed: the model gave a vector that is not a number: " + unsupported.Str})
		}
		if err != nil {
			return err
		}
	}
}

// workerExitOnEnv names a text that makes the model process exit when it
// is asked to embed it: tests use it for a text that crashes the model.
const workerExitOnEnv = "GRAPHSYNC_EMBED_WORKER_EXIT_ON"

// backgroundNice is the model process's nice value: the lowest priority.
const backgroundNice = 19

// lowerProcessPriority sets the nice value of each of the calling
// process's threads (Linux keeps one per thread; threads started later
// inherit it) and of its session group (its autogroup, where Linux has
// them). Without autogroups (a process in a cgroup of its own: a
// container, a systemd service) the file is absent and the threads' nice
// orders the model after the other processes of that cgroup. Linux
// refuses an autogroup change within 100 ms of another anywhere on the
// machine (EAGAIN, to processes without CAP_SYS_ADMIN): it is tried again
// for up to 5 s.
func lowerProcessPriority() error {
	var errs []error
	// Twice: a thread started during the first pass by one not yet
	// lowered kept the usual priority.
	for range 2 {
		if err := lowerThreads(); err != nil {
			errs = append(errs, err)
			break
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := os.WriteFile("/proc/self/autogroup", []byte(strconv.Itoa(backgroundNice)), 0)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			break
		}
		if !errors.Is(err, syscall.EAGAIN) || time.Now().After(deadline) {
			errs = append(errs, fmt.Errorf("embed: lower the model process's scheduling group to nice %d: %w", backgroundNice, err))
			break
		}
		time.Sleep(20 * time.Millisecond) // the kernel's limit is 100 ms
	}
	return errors.Join(errs...)
}

// lowerThreads sets every thread of the calling process to backgroundNice.
func lowerThreads() error {
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

// workerEnvKeep names the variables of this process's environment the
// model process is handed (workerEnviron holds the rest back): the dynamic
// loader's, the C allocator's (how ONNX Runtime's memory is bounded) and
// the Go runtime's settings; workerEnvKeepPrefixes, families of them. The
// rest, database URLs, passwords and API keys among them, is not handed
// down: the model process needs none of it.
var workerEnvKeep = []string{
	"LD_LIBRARY_PATH", "LD_PRELOAD", "GLIBC_TUNABLES", "TMPDIR",
	"GOMAXPROCS", "GOGC", "GOMEMLIMIT", "GODEBUG", "GOTRACEBACK", "GOCOVERDIR",
	workerExitOnEnv,
}

var workerEnvKeepPrefixes = []string{"MALLOC_", "OMP_"}

// workerEnviron is the model process's environment, from this process's
// environ: workerEnv set, and the variables workerEnvKeep and
// workerEnvKeepPrefixes name.
func workerEnviron(environ []string) []string {
	env := []string{workerEnv + "=1"}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(workerEnvKeep, name) || slices.ContainsFunc(workerEnvKeepPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			env = append(env, kv)
		}
	}
	return env
}

// maxLogLine bounds one forwarded line of the model process's standard
// error; a longer one is cut.
const maxLogLine = 4096

// forwardLines hands each line read from r to onLog (nil: writes it to
// os.Stderr) until r ends, and closes r.
func forwardLines(r *os.File, onLog func(line string)) {
	defer r.Close()
	if onLog == nil {
		_, _ = io.Copy(os.Stderr, r)
		return
	}
	lines := bufio.NewReaderSize(r, maxLogLine)
	for {
		line, err := lines.ReadSlice('\n')
		if len(line) > 0 {
			onLog(strings.TrimRight(string(line), "\r\n"))
		}
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = lines.ReadSlice('\n') // the rest of a long line is dropped
		}
		if err != nil {
			return
		}
	}
}

// workerEmbedder runs the local model in a model process. A process that
// could not start again fails the call as unavailable (the stage backs
// off). One that ends during a call (killed, out of memory, or a text
// that crashes the native runtime) fails it as a refusal of those texts:
// the stage halves the batch, so a text that crashes the model ends up
// refused alone, and the rest are embedded. A call of one text is tried
// once more in a new process first. The next call starts another.
type workerEmbedder struct {
	start     workerStart
	onLog     func(line string) // nil: the lines go to os.Stderr
	model     string
	dimension int

	mu          sync.Mutex // one call at a time; guards what follows
	proc        *workerProc
	closed      bool
	priorityErr error
}

// workerProc is one running model process.
type workerProc struct {
	cmd    *exec.Cmd
	in     *os.File // the process's stdin
	out    *os.File // its stdout
	read   *bufio.Reader
	done   chan struct{} // closed once the process has been waited for
	logged chan struct{} // closed once its standard error has been read to the end
}

// openWorker checks the model files as openONNX does (the same one-line
// error names the first missing one), then starts the model process and
// waits until it has loaded the model.
func openWorker(cfg Config) (Embedder, error) {
	if err := checkModelFiles(cfg); err != nil {
		return nil, err
	}
	e := &workerEmbedder{start: workerStart{ModelDir: cfg.ModelDir, RuntimeLib: cfg.RuntimeLib,
		MaxTokens: cfg.MaxTokens, BatchSize: cfg.BatchSize, Threads: cfg.Threads}, onLog: cfg.OnProcessLog}
	proc, hello, err := startWorker(context.Background(), e.start, e.onLog)
	if err != nil {
		return nil, err
	}
	e.proc, e.model, e.dimension = proc, hello.Model, hello.Dimension
	e.setPriorityError(hello)
	return e, nil
}

// setPriorityError keeps why the latest model process runs at the usual
// priority (nil when it runs at the lowest).
func (e *workerEmbedder) setPriorityError(hello workerHello) {
	e.priorityErr = nil
	if hello.PriorityError != "" {
		e.priorityErr = errors.New(hello.PriorityError)
	}
}

// startWorker starts the model process, sends it start and reads its
// hello; ctx ending first kills it. The process runs this binary in a
// session of its own, so in an autogroup of its own, whose priority it
// lowers once the model is loaded; it is killed when the thread that
// started it ends (and reads the end of its input when this process
// does). Each line it writes to its standard error goes to onLog (nil:
// to this process's standard error).
func startWorker(ctx context.Context, start workerStart, onLog func(line string)) (*workerProc, workerHello, error) {
	var hello workerHello
	exe, err := os.Executable()
	if err != nil {
		return nil, hello, fmt.Errorf("embed: find this binary to start the model process: %w", err)
	}
	// Pipes of our own: exec's would be closed by Wait, which may run
	// before the process's last answer (its start error) is read.
	var pipes [3][2]*os.File // stdin, stdout, stderr: read end, write end
	for i := range pipes {
		if pipes[i][0], pipes[i][1], err = os.Pipe(); err != nil {
			for _, made := range pipes[:i] {
				closeFiles(made[:]...)
			}
			return nil, hello, fmt.Errorf("embed: model process: %w", err)
		}
	}
	childIn, in := pipes[0][0], pipes[0][1]
	out, childOut := pipes[1][0], pipes[1][1]
	logs, childErr := pipes[2][0], pipes[2][1]
	cmd := exec.Command(exe)
	cmd.Args = []string{filepath.Base(exe) + " (model process)"}
	cmd.Env = workerEnviron(os.Environ())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = childIn, childOut, childErr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	closeFiles(childIn, childOut, childErr)
	if err != nil {
		closeFiles(in, out, logs)
		return nil, hello, fmt.Errorf("embed: start the model process: %w", err)
	}
	p := &workerProc{cmd: cmd, in: in, out: out, read: bufio.NewReader(out), done: make(chan struct{}), logged: make(chan struct{})}
	go func() {
		forwardLines(logs, onLog)
		close(p.logged)
	}()
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	if err := p.exchange(ctx, start, &hello); err != nil {
		if ctx.Err() != nil {
			return nil, hello, ctx.Err()
		}
		return nil, hello, fmt.Errorf("embed: the model process ended before it loaded the model: %w", err)
	}
	if hello.Error != "" {
		p.kill()
		return nil, hello, &workerStartError{msg: hello.Error, kind: hello.Kind}
	}
	return p, hello, nil
}

// closeFiles closes files.
func closeFiles(files ...*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// exchange writes request and reads the answer into answer. When ctx ends
// first, or the exchange fails, the process is killed: a model run cannot
// be interrupted, and a process that failed one exchange is not trusted
// with the next.
func (p *workerProc) exchange(ctx context.Context, request, answer any) error {
	result := make(chan error, 1)
	go func() {
		err := writeFrame(p.in, request)
		if err == nil {
			err = readFrame(p.read, answer)
		}
		result <- err
	}()
	select {
	case err := <-result:
		if err != nil {
			p.kill()
		}
		return err
	case <-ctx.Done():
		p.kill()
		<-result
		return ctx.Err()
	}
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

// kill ends the process, waits for it and closes the pipes.
func (p *workerProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
	p.waitLogged()
	p.in.Close()
	p.out.Close()
}

// waitLogged waits, for up to a second, until the ended process's last
// lines have been handed on: its last words (a crash) come before the
// error its end gives, and before sync's own last line.
func (p *workerProc) waitLogged() {
	select {
	case <-p.logged:
	case <-time.After(time.Second):
	}
}

// stop closes the process's input, so that it ends once its call in
// flight is answered, and kills it if it has not ended within wait.
func (p *workerProc) stop(wait time.Duration) {
	_ = p.in.Close()
	select {
	case <-p.done:
		p.waitLogged()
		p.out.Close()
	case <-time.After(wait):
		p.kill()
	}
}

func (e *workerEmbedder) backgroundError() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.priorityErr
}

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

// Embed sends texts to the model process and waits for its vectors.
func (e *workerEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if len(texts) == 0 {
		return [][]float32{}, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errors.New("embed: embedder is closed")
	}
	answer, err := e.call(ctx, texts)
	if err != nil && len(texts) == 1 && errors.Is(err, errProcessEnded) && ctx.Err() == nil {
		// Killed from outside, or this text crashes the model: a new
		// process tells which.
		answer, err = e.call(ctx, texts)
	}
	switch {
	case err != nil:
		return nil, err
	case answer.Unavailable:
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, answer.Error)
	case answer.Error != "":
		return nil, errors.New(answer.Error)
	case len(answer.Vectors) != len(texts):
		return nil, fmt.Errorf("embed: the model process answered %d vectors for %d texts", len(answer.Vectors), len(texts))
	}
	return answer.Vectors, nil
}

// errProcessEnded is wrapped by the error of a call during which the model
// process ended: not unavailable, so that the stage halves the batch.
var errProcessEnded = errors.New("the model process ended while it embedded these texts")

// call starts a model process if none runs, and sends it texts.
func (e *workerEmbedder) call(ctx context.Context, texts []string) (workerAnswer, error) {
	var answer workerAnswer
	if e.proc == nil {
		proc, hello, err := startWorker(ctx, e.start, e.onLog)
		if err != nil {
			if ctx.Err() != nil {
				return answer, ctx.Err()
			}
			return answer, fmt.Errorf("%w: start the model process again: %w", ErrUnavailable, err)
		}
		if hello.Model != e.model || hello.Dimension != e.dimension {
			proc.kill()
			return answer, fmt.Errorf("%w: the model process loaded %s (%d dimensions), not %s (%d)",
				ErrUnavailable, hello.Model, hello.Dimension, e.model, e.dimension)
		}
		e.proc = proc
		e.setPriorityError(hello)
	}
	err := e.proc.exchange(ctx, workerRequest{Texts: texts}, &answer)
	if err != nil {
		e.proc = nil
		if ctx.Err() != nil {
			return answer, ctx.Err()
		}
		return answer, fmt.Errorf("embed: %w (a batch of %d): %w", errProcessEnded, len(texts), err)
	}
	return answer, nil
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
