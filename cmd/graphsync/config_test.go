package main

import (
	"context"
	"errors"
	"flag"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"graphsync/internal/stacktest"
	"graphsync/relay"
)

// A connection string the command cannot use is named in its error with
// the password hidden, whatever the password holds (package redact has
// the rule's table test; this is the path from the flag to the line).
func TestConnectionErrorsHideThePassword(t *testing.T) {
	for secret, args := range map[string][]string{
		"ssw0rd": {"--pg-url", "postgres://app:Pa@ssw0rd@127.0.0.1:1/x?sslmode=bogus"},
		"Pa ss":  {"--pg-url", "postgres://app:Pa ss@127.0.0.1:1/x?connect_timeout=2"},
		"secret": {"--pg-url", `host=127.0.0.1 port=1 password=top\ secret connect_timeout=2`},
		"a b":    {"--pg-url", "host=127.0.0.1 port=1 password='a b' sslmode=bogus"},
		"s3cret": {"--pg-url", "postgres://app:s3cret@127.0.0.1:1/x?connect_timeout=2"},
		// pgx echoes the part after the first escaped space.
		"battery": {"--pg-url", `host=127.0.0.1 port=1 password=correct\ horse\ battery sslmode=bogus`},
		// A user name with an '@' in it (user@server).
		"S3cret": {"--pg-url", "postgres://app@server:S3cret@127.0.0.1:1/x?connect_timeout=2"},
		// pgx ends the userinfo at the first '@' and looks the rest up as
		// the host: refused before it is used, naming the encoding.
		"3xY9kQ": {"--pg-url", "postgres://app:Tr0ub4dor@3xY9kQ@127.0.0.1:1/x?connect_timeout=2"},
		// ... or, after a '/', as the database name.
		"w0rd": {"--pg-url", "postgres://app:p@ss/w0rd@127.0.0.1:1/x?connect_timeout=2"},
		// A passphrase of short words.
		"fox": {"--pg-url", `host=127.0.0.1 port=1 password=red\ fox\ ran\ far sslmode=bogus`},
		// user@server and a space in the password.
		"my s4cret": {"--pg-url", "postgres://app@server:my s4cret@127.0.0.1:1/x?connect_timeout=2"},
	} {
		code, stderr := runCapturingStderr(t, append([]string{"drift", "--neo4j-uri", "bolt://127.0.0.1:1"}, args...))
		if code != 2 || strings.Contains(stderr, secret) || !strings.Contains(stderr, "xxxxx") {
			t.Errorf("%v: exit %d, want 2 and the password hidden:\n%s", args, code, stderr)
		}
		if (secret == "3xY9kQ" || secret == "w0rd") && !strings.Contains(stderr, "%40") {
			t.Errorf("%v: the refusal does not say how to write the '@':\n%s", args, stderr)
		}
	}
	// A database name whose '@' is percent-encoded is the user's own: it is
	// tried, not refused.
	_, stderr := runCapturingStderr(t, []string{"drift", "--neo4j-uri", "bolt://127.0.0.1:1", "--pg-url", "postgres://app:s3cret@127.0.0.1:1/my%40db?connect_timeout=2"})
	if strings.Contains(stderr, "not percent-encoded") || !strings.Contains(stderr, "127.0.0.1:1") {
		t.Errorf("an encoded '@' in the database name: %s", stderr)
	}
}

func TestFlagsFromEnvironment(t *testing.T) {
	t.Setenv("GRAPHSYNC_WAKE", "stream")
	t.Setenv("GRAPHSYNC_BATCH_SIZE", "42")
	t.Setenv("GRAPHSYNC_LEASE", "not-a-duration")
	fs := flag.NewFlagSet("sync", flag.ContinueOnError)
	var f syncFlags
	f.register(fs)
	err := parseFlags(fs, []string{"--lease", "3s"})
	if err != nil {
		t.Fatalf("a bad env value for a flag given on the command line must not matter: %v", err)
	}
	if f.wake != "stream" || f.relay.BatchSize != 42 || f.relay.Lease.String() != "3s" {
		t.Errorf("wake %q batch %d lease %s", f.wake, f.relay.BatchSize, f.relay.Lease)
	}
	fs = flag.NewFlagSet("sync", flag.ContinueOnError)
	f = syncFlags{}
	f.register(fs)
	err = parseFlags(fs, nil)
	var usage usageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "GRAPHSYNC_LEASE") {
		t.Errorf("bad GRAPHSYNC_LEASE: %v", err)
	}
}

