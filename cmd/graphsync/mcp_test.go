package main

import (
	"strings"
	"testing"
)

// graphsync mcp names a wrong setting before it connects (the servers are
// on a port nothing listens on), with exit 2 and one line.
func TestMCPFlagMistakesAreNamedBeforeConnecting(t *testing.T) {
	t.Setenv("GRAPHSYNC_TENANT", "")
	pg, bolt := "postgres://x@127.0.0.1:1/x?connect_timeout=2", "bolt://127.0.0.1:1"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mcp"}, "--tenant"},
		{[]string{"mcp", "--tenant", "0"}, "--tenant"},
		{[]string{"mcp", "--tenant", "1", "--call-timeout", "0s"}, "--call-timeout"},
		{[]string{"mcp", "--tenant", "1", "--max-concurrent-per-token", "0"}, "--max-concurrent-per-token"},
		{[]string{"mcp", "--http", "127.0.0.1:0", "--max-sessions-per-token", "0"}, "--max-sessions-per-token"},
		{[]string{"mcp", "token"}, "want create, list or revoke"},
		{[]string{"mcp", "token", "frob"}, "frob"},
		{[]string{"mcp", "token", "create"}, "--tenant"},
		{[]string{"mcp", "token", "revoke", "--tenant", "1"}, "one token id"},
		{[]string{"mcp", "token", "revoke", "--tenant", "1", "abc"}, `"abc"`},
		{[]string{"mcp", "token", "list", "extra"}, `"extra"`},
	} {
		args := append(c.args, "--pg-url", pg, "--log-level", "error")
		if len(c.args) < 2 || c.args[1] != "token" {
			args = append(args, "--neo4j-uri", bolt)
		}
		code, stderr := runCapturingStderr(t, args)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "127.0.0.1:1") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, want 2 and one line naming %s:\n%s", c.args, code, c.want, stderr)
		}
	}
}
