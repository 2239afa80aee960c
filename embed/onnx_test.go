//go:build cgo

package embed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestEmbedAwkwardTexts: every text gets a unit vector of the model's
// dimension, a 100 kB description and a text of control characters too.
func TestEmbedAwkwardTexts(t *testing.T) {
	e := sharedEmbedder(t)
	if e.Dimension() != 384 || e.Model() != DefaultModel {
		t.Fatalf("model %q dimension %d, want %s 384", e.Model(), e.Dimension(), DefaultModel)
	}
	texts := map[string]string{
		"empty":            "",
		"spaces":           "   \t\n ",
		"100 kB words":     strings.Repeat("wireless speaker kettle ", 100_000/24),
		"100 kB one word":  strings.Repeat("x", 100_000),
		"100 kB CJK":       strings.Repeat("无线蓝牙音箱", 100_000/18),
		"emoji":            "🙂🚀🔥👨‍👩‍👧‍👦🇫🇷",
		"RTL":              "مرحبا بالعالم שלום עולם",
		"control":          "a\x00b\x01c\x1b[31mred\x7f\u200b\u202e\ufeff",
		"invalid UTF-8":    "caf\xc3 \xff\xfe speaker",
		"combining only":   "\u0301\u0308\u0327",
		"lone surrogates?": string([]rune{0xD800, 0xDFFF}),
	}
	names := make([]string, 0, len(texts))
	inputs := make([]string, 0, len(texts))
	for name, text := range texts {
		names = append(names, name)
		inputs = append(inputs, text)
	}
	vectors, err := e.Embed(context.Background(), inputs)
	if err != nil {
		t.Fatal(err)
	}
	if len(vectors) != len(inputs) {
		t.Fatalf("%d vectors for %d texts", len(vectors), len(inputs))
	}
	for i, v := range vectors {
		if len(v) != 384 {
			t.Errorf("%s: %d floats", names[i], len(v))
			continue
		}
		var norm float64
		for _, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				t.Fatalf("%s: %v in the vector", names[i], x)
			}
			norm += float64(x) * float64(x)
		}
		if math.Abs(norm-1) > 1e-4 {
			t.Errorf("%s: squared norm %v, want 1", names[i], norm)
		}
	}
}

// TestEmbedTruncatesAtTheTokenLimit: a long text keeps its first 254 word
// pieces, so two texts equal up to far past that embed alike and a text
// shorter than the limit does not.
func TestEmbedTruncatesAtTheTokenLimit(t *testing.T) {
	e := sharedEmbedder(t)
	words := e.(*onnxEmbedder).words
	head := strings.Repeat("ergonomic office chair with lumbar support ", 60) // ~360 pieces
	ids, err := words.encode(head + "completely different ending about kettles")
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != DefaultMaxTokens || ids[0] != words.clsID || ids[len(ids)-1] != words.sepID {
		t.Fatalf("%d ids from %d..%d, want %d between [CLS] and [SEP]", len(ids), ids[0], ids[len(ids)-1], DefaultMaxTokens)
	}
	vectors, err := e.Embed(context.Background(), []string{head + "kettles and toasters", head + "speakers and radios", "short chair", "short kettle"})
	if err != nil {
		t.Fatal(err)
	}
	if c := cosine(vectors[0], vectors[1]); c < 0.999999 {
		t.Errorf("texts equal over the first 256 tokens: cosine %v, want 1", c)
	}
	if c := cosine(vectors[2], vectors[3]); c > 0.99 {
		t.Errorf("different short texts: cosine %v, want them apart", c)
	}
}