// GRAPHSYNC_HTTP_ADDR set empty disables the HTTP server, as --http-addr=
// does; an empty variable of another flag still leaves its default.
func TestEmptyHTTPAddrFromEnvironment(t *testing.T) {
	t.Setenv("GRAPHSYNC_HTTP_ADDR", "")
	t.Setenv("GRAPHSYNC_BATCH_SIZE", "")
	t.Setenv("GRAPHSYNC_WAKE", "")
	fs := flag.NewFlagSet("sync", flag.ContinueOnError)
	var f syncFlags
	f.register(fs)
	if err := parseFlags(fs, nil); err != nil {
		t.Fatal(err)
	}
	if f.httpAddr != "" {
		t.Errorf("GRAPHSYNC_HTTP_ADDR= left --http-addr %q, want empty (disabled)", f.httpAddr)
	}
	if f.relay.BatchSize != 500 || f.wake != "poll" {
		t.Errorf("empty GRAPHSYNC_BATCH_SIZE and GRAPHSYNC_WAKE changed the defaults: batch %d, wake %q", f.relay.BatchSize, f.wake)
	}
	fs = flag.NewFlagSet("sync", flag.ContinueOnError)
	f = syncFlags{}
	f.register(fs)
	if err := parseFlags(fs, []string{"--http-addr", ":9"}); err != nil || f.httpAddr != ":9" {
		t.Errorf("--http-addr on the command line: %q, %v", f.httpAddr, err)
	}
}

func TestUnknownCommandAndWake(t *testing.T) {
	if code := run([]string{"frobnicate"}); code != 2 {
		t.Errorf("unknown command exit %d, want 2", code)
	}
	if code := run([]string{"sync", "--wake", "pigeon", "--pg-url", "postgres://x@127.0.0.1:1/x"}); code != 2 {
		t.Errorf("unknown wake mode exit %d, want 2", code)
	}
}

// Every command checks its flags before it connects (the URLs name ports
// nothing listens on, which would be exit 1): a wrong log level is a usage
// error also for commands that log nothing, a mistyped dlq subcommand needs
// no database, and dlq's help is help.
func TestCommandsCheckTheirFlagsBeforeConnecting(t *testing.T) {
	pg, bolt := "postgres://x@127.0.0.1:1/x", "bolt://127.0.0.1:1"
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"migrate", "--log-level", "loud", "--pg-url", pg, "--neo4j-uri", bolt}, 2},
		{[]string{"dlq", "list", "--log-format", "xml", "--pg-url", pg}, 2},
		{[]string{"retention", "--log-level", "loud", "--pg-url", pg}, 2},
		{[]string{"summary", "--log-level", "loud", "--pg-url", pg, "--neo4j-uri", bolt}, 2},
		{[]string{"dlq", "lst", "--pg-url", pg}, 2},
		{[]string{"dlq", "-h"}, 0},
		{[]string{"dlq", "list", "-h"}, 0},
		{[]string{"sync", "--dependency-wait", "2s", "--dependency-wait-max", "1s", "--pg-url", pg, "--neo4j-uri", bolt}, 2},
		{[]string{"demo", "--max-batch-bytes", "-1", "--pg-url", pg, "--neo4j-uri", bolt}, 2},
		{[]string{"dlq", "list", "--pg-url", pg}, 1}, // the flags are right: it fails to connect
	} {
		if code := run(c.args); code != c.want {
			t.Errorf("%v: exit %d, want %d", c.args, code, c.want)
		}
	}
}

