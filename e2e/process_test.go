package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"graphsync/internal/proctest"
)

const (
	killSignal = syscall.SIGKILL
	termSignal = syscall.SIGTERM
)

// syncProc is one `graphsync sync` child process.
type syncProc struct {
	name     string
	relayID  string
	httpAddr string
	logPath  string
	cmd      *exec.Cmd
	logFile  *os.File
	// done is closed once the process has exited and state is set.
	done  chan struct{}
	state *os.ProcessState
}

// startSync starts `graphsync sync` with the given arguments plus its own
// --relay-id (name and a sequence number) and --http-addr (a free port on
// loopback), in env (childEnv when nil). Its stdout and stderr go to a log
// file whose tail the test prints if it fails.
func (s *stack) startSync(name string, env []string, args ...string) *syncProc {
	s.t.Helper()
	if env == nil {
		env = s.childEnv()
	}
	logPath := s.logPath(name)
	logFile, err := os.Create(logPath)
	if err != nil {
		s.t.Fatalf("create log %s: %v", logPath, err)
	}
	p := &syncProc{
		name:     fmt.Sprintf("%s-%d", name, s.started),
		httpAddr: freeLoopbackAddr(s.t),
		logPath:  logPath,
		logFile:  logFile,
		done:     make(chan struct{}),
	}
	p.relayID = "e2e-" + p.name
	full := append([]string{"sync", "--relay-id", p.relayID, "--http-addr", p.httpAddr}, args...)
	p.cmd = exec.Command(graphsyncBin, full...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		s.t.Fatalf("start graphsync %v: %v", full, err)
	}
	s.procs = append(s.procs, p)
	go func() {
		p.cmd.Wait() //nolint:errcheck // the exit status is read from ProcessState
		p.state = p.cmd.ProcessState
		p.logFile.Close()
		close(p.done)
	}()
	s.logf("started %s (pid %d): graphsync %s", p.name, p.cmd.Process.Pid, strings.Join(full, " "))
	return p
}

// freeLoopbackAddr returns a loopback address whose port was free a moment ago.
func freeLoopbackAddr(t testing.TB) string {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer listener.Close()
	return listener.Addr().String()
}

func (p *syncProc) pid() int { return p.cmd.Process.Pid }

func (p *syncProc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *syncProc) signal(sig syscall.Signal) {
	if p.running() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// waitExit waits up to timeout for the process to exit and returns its exit
// code (-1 when a signal killed it); ok is false if it is still running.
func (p *syncProc) waitExit(timeout time.Duration) (code int, ok bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return p.state.ExitCode(), true
	case <-timer.C:
		return 0, false
	}
}

// kill SIGKILLs p and waits until it is gone.
func (s *stack) kill(p *syncProc) {
	t := s.t
	t.Helper()
	if !p.running() {
		t.Fatalf("%s exited before the test killed it: %s", p.name, p.exitDescription())
	}
	p.signal(killSignal)
	if _, ok := p.waitExit(exitTimeout); !ok {
		t.Fatalf("%s still running %s after SIGKILL", p.name, exitTimeout)
	}
	s.logf("killed %s (SIGKILL)", p.name)
}

// killInFlight waits until one of ps holds leased rows (looking at them in
// the order given), SIGKILLs that one at once and returns it with how many
// rows its lease still covers (the batch it died with). A relay seen
// holding rows is stopped (SIGSTOP) and looked at again before the kill:
// a batch it settled between the look and the SIGKILL's delivery made
// every kill of a TestChaos/stream run miss its batch (stop 49's CI run,
// "no SIGKILL hit a relay with a batch in flight"). One that holds none
// once stopped goes on (SIGCONT).
//
// It looks at random intervals of 2 to 20 ms, not on the tick:
// a relay that has caught up polls every --poll-interval (100ms, the tick)
// and holds each batch for a few ms of that period. Two tickers of one
// period keep their phase, so a look on the tick that first fell between
// two batches fell there for the whole minute (TestChaos/poll, stop 45's
// CI run: "no row leased" while the relay kept up with the writer).
func (s *stack) killInFlight(ps ...*syncProc) (*syncProc, int64) {
	s.t.Helper()
	var busy *syncProc
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.name
	}
	randomLook := func() time.Duration {
		return inFlightLookMin + time.Duration(rand.Int64N(int64(inFlightLookMax-inFlightLookMin)))
	}
	pollUntil(s.t, time.Minute, randomLook, strings.Join(names, " or ")+" to hold a batch", func() (bool, string) {
		for _, p := range ps {
			if s.leasedBy(p.relayID) == 0 {
				continue
			}
			s.stop(p)
			if s.leasedBy(p.relayID) > 0 {
				busy = p
				return true, ""
			}
			p.signal(syscall.SIGCONT)
		}
		return false, "no row leased" + s.writerState()
	})
	s.kill(busy)
	inFlight := s.leasedBy(busy.relayID)
	s.logf("%s died with %d rows in flight", busy.name, inFlight)
	return busy, inFlight
}

// stop sends p SIGSTOP and waits until every thread of it has stopped.
func (s *stack) stop(p *syncProc) {
	s.t.Helper()
	p.signal(syscall.SIGSTOP)
	pollUntil(s.t, exitTimeout, func() time.Duration { return time.Millisecond }, p.name+" to stop", func() (bool, string) {
		threads, err := proctest.ThreadStats(p.cmd.Process.Pid)
		if err != nil {
			return false, err.Error()
		}
		for _, fields := range threads {
			if state := fields[proctest.State]; state != "T" && state != "t" {
				return false, "a thread in state " + state
			}
		}
		return true, ""
	})
}

// Looks for a batch in flight are this far apart, at random.
const (
	inFlightLookMin = 2 * time.Millisecond
	inFlightLookMax = 20 * time.Millisecond
)

func (p *syncProc) exitDescription() string {
	if p.running() {
		return "still running"
	}
	return p.state.String()
}

// get requests path from the process's HTTP server.
func (p *syncProc) get(path string) (status int, body string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.httpAddr+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(raw)), err
}

// readyz reports /readyz's status code and body.
func (p *syncProc) readyz() (int, string) {
	status, body, err := p.get("/readyz")
	if err != nil {
		return 0, err.Error()
	}
	return status, body
}

// waitReadyz waits until /readyz answers want, failing the test if the
// process exits first.
func (p *syncProc) waitReadyz(t testing.TB, want int, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		status, body := p.readyz()
		if status == want {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited (%s) while the test waited for /readyz %d; log tail:\n%s", p.name, p.exitDescription(), want, tail(p.logPath, 20))
		case <-deadline.C:
			t.Fatalf("%s: /readyz did not answer %d within %s; last %d: %s", p.name, want, timeout, status, body)
		case <-ticker.C:
		}
	}
}

// metric sums the samples of the named metric (every label set) on /metrics.
func (p *syncProc) metric(name string) (float64, error) {
	status, body, err := p.get("/metrics")
	if err != nil {
		return 0, err
	}
	if status != http.StatusOK {
		return 0, fmt.Errorf("/metrics answered %d", status)
	}
	var sum float64
	found := false
	scanner := bufio.NewScanner(strings.NewReader(body))
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok || (series != name && !strings.HasPrefix(series, name+"{")) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum += v
		found = true
	}
	if !found {
		return 0, errors.New("no metric " + name)
	}
	return sum, nil
}
