package relay

import (
	"strings"
	"testing"
	"unicode/utf8"

	"graphsync/redact"
)

// Producer text reaches logs bounded: a megabyte trace id is cut, on a rune
// boundary, and credentials in driver errors are hidden.
func TestLogTextIsBoundedAndRedacted(t *testing.T) {
	long := strings.Repeat("é", 1<<20)
	got := redact.Clip(long, 128)
	if len(got) > 128+len("…(truncated)") || !utf8.ValidString(got) || !strings.HasSuffix(got, "…(truncated)") {
		t.Errorf("clip kept %d bytes (valid UTF-8: %v)", len(got), utf8.ValidString(got))
	}
	if redact.Clip("short", 128) != "short" {
		t.Error("clip changed a short text")
	}
	for in, secret := range map[string]string{
		"dial postgres://graphsync:s3cret@db:5432/x failed": "s3cret",
		"auth failed: password=hunter2 user=neo4j":          "hunter2",
	} {
		if out := redact.Text(in); strings.Contains(out, secret) {
			t.Errorf("redact.Text(%q) = %q", in, out)
		}
	}
}
