package embed

import (
	"errors"
	"flag"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigDefaultsAndValidation(t *testing.T) {
	t.Setenv(EnvCache, "/cache")
	t.Setenv(EnvModelDir, "")
	t.Setenv(EnvRuntimeLib, "")
	t.Setenv(EnvAPIKey, "sk-from-env")
	cfg := Config{}.withDefaults()
	if cfg.Kind != KindONNX || cfg.ModelDir != "/cache/embed/all-minilm-l6-v2" ||
		cfg.RuntimeLib != "/cache/onnxruntime-1.29.0/libonnxruntime.so" || cfg.MaxTokens != 256 ||
		cfg.BatchSize != 32 || cfg.APIKey != "sk-from-env" || cfg.Retries != DefaultRetries {
		t.Fatalf("defaults: %+v", cfg)
	}
	t.Setenv(EnvModelDir, "/models/mine")
	t.Setenv(EnvRuntimeLib, "/lib/ort.so")
	if cfg := (Config{}).withDefaults(); cfg.ModelDir != "/models/mine" || cfg.RuntimeLib != "/lib/ort.so" {
		t.Fatalf("environment not read: %+v", cfg)
	}
	if cfg := (Config{ModelDir: "/given", Retries: -1}).withDefaults(); cfg.ModelDir != "/given" || cfg.Retries != 0 {
		t.Fatalf("given values overridden: %+v", cfg)
	}

	bad := []struct {
		cfg  Config
		want string
	}{
		{Config{Kind: "bert"}, `--embedder "bert": want onnx, openai or none`},
		{Config{Kind: KindOpenAI, Model: "m"}, "needs --embed-url"},
		{Config{Kind: KindOpenAI, URL: "http://h/v1"}, "needs --embed-model"},
		{Config{Kind: KindOpenAI, URL: "ftp://h", Model: "m"}, "want an http:// or https:// URL"},
		{Config{Kind: KindOpenAI, URL: "user:s3cret@h/v1", Model: "m"}, "want an http:// or https:// URL"},
		{Config{MaxTokens: 1000}, "want 3 to 512"},
		{Config{BatchSize: -1}, "batch size -1"},
		{Config{Threads: -2}, "threads -2"},
	}
	for _, tc := range bad {
		_, err := Open(tc.cfg)
		if err == nil || !errors.Is(err, ErrConfig) || !IsStartError(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%+v): %v, want ErrConfig with %q", tc.cfg, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%+v): %v shows the URL's password", tc.cfg, err)
		}
	}
}

// TestRegisterFlags: the flags a command registers open what they say;
// --embedder none gives no embedder and no error; a model directory
// without the model is a start error of one line naming the file and
// make model. Every flag's GRAPHSYNC_<NAME> is the variable make model
// writes, so the commands' environment fallback finds the model.
func TestRegisterFlags(t *testing.T) {
	parse := func(args ...string) Config {
		t.Helper()
		var cfg Config
		fs := flag.NewFlagSet("sync", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	e, err := Open(parse("--embedder", "none"))
	if e != nil || err != nil {
		t.Fatalf("--embedder none: %v, %v; want nil, nil", e, err)
	}
	missing := filepath.Join(t.TempDir(), "no-model")
	_, err = Open(parse("--embed-model-dir", missing))
	if !IsStartError(err) {
		t.Fatalf("missing model: %v, want a start error", err)
	}
	if msg := err.Error(); msg != "embedding "+filepath.Join(missing, "model.onnx")+" is missing: run `make model` to fetch it, or use --embedder none" {
		t.Fatalf("missing model: %q", msg)
	}
	if cfg := parse("--embed-threads", "3"); cfg.Threads != 3 {
		t.Fatalf("--embed-threads 3 parsed as %d", cfg.Threads)
	}
	cfg := parse("--embedder", "openai", "--embed-url", "http://127.0.0.1:9/v1", "--embed-model", "m", "--embed-batch-size", "8")
	if cfg.Kind != KindOpenAI || cfg.URL != "http://127.0.0.1:9/v1" || cfg.Model != "m" || cfg.BatchSize != 8 {
		t.Fatalf("parsed %+v", cfg)
	}

	var names []string
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	new(Config).RegisterFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		names = append(names, "GRAPHSYNC_"+strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")))
	})
	for _, env := range []string{EnvModelDir, EnvRuntimeLib, "GRAPHSYNC_EMBEDDER"} {
		found := false
		for _, name := range names {
			found = found || name == env
		}
		if !found {
			t.Errorf("no flag reads %s (flags read %v)", env, names)
		}
	}
	for _, name := range names {
		if name == EnvAPIKey {
			t.Errorf("the API key is a flag: it would show in the process list")
		}
	}
}

// Sync takes half the cores unless told the threads, and never asks for
// none; a negative count is left for Open to refuse.
func TestSyncThreads(t *testing.T) {
	for _, c := range []struct{ threads, cores, want int }{
		{0, 2, 1}, {0, 1, 1}, {0, 3, 1}, {0, 8, 4}, {2, 2, 2}, {4, 2, 4}, {-2, 2, -2},
	} {
		if got := SyncThreads(c.threads, c.cores); got != c.want {
			t.Errorf("SyncThreads(%d, %d) = %d, want %d", c.threads, c.cores, got, c.want)
		}
	}
}