// A flag out of range is named before anything is connected: the servers
// (loopback port 1) are never tried, so the one line on standard error is
// the flag's, with exit 2.
func TestFlagMistakesAreNamedBeforeConnecting(t *testing.T) {
	pg, bolt := "postgres://x@127.0.0.1:1/x?connect_timeout=2", "bolt://127.0.0.1:1"
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"rebuild", "--chunk-size", "0"}, "--chunk-size"},
		{[]string{"rebuild", "--chunk-size", "100001"}, "--chunk-size"},
		{[]string{"rebuild", "--tenant", "-3"}, "--tenant"},
		{[]string{"rebuild", "--recheck-after", "-1s"}, "--recheck-after"},
		{[]string{"rebuild", "--resume-within", "0s"}, "--resume-within"},
		{[]string{"drift", "--tenant", "-3"}, "--tenant"},
		{[]string{"drift", "--recheck-after", "-1s"}, "--recheck-after"},
		{[]string{"context", "--tenant", "1", "--hops", "7", "speaker"}, "--hops"},
		{[]string{"context", "--tenant", "1", "--hops", "-1", "speaker"}, "--hops"},
		{[]string{"context", "--tenant", "1", "--max-chars", "3", "speaker"}, "--max-chars"},
		{[]string{"sync", "--drift-sample", "7", "--drift-check-every", "1m", "--http-addr", ""}, "--drift-sample"},
		{[]string{"sync", "--drift-sample", "NaN", "--http-addr", ""}, "--drift-sample"},
		{[]string{"sync", "--max-payload-bytes", "-1", "--http-addr", ""}, "--max-payload-bytes"},
		{[]string{"sync", "--neo4j-tx-timeout", "-1s", "--http-addr", ""}, "--neo4j-tx-timeout"},
		{[]string{"demo", "--drift-sample", "0", "--no-sync"}, "--drift-sample"},
		// A zero the relay would read as its default is refused, not run.
		{[]string{"sync", "--batch-size", "0", "--http-addr", ""}, "--batch-size"},
		{[]string{"sync", "--lease", "0s", "--http-addr", ""}, "--lease"},
		{[]string{"sync", "--drain-timeout", "0s", "--http-addr", ""}, "--drain-timeout"},
		{[]string{"demo", "--max-attempts", "0", "--no-sync"}, "--max-attempts"},
		// A negative one is named as the flag, not as the library's field.
		{[]string{"sync", "--batch-size=-5", "--http-addr", ""}, "--batch-size"},
		{[]string{"sync", "--lease=-1s", "--http-addr", ""}, "--lease"},
		{[]string{"sync", "--sink-backoff-max=-1s", "--http-addr", ""}, "--sink-backoff-max"},
		{[]string{"sync", "--http-addr", "bogus"}, "--http-addr"},
		// Settings checked against each other: one line.
		{[]string{"sync", "--sink-backoff", "1m", "--sink-backoff-max", "1s", "--dependency-wait", "2m", "--dependency-wait-max", "1m", "--http-addr", ""}, "sink backoff max"},
		// The demo's workload: a zero or a negative count is named before
		// anything is connected, not read as the default.
		{[]string{"demo", "--orders", "0", "--no-sync"}, "--orders"},
		{[]string{"demo", "--orders", "-1", "--no-sync"}, "--orders"},
		{[]string{"demo", "--writers", "0", "--no-sync"}, "--writers"},
		// A word among the flags (a true/false flag given a value) would
		// turn the flag on and drop every flag after it.
		{[]string{"sync", "--until-caught-up", "false", "--batch-size", "-1"}, `"false"`},
		{[]string{"migrate", "--skip-neo4j", "false"}, `"false"`},
		{[]string{"summary", "7"}, `"7"`},
	} {
		args := append(c.args, "--pg-url", pg, "--neo4j-uri", bolt, "--log-level", "error")
		code, stderr := runCapturingStderr(t, args)
		if code != 2 || !strings.Contains(stderr, c.flag) || strings.Contains(stderr, "127.0.0.1:1") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, want 2 and one line naming %s, not a connection error:\n%s", c.args, code, c.flag, stderr)
		}
	}
}