// TestEmbedConcurrently: calls from many goroutines at once (run under
// -race) give the vectors of a lone call.
func TestEmbedConcurrently(t *testing.T) {
	e := sharedEmbedder(t)
	texts, _ := loadFixture(t, DefaultModel)
	want, err := e.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := texts[g*5 : g*5+5]
			got, err := e.Embed(context.Background(), mine)
			if err != nil {
				errs <- err
				return
			}
			for i := range mine {
				if c := cosine(got[i], want[g*5+i]); c < 0.99999 {
					errs <- fmt.Errorf("goroutine %d text %d: cosine %v to the lone call", g, i, c)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestEmbedEmptyAndCancelled(t *testing.T) {
	e := sharedEmbedder(t)
	got, err := e.Embed(context.Background(), nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("no texts: %v, %v; want an empty result", got, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Embed(ctx, []string{"a"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v, want context.Canceled", err)
	}
}

func TestEmbedAfterCloseFails(t *testing.T) {
	e, err := Open(Config{ModelDir: modelDir(DefaultModel)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := e.Embed(context.Background(), []string{"a"}); err == nil {
		t.Fatal("Embed after Close succeeded")
	}
}

// copyModel copies the default model's files into a fresh directory, where
// a test may break them.
func copyModel(t *testing.T) (dir, lib string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "broken-model")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{modelFileName, tokenizerFileName} {
		raw, err := os.ReadFile(filepath.Join(modelDir(DefaultModel), name))
		if err != nil {
			t.Fatalf("read %s (run make model first): %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, Config{}.withDefaults().RuntimeLib
}

// TestOpenNamesTheBadFile: a missing or corrupt model, tokenizer or runtime
// library gives one line that names the file and make model, wrapping
// ErrModelFiles; nothing crashes.
func TestOpenNamesTheBadFile(t *testing.T) {
	cases := []struct {
		name    string
		breakIt func(t *testing.T, dir, lib string) (cfg Config, badFile string)
		problem string
	}{
		{"model missing", func(t *testing.T, dir, lib string) (Config, string) {
			path := filepath.Join(dir, modelFileName)
			mustRemove(t, path)
			return Config{ModelDir: dir, RuntimeLib: lib}, path
		}, "is missing"},
		{"tokenizer missing", func(t *testing.T, dir, lib string) (Config, string) {
			path := filepath.Join(dir, tokenizerFileName)
			mustRemove(t, path)
			return Config{ModelDir: dir, RuntimeLib: lib}, path
		}, "is missing"},
		{"runtime missing", func(t *testing.T, dir, lib string) (Config, string) {
			path := filepath.Join(t.TempDir(), "libonnxruntime.so")
			return Config{ModelDir: dir, RuntimeLib: path}, path
		}, "is missing"},
		{"model truncated", func(t *testing.T, dir, lib string) (Config, string) {
			path := filepath.Join(dir, modelFileName)
			mustTruncate(t, path, 1<<20)
			return Config{ModelDir: dir, RuntimeLib: lib}, path
		}, "is corrupt"},
		{"model garbage", func(t *testing.T, dir, lib string) (Config, string) {
			path := filepath.Join(dir, modelFileName)
			mustWrite(t, path, "this is not an ONNX model")
			return Config{ModelDir: dir, RuntimeLib: lib}, path
		}, "is corrupt"},
		{"tokenizer not JSON", func(t *testing.T, dir, lib string) (Config, string) {
			path := filepath.Join(dir, tokenizerFileName)
			mustTruncate(t, path, 1000)
			return Config{ModelDir: dir, RuntimeLib: lib}, path
		}, "is corrupt"},
		{"tokenizer other JSON", func(t *testing.T, dir, lib string) (Config, string) {
			path := filepath.Join(dir, tokenizerFileName)
			mustWrite(t, path, `{"model": {"type": "WordPiece", "vocab": 7}}`)
			return Config{ModelDir: dir, RuntimeLib: lib}, path
		}, "is corrupt"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, lib := copyModel(t)
			cfg, badFile := tc.breakIt(t, dir, lib)
			e, err := Open(cfg)
			if err == nil {
				e.Close()
				t.Fatal("Open succeeded")
			}
			msg := err.Error()
			if !errors.Is(err, ErrModelFiles) || !IsStartError(err) {
				t.Errorf("error does not wrap ErrModelFiles: %v", err)
			}
			if !strings.Contains(msg, badFile) || !strings.Contains(msg, tc.problem) || !strings.Contains(msg, "make model") || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want one line naming %s, %q and make model", msg, badFile, tc.problem)
			}
		})
	}
}

// TestOpenCorruptRuntime: a file that is not a shared library in the
// runtime's place. It runs in a child process: dlopen state is per
// process, and a runtime loaded by another test here would be reused.
func TestOpenCorruptRuntime(t *testing.T) {
	if os.Getenv("EMBED_CORRUPT_RUNTIME_CHILD") == "" {
		runChild(t, "TestOpenCorruptRuntime", "EMBED_CORRUPT_RUNTIME_CHILD=1")
		return
	}
	lib := filepath.Join(t.TempDir(), "libonnxruntime.so")
	mustWrite(t, lib, "\x7fELF but not really a library")
	e, err := Open(Config{ModelDir: modelDir(DefaultModel), RuntimeLib: lib})
	if err == nil {
		e.Close()
		t.Fatal("Open succeeded")
	}
	if msg := err.Error(); !errors.Is(err, ErrModelFiles) || !strings.Contains(msg, lib) || !strings.Contains(msg, "is corrupt") || !strings.Contains(msg, "make model") || strings.Contains(msg, "\n") {
		t.Fatalf("error %q: want one line naming %s, is corrupt and make model", msg, lib)
	}
}

func mustRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustTruncate(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}
