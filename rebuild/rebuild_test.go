package rebuild

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap/zaptest"

	"graphsync/drift"
	"graphsync/events"
	"graphsync/internal/stacktest"
	"graphsync/outbox"
	"graphsync/pipelinetest"
	"graphsync/projector"
	"graphsync/relay"
	gsql "graphsync/sql"
	"graphsync/workload"
)

func stack(t *testing.T) (*pgxpool.Pool, neo4j.DriverWithContext) { return pipelinetest.Stack(t) }

func startSync(t *testing.T, pool *pgxpool.Pool, driver neo4j.DriverWithContext, id string) {
	pipelinetest.StartSync(t, pool, driver, id)
}

func waitCaughtUp(t *testing.T, pool *pgxpool.Pool) {
	pipelinetest.WaitCaughtUp(t, pool, 90*time.Second)
}

func writeWorkload(t *testing.T, pool *pgxpool.Pool, driver neo4j.DriverWithContext, cfg workload.Config) []int64 {
	t.Helper()
	report, err := workload.Run(context.Background(), pool, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stacktest.CleanGraph(t, driver, report.TenantIDs...) })
	return report.TenantIDs
}

func rebuildScope(t *testing.T, pool *pgxpool.Pool, driver neo4j.DriverWithContext, cfg Config) *Result {
	t.Helper()
	res, err := runScope(context.Background(), t, pool, driver, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// scopeOutcome is how a rebuild run beside the test ended.
type scopeOutcome struct {
	res *Result
	err error
}

// runScopeBeside runs a rebuild beside the test; a test that fails early
// stops it and waits for it before it ends.
func runScopeBeside(t *testing.T, pool *pgxpool.Pool, driver neo4j.DriverWithContext, cfg Config) <-chan scopeOutcome {
	done, finished := make(chan scopeOutcome, 1), make(chan struct{})
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(func() { stop(); <-finished })
	go func() {
		defer close(finished)
		res, err := runScope(ctx, t, pool, driver, cfg)
		done <- scopeOutcome{res, err}
	}()
	return done
}

// awaitTransactionsWait returns once the rebuild run beside the test waits
// for the transactions running at a read (its last query is
// RebuildXactsEnded); it fails the test when the rebuild ends first.
func awaitTransactionsWait(t *testing.T, pool *pgxpool.Pool, done <-chan scopeOutcome, what string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = $1`,
		gsql.Query("RebuildXactsEnded")) == 0 {
		select {
		case o := <-done:
			t.Fatalf("the rebuild ended (%v) without waiting for %s", o.err, what)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rebuild did not wait for %s within 60s", what)
		}
	}
}

// poolOf is a pool of its own of n connections to shared's database.
func poolOf(shared *pgxpool.Pool, n int32) (*pgxpool.Pool, error) {
	cfg := shared.Config().Copy()
	cfg.MaxConns = n
	return pgxpool.NewWithConfig(context.Background(), cfg)
}

// runScope is rebuildScope for a goroutine: it returns its error.
//
// The rebuild gets a pool of its own, sized as `graphsync rebuild` sizes
// it, as the process it stands for would have: rebuilds and syncs sharing
// the test's small pool waited for one another's connections for ever (two
// rebuilds under load each held their lock and drift's snapshot, four
// connections, and each waited for a fifth).
func runScope(ctx context.Context, t *testing.T, shared *pgxpool.Pool, driver neo4j.DriverWithContext, cfg Config) (*Result, error) {
	pool, err := poolOf(shared, 6)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	sink, err := projector.New(driver, projector.Config{}, zaptest.NewLogger(t))
	if err != nil {
		return nil, err
	}
	cfg.Sink = sink
	if cfg.RecheckAfter == 0 {
		cfg.RecheckAfter = 200 * time.Millisecond
	}
	b, err := New(pool, driver, cfg, zaptest.NewLogger(t))
	if err != nil {
		return nil, err
	}
	res, err := b.Run(ctx)
	if err != nil {
		return nil, fmt.Errorf("rebuild of tenant %d (%s): %w", cfg.TenantID, cfg.Source, err)
	}
	return res, nil
}

func dump(t *testing.T, driver neo4j.DriverWithContext, tenant int64) projector.Dump {
	t.Helper()
	d, err := projector.DumpGraph(context.Background(), driver, tenant)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// full is a dump with what String leaves out: every node's guard
// (version and outbox id) and the tombstones. Replay must give it exactly.
func full(d projector.Dump) string {
	var b strings.Builder
	b.WriteString(d.String())
	for _, n := range append(append([]projector.DumpNode(nil), d.Nodes...), d.Tombstones...) {
		fmt.Fprintf(&b, "%s %d guard %d/%d\n", n.Label, n.ID, n.Sync.Version, n.Sync.OutboxID)
	}
	return b.String()
}

// withoutTombstones is a dump with every node's version but not its outbox
// id, nor the tombstones: a snapshot has no history to know which products
// were deleted, nor which event wrote a node last.
func withoutTombstones(d projector.Dump) string {
	var b strings.Builder
	b.WriteString(d.String())
	for _, n := range d.Nodes {
		fmt.Fprintf(&b, "%s %d version %d\n", n.Label, n.ID, n.Sync.Version)
	}
	return b.String()
}

func requireNoDrift(t *testing.T, res *Result, what string) {
	t.Helper()
	if res.Report == nil || res.Report.DriftTotal != 0 {
		var md strings.Builder
		if res.Report != nil {
			_ = res.Report.WriteMarkdown(&md, 0)
		}
		t.Fatalf("%s: drift remains:\n%s", what, md.String())
	}
}

func cypherExec(t *testing.T, driver neo4j.DriverWithContext, query string, params map[string]any) {
	t.Helper()
	if _, err := neo4j.ExecuteQuery(context.Background(), driver, query, params, neo4j.EagerResultTransformer); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// After sync, a rebuild of one tenant gives the canonical dump sync gave:
// by replay into its emptied part of the graph (Neo4j lost it), by snapshot
// (the same, tombstones aside: they need history), and by a snapshot in
// place over a node edited by hand (the sweep puts it right) while a reader
// never misses a node. The other tenant is
// never touched, and no outbox row is delivered again.
func TestRebuildEqualsTheSyncedGraph(t *testing.T) {
	pool, driver := stack(t)
	startSync(t, pool, driver, "sync-a")
	tenants := writeWorkload(t, pool, driver, workload.Config{Seed: 11, Tenants: 2, Orders: 300, Writers: 3})
	waitCaughtUp(t, pool)
	target, other := tenants[0], tenants[1]
	synced, otherSynced := dump(t, driver, target), dump(t, driver, other)
	if len(synced.Nodes) == 0 || len(synced.Tombstones) == 0 {
		t.Fatalf("the workload gave tenant %d no graph or no deleted product to rebuild:\n%s", target, synced)
	}
	processed := count(t, pool, `SELECT count(*) FROM outbox_messages WHERE processed_at IS NOT NULL`)

	// Neo4j lost the tenant: replay brings it back (auto: history complete).
	stacktest.CleanGraph(t, driver, target)
	res := rebuildScope(t, pool, driver, Config{TenantID: target})
	if res.Source != SourceReplay || res.NotApplied != 0 {
		t.Errorf("auto chose %s (%s), %d events not applied (%s); want replay, all applied", res.Source, res.Why, res.NotApplied, res.FirstRejection)
	}
	requireNoDrift(t, res, "replay into an empty graph")
	if got := dump(t, driver, target); full(got) != full(synced) {
		t.Errorf("replay: the rebuilt graph differs from the synced one\nsynced:\n%s\nrebuilt:\n%s", full(synced), full(got))
	}

	// The same from the rows.
	stacktest.CleanGraph(t, driver, target)
	res = rebuildScope(t, pool, driver, Config{TenantID: target, Source: SourceSnapshot})
	requireNoDrift(t, res, "snapshot into an empty graph")
	if got := dump(t, driver, target); withoutTombstones(got) != withoutTombstones(synced) {
		t.Errorf("snapshot: the rebuilt graph differs from the synced one\nsynced:\n%s\nrebuilt:\n%s", synced, got)
	}
	if res.Done == 0 || res.Chunks == 0 {
		t.Errorf("snapshot read %d rows in %d chunks", res.Done, res.Chunks)
	}

	// In place: a property edited by hand keeps the node's version, so the
	// guards keep it; the sweep re-projects it. A stray node goes.
	cypherExec(t, driver, `MATCH (p:Product {tenant_id: $t}) WITH p LIMIT 1 SET p.name = 'edited by hand'`, map[string]any{"t": target})
	cypherExec(t, driver, `CREATE (:Order {tenant_id: $t, id: 1, status: 'nobody wrote me'})`, map[string]any{"t": target})
	// A reader during the rebuild never misses an order (none is deleted).
	orders := func() int64 {
		res, err := neo4j.ExecuteQuery(context.Background(), driver, `MATCH (o:Order {tenant_id: $t}) RETURN count(o) AS n`,
			map[string]any{"t": target}, neo4j.EagerResultTransformer)
		if err != nil {
			t.Error(err)
			return -1
		}
		n, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "n")
		return n
	}
	before := orders()
	stop, fewest := make(chan struct{}), make(chan int64, 1)
	go func() {
		low := before
		for {
			select {
			case <-stop:
				fewest <- low
				return
			default:
			}
			if n := orders(); n >= 0 && n < low {
				low = n
			}
		}
	}()
	res = rebuildScope(t, pool, driver, Config{TenantID: target, Source: SourceSnapshot, ChunkSize: 20})
	close(stop)
	if low := <-fewest; low < before-1 {
		t.Errorf("a reader saw %d orders during the rebuild, %d before (one stray order is swept)", low, before)
	}
	requireNoDrift(t, res, "snapshot in place")
	if len(res.Repaired) == 0 {
		t.Error("the sweep reported no repair of the edited node and the stray one")
	}
	if got := dump(t, driver, target); withoutTombstones(got) != withoutTombstones(synced) {
		t.Errorf("snapshot in place: the graph differs from the synced one\nsynced:\n%s\nrebuilt:\n%s", synced, got)
	}

	if got := dump(t, driver, other); full(got) != full(otherSynced) {
		t.Errorf("tenant %d, not in scope, changed:\nbefore:\n%s\nafter:\n%s", other, otherSynced, got)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox_messages WHERE processed_at IS NOT NULL`); n != processed {
		t.Errorf("%d rows processed before the rebuilds, %d after: the rebuild touched the outbox", processed, n)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`); n != 0 {
		t.Errorf("%d outbox rows pending after the rebuilds: sync would deliver them again", n)
	}
}

// A rebuild of each source while two sync processes deliver a live
// workload converges: once the workload is done and sync caught up, the
// boundary review finds no drift.
func TestRebuildUnderLiveLoadConverges(t *testing.T) {
	pool, driver := stack(t)
	startSync(t, pool, driver, "sync-a")
	startSync(t, pool, driver, "sync-b")
	tenants, done := pipelinetest.StartWorkload(t, pool, workload.Config{Seed: 5, Tenants: 2, Orders: 8000, Writers: 3})
	t.Cleanup(func() { stacktest.CleanGraph(t, driver, tenants...) })
	// Wipe one tenant while it is written: the snapshot brings it back.
	stacktest.CleanGraph(t, driver, tenants[0])
	// Both rebuilds start at once, one per tenant and source, so that both
	// run while the workload is written (one after the other, the second
	// could start after the workload ended).
	select {
	case ids := <-done:
		done <- ids
		t.Fatal("the workload was over before the rebuilds started: they would not run under load")
	default:
	}
	configs := []Config{
		{TenantID: tenants[0], Source: SourceSnapshot, ChunkSize: 50},
		{TenantID: tenants[1], Source: SourceReplay, ChunkSize: 100},
	}
	under := make([]*Result, len(configs))
	errs := make([]error, len(configs))
	var wg sync.WaitGroup
	for i, cfg := range configs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			under[i], errs[i] = runScope(context.Background(), t, pool, driver, cfg)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// The workload's 8,000 orders (some 23,000 events) take about 2 minutes
	// at the 200 events/s this machine gave without busy loops, and up
	// to 9 minutes on a loaded 2-core one (45 events/s, two busy loops
	// beside the tests): the wait is for its end, not a timing assertion.
	select {
	case <-done:
	case <-time.After(15 * time.Minute):
		t.Fatal("the workload did not finish within 15 minutes")
	}
	for i, res := range under {
		if res.Done == 0 {
			t.Errorf("rebuild %d under load read nothing", i)
		}
	}
	waitCaughtUp(t, pool)
	for _, tenant := range tenants {
		checkNoDrift(t, pool, driver, tenant, fmt.Sprintf("tenant %d after rebuild under load", tenant))
	}
}

// After retention dropped the archive partition that held a tenant's
// history, auto decides on a snapshot (it knows from outbox_history_gaps)
// and brings the emptied graph back to drift 0.
func TestAutoTakesASnapshotWhenRetentionDroppedHistory(t *testing.T) {
	pool, driver := stack(t)
	startSync(t, pool, driver, "sync-a")
	tenants := writeWorkload(t, pool, driver, workload.Config{Seed: 13, Tenants: 1, Orders: 120, Writers: 2})
	waitCaughtUp(t, pool)
	synced := dump(t, driver, tenants[0])
	ctx := context.Background()
	report, err := relay.Retain(ctx, pool, relay.RetentionConfig{ArchiveAfter: time.Nanosecond})
	if err != nil || report.Archived == 0 {
		t.Fatalf("archive: %+v, %v", report, err)
	}
	dropped, err := relay.ArchivePartitionsDrop(ctx, pool, time.Now().AddDate(0, 2, 0))
	if err != nil || len(dropped) == 0 {
		t.Fatalf("drop partitions: %v, %v", dropped, err)
	}
	if n := count(t, pool, `SELECT coalesce(sum(rows_dropped), 0)::bigint FROM outbox_history_gaps WHERE tenant_id = $1`, tenants[0]); n == 0 {
		t.Fatal("retention dropped the tenant's history but outbox_history_gaps does not say so")
	}
	stacktest.CleanGraph(t, driver, tenants[0])
	res := rebuildScope(t, pool, driver, Config{TenantID: tenants[0]})
	if res.Source != SourceSnapshot || !strings.Contains(res.Why, "incomplete") {
		t.Errorf("auto chose %s (%s); want snapshot, saying the history is incomplete", res.Source, res.Why)
	}
	requireNoDrift(t, res, "auto after dropped history")
	if got := dump(t, driver, tenants[0]); withoutTombstones(got) != withoutTombstones(synced) {
		t.Errorf("the rebuilt graph differs from the synced one\nsynced:\n%s\nrebuilt:\n%s", synced, got)
	}
}

// Two rebuilds of overlapping scopes at once: the second is refused with
// ErrBusy, whichever is the wider.
func TestOverlappingRebuildsAreRefused(t *testing.T) {
	pool, driver := stack(t)
	tenants := writeWorkload(t, pool, driver, workload.Config{Seed: 17, Tenants: 2, Orders: 10, Writers: 1})
	ctx := context.Background()
	for _, held := range []struct {
		scope int64
		tries []int64
	}{
		{tenants[0], []int64{tenants[0], 0}},
		{0, []int64{tenants[0], tenants[1]}},
	} {
		unlock, err := lockScope(ctx, pool, held.scope)
		if err != nil {
			t.Fatal(err)
		}
		for _, scope := range held.tries {
			b, err := New(pool, driver, Config{TenantID: scope, Sink: outbox.SinkFunc(nil)}, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Run(ctx); !errors.Is(err, ErrBusy) {
				t.Errorf("a rebuild of scope %d while scope %d runs: %v, want ErrBusy", scope, held.scope, err)
			}
		}
		unlock()
	}
	// Disjoint tenants do not exclude each other.
	unlock, err := lockScope(ctx, pool, tenants[0])
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	other, err := lockScope(ctx, pool, tenants[1])
	if err != nil {
		t.Fatalf("a rebuild of tenant %d while tenant %d rebuilds: %v", tenants[1], tenants[0], err)
	}
	other()
}

// changeProduct makes a business change and writes its event in tx, as a
// producer does: the product's category renamed, its description changed
// (version + 1), and the ProductUpdated carrying the new state. It returns
// the event's outbox id and the product's new version.
func changeProduct(t *testing.T, tx pgx.Tx, tenant, product int64, what string) (outboxID, version int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := tx.Exec(ctx, `UPDATE categories SET name = $3 WHERE tenant_id = $1
		AND id = (SELECT category_id FROM products WHERE tenant_id = $1 AND id = $2)`, tenant, product, "category "+what); err != nil {
		t.Fatal(err)
	}
	var s events.ProductState
	var categoryID pgtype.Int8
	var categoryName pgtype.Text
	err := tx.QueryRow(ctx, `WITH p AS (
		  UPDATE products SET description = $3, version = version + 1, updated_at = now()
		  WHERE tenant_id = $1 AND id = $2
		  RETURNING tenant_id, id, version, sku, name, description, category_id, price_cents, currency, status)
		SELECT p.id, p.version, p.sku, p.name, p.description, p.category_id, c.name, p.price_cents, p.currency, p.status
		FROM p LEFT JOIN categories c ON c.tenant_id = p.tenant_id AND c.id = p.category_id`, tenant, product, "description "+what).
		Scan(&s.ID, &s.Version, &s.SKU, &s.Name, &s.Description, &categoryID, &categoryName, &s.PriceCents, &s.Currency, &s.Status)
	if err != nil {
		t.Fatal(err)
	}
	if categoryID.Valid {
		s.Category = &events.CategoryRef{ID: categoryID.Int64, Name: categoryName.String}
	}
	if err := events.Enqueue(ctx, tx, tenant, events.ProductUpdated{ProductState: s}); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `SELECT max(id) FROM outbox_messages WHERE tenant_id = $1 AND aggregate_id = $2`, tenant, product).Scan(&outboxID); err != nil {
		t.Fatal(err)
	}
	return outboxID, s.Version
}

// productWithCategory is the tenant's first product that has a category.
func productWithCategory(t *testing.T, pool *pgxpool.Pool, tenant int64) int64 {
	t.Helper()
	return count(t, pool, `SELECT id FROM products WHERE tenant_id = $1 AND category_id IS NOT NULL ORDER BY id LIMIT 1`, tenant)
}

// graphProduct is what the graph holds of a product and its category.
type graphProduct struct {
	Description string
	Version     int64
	Category    string
	// The outbox ids of the events that wrote the product and the
	// category last (their guards).
	ProductOutboxID, CategoryOutboxID int64
}

func readGraphProduct(t *testing.T, driver neo4j.DriverWithContext, tenant, product int64) graphProduct {
	t.Helper()
	res, err := neo4j.ExecuteQuery(context.Background(), driver, `MATCH (p:Product {tenant_id: $t, id: $id})
		OPTIONAL MATCH (p)-[:IN_CATEGORY]->(c:Category)
		RETURN p.description AS description, p.sync_version AS version, p.sync_outbox_id AS product_outbox,
		       c.name AS category, c.sync_outbox_id AS category_outbox`,
		map[string]any{"t": tenant, "id": product}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 1 {
		t.Fatalf("product %d of tenant %d: %d nodes in the graph, want 1", product, tenant, len(res.Records))
	}
	rec := res.Records[0]
	var g graphProduct
	g.Description, _, _ = neo4j.GetRecordValue[string](rec, "description")
	g.Version, _, _ = neo4j.GetRecordValue[int64](rec, "version")
	g.ProductOutboxID, _, _ = neo4j.GetRecordValue[int64](rec, "product_outbox")
	g.Category, _, _ = neo4j.GetRecordValue[string](rec, "category")
	g.CategoryOutboxID, _, _ = neo4j.GetRecordValue[int64](rec, "category_outbox")
	return g
}

// checkNoDrift runs the boundary review of one tenant, without repair.
func checkNoDrift(t *testing.T, pool *pgxpool.Pool, driver neo4j.DriverWithContext, tenant int64, what string) {
	t.Helper()
	b, err := New(pool, driver, Config{TenantID: tenant, Sink: outbox.SinkFunc(nil), RecheckAfter: 200 * time.Millisecond}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	report, err := b.checker.Run(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if report.DriftTotal != 0 {
		var md strings.Builder
		_ = report.WriteMarkdown(&md, 0)
		t.Errorf("%s: drift %d\n%s", what, report.DriftTotal, md.String())
	}
}

// A transaction that is open when the snapshot starts reading, and commits
// after, has its business change and its event (a product's new version
// and its category's new name) both outside the snapshot: its event,
// applied by sync after the rebuild read, is not lost, and the snapshot's
// older read of the same rows does not undo it. The result is the state a
// replay that applies every event once gives.
func TestTransactionHeldAcrossTheSnapshotStart(t *testing.T) {
	pool, driver := stack(t)
	ctx := context.Background()
	startSync(t, pool, driver, "sync-a")
	tenant := writeWorkload(t, pool, driver, workload.Config{Seed: 23, Tenants: 1, Orders: 60, Writers: 1})[0]
	waitCaughtUp(t, pool)
	product := productWithCategory(t, pool, tenant)

	held, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback(ctx) //nolint:errcheck // committed below
	event, version := changeProduct(t, held, tenant, product, "held across the snapshot")

	done := runScopeBeside(t, pool, driver, Config{TenantID: tenant, Source: SourceSnapshot, ChunkSize: 10})
	// The first chunk (categories) was read in a snapshot that does not see
	// the held transaction when its write waits for that transaction to
	// end (the reference watermark): then commit it.
	awaitTransactionsWait(t, pool, done, "the transaction open at its read")
	if err := held.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	requireNoDrift(t, o.res, "snapshot around the held transaction")
	// The base phase and sync got it right alone: a stale write the sweep
	// put right would be a reader's older state in between.
	if len(o.res.Repaired) > 0 {
		t.Errorf("the sweep had to repair %v", o.res.Repaired)
	}
	waitCaughtUp(t, pool)

	// Not lost, and not overwritten by the older read: the graph holds what
	// the held transaction wrote, and its event is the last write of both
	// the product and the category.
	want := graphProduct{Description: "description held across the snapshot", Version: version,
		Category: "category held across the snapshot", ProductOutboxID: event, CategoryOutboxID: event}
	if got := readGraphProduct(t, driver, tenant, product); got != want {
		t.Errorf("product %d after the rebuild: %+v, want %+v", product, got, want)
	}
	checkNoDrift(t, pool, driver, tenant, "after the rebuild and sync")
	// Not applied twice in effect: the graph is what applying every event
	// once gives (a replay into an emptied graph), versions included.
	after := dump(t, driver, tenant)
	stacktest.CleanGraph(t, driver, tenant)
	res := rebuildScope(t, pool, driver, Config{TenantID: tenant, Source: SourceReplay})
	requireNoDrift(t, res, "replay")
	if replayed := dump(t, driver, tenant); withoutTombstones(replayed) != withoutTombstones(after) {
		t.Errorf("the graph after the snapshot and sync differs from a replay of the history\nafter:\n%s\nreplayed:\n%s", after, replayed)
	}
}

// A transaction left open before a replay began (idle in transaction)
// holds back the horizon the history is read below. Events committed after
// it, which sync applied before Neo4j lost them, must still be replayed: the
// replay waits for the transaction, then reads on, and the sweep has
// nothing left to repair.
func TestReplayWaitsForATransactionOpenAtItsStart(t *testing.T) {
	pool, driver := stack(t)
	ctx := context.Background()
	startSync(t, pool, driver, "sync-a")
	tenant := writeWorkload(t, pool, driver, workload.Config{Seed: 29, Tenants: 1, Orders: 60, Writers: 1})[0]
	waitCaughtUp(t, pool)
	held := productWithCategory(t, pool, tenant)
	later := count(t, pool, `SELECT id FROM products WHERE tenant_id = $1 AND category_id IS NOT NULL
		AND category_id <> (SELECT category_id FROM products WHERE tenant_id = $1 AND id = $2) ORDER BY id LIMIT 1`, tenant, held)

	heldTx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer heldTx.Rollback(ctx) //nolint:errcheck // committed below
	changeProduct(t, heldTx, tenant, held, "held open")
	laterTx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	event, version := changeProduct(t, laterTx, tenant, later, "committed after the held one began")
	if err := laterTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for count(t, pool, `SELECT count(*) FROM outbox_messages WHERE id = $1 AND processed_at IS NOT NULL`, event) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("sync did not apply the later event within 60s")
		}
		<-time.After(20 * time.Millisecond)
	}
	stacktest.CleanGraph(t, driver, tenant) // Neo4j lost the tenant's graph

	done := runScopeBeside(t, pool, driver, Config{TenantID: tenant, Source: SourceReplay, ChunkSize: 50})
	awaitTransactionsWait(t, pool, done, "the transaction open at its start")
	if err := heldTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	requireNoDrift(t, o.res, "replay around the held transaction")
	if len(o.res.Repaired) > 0 {
		t.Errorf("the sweep had to repair %v: the replay left out what was committed after the held transaction", o.res.Repaired)
	}
	want := graphProduct{Description: "description committed after the held one began", Version: version,
		Category: "category committed after the held one began", ProductOutboxID: event, CategoryOutboxID: event}
	if got := readGraphProduct(t, driver, tenant, later); got != want {
		t.Errorf("product %d after the replay: %+v, want %+v", later, got, want)
	}
}

// Neo4j lost the graph of a tenant while sync was stopped; a rebuild brings
// it back, then sync carries on with new changes: drift 0, and no outbox
// row is delivered twice (the rebuild writes the graph, never the outbox).
func TestRebuildIntoAnEmptyGraphThenSync(t *testing.T) {
	pool, driver := stack(t)
	ctx := context.Background()
	var mu sync.Mutex
	delivered := map[int64]int{}
	startCountingSync := func(id string) (stop func()) {
		sink, err := projector.New(driver, projector.Config{}, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		counting := outbox.SinkFunc(func(ctx context.Context, batch []outbox.Message) (map[int64]error, error) {
			rejected, err := sink.Deliver(ctx, batch)
			if err == nil {
				mu.Lock()
				for _, m := range batch {
					if _, bad := rejected[m.ID]; !bad {
						delivered[m.ID]++
					}
				}
				mu.Unlock()
			}
			return rejected, err
		})
		rel, err := relay.New(pool, counting, relay.Config{ID: id, PollInterval: 50 * time.Millisecond, DependencyWait: 50 * time.Millisecond,
			RetryStep: 50 * time.Millisecond, SinkBackoff: 50 * time.Millisecond}, zaptest.NewLogger(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		errs := make(chan error, 1)
		go func() { errs <- rel.Run(runCtx) }()
		stopped := false
		stop = func() {
			if stopped {
				return
			}
			stopped = true
			cancel()
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		t.Cleanup(stop)
		return stop
	}

	stop := startCountingSync("sync-before")
	tenant := writeWorkload(t, pool, driver, workload.Config{Seed: 29, Tenants: 1, Orders: 80, Writers: 2})[0]
	waitCaughtUp(t, pool)
	stop()
	synced := dump(t, driver, tenant)

	// Neo4j lost the tenant's graph.
	stacktest.CleanGraph(t, driver, tenant)
	if d := dump(t, driver, tenant); len(d.Nodes) != 0 {
		t.Fatalf("the graph still holds %d nodes of tenant %d", len(d.Nodes), tenant)
	}
	res := rebuildScope(t, pool, driver, Config{TenantID: tenant})
	requireNoDrift(t, res, "rebuild into the emptied graph")
	if got := dump(t, driver, tenant); full(got) != full(synced) {
		t.Errorf("the rebuilt graph differs from the synced one\nsynced:\n%s\nrebuilt:\n%s", full(synced), full(got))
	}

	// Sync carries on: a new change reaches the graph, nothing is delivered
	// again.
	startCountingSync("sync-after")
	product := productWithCategory(t, pool, tenant)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	event, version := changeProduct(t, tx, tenant, product, "after the rebuild")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, pool)
	want := graphProduct{Description: "description after the rebuild", Version: version, Category: "category after the rebuild",
		ProductOutboxID: event, CategoryOutboxID: event}
	if got := readGraphProduct(t, driver, tenant, product); got != want {
		t.Errorf("product %d after sync: %+v, want %+v", product, got, want)
	}
	checkNoDrift(t, pool, driver, tenant, "after the rebuild and sync")

	rows := count(t, pool, `SELECT count(*) FROM outbox_messages`)
	mu.Lock()
	defer mu.Unlock()
	if int64(len(delivered)) != rows {
		t.Errorf("sync delivered %d distinct outbox rows, the outbox holds %d", len(delivered), rows)
	}
	for id, n := range delivered {
		if n != 1 {
			t.Errorf("outbox row %d delivered %d times", id, n)
		}
	}
	if delivered[event] != 1 {
		t.Errorf("the change after the rebuild (outbox row %d) was delivered %d times, want 1", event, delivered[event])
	}
}

// halfApplied is a projector whose first chunk of several events Neo4j
// drops after half of it committed: the rest comes back ErrNotApplied, as
// the projector reports a connection lost mid-chunk.
type halfApplied struct {
	outbox.Sink
	broke atomic.Bool
}

func (s *halfApplied) Deliver(ctx context.Context, batch []outbox.Message) (map[int64]error, error) {
	if len(batch) < 2 || s.broke.Swap(true) {
		return s.Sink.Deliver(ctx, batch)
	}
	half := len(batch) / 2
	rejected, err := s.Sink.Deliver(ctx, batch[:half])
	if err != nil {
		return nil, err
	}
	if rejected == nil {
		rejected = map[int64]error{}
	}
	for _, m := range batch[half:] {
		rejected[m.ID] = fmt.Errorf("%w: connection to Neo4j lost", outbox.ErrNotApplied)
	}
	return rejected, nil
}

// A replay chunk that Neo4j applied only in part (the connection went after
// some of its transactions committed) is delivered again, the unapplied
// part only: nothing is left to the sweep, and the graph is what sync gave.
func TestReplayDeliversAgainWhatNeo4jLeftUnapplied(t *testing.T) {
	pool, driver := stack(t)
	startSync(t, pool, driver, "sync-unapplied")
	tenant := writeWorkload(t, pool, driver, workload.Config{Seed: 23, Tenants: 1, Orders: 120, Writers: 2})[0]
	waitCaughtUp(t, pool)
	synced := dump(t, driver, tenant)
	stacktest.CleanGraph(t, driver, tenant)

	inner, err := projector.New(driver, projector.Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	sink := &halfApplied{Sink: inner}
	b, err := New(pool, driver, Config{TenantID: tenant, Source: SourceReplay, ChunkSize: 200, Sink: sink,
		RecheckAfter: 200 * time.Millisecond}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !sink.broke.Load() {
		t.Fatal("no chunk was delivered in part")
	}
	requireNoDrift(t, res, "replay after a chunk applied in part")
	if res.NotApplied != 0 || len(res.Repaired) > 0 {
		t.Errorf("%d events not applied (%s), the sweep repaired %v; want every event replayed", res.NotApplied, res.FirstRejection, res.Repaired)
	}
	if got := dump(t, driver, tenant); full(got) != full(synced) {
		t.Errorf("the replayed graph differs from the synced one\nsynced:\n%s\nreplayed:\n%s", full(synced), full(got))
	}
}

// brokenSink refuses every chunk as a broken sink does (a Neo4j setting
// that cannot work), which the replay does not retry.
type brokenSink struct{ outbox.Sink }

func (brokenSink) Deliver(context.Context, []outbox.Message) (map[int64]error, error) {
	return nil, fmt.Errorf("%w: the test's sink refuses every chunk", outbox.ErrSinkBroken)
}

// A replay whose delivery fails returns its error while the reader of the
// history waits for a transaction older than the replay (one left idle
// with a transaction id): it did not end until that transaction did.
func TestReplayStopsOnAFailedDeliveryWhileTheReaderWaits(t *testing.T) {
	pool, driver := stack(t)
	startSync(t, pool, driver, "sync-failed-delivery")
	tenant := writeWorkload(t, pool, driver, workload.Config{Seed: 29, Tenants: 1, Orders: 20, Writers: 1})[0]
	waitCaughtUp(t, pool)
	ctx := context.Background()
	var events int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_messages WHERE tenant_id = $1`, tenant).Scan(&events); err != nil {
		t.Fatal(err)
	}
	idle, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Rollback(ctx) //nolint:errcheck
	if _, err := idle.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	// The first chunk is whole, the second short: the reader reaches the
	// end of the history, and waits for the idle transaction, while the
	// first chunk's delivery fails.
	b, err := New(pool, driver, Config{TenantID: tenant, Source: SourceReplay, ChunkSize: max(1, events*2/3), Sink: brokenSink{},
		RecheckAfter: 100 * time.Millisecond}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	_, err = b.Run(runCtx)
	if !errors.Is(err, outbox.ErrSinkBroken) || time.Since(start) > 30*time.Second {
		t.Fatalf("replay with a broken sink beside an idle transaction: %v after %s, want the sink's error at once", err, time.Since(start).Round(time.Millisecond))
	}
}

// A pool too small for what a rebuild (or a drift check) holds at once is
// refused when it is made, naming the numbers: before, the rebuild took it
// and waited for its own connections for ever.
func TestPoolTooSmallIsRefused(t *testing.T) {
	shared, driver := stack(t)
	small := func(n int32) *pgxpool.Pool {
		pool, err := poolOf(shared, n)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	sink, err := projector.New(driver, projector.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	_, err = New(small(MinPoolConns-1), driver, Config{Sink: sink}, nil)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("allows %d connections; a rebuild needs at least %d", MinPoolConns-1, MinPoolConns)) {
		t.Errorf("a rebuild on a pool of %d: %v, want it refused, naming both numbers", MinPoolConns-1, err)
	}
	if _, err := drift.New(small(drift.MinPoolConns-1), driver, drift.Config{}, nil); err == nil || !strings.Contains(err.Error(), "a check needs at least") {
		t.Errorf("a drift check on a pool of %d: %v, want it refused", drift.MinPoolConns-1, err)
	}
	if _, err := New(small(MinPoolConns), driver, Config{Sink: sink}, nil); err != nil {
		t.Errorf("a rebuild on a pool of %d: %v", MinPoolConns, err)
	}
}
