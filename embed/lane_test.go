//go:build cgo && linux

package embed

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBackgroundModelRunsAtTheLowestPriority: with Background, the model's
// threads (the lane's and ONNX Runtime's intra-op thread, which must start
// from the lane to inherit its priority) run at nice 19, the vectors are the
// ones the embedder gives without it, and Close ends those threads.
func TestBackgroundModelRunsAtTheLowestPriority(t *testing.T) {
	before := nicedThreads(t)
	e, err := Open(Config{ModelDir: modelDir(DefaultModel), BatchSize: 16, Threads: 2, Background: true})
	if err != nil {
		t.Fatalf("open embedder (run make model first): %v", err)
	}
	defer e.Close()
	if err := BackgroundError(e); err != nil {
		t.Fatalf("the model runs at the process's priority: %v", err)
	}
	// A few texts: at nice 19 beside busy threads of the same scheduling
	// group (a loaded test machine) the lane gets a sliver of a core.
	texts, _ := loadFixture(t, DefaultModel)
	texts = texts[:4]
	got, err := e.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	// Two threads: the lane and the one intra-op thread ONNX Runtime adds
	// to its caller for Threads 2.
	if n := nicedThreads(t) - before; n != 2 {
		t.Errorf("%d more threads at nice %d while the model is loaded; want the lane's and ONNX Runtime's (2)", n, backgroundNice)
	}
	// Go never ends the main thread: a lane there would leave its nice
	// value on it after Close.
	if nice := threadNice(t, os.Getpid()); nice == backgroundNice {
		t.Errorf("the main thread is at nice %d: the lane runs on it", nice)
	}
	want, err := sharedEmbedder(t).Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range texts {
		if c := cosine(got[i], want[i]); c < 0.99999 {
			t.Errorf("text %d: cosine %v to the embedder without Background", i, c)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// Thread exits are asynchronous: poll.
	deadline := time.Now().Add(10 * time.Second)
	for n := nicedThreads(t) - before; n > 0; n = nicedThreads(t) - before {
		if time.Now().After(deadline) {
			t.Fatalf("%d threads still at nice %d 10s after Close", n, backgroundNice)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// threadNice reads thread tid's nice value.
func threadNice(t *testing.T, tid int) int {
	t.Helper()
	nice, err := statNice(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		t.Fatal(err)
	}
	return nice
}

// statNice reads the nice value of a /proc stat file: the 19th field, the
// 17th after the command name in parentheses.
func statNice(path string) (int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(fields) < 17 {
		return 0, fmt.Errorf("%s: %d fields after the name", path, len(fields))
	}
	return strconv.Atoi(fields[16])
}

// nicedThreads counts the process's threads at backgroundNice.
func nicedThreads(t *testing.T) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, path := range stats {
		nice, err := statNice(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread ended since the glob
		}
		if err != nil {
			t.Fatal(err)
		}
		if nice == backgroundNice {
			n++
		}
	}
	return n
}