// Retention settings that would remove what they should keep stop the
// command before it connects (the URL names a port nothing listens on),
// with exit 2 and the flag named.
func TestRetentionSettingsAreValidated(t *testing.T) {
	pg := "postgres://x@127.0.0.1:1/x"
	for _, args := range [][]string{
		{"retention", "--keep-archive", "-24h", "--pg-url", pg},
		{"retention", "--archive-after", "-1h", "--pg-url", pg},
		{"retention", "--keep-archive", "24h", "--pg-url", pg},
		{"retention", "--archive-batch", "-1", "--pg-url", pg},
		{"sync", "--keep-archive", "-24h", "--pg-url", pg},
		{"sync", "--retention-every", "-1h", "--pg-url", pg},
		{"retention", "--months-ahead", "0", "--pg-url", pg},
		{"retention", "--archive-batch", "0", "--pg-url", pg},
		{"retention", "now", "--pg-url", pg},
		{"dlq", "list", "--limit", "0", "--pg-url", pg},
		{"dlq", "list", "7", "--pg-url", pg},
	} {
		if code := run(args); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	for cfg, flag := range map[relay.RetentionConfig]string{
		{KeepArchive: -time.Hour}:                              "--keep-archive must not be negative",
		{ArchiveAfter: 48 * time.Hour, KeepArchive: time.Hour}: "--keep-archive (1h0m0s) must be at least --archive-after (48h0m0s)",
		{KeepArchive: 24 * time.Hour}:                          "--keep-archive (24h0m0s) must be at least --archive-after (168h0m0s)",
	} {
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%+v: %v, want %q", cfg, err, flag)
		}
	}
	if err := (relay.RetentionConfig{}).Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}

// dlq list keeps each producer text to one bounded table cell.
func TestCellIsOneBoundedLine(t *testing.T) {
	got := cell("a\nvery "+strings.Repeat("long ", 100)+"type", 40)
	if strings.ContainsAny(got, "\n\t") || len([]rune(got)) > 40 {
		t.Errorf("cell = %q", got)
	}
	if cell("OrderPlaced", 40) != "OrderPlaced" {
		t.Error("cell changed a short text")
	}
}

