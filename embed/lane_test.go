//go:build cgo && linux

package embed

import (
	"context"
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
	texts, _ := loadFixture(t, DefaultModel)
	got, err := e.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	// Two threads: the lane and the one intra-op thread ONNX Runtime adds
	// to its caller for Threads 2.
	if n := nicedThreads(t) - before; n < 2 {
		t.Errorf("%d more threads at nice %d while the model is loaded; want the lane's and ONNX Runtime's (2)", n, backgroundNice)
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

// nicedThreads counts the process's threads at backgroundNice
// (/proc/self/task/*/stat: the nice value is the 19th field, the 17th
// after the command name in parentheses).
func nicedThreads(t *testing.T) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, path := range stats {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue // the thread ended since the glob
		}
		fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
		if len(fields) < 17 {
			t.Fatalf("%s: %d fields after the name", path, len(fields))
		}
		if nice, err := strconv.Atoi(fields[16]); err == nil && nice == backgroundNice {
			n++
		}
	}
	return n
}
