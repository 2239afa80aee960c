package main

import (
	"os"
	"strings"
	"testing"

	"graphsync/embed"
)

// envRunMain makes the test binary run graphsync itself, with the arguments
// in the variable (separated by \x1f): tests that must SIGKILL a command
// start the test binary as a child this way.
const envRunMain = "GRAPHSYNC_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	// Sync started by a test runs its model in this binary (ADR 0032).
	embed.ServeWorkerIfAsked()
	if args, ok := os.LookupEnv(envRunMain); ok {
		os.Exit(run(strings.Split(args, "\x1f")))
	}
	os.Exit(m.Run())
}
