package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/embed"
	"graphsync/embed/stage"
	"graphsync/redact"
	"graphsync/relay"
	"graphsync/retrieve"
	gsql "graphsync/sql"
	"graphsync/workload"
)

// demoStream names the demo's own replication slot and publication.
const demoStream = "graphsync_demo"

// runDemo is the main job on a small scale: write a workload through real
// transactions, run the sync service until it has caught up, print a summary.
func runDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var f syncFlags
	f.register(fs)
	var w workload.Config
	fs.Int64Var(&w.Seed, "seed", 1, "workload seed (same seed, same events)")
	fs.IntVar(&w.Tenants, "tenants", 3, "tenants to create")
	fs.IntVar(&w.ProductsPerTenant, "products", 20, "products per tenant")
	fs.IntVar(&w.CustomersPerTenant, "customers", 10, "customers per tenant")
	fs.IntVar(&w.Orders, "orders", 60, "orders across all tenants")
	fs.IntVar(&w.Writers, "writers", 4, "concurrent writers")
	fs.IntVar(&w.OrdersPerTx, "orders-per-tx", 1, "orders per transaction (1 = one business change per transaction)")
	noSync := fs.Bool("no-sync", false, "only write the workload")
	question := fs.String("question", "a wireless speaker or a kettle", "question whose graph context the demo shows (empty: none)")
	meaning := fs.String("meaning-question", demoMeaningQuestion, "question sharing no word with the product that answers it, asked last by hybrid retrieval (empty or --embedder none: none)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// In stream mode the demo reads through a slot of its own, unless told
	// otherwise (by flag or environment), and drops it at the end: a slot
	// nobody reads keeps every byte of WAL the cluster writes from then on.
	for name, value := range map[string]*string{"slot": &f.relay.Slot, "publication": &f.relay.Publication} {
		if *value == fs.Lookup(name).DefValue {
			*value = demoStream
		}
	}
	log, err := f.conn.logger()
	if err != nil {
		return err
	}
	if err := f.validate(); err != nil {
		return err
	}
	// workload.Config reads a zero as its default: a count given as 0 (or
	// below) is a mistake, named before anything is connected.
	for _, c := range []struct {
		flag  string
		value int
	}{{"tenants", w.Tenants}, {"products", w.ProductsPerTenant}, {"customers", w.CustomersPerTenant},
		{"orders", w.Orders}, {"writers", w.Writers}, {"orders-per-tx", w.OrdersPerTx}} {
		if c.value < 1 {
			return usageError{fmt.Sprintf("--%s must be positive, got %d", c.flag, c.value)}
		}
	}
	// Ctrl-C stops the demo softly, so that it still drops its replication
	// slot (a slot nobody reads keeps WAL); a second one exits at once.
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	go func() {
		<-ctx.Done()
		stopSignals()
	}()
	pool, err := f.conn.openPostgres(ctx, int32(w.Writers+4))
	if err != nil {
		return err
	}
	defer pool.Close()

	start := time.Now()
	report, err := workload.Run(ctx, pool, w, log.Named("workload"))
	if err != nil {
		return fmt.Errorf("demo workload: %w", err)
	}
	fmt.Printf("demo: wrote %d events for %d tenants in %s (%d products, %d customers, %d orders)\n",
		report.Events, len(report.TenantIDs), time.Since(start).Round(time.Millisecond), report.Products, report.Customers, report.Orders)
	if *noSync {
		return nil
	}
	f.untilCaughtUp = true
	f.httpAddr = ""
	start = time.Now()
	syncErr := serveSync(ctx, f, log.Named("sync"))
	if f.relay.Wake == relay.WakeStream {
		dropCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := relay.DropStream(dropCtx, pool, f.relay.Slot, f.relay.Publication, slotReleaseWait); err != nil {
			fmt.Fprintf(os.Stderr, "demo: %v\n", redact.LineWith(err.Error(), f.conn.pgURL))
		} else {
			fmt.Printf("demo: dropped replication slot and publication %s (a slot nobody reads keeps WAL)\n", f.relay.Slot)
		}
	}
	if syncErr != nil {
		return syncErr
	}
	if ctx.Err() != nil {
		return errors.New("interrupted before the sync caught up")
	}
	fmt.Printf("demo: sync (%s mode) caught up in %s\n", f.relay.Wake, time.Since(start).Round(time.Millisecond))
	driver, err := f.conn.openNeo4j(ctx, true)
	if err != nil {
		return err
	}
	defer driver.Close(ctx)
	if err := printSummary(ctx, os.Stdout, pool, driver, report.TenantIDs); err != nil {
		return err
	}
	if len(report.TenantIDs) == 0 {
		return nil
	}
	// The point of the graph: what GraphRAG retrieval hands an LLM. With an
	// embedder, the vectors sync's embedding stage keeps current are
	// drained first (it runs beside sync, which may stop before it is done).
	cfg := retrieve.Config{}
	if f.embedder.Kind != embed.KindNone {
		embedder, err := demoEmbed(ctx, pool, driver, f.embedder, report.TenantIDs)
		if err != nil {
			return err
		}
		defer embedder.Close()
		cfg.Embedder = embedder
	}
	tenant := report.TenantIDs[0]
	if *question != "" {
		fmt.Printf("\ndemo: graphsync context --tenant %d %q\n\n", tenant, *question)
		if err := writeContext(ctx, os.Stdout, driver, cfg, retrieve.FormatMarkdown, tenant, *question); err != nil {
			return err
		}
	}
	if *meaning == "" || cfg.Embedder == nil {
		return nil
	}
	fmt.Printf("\ndemo: no word of this question is in the product that answers it; hybrid retrieval finds it by meaning\n")
	fmt.Printf("demo: graphsync context --tenant %d --retrieval hybrid %q\n\n", tenant, *meaning)
	cfg.Retrieval = retrieve.RetrievalHybrid
	return writeContext(ctx, os.Stdout, driver, cfg, retrieve.FormatMarkdown, tenant, *meaning)
}

