package projector

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"graphsync/events"
	"graphsync/internal/stacktest"
	"graphsync/outbox"
	"graphsync/relay"
)

// Tests for points of issue 12 ("Failure policy and the Sink contract") that
// were covered only with a fake transaction or a fake sink: here the relay
// claims from real PostgreSQL and the projector writes to real Neo4j.

// syncRig is a relay on a fresh PostgreSQL database delivering to a
// projector on the shared Neo4j.
type syncRig struct {
	t       *testing.T
	pool    *pgxpool.Pool
	driver  neo4j.DriverWithContext
	ids     *ids
	metrics *relay.Metrics
}

func newSyncRig(t *testing.T) *syncRig {
	t.Helper()
	_, driver := liveProjector(t) // the schema in place
	_, pool := stacktest.FreshDatabase(t)
	r := &syncRig{t: t, pool: pool, driver: driver, ids: newIDs(t, driver), metrics: relay.NewMetrics()}
	if _, err := pool.Exec(context.Background(), `INSERT INTO tenants (id, name) VALUES ($1, 'issue 12')`, r.ids.tenant); err != nil {
		t.Fatal(err)
	}
	return r
}

// insert writes the messages' columns as outbox rows in one transaction, as
// a plain-SQL producer would, and returns their outbox ids.
func (r *syncRig) insert(msgs ...outbox.Message) []int64 {
	r.t.Helper()
	var out []int64
	err := pgx.BeginFunc(context.Background(), r.pool, func(tx pgx.Tx) error {
		for _, m := range msgs {
			var id int64
			if err := tx.QueryRow(context.Background(), `INSERT INTO outbox_messages
				(tenant_id, aggregate_type, aggregate_id, event_type, event_version, payload)
				VALUES ($1, $2, $3, $4, $5, $6::jsonb) RETURNING id`,
				m.TenantID, m.AggregateType, m.AggregateID, m.EventType, m.EventVersion, string(m.Payload)).Scan(&id); err != nil {
				return err
			}
			out = append(out, id)
		}
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

// start runs a relay (poll mode, short intervals) delivering to sink until
// the test ends.
func (r *syncRig) start(sink outbox.Sink, cfg relay.Config) {
	r.t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	if cfg.RetryStep == 0 {
		cfg.RetryStep = 50 * time.Millisecond
	}
	if cfg.SinkBackoff == 0 {
		cfg.SinkBackoff, cfg.SinkBackoffMax = 20*time.Millisecond, 200*time.Millisecond
	}
	if cfg.DependencyWait == 0 {
		cfg.DependencyWait = 50 * time.Millisecond
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 3
	}
	rel, err := relay.New(r.pool, sink, cfg, zaptest.NewLogger(r.t, zaptest.Level(zap.WarnLevel)), r.metrics)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rel.Run(ctx) }()
	var once sync.Once
	r.t.Cleanup(func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				r.t.Errorf("relay: %v", err)
			}
		})
	})
}

func (r *syncRig) count(query string, args ...any) int64 {
	r.t.Helper()
	var n int64
	if err := r.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		r.t.Fatalf("%s: %v", query, err)
	}
	return n
}

func (r *syncRig) text(query string, args ...any) string {
	r.t.Helper()
	var s string
	if err := r.pool.QueryRow(context.Background(), query, args...).Scan(&s); err != nil {
		r.t.Fatalf("%s: %v", query, err)
	}
	return s
}

// version is the sync_version of product n in the graph, 0 when absent.
func (r *syncRig) version(n int64) int64 {
	r.t.Helper()
	res, err := neo4j.ExecuteQuery(context.Background(), r.driver,
		"MATCH (p:Product {tenant_id: $tenant, id: $id}) RETURN p.sync_version AS v",
		map[string]any{"tenant": r.ids.tenant, "id": r.ids.id(n)}, neo4j.EagerResultTransformer)
	if err != nil {
		r.t.Fatal(err)
	}
	if len(res.Records) == 0 {
		return 0
	}
	v, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "v")
	return v
}

