package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// Missing model files stop sync, rebuild, drift and migrate at start: exit
// 2, one line naming the file and make model.
func TestMissingModelFilesExitTwoNamingTheFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "no-model")
	t.Setenv("GRAPHSYNC_EMBED_MODEL_DIR", dir)
	for _, cmd := range [][]string{
		{"sync", "--http-addr="},
		{"rebuild"},
		{"drift"},
		{"migrate"},
	} {
		code, stderr := runCapturingStderr(t, cmd)
		stderr = strings.TrimSpace(stderr)
		if code != 2 || strings.Count(stderr, "\n") != 0 || !strings.Contains(stderr, filepath.Join(dir, "model.onnx")) ||
			!strings.Contains(stderr, "make model") {
			t.Errorf("%s: exit %d, stderr %q; want 2 and one line naming %s and make model", cmd[0], code, stderr, filepath.Join(dir, "model.onnx"))
		}
	}
}
