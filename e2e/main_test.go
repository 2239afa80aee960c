package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// graphsyncBin is the binary under test, built once by TestMain.
var graphsyncBin string

// envBuildFlags passes extra `go build` flags for the binary under test, for
// example GRAPHSYNC_E2E_BUILD_FLAGS=-race to run the service under the race
// detector (slower).
const envBuildFlags = "GRAPHSYNC_E2E_BUILD_FLAGS"

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "graphsync-e2e-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: temp dir for the binary: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	graphsyncBin = filepath.Join(dir, "graphsync")
	args := []string{"build", "-o", graphsyncBin}
	args = append(args, strings.Fields(os.Getenv(envBuildFlags))...)
	args = append(args, "graphsync/cmd/graphsync")
	started := time.Now()
	build := exec.Command("go", args...)
	if output, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go %v: %v\n%s", args, err, output)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: built %s in %s\n", graphsyncBin, time.Since(started).Round(time.Millisecond))
	return m.Run()
}