// metric sums the samples of a metric family the relay exports.
func (r *syncRig) metric(name string) float64 {
	r.t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.metrics.Collectors(r.pool)...)
	families, err := reg.Gather()
	if err != nil {
		r.t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		<-time.After(25 * time.Millisecond)
	}
}

func (r *syncRig) productEvent(n, version int64, name string) outbox.Message {
	st := product(r.ids.id(n), version, name, 0, "", 100*version, "active")
	if version == 1 {
		return r.ids.message(r.t, events.ProductCreated{ProductState: st})
	}
	return r.ids.message(r.t, events.ProductUpdated{ProductState: st})
}

// Issue 12, point 1 and the Tests paragraph: the batch [A v1 refused by
// Neo4j, B, A v2, C], committed in one transaction so the relay claims it
// as one batch, through the relay on PostgreSQL and the projector on Neo4j.
// Neo4j cannot be made to refuse one event's data on demand, so A v1 is
// refused by a wrapper around the real write transaction (as the
// conformance suite does); everything else is real. B and C are applied at
// once; A v2 is never in the graph while A v1 is pending, and is applied,
// uncounted and without last_error, once A v1 is in the DLQ.
func TestIssue12InterleavedRefusalThroughRelay(t *testing.T) {
	r := newSyncRig(t)
	p, err := New(r.driver, Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	const a, b, c = 1, 2, 3
	ids := r.insert(r.productEvent(a, 1, "A"), r.productEvent(b, 1, "B"), r.productEvent(a, 2, "A2"), r.productEvent(c, 1, "C"))
	av1, bID, av2, cID := ids[0], ids[1], ids[2], ids[3]
	var refusals sync.Map
	p.applyBatch = func(ctx context.Context, items []*item, _ *lookAhead) (map[int64]error, error) {
		for _, it := range items {
			if it.msg.ID == av1 {
				n, _ := refusals.LoadOrStore(av1, new(int))
				*n.(*int)++
				return nil, &neo4j.Neo4jError{Code: "Neo.ClientError.Statement.TypeError", Msg: "refused by the test"}
			}
		}
		return p.apply(ctx, items, nil)
	}
	var early sync.Once
	var appliedEarly bool
	check := func() {
		// While A v1 is not in the DLQ, A v2 must not be in the graph.
		if r.count(`SELECT count(*) FROM outbox_messages_dlq WHERE id = $1`, av1) == 0 && r.version(a) >= 2 {
			early.Do(func() { appliedEarly = true })
		}
	}
	r.start(p, relay.Config{ID: "relay-interleaved", MaxAttempts: 3, RetryStep: 300 * time.Millisecond})
	waitFor(t, 15*time.Second, "B and C applied", func() bool {
		check()
		return r.count(`SELECT count(*) FROM outbox_messages WHERE id IN ($1, $2) AND processed_at IS NOT NULL`, bID, cID) == 2
	})
	if n := r.count(`SELECT count(*) FROM outbox_messages WHERE id IN ($1, $2) AND attempts = 1`, bID, cID); n != 2 {
		t.Errorf("B and C were not applied at their first attempt")
	}
	if r.version(b) != 1 || r.version(c) != 1 {
		t.Errorf("B and C not in the graph: versions %d, %d", r.version(b), r.version(c))
	}
	waitFor(t, 20*time.Second, "A v1 in the DLQ and A v2 applied after it", func() bool {
		check()
		return r.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND processed_at IS NOT NULL`, av2) == 1
	})
	if appliedEarly {
		t.Error("A v2 reached the graph while A v1 was still pending")
	}
	if got := r.text(`SELECT last_error FROM outbox_messages_dlq WHERE id = $1`, av1); !strings.Contains(got, "neo4j refused its writes") {
		t.Errorf("A v1's last_error %q does not say Neo4j refused it", got)
	}
	if n := r.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND attempts = 1 AND last_error IS NULL`, av2); n != 1 {
		t.Errorf("A v2, only held back, was counted or carries a last_error")
	}
	if r.version(a) != 2 {
		t.Errorf("A's graph version %d after A v2 was applied, want 2", r.version(a))
	}
	n, _ := refusals.Load(av1)
	if got := *n.(*int); got < 3 {
		t.Errorf("A v1 was refused %d times, want one per attempt (3)", got)
	}
}

// Issue 12, point 2 and the Tests paragraph: "an event whose transaction
// always times out reaches the DLQ after its attempts while every other
// aggregate flows". TestSuspectBatchIsSplitDownToTheEvent fakes the timeout
// with a plain error; here Neo4j itself times the transaction out: another
// transaction holds a write lock on product A's node, so every transaction
// writing A waits on it until the projector's TxTimeout ends it (Neo4j
// answers Neo.ClientError.Transaction.LockClientStopped, classed suspect).
func TestIssue12TimedOutEventReachesDLQWhileOthersFlow(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	const a = 1
	deliverAll(t, mustProjector(t, r.driver, Config{}), r.productEvent(a, 1, "A"))
	session := r.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite})
	defer session.Close(ctx)
	lock, err := session.BeginTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx) //nolint:errcheck
	if _, err := lock.Run(ctx, "MATCH (p:Product {tenant_id: $t, id: $id}) SET p.locked_by_test = true",
		map[string]any{"t": r.ids.tenant, "id": r.ids.id(a)}); err != nil {
		t.Fatal(err)
	}

	var msgs []outbox.Message
	stuck := -1
	for i := range 24 {
		agg := int64(10 + i%8)
		msgs = append(msgs, r.productEvent(agg, int64(1+i/8), "P"))
		if i == 11 {
			stuck = len(msgs)
			msgs = append(msgs, r.productEvent(a, 2, "A2"))
		}
	}
	ids := r.insert(msgs...)
	stuckID := ids[stuck]
	p := mustProjector(t, r.driver, Config{TxTimeout: 4 * time.Second})
	r.start(p, relay.Config{ID: "relay-timeout", BatchSize: 16, MaxAttempts: 3})
	waitFor(t, 120*time.Second, "the timed-out event in the DLQ and every other event processed", func() bool {
		return r.count(`SELECT count(*) FROM outbox_messages_dlq WHERE id = $1`, stuckID) == 1 &&
			r.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`) == 0
	})
	if n := r.count(`SELECT count(*) FROM outbox_messages_dlq`); n != 1 {
		t.Errorf("%d rows dead-lettered, want only the one whose transaction times out", n)
	}
	if n := r.count(`SELECT coalesce(max(attempts), 0) FROM outbox_messages`); n != 1 {
		t.Errorf("an event applied beside the timed-out one was counted %d attempts, want 1", n)
	}
	lastError := r.text(`SELECT last_error FROM outbox_messages_dlq WHERE id = $1`, stuckID)
	// Neo4j ends it while it waits for the lock (LockClientStopped) or,
	// under load, a moment earlier (TransactionTimedOutClientConfiguration).
	if !strings.Contains(lastError, "LockClientStopped") && !strings.Contains(lastError, "TransactionTimedOutClientConfiguration") {
		t.Errorf("last_error %q does not name Neo4j's timeout", lastError)
	}
	t.Logf("DLQ last_error: %.300s", lastError)
	for agg := int64(10); agg < 18; agg++ {
		if v := r.version(agg); v != 3 {
			t.Errorf("product %d at version %d, want 3", agg, v)
		}
	}
}

func mustProjector(t *testing.T, driver neo4j.DriverWithContext, cfg Config) *Projector {
	t.Helper()
	p, err := New(driver, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Issue 12, Deliver "Bounds at validation": the limits are configurable and
// an event over one ends in the DLQ with a last_error naming the limit.
// events' TestDecodeErrors checks the default limits' texts only; here a
// projector configured with other limits, behind the relay.
func TestIssue12ConfiguredLimitsNamedInLastError(t *testing.T) {
	r := newSyncRig(t)
	p := mustProjector(t, r.driver, Config{Limits: events.Limits{MaxOrderLines: 2, MaxPayloadBytes: 4096}})
	line := func(n int32) events.OrderLine {
		return events.OrderLine{LineNo: n, ProductID: r.ids.id(1), Quantity: 1, UnitPriceCents: 100}
	}
	big := strings.Replace(mustJSON(t, events.ProductUpdated{ProductState: product(r.ids.id(2), 2, "Big", 0, "", 1, "active")}),
		"{", `{"note": "`+strings.Repeat("n", 5000)+`", `, 1)
	ids := r.insert(
		r.productEvent(1, 1, "P"),
		r.productEvent(2, 1, "Q"),
		r.ids.message(t, orderPlaced(r.ids.id(20), r.ids.id(30), line(1), line(2))),
		r.ids.message(t, orderPlaced(r.ids.id(21), r.ids.id(30), line(1), line(2), line(3))),
		r.ids.raw("Product", r.ids.id(2), "ProductUpdated", 1, big),
	)
	r.start(p, relay.Config{ID: "relay-limits", MaxAttempts: 2})
	waitFor(t, 20*time.Second, "the two events over a limit in the DLQ, the rest processed", func() bool {
		return r.count(`SELECT count(*) FROM outbox_messages_dlq`) == 2 &&
			r.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`) == 0
	})
	for id, want := range map[int64]string{
		ids[3]: "lines has 3 entries, over the limit of 2 (max order lines)",
		ids[4]: "over the limit of 4096 (max payload bytes)",
	} {
		if got := r.text(`SELECT coalesce((SELECT last_error FROM outbox_messages_dlq WHERE id = $1), '')`, id); !strings.Contains(got, want) {
			t.Errorf("outbox id %d: last_error %q, want it to say %q", id, got, want)
		}
	}
}

