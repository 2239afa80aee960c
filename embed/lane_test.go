//go:build cgo && linux

package embed

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBackgroundModelRunsAtTheLowestPriority: with Background, one thread
// (the lane; Threads 1 adds no ONNX Runtime thread) runs at nice 19, not the
// main thread, and the model's runs take CPU time on it; the vectors are
// the ones the embedder gives without it, and Close ends that thread.
func TestBackgroundModelRunsAtTheLowestPriority(t *testing.T) {
	before := nicedThreadIDs(t)
	e, err := Open(Config{ModelDir: modelDir(DefaultModel), BatchSize: 16, Threads: 1, Background: true})
	if err != nil {
		t.Fatalf("open embedder (run make model first): %v", err)
	}
	defer e.Close()
	if err := BackgroundError(e); err != nil {
		t.Fatalf("the model runs at the process's priority: %v", err)
	}
	lanes := nicedThreadIDs(t)
	if len(lanes) != len(before)+1 {
		t.Fatalf("%d more threads at nice %d once the model is loaded; want the lane (1)", len(lanes)-len(before), backgroundNice)
	}
	lane := 0
	for _, tid := range lanes {
		if !slices.Contains(before, tid) {
			lane = tid
		}
	}
	// Go never ends the main thread: a lane there would leave its nice
	// value on it after Close.
	if lane == os.Getpid() {
		t.Fatalf("the lane runs on the main thread")
	}
	// A few texts: at nice 19 beside busy threads of the same scheduling
	// group (a loaded test machine) the lane gets a sliver of a core.
	texts, _ := loadFixture(t, DefaultModel)
	texts = texts[:8]
	cpuBefore := threadCPUTicks(t, lane)
	got, err := e.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	if used := threadCPUTicks(t, lane) - cpuBefore; used < 1 {
		t.Errorf("the lane used %d ticks of CPU while the model ran 8 texts; want the runs on it", used)
	}
	sameAsLocalModel(t, texts, got)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// Thread exits are asynchronous: poll.
	deadline := time.Now().Add(10 * time.Second)
	for slices.Contains(nicedThreadIDs(t), lane) {
		if time.Now().After(deadline) {
			t.Fatalf("the lane's thread %d is still there 10s after Close", lane)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// threadCPUTicks reads thread tid's user and system CPU time, in clock
// ticks (the 14th and 15th fields of its stat line).
func threadCPUTicks(t *testing.T, tid int) int {
	t.Helper()
	fields, err := statFields(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		t.Fatal(err)
	}
	utime, err1 := strconv.Atoi(fields[11])
	stime, err2 := strconv.Atoi(fields[12])
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	return utime + stime
}

// statFields are the fields of a /proc stat file after the command name
// in parentheses (the 3rd field on).
func statFields(path string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(fields) < 17 {
		return nil, fmt.Errorf("%s: %d fields after the name", path, len(fields))
	}
	return fields, nil
}

// nicedThreadIDs lists the process's threads at backgroundNice (the
// 19th field of a stat line).
func nicedThreadIDs(t *testing.T) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var tids []int
	for _, path := range stats {
		fields, err := statFields(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread ended since the glob
		}
		if err != nil {
			t.Fatal(err)
		}
		if nice, err := strconv.Atoi(fields[16]); err == nil && nice == backgroundNice {
			tid, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			if err != nil {
				t.Fatal(err)
			}
			tids = append(tids, tid)
		}
	}
	return tids
}