// dlq retry of an id named twice retries its one row and succeeds.
func TestDLQRetryOfAnIDNamedTwice(t *testing.T) {
	_, pool := stacktest.FreshDatabase(t)
	ctx := context.Background()
	id := int64(4242)
	if _, err := pool.Exec(ctx, `INSERT INTO outbox_messages_dlq (id, tenant_id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ($1, 1, 'Order', 1, 'OrderPlaced', '{}')`, id); err != nil {
		t.Fatal(err)
	}
	if err := dlqCommand(ctx, pool, "retry", []int64{id, id}, 0, 10); err != nil {
		t.Errorf("dlq retry %d %d: %v", id, id, err)
	}
	var pending int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_messages WHERE id = $1 AND processed_at IS NULL`, id).Scan(&pending); err != nil || pending != 1 {
		t.Errorf("row %d pending %d times after the retry (%v), want once", id, pending, err)
	}
}

// dlq list says when --limit cut the list, and only then.
func TestDLQListSaysWhenTheLimitCutIt(t *testing.T) {
	url, pool := stacktest.FreshDatabase(t)
	if _, err := pool.Exec(context.Background(), `INSERT INTO outbox_messages_dlq (id, tenant_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT g, 1, 'Order', g, 'OrderPlaced', '{}' FROM generate_series(1, 3) g`); err != nil {
		t.Fatal(err)
	}
	for limit, cut := range map[string]bool{"2": true, "3": false} {
		code, stderr := runCapturingStderr(t, []string{"dlq", "list", "--limit", limit, "--pg-url", url, "--log-level", "error"})
		if code != 0 || strings.Contains(stderr, "more exist") != cut {
			t.Errorf("--limit %s of 3 dead letters: exit %d, stderr %q; want exit 0 and a note of more only when cut", limit, code, stderr)
		}
	}
}

// --tenant (or GRAPHSYNC_TENANT, set for another command) scopes retry and
// discard too: another tenant's dead letter is left alone and the command
// fails naming the tenant; a list of one tenant says so on standard error.
func TestDLQTenantScopesRetryAndDiscard(t *testing.T) {
	url, pool := stacktest.FreshDatabase(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO outbox_messages_dlq (id, tenant_id, aggregate_type, aggregate_id, event_type, payload)
		VALUES (4243, 1, 'Order', 1, 'OrderPlaced', '{}')`); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"discard", "retry"} {
		code, stderr := runCapturingStderr(t, []string{"dlq", sub, "--tenant", "2", "--pg-url", url, "--log-level", "error", "4243"})
		if code == 0 || !strings.Contains(stderr, "not in tenant 2's dead letters") {
			t.Errorf("dlq %s --tenant 2 of tenant 1's row: exit %d, stderr %q; want a failure naming tenant 2", sub, code, stderr)
		}
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_messages_dlq WHERE id = 4243`).Scan(&left); err != nil || left != 1 {
		t.Fatalf("tenant 1's dead letter after commands scoped to tenant 2: %d rows (%v), want it kept", left, err)
	}
	t.Setenv("GRAPHSYNC_TENANT", "1")
	code, stderr := runCapturingStderr(t, []string{"dlq", "list", "--pg-url", url, "--log-level", "error"})
	if code != 0 || !strings.Contains(stderr, "tenant 1 only") {
		t.Errorf("dlq list with GRAPHSYNC_TENANT=1: exit %d, stderr %q; want a note that the list is one tenant's", code, stderr)
	}
}

// Words and flags may be mixed, but after "--" every argument is a word:
// a question cannot switch the tenant or the server.
func TestWordsAfterDoubleDashAreNeverFlags(t *testing.T) {
	for _, c := range []struct {
		args   []string
		tenant int64
		words  []string
	}{
		{[]string{"--tenant", "1", "wireless", "--format", "json", "speaker"}, 1, []string{"wireless", "speaker"}},
		{[]string{"--tenant", "1", "--", "kettle", "--tenant=2", "-tenant", "3"}, 1, []string{"kettle", "--tenant=2", "-tenant", "3"}},
		{[]string{"--tenant", "1", "kettle", "--", "--neo4j-uri=bolt://elsewhere:7687", "--"}, 1, []string{"kettle", "--neo4j-uri=bolt://elsewhere:7687", "--"}},
	} {
		fs := flag.NewFlagSet("context", flag.ContinueOnError)
		tenant := fs.Int64("tenant", 0, "")
		fs.String("format", "markdown", "")
		fs.String("neo4j-uri", "", "")
		words, err := parseFlagsAndWords(fs, c.args)
		if err != nil || *tenant != c.tenant || !slices.Equal(words, c.words) {
			t.Errorf("%q: tenant %d, words %q (%v); want tenant %d, words %q", c.args, *tenant, words, err, c.tenant, c.words)
		}
	}
}

// A busy --http-addr stops sync before it connects to anything (the
// servers here are loopback port 1) or changes anything: one line naming
// the address, exit 1.
func TestBusyHTTPAddressStopsSyncBeforeConnecting(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	code, stderr := runCapturingStderr(t, []string{"sync", "--http-addr", addr, "--wake", "notify",
		"--pg-url", "postgres://x@127.0.0.1:1/x?connect_timeout=2", "--neo4j-uri", "bolt://127.0.0.1:1", "--log-level", "error"})
	if code != 1 || !strings.Contains(stderr, "listen on "+addr) || strings.Contains(stderr, "PostgreSQL") {
		t.Errorf("exit %d, want 1 and the busy address named before any connection:\n%s", code, stderr)
	}
}
