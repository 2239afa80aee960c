package relay

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The offset reader never skips a row whose transaction committed after a
// higher id was already visible, where "id > last offset" does.
func TestOffsetReaderDoesNotSkipLateCommits(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	reader := NewOffsetReader(h.pool, "test-consumer", "")

	late, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx) //nolint:errcheck
	lowID, err := insert(ctx, late, event{1, "Order", 1, "OrderPlaced", `{}`})
	if err != nil {
		t.Fatal(err)
	}
	highID := h.insertCommitted(event{1, "Order", 2, "OrderPlaced", `{}`})

	pos, err := reader.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seen []int64
	read := func() {
		t.Helper()
		batch, next, err := reader.Read(ctx, pos, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range batch {
			seen = append(seen, m.ID)
		}
		if err := reader.Store(ctx, h.pool, next); err != nil {
			t.Fatal(err)
		}
		if pos, err = reader.Load(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// While the low id's transaction runs, the high id is beyond the horizon:
	// an id-offset reader would read it now and skip the low one later.
	read()
	if len(seen) != 0 {
		t.Fatalf("read %v while an older transaction was still open", seen)
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "both rows read", func() bool {
		read()
		return len(seen) == 2
	})
	if !(contains(seen, lowID) && contains(seen, highID)) {
		t.Fatalf("read %v, want %d and %d", seen, lowID, highID)
	}
	read()
	if len(seen) != 2 {
		t.Fatalf("rows read twice: %v", seen)
	}
}

func TestOffsetReaderProcessedOnlyStopsAtPending(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	first := h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`})
	second := h.insertCommitted(event{1, "Order", 2, "OrderPlaced", `{}`})
	if _, err := h.pool.Exec(ctx, `UPDATE outbox_messages SET processed_at = now() WHERE id = $1`, second); err != nil {
		t.Fatal(err)
	}
	reader := NewOffsetReader(h.pool, "processed-consumer", "p0")
	reader.ProcessedOnly = true
	eventually(t, 5*time.Second, "horizon past both rows", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE created_xid < pg_snapshot_xmin(pg_current_snapshot())`) == 2
	})
	batch, _, err := reader.Read(ctx, Position{XID: "0"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(batch) != 0 {
		t.Fatalf("read %d rows past the pending row %d", len(batch), first)
	}
	if _, err := h.pool.Exec(ctx, `UPDATE outbox_messages SET processed_at = now() WHERE id = $1`, first); err != nil {
		t.Fatal(err)
	}
	batch, _, err = reader.Read(ctx, Position{XID: "0"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(batch) != 2 {
		t.Fatalf("read %d rows, want 2", len(batch))
	}
}

// A row whose occurred_at is infinity (the relay dead-letters it) is no
// error for a reader: a ProcessedOnly reader stops before it, as before any
// pending row, and a plain one reads it with a zero OccurredAt.
func TestOffsetReaderReadsARowAtInfinity(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	before := h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`})
	var endless int64
	if err := h.pool.QueryRow(ctx, `INSERT INTO outbox_messages (tenant_id, aggregate_type, aggregate_id, event_type, payload, occurred_at)
		VALUES (1, 'Order', 2, 'OrderPlaced', '{}', 'infinity') RETURNING id`).Scan(&endless); err != nil {
		t.Fatal(err)
	}
	h.exec(`UPDATE outbox_messages SET processed_at = now() WHERE id = $1`, before)
	eventually(t, 5*time.Second, "horizon past both rows", func() bool {
		return h.count(`SELECT count(*) FROM outbox_messages WHERE created_xid < pg_snapshot_xmin(pg_current_snapshot())`) == 2
	})
	processedOnly := NewOffsetReader(h.pool, "processed-consumer", "p0")
	processedOnly.ProcessedOnly = true
	batch, _, err := processedOnly.Read(ctx, Position{XID: "0"}, 10)
	if err != nil || len(batch) != 1 || batch[0].ID != before {
		t.Errorf("processed-only reader: %d rows (%v), want row %d alone", len(batch), err, before)
	}
	batch, _, err = NewOffsetReader(h.pool, "every-row", "p0").Read(ctx, Position{XID: "0"}, 10)
	if err != nil || len(batch) != 2 || batch[1].ID != endless || !batch[1].OccurredAt.IsZero() {
		t.Errorf("plain reader: %d rows (%v), want rows %d and %d, the second without a time", len(batch), err, before, endless)
	}
}

// A dead letter whose occurred_at is infinity (why it was dead-lettered)
// is listed like any other.
func TestDLQListsARowAtInfinity(t *testing.T) {
	h := newHarness(t, WakePoll)
	h.exec(`INSERT INTO outbox_messages_dlq (id, tenant_id, aggregate_type, aggregate_id, event_type, payload, occurred_at, last_error)
		VALUES (900001, 1, 'Order', 2, 'OrderPlaced', '{}', 'infinity', 'occurred_at is infinity')`)
	letters, err := DLQList(context.Background(), h.pool, 0, 10)
	if err != nil || len(letters) != 1 || letters[0].ID != 900001 || !letters[0].OccurredAt.IsZero() {
		t.Errorf("DLQList: %+v (%v), want row 900001 without a time", letters, err)
	}
}

func contains(ids []int64, id int64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// Retention archives old processed rows in batches (idempotently), keeps
// pending and recent rows, creates coming partitions and drops old ones.
func TestRetention(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	old := h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`})
	recent := h.insertCommitted(event{1, "Order", 2, "OrderPlaced", `{}`})
	pending := h.insertCommitted(event{1, "Order", 3, "OrderPlaced", `{}`})
	if _, err := h.pool.Exec(ctx, `UPDATE outbox_messages SET processed_at = now() - interval '8 days',
		occurred_at = now() - interval '8 days' WHERE id = $1`, old); err != nil {
		t.Fatal(err)
	}
	if _, err := h.pool.Exec(ctx, `UPDATE outbox_messages SET processed_at = now() WHERE id = $1`, recent); err != nil {
		t.Fatal(err)
	}
	// An archive partition from long ago, past retention.
	if _, err := h.pool.Exec(ctx, `CREATE TABLE outbox_messages_archive_202001 PARTITION OF outbox_messages_archive
		FOR VALUES FROM ('2020-01-01') TO ('2020-02-01')`); err != nil {
		t.Fatal(err)
	}
	// Holds: one that ran out long ago (its aggregate got no event since),
	// one that just ran out, one live; and two aggregates that have waited
	// for another aggregate's events since long ago, whose holds ran out
	// while no relay ran: one still has its event pending (the hold keeps
	// since when it has waited, for the backoff and the gauges), one has
	// none left.
	waiting := h.insertCommitted(event{1, "Order", 4, "OrderPlaced", `{}`})
	if _, err := h.pool.Exec(ctx, `INSERT INTO outbox_aggregate_leases (tenant_id, aggregate_type, aggregate_id, locked_by, locked_until, deferred_since, deferred_at)
		VALUES (1, 'Order', 1, 'held back', now() - interval '2 hours', NULL, NULL),
		       (1, 'Order', 2, 'held back', now() - interval '1 second', NULL, NULL),
		       (1, 'Order', 3, 'held back', now() + interval '1 minute', NULL, NULL),
		       (1, 'Order', 4, 'held back', now() - interval '2 hours', now() - interval '5 hours', now() - interval '2 hours'),
		       (1, 'Order', 5, 'held back', now() - interval '2 hours', now() - interval '5 hours', now() - interval '2 hours')`); err != nil {
		t.Fatal(err)
	}
	report, err := Retain(ctx, h.pool, RetentionConfig{ArchiveBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if report.Archived != 1 {
		t.Errorf("archived %d rows, want 1", report.Archived)
	}
	if report.LeasesRemoved != 2 || h.count(`SELECT count(*) FROM outbox_aggregate_leases WHERE aggregate_id IN (2, 3, 4)`) != 3 ||
		h.count(`SELECT count(*) FROM outbox_aggregate_leases WHERE aggregate_id = 4 AND deferred_since < now() - interval '4 hours'`) != 1 {
		t.Errorf("removed %d aggregate leases, want the two that ran out 2 hours ago with nothing pending (a hold with no event since, the wait of an aggregate with no event left)", report.LeasesRemoved)
	}
	if h.count(`SELECT count(*) FROM outbox_messages_archive WHERE id = $1`, old) != 1 ||
		h.count(`SELECT count(*) FROM outbox_messages WHERE id = ANY($1)`, []int64{recent, pending, waiting}) != 3 {
		t.Error("the archive moved the wrong rows")
	}
	if h.count(`SELECT count(*) FROM outbox_messages_archive_default`) != 0 {
		t.Error("archived row landed in the default partition: its month had no partition")
	}
	if len(report.PartitionsCreated) < 4 {
		t.Errorf("partitions created %v, want this month and 3 ahead at least", report.PartitionsCreated)
	}
	if len(report.PartitionsDropped) != 1 || report.PartitionsDropped[0] != "outbox_messages_archive_202001" {
		t.Errorf("partitions dropped %v, want the 2020-01 one", report.PartitionsDropped)
	}
	again, err := Retain(ctx, h.pool, RetentionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Archived != 0 || len(again.PartitionsCreated) != 0 || len(again.PartitionsDropped) != 0 || again.LeasesRemoved != 0 {
		t.Errorf("second run was not a no-op: %+v", again)
	}
}

// DLQ administration: list, retry (back to pending with its id), discard.
func TestDLQAdmin(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	a := h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{"bad": true}`})
	b := h.insertCommitted(event{2, "Order", 2, "OrderPlaced", `{"bad": true}`})
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outboxMoveToDLQ(ctx, tx, []int64{a, b}, []string{"bad a", "bad b"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	letters, err := DLQList(ctx, h.pool, 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(letters) != 1 || letters[0].ID != b || letters[0].LastError != "bad b" {
		t.Fatalf("tenant 2's dead letters: %+v", letters)
	}
	// Scoped to a tenant, an id of another tenant is left alone.
	if moved, err := DLQRetry(ctx, h.pool, 2, []int64{a}); err != nil || len(moved) != 0 {
		t.Fatalf("retry of tenant 1's row scoped to tenant 2: moved %v (%v)", moved, err)
	}
	if gone, err := DLQDiscard(ctx, h.pool, 2, []int64{a}); err != nil || len(gone) != 0 {
		t.Fatalf("discard of tenant 1's row scoped to tenant 2: deleted %v (%v)", gone, err)
	}
	retried, err := DLQRetry(ctx, h.pool, 1, []int64{a})
	if err != nil || len(retried) != 1 {
		t.Fatalf("retry: %v %v", retried, err)
	}
	if h.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND processed_at IS NULL AND attempts = 0`, a) != 1 {
		t.Error("retried row is not pending with a fresh attempt count")
	}
	// Not failing any more: sync --until-caught-up waits for it.
	if flowing, err := PendingFlowing(ctx, h.pool, time.Hour); err != nil || !flowing {
		t.Errorf("the retried row does not count as flowing (%v, %v): a caught-up check would stop before it is applied", flowing, err)
	}
	discarded, err := DLQDiscard(ctx, h.pool, 0, []int64{b, 999999})
	if err != nil || len(discarded) != 1 {
		t.Fatalf("discard: %v %v", discarded, err)
	}
	if h.count(`SELECT count(*) FROM outbox_messages_dlq`) != 0 {
		t.Error("DLQ not empty")
	}
	// A retried row is delivered again.
	sink := newRecordingSink()
	h.start(sink, h.config("relay-dlq"))
	eventually(t, 10*time.Second, "retried row delivered", func() bool { return sink.appliedIDs()[a] > 0 })
}

func TestMetricsReadFromPostgres(t *testing.T) {
	h := newHarness(t, WakePoll)
	h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`})
	if _, err := h.pool.Exec(context.Background(), `UPDATE outbox_messages SET occurred_at = now() - interval '1 hour',
		last_error = 'boom'`); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	registry := prometheus.NewRegistry()
	registry.MustRegister(m.Collectors(h.pool)...)
	expected := `
# HELP outbox_blocked_aggregates Aggregates whose pending events wait behind a failing event.
# TYPE outbox_blocked_aggregates gauge
outbox_blocked_aggregates 1
# HELP outbox_dlq_depth Rows in outbox_messages_dlq.
# TYPE outbox_dlq_depth gauge
outbox_dlq_depth 0
`
	if err := testutil.GatherAndCompare(registry, strings.NewReader(expected), "outbox_blocked_aggregates", "outbox_dlq_depth"); err != nil {
		t.Error(err)
	}
	stats, err := ReadStats(context.Background(), h.pool)
	if err != nil {
		t.Fatal(err)
	}
	if stats.LagSeconds < 3500 {
		t.Errorf("lag %.0fs, want about an hour", stats.LagSeconds)
	}
}

func TestConfigValidation(t *testing.T) {
	cases := map[string]Config{
		"unknown wake":  {Wake: "carrier-pigeon"},
		"slot with SQL": {Slot: "x; DROP TABLE outbox_messages"},
		"tiny lease":    {Lease: time.Millisecond},
		"backoff order": {SinkBackoff: time.Minute, SinkBackoffMax: time.Second},
		"wait order":    {DependencyWait: time.Minute, DependencyWaitMax: time.Second},
		"negative":      {BatchSize: -1},
	}
	for name, cfg := range cases {
		if err := cfg.withDefaults().validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := (Config{}).withDefaults().validate(); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
	if err := (Config{DependencyWait: 2 * time.Minute}).withDefaults().validate(); err != nil {
		t.Errorf("a dependency wait above the default maximum rejected: %v", err)
	}
	if _, err := ParseWakeMode("STREAM"); err != nil {
		t.Error(err)
	}
}

// Rows the retention job archived are still read by an offset reader that
// was behind, and a row retried from the DLQ is read again.
func TestOffsetReaderReadsArchiveAndRetriedRows(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	archived := h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`})
	if _, err := h.pool.Exec(ctx, `UPDATE outbox_messages SET processed_at = now() - interval '8 days' WHERE id = $1`, archived); err != nil {
		t.Fatal(err)
	}
	if report, err := Retain(ctx, h.pool, RetentionConfig{}); err != nil || report.Archived != 1 {
		t.Fatalf("retention: %+v, %v", report, err)
	}
	dead := h.insertCommitted(event{1, "Order", 2, "OrderPlaced", `{}`})
	reader := NewOffsetReader(h.pool, "behind", "")
	var seen []int64
	pos := Position{XID: "0"}
	// The reader stops below the oldest transaction running anywhere in the
	// cluster (other tests' included), so an empty read only means "not
	// yet": read until the rows the test expects have come, or time is up.
	readUntil := func(want ...int64) {
		eventually(t, 10*time.Second, fmt.Sprintf("the reader reading rows %v", want), func() bool {
			batch, next, err := reader.Read(ctx, pos, 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range batch {
				seen = append(seen, m.ID)
			}
			pos = next
			for _, id := range want {
				if !contains(seen, id) {
					return false
				}
			}
			return true
		})
	}
	readUntil(archived, dead)
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outboxMoveToDLQ(ctx, tx, []int64{dead}, []string{"bad"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := DLQRetry(ctx, h.pool, 0, []int64{dead}); err != nil {
		t.Fatal(err)
	}
	seen = nil
	readUntil(dead) // the retried row is read again
}

// A month whose partition cannot be created (its rows already sit in the
// default partition) is reported, and the archiving still runs.
// occurred_at is the producer's value. A processed row dated in year 1 must
// not make the retention job create (and drop again) a partition per month
// since then: it lands in the default partition, which keeps nothing older
// than the archive does, and its going is recorded as history dropped. A
// pending row at infinity (the relay dead-letters it) must not make the job
// or the gauges fail, nor hide the lag of the rows behind it.
func TestRetentionAndGaugesSurviveProducerDates(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	endless := h.insertCommitted(event{1, "Order", 3, "OrderPlaced", `{}`}) // the lowest pending id
	ancient := h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`})
	late := h.insertCommitted(event{1, "Order", 2, "OrderPlaced", `{}`})
	if _, err := h.pool.Exec(ctx, `UPDATE outbox_messages SET processed_at = now() - interval '8 days', occurred_at = '0001-01-01 00:00:00+00' WHERE id = $1`, ancient); err != nil {
		t.Fatal(err)
	}
	if _, err := h.pool.Exec(ctx, `UPDATE outbox_messages SET occurred_at = '-infinity' WHERE id = $1`, endless); err != nil {
		t.Fatal(err)
	}
	if _, err := h.pool.Exec(ctx, `UPDATE outbox_messages SET occurred_at = now() - interval '1 hour' WHERE id = $1`, late); err != nil {
		t.Fatal(err)
	}
	report, err := Retain(ctx, h.pool, RetentionConfig{KeepArchive: 60 * 24 * time.Hour, MonthsAhead: 1})
	if err != nil {
		t.Fatalf("retention: %v", err)
	}
	// At most the months the archive keeps (60 days: three months touched),
	// this one and one ahead.
	if n := len(report.PartitionsCreated); n == 0 || n > 5 {
		t.Errorf("partitions created %v, want the months the archive keeps up to one ahead", report.PartitionsCreated)
	}
	if n := h.count(`SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox_messages_archive'::regclass`); n > 6 {
		t.Errorf("the archive has %d partitions", n)
	}
	if len(report.PartitionsDropped) != 0 {
		t.Errorf("partitions dropped %v, want none", report.PartitionsDropped)
	}
	if report.Archived != 1 {
		t.Errorf("archived %d rows, want the one dated in year 1", report.Archived)
	}
	if n := h.count(`SELECT count(*) FROM outbox_messages_archive WHERE id = $1`, ancient); n != 0 {
		t.Errorf("the row dated in year 1 is still in the archive, older than it keeps")
	}
	if n := h.count(`SELECT coalesce(sum(rows_dropped), 0) FROM outbox_history_gaps
		WHERE partition_name = 'outbox_messages_archive_default' AND tenant_id = 1 AND oldest = '0001-01-01 00:00:00+00'`); n != 1 {
		t.Errorf("the row dated in year 1 went unrecorded: %d rows in outbox_history_gaps", n)
	}
	stats, err := ReadStats(ctx, h.pool)
	if err != nil {
		t.Fatalf("gauges with a pending row at -infinity: %v", err)
	}
	if stats.LagSeconds < 3500 || stats.LagSeconds > 4000 {
		t.Errorf("lag %.0fs with the oldest pending row at -infinity and the next one an hour old, want about an hour", stats.LagSeconds)
	}
}

func TestRetentionArchivesDespiteAPartitionItCannotCreate(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	if _, err := h.pool.Exec(ctx, `INSERT INTO outbox_messages_archive
		(id, tenant_id, aggregate_type, aggregate_id, event_type, payload, occurred_at, processed_at)
		VALUES (-1, 1, 'Order', 1, 'OrderPlaced', '{}', now() + interval '6 months', now())`); err != nil {
		t.Fatal(err)
	}
	old := h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`})
	if _, err := h.pool.Exec(ctx, `UPDATE outbox_messages SET processed_at = now() - interval '8 days' WHERE id = $1`, old); err != nil {
		t.Fatal(err)
	}
	report, err := Retain(ctx, h.pool, RetentionConfig{MonthsAhead: 8})
	if err == nil || !strings.Contains(err.Error(), "create archive partition") {
		t.Errorf("the partition that cannot be created was not reported: %v", err)
	}
	if report.Archived != 1 {
		t.Errorf("archived %d rows, want 1: archiving stopped at the partition error", report.Archived)
	}
}

// "Caught up" (sync --until-caught-up) passes over an aggregate that has
// waited for another aggregate's events for longer than it is told, and was
// deferred again after the last row anything applied: the event it waits for
// is in the DLQ or never came, and nothing pending can bring it. One that has
// waited less still flows, as does one deferred before a row was applied
// (that row may be what it waits for), and any other row.
func TestCaughtUpPassesOverLongWaits(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := h.pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	applied := h.insertCommitted(event{1, "Order", 9, "OrderPlaced", `{}`})
	exec(`UPDATE outbox_messages SET processed_at = now() - interval '10 seconds' WHERE id = $1`, applied)
	h.insertCommitted(event{1, "Order", 1, "OrderPlaced", `{}`})
	exec(`INSERT INTO outbox_aggregate_leases (tenant_id, aggregate_type, aggregate_id, locked_by, locked_until, deferred_since, deferred_at)
		VALUES (1, 'Order', 1, 'held back', now() + interval '30 seconds', now() - interval '2 minutes', now() - interval '1 second')`)
	flowing := func(waited time.Duration) bool {
		t.Helper()
		f, err := PendingFlowing(ctx, h.pool, waited)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	if flowing(time.Minute) {
		t.Error("an aggregate waiting 2 minutes, deferred after the last row applied, counts as flowing when told 1 minute")
	}
	if !flowing(time.Hour) {
		t.Error("an aggregate waiting 2 minutes counts as caught up when told 1 hour")
	}
	exec(`UPDATE outbox_messages SET processed_at = now() WHERE id = $1`, applied)
	if !flowing(time.Minute) {
		t.Error("an aggregate deferred before a row was applied (perhaps the one it waits for) counts as caught up")
	}
	exec(`UPDATE outbox_messages SET processed_at = now() - interval '10 seconds' WHERE id = $1`, applied)
	h.insertCommitted(event{1, "Order", 2, "OrderPlaced", `{}`})
	if !flowing(time.Minute) {
		t.Error("another aggregate's pending row does not count as flowing")
	}
}

// Archive partitions are months in UTC, as retention's cutoff is, whatever
// TimeZone the session runs in: a bound written as a bare date was read in
// New York time and kept rows five hours off the months being dropped.
func TestArchivePartitionsAreUTCMonths(t *testing.T) {
	h := newHarness(t, WakePoll)
	ctx := context.Background()
	var db string
	if err := h.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	h.exec(`ALTER DATABASE ` + pgx.Identifier{db}.Sanitize() + ` SET timezone = 'America/New_York'`)
	h.pool.Reset() // new sessions take the database's TimeZone
	created, err := ArchivePartitionsEnsure(ctx, h.pool, time.Date(2031, 3, 15, 12, 0, 0, 0, time.UTC), 0, 24*time.Hour)
	if err != nil || len(created) != 1 {
		t.Fatalf("partitions created %v, %v; want one", created, err)
	}
	var from, to time.Time
	if err := h.pool.QueryRow(ctx, `SELECT
		(regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz,
		(regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz
		FROM pg_class c WHERE c.relname = $1`, created[0]).Scan(&from, &to); err != nil {
		t.Fatal(err)
	}
	if !from.Equal(time.Date(2031, 3, 1, 0, 0, 0, 0, time.UTC)) || !to.Equal(time.Date(2031, 4, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("partition %s holds %s to %s, want the UTC month", created[0], from.UTC(), to.UTC())
	}
}