// demoMeaningQuestion shares no word with "... Tent" and its description
// (demo workload, seed 1: tenant 1 sells tents).
const demoMeaningQuestion = "a shelter for a night in the woods"

// demoEmbed opens the embedder and runs the embedding stage over the demo's
// tenants until nothing is pending.
func demoEmbed(ctx context.Context, pool *pgxpool.Pool, driver neo4j.DriverWithContext, cfg embed.Config, tenants []int64) (embed.Embedder, error) {
	embedder, err := embed.Open(cfg)
	if err != nil {
		if embed.IsStartError(err) {
			return nil, usageError{err.Error()}
		}
		return nil, fmt.Errorf("open the embedder: %w", err)
	}
	s, err := stage.New(driver, stage.NewCache(pool), embedder, stage.Config{Tenants: tenants}, nil)
	if err != nil {
		embedder.Close()
		return nil, err
	}
	start := time.Now()
	round, err := s.Drain(ctx)
	if err != nil {
		embedder.Close()
		return nil, fmt.Errorf("demo: embed: %w", err)
	}
	fmt.Printf("demo: embeddings current (%s, %d written after sync stopped, in %s)\n", embedder.Model(), round.Written, time.Since(start).Round(time.Millisecond))
	return embedder, nil
}

func runSummary(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("summary", flag.ContinueOnError)
	var conn connFlags
	conn.register(fs, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return conn.withServers(ctx, 2, func(pool *pgxpool.Pool, driver neo4j.DriverWithContext) error {
		if err := requireRelayRole(ctx, pool, "the summary would leave out every tenant it cannot see"); err != nil {
			return err
		}
		return printSummary(ctx, os.Stdout, pool, driver, nil)
	})
}

// tenantSummary is one tenant's line of the summary.
type tenantSummary struct {
	products, customers, orders, events, pending, dlq int64
	nodes, rels                                       map[string]int64
}

// printSummary prints, per tenant, what PostgreSQL holds (business rows,
// events, pending, DLQ) beside what Neo4j holds (nodes per label,
// relationships per type), and the outbox lag.
func printSummary(ctx context.Context, out io.Writer, pool *pgxpool.Pool, driver neo4j.DriverWithContext, only []int64) error {
	tenants := map[int64]*tenantSummary{}
	get := func(id int64) *tenantSummary {
		if tenants[id] == nil {
			tenants[id] = &tenantSummary{nodes: map[string]int64{}, rels: map[string]int64{}}
		}
		return tenants[id]
	}
	// The outbox has no index by tenant that holds processed rows (ADR
	// 0014): its events, and the pending ones, are counted in one pass for
	// every tenant shown.
	rows, err := pool.Query(ctx, gsql.Query("DemoTenantSummary"), only)
	if err != nil {
		return fmt.Errorf("summary: read PostgreSQL: %w", err)
	}
	var id int64
	var s tenantSummary
	_, err = pgx.ForEachRow(rows, []any{&id, &s.products, &s.customers, &s.orders, &s.events, &s.pending, &s.dlq}, func() error {
		t := get(id)
		t.products, t.customers, t.orders, t.events, t.pending, t.dlq = s.products, s.customers, s.orders, s.events, s.pending, s.dlq
		return nil
	})
	if err != nil {
		return fmt.Errorf("summary: read PostgreSQL: %w", err)
	}
	ids := make([]int64, 0, len(tenants))
	for id := range tenants {
		ids = append(ids, id)
	}
	session := driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeRead})
	defer session.Close(ctx)
	nodeRows, err := neo4j.ExecuteRead(ctx, session, func(tx neo4j.ManagedTransaction) ([]*neo4j.Record, error) {
		res, err := tx.Run(ctx, `MATCH (n) WHERE n.tenant_id IN $ids AND valueType(n.tenant_id) STARTS WITH 'INTEGER'
			RETURN n.tenant_id AS tenant, labels(n)[0] AS label, count(*) AS n`, map[string]any{"ids": ids})
		if err != nil {
			return nil, err
		}
		return res.Collect(ctx)
	})
	if err != nil {
		return fmt.Errorf("summary: read Neo4j nodes: %w", err)
	}
	for _, r := range nodeRows {
		if tenant, n, ok := tenantCount(r); ok {
			label, _ := r.Get("label")
			get(tenant).nodes[fmt.Sprint(label)] = n
		}
	}
	relRows, err := neo4j.ExecuteRead(ctx, session, func(tx neo4j.ManagedTransaction) ([]*neo4j.Record, error) {
		res, err := tx.Run(ctx, `MATCH (a)-[r]->() WHERE a.tenant_id IN $ids AND valueType(a.tenant_id) STARTS WITH 'INTEGER'
			RETURN a.tenant_id AS tenant, type(r) AS type, count(*) AS n`, map[string]any{"ids": ids})
		if err != nil {
			return nil, err
		}
		return res.Collect(ctx)
	})
	if err != nil {
		return fmt.Errorf("summary: read Neo4j relationships: %w", err)
	}
	for _, r := range relRows {
		if tenant, n, ok := tenantCount(r); ok {
			typ, _ := r.Get("type")
			get(tenant).rels[fmt.Sprint(typ)] = n
		}
	}
	stats, err := relay.ReadStats(ctx, pool)
	if err != nil {
		return fmt.Errorf("summary: read outbox stats: %w", err)
	}

	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TENANT\tPG products/customers/orders\tEVENTS\tPENDING\tDLQ\tNEO4J nodes\tNEO4J relationships")
	for _, id := range ids {
		t := tenants[id]
		fmt.Fprintf(w, "%d\t%d/%d/%d\t%d\t%d\t%d\t%s\t%s\n", id, t.products, t.customers, t.orders, t.events, t.pending, t.dlq,
			formatCounts(t.nodes), formatCounts(t.rels))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "outbox: lag %.1fs, DLQ %d, blocked aggregates %d, waiting aggregates %d\n",
		stats.LagSeconds, stats.DLQDepth, stats.BlockedAggregates, stats.WaitingAggregates)
	return nil
}

// tenantCount reads a summary row's tenant and count. Cypher finds
// tenant_id 1.0 IN [1]: the queries leave out a node another writer gave a
// float tenant id, and a value that is still not an integer is skipped
// rather than trusted.
func tenantCount(r *neo4j.Record) (tenant, n int64, ok bool) {
	tenant, _, err1 := neo4j.GetRecordValue[int64](r, "tenant")
	n, _, err2 := neo4j.GetRecordValue[int64](r, "n")
	return tenant, n, err1 == nil && err2 == nil
}

func formatCounts(counts map[string]int64) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := ""
	for i, k := range keys {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%s=%d", k, counts[k])
	}
	if out == "" {
		return "-"
	}
	return out
}