// Issue 12, point 10: "Waiting for another aggregate is not the event's
// fault: it must not count against it, and it must not look like a
// failure." TestDeferredEventIsNotAFailure uses a fake sink; here the
// projector defers an OrderPlaced whose product is not in the graph yet
// (its ProductCreated comes later in the outbox), on real services: no
// attempt counted, no last_error, nothing in outbox_failures, and the order
// applied once the product is.
func TestIssue12WaitingOrderIsNotAFailure(t *testing.T) {
	r := newSyncRig(t)
	p := mustProjector(t, r.driver, Config{})
	line := events.OrderLine{LineNo: 1, ProductID: r.ids.id(1), Quantity: 1, UnitPriceCents: 100}
	order := r.insert(r.ids.message(t, orderPlaced(r.ids.id(20), r.ids.id(30), line)))[0]
	r.start(p, relay.Config{ID: "relay-waiting", MaxAttempts: 2})
	waitFor(t, 15*time.Second, "the order deferred several times (more than MaxAttempts)", func() bool {
		return r.metric("outbox_deferred_total") >= 3
	})
	r.insert(r.productEvent(1, 1, "P"))
	waitFor(t, 15*time.Second, "the order applied after its product", func() bool {
		return r.count(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL`) == 0
	})
	if n := r.count(`SELECT count(*) FROM outbox_messages WHERE id = $1 AND attempts <= 1 AND last_error IS NULL`, order); n != 1 {
		t.Errorf("the order that only waited was counted or carries a last_error")
	}
	if n := r.count(`SELECT count(*) FROM outbox_messages_dlq`); n != 0 {
		t.Errorf("%d rows dead-lettered for waiting", n)
	}
	if f := r.metric("outbox_failures"); f != 0 {
		t.Errorf("outbox_failures = %v after an order only waited", f)
	}
	res, err := neo4j.ExecuteQuery(context.Background(), r.driver,
		"MATCH (:Order {tenant_id: $t, id: $o})-[:CONTAINS]->(:Product {tenant_id: $t, id: $p}) RETURN count(*) AS n",
		map[string]any{"t": r.ids.tenant, "o": r.ids.id(20), "p": r.ids.id(1)}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	if n, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "n"); n != 1 {
		t.Errorf("the order's CONTAINS relationship is not in the graph")
	}
}
