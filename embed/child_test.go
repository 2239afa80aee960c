//go:build cgo

package embed

import (
	"os"
	"os/exec"
	"testing"
)

// runChild runs one test of this package in a child process with extra
// environment, and fails when the child fails.
func runChild(t *testing.T, test string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child %s: %v\n%s", test, err, out)
	}
}
