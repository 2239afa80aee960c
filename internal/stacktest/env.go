package stacktest

import (
	"bufio"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Environment variable names, shared with .local/services.env, the binary and
// docker-compose.yml.
const (
	EnvPostgresURL   = "GRAPHSYNC_PG_URL"
	EnvNeo4jURI      = "GRAPHSYNC_NEO4J_URI"
	EnvNeo4jUser     = "GRAPHSYNC_NEO4J_USER"
	EnvNeo4jPassword = "GRAPHSYNC_NEO4J_PASSWORD"
	EnvRepoRoot      = "GRAPHSYNC_REPO_ROOT"
)

const servicesEnvFile = ".local/services.env"

const startHint = "run `make services-up` (or scripts/services.sh up) first"

var (
	repoRootOnce sync.Once
	repoRootDir  string
	repoRootErr  error

	envFileOnce   sync.Once
	envFileValues map[string]string
	envFileErr    error
)

// RepoRoot returns the repository root: GRAPHSYNC_REPO_ROOT when set, else
// the nearest directory above the working directory holding graphsync's go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("stacktest: %v", err)
	}
	return root
}

func repoRoot() (string, error) {
	repoRootOnce.Do(func() {
		if dir := os.Getenv(EnvRepoRoot); dir != "" {
			repoRootDir = dir
			return
		}
		dir, err := os.Getwd()
		if err != nil {
			repoRootErr = fmt.Errorf("find repo root: %w", err)
			return
		}
		for {
			body, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err == nil && isGraphsyncModule(string(body)) {
				repoRootDir = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				repoRootErr = errors.New("find repo root: no go.mod of module graphsync above the working directory; set " + EnvRepoRoot)
				return
			}
			dir = parent
		}
	})
	return repoRootDir, repoRootErr
}

func isGraphsyncModule(goMod string) bool {
	for _, line := range strings.Split(goMod, "\n") {
		if fields := strings.Fields(line); len(fields) == 2 && fields[0] == "module" {
			return fields[1] == "graphsync"
		}
	}
	return false
}

// lookupEnv returns the process environment's value of name, else the value
// in .local/services.env when the service URLs are not both in the
// environment. The environment is never modified: tests may run in parallel.
func lookupEnv(name string) (string, bool, error) {
	if value, ok := os.LookupEnv(name); ok && value != "" {
		return value, true, nil
	}
	if os.Getenv(EnvPostgresURL) != "" && os.Getenv(EnvNeo4jURI) != "" {
		value, ok := os.LookupEnv(name)
		return value, ok, nil
	}
	values, err := servicesEnv()
	if err != nil {
		return "", false, err
	}
	value, ok := values[name]
	return value, ok, nil
}

func servicesEnv() (map[string]string, error) {
	envFileOnce.Do(func() {
		root, err := repoRoot()
		if err != nil {
			envFileErr = err
			return
		}
		path := filepath.Join(root, servicesEnvFile)
		envFileValues, envFileErr = parseEnvFile(path)
		if errors.Is(envFileErr, os.ErrNotExist) {
			envFileErr = fmt.Errorf("%s and %s are unset and %s does not exist: %s", EnvPostgresURL, EnvNeo4jURI, path, startHint)
		}
	})
	return envFileValues, envFileErr
}

// parseEnvFile reads `export NAME=VALUE` lines (VALUE optionally in single or
// double quotes), as scripts/services.sh writes them.
func parseEnvFile(path string) (map[string]string, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	values := map[string]string{}
	scanner := bufio.NewScanner(file)
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && (value[0] == '\'' || value[0] == '"') && value[len(value)-1] == value[0] {
			value = value[1 : len(value)-1]
		}
		values[strings.TrimSpace(name)] = value
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return values, nil
}

// requireEnv returns a required setting or fails the test.
func requireEnv(t testing.TB, name string) string {
	t.Helper()
	value, _, err := lookupEnv(name)
	if err != nil {
		t.Fatalf("stacktest: %v", err)
	}
	if value == "" {
		t.Fatalf("stacktest: %s is not set (environment or %s): %s", name, servicesEnvFile, startHint)
	}
	return value
}

// Redact returns rawURL with any password replaced by "xxxxx", for messages.
func Redact(rawURL string) string {
	parsed, err := url.Parse(rawURL)
	if err != nil {
		return "<unparseable URL>"
	}
	return parsed.Redacted()
}
