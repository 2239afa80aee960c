package mcpserver_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"graphsync/internal/stacktest"
	"graphsync/retrieve"
)

// EnvPython names the Python interpreter with the `mcp` package (PyPI) that
// TestPythonClient runs; by default the venv `make mcp-client-venv` makes.
const EnvPython = "GRAPHSYNC_MCP_PYTHON"

// TestPythonClient runs an independent MCP client, the Python SDK, against
// the real command over stdio and over streamable HTTP with a token made by
// `graphsync mcp token create`. Without the venv it fails: make test makes
// it first.
func TestPythonClient(t *testing.T) {
	root := stacktest.RepoRoot(t)
	python := os.Getenv(EnvPython)
	if python == "" {
		python = filepath.Join(root, ".local", "venv-mcp", "bin", "python")
	}
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("no Python MCP client at %s (%v): run make mcp-client-venv, or set %s", python, err, EnvPython)
	}
	s := newStack(t)
	bin := binary(t)
	env := append(os.Environ(), "GRAPHSYNC_PG_URL="+s.pgURL, "GRAPHSYNC_NEO4J_URI="+stacktest.Neo4jURI(t), "GRAPHSYNC_LOG_LEVEL=warn")

	create := exec.Command(bin, "mcp", "token", "create", "--tenant", itoa(s.a.tenant), "--name", "python client")
	create.Env = env
	out, err := create.Output()
	if err != nil {
		t.Fatalf("mcp token create: %v", err)
	}
	token := strings.TrimSpace(string(out))
	if !strings.HasPrefix(token, "gsmcp_") {
		t.Fatalf("mcp token create printed %q", token)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	server := exec.CommandContext(ctx, bin, "mcp", "--http", "127.0.0.1:0")
	server.Env = env
	server.Cancel = func() error { return server.Process.Signal(os.Interrupt) }
	stderr, err := server.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = server.Wait() })
	addr := make(chan string, 1)
	go func() {
		listening := regexp.MustCompile(`graphsync mcp: listening on (http://\S+)`)
		scan := bufio.NewScanner(stderr)
		for scan.Scan() {
			if m := listening.FindStringSubmatch(scan.Text()); m != nil {
				addr <- m[1]
			}
			t.Logf("server: %s", scan.Text())
		}
	}()
	var url string
	select {
	case url = <-addr:
	case <-time.After(60 * time.Second):
		t.Fatal("graphsync mcp --http did not say where it listens within 60 s")
	}

	check := exec.Command(python, filepath.Join(root, "scripts", "mcp-client", "check.py"),
		"--stdio", bin+" mcp --tenant "+itoa(s.a.tenant),
		"--http", url+"/mcp", "--token", token,
		"--question", "electric kettle", "--expect-key", retrieve.NodeKey("Product", s.a.id(11)))
	check.Env = env
	output, err := check.CombinedOutput()
	t.Logf("python client:\n%s", output)
	if err != nil {
		t.Fatalf("the Python MCP client failed: %v", err)
	}
	if !strings.Contains(string(output), " 0 failed") {
		t.Fatal("the Python MCP client did not report its checks")
	}
}
