package projector

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/events"
	"graphsync/graphmodel"
	"graphsync/outbox"
)

// BenchmarkProjector measures events/s through Deliver into the real Neo4j at
// several batch sizes, beside a ceiling measured in the same run: the same
// nodes and relationships written by plain `UNWIND ... MERGE ... SET n +=`
// statements, with no decoding, validation, ownership lookup or guards.
// One iteration is one batch of a commerce mix: 60% OrderPlaced (two lines),
// 20% ProductPriceChanged, 20% OrderConfirmed.
//
//	go test -run '^$' -bench BenchmarkProjector -benchtime 2s ./projector
func BenchmarkProjector(b *testing.B) {
	for _, size := range []int{1, 100, 1000, 5000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			p, driver := liveProjector(b)
			mix := newBenchMix(b, p, driver)
			ceiling := newBenchMix(b, p, driver)
			// Warm up until every event kind of the mix went through once:
			// the first run of each statement compiles its Cypher plan.
			for warm := 0; warm < 10; warm += size {
				if rejected, err := p.Deliver(context.Background(), mix.next(b, size)); err != nil || len(rejected) > 0 {
					b.Fatalf("Deliver: %v %v", err, rejected)
				}
				runPlain(b, driver, ceiling.plainStatements(b, ceiling.next(b, size)))
			}
			var projected, plain time.Duration
			b.ResetTimer()
			b.StopTimer()
			for range b.N {
				// The timer runs only around the two timed writes, so b.N
				// scales with them, not with event generation.
				batch := mix.next(b, size)
				b.StartTimer()
				start := time.Now()
				if rejected, err := p.Deliver(context.Background(), batch); err != nil || len(rejected) > 0 {
					b.Fatalf("Deliver: %v %v", err, rejected)
				}
				projected += time.Since(start)
				b.StopTimer()

				stmts := ceiling.plainStatements(b, ceiling.next(b, size))
				b.StartTimer()
				start = time.Now()
				runPlain(b, driver, stmts)
				plain += time.Since(start)
				b.StopTimer()
			}
			events := float64(b.N * size)
			projectorRate, ceilingRate := events/projected.Seconds(), events/plain.Seconds()
			b.ReportMetric(projectorRate, "events/s")
			b.ReportMetric(ceilingRate, "ceiling-events/s")
			b.ReportMetric(projectorRate/ceilingRate, "of-ceiling")
			b.ReportMetric(0, "ns/op") // one op is a batch through both paths: events/s says more
			b.Logf("batch %d: projector %.0f events/s, plain MERGE ceiling %.0f events/s, ratio %.2f", size, projectorRate, ceilingRate, projectorRate/ceilingRate)
		})
	}
}

// benchMix generates a tenant's event stream: products and customers made up
// front, then orders placed and confirmed, prices changed.
type benchMix struct {
	ids       *ids
	products  []events.ProductState
	customers int64
	placed    []events.OrderState // placed, not yet confirmed
	nextOrder int64
	k         int
	p         *Projector
}

const (
	benchProducts  = 200
	benchCustomers = 100
)

func newBenchMix(b testing.TB, p *Projector, driver neo4j.DriverWithContext) *benchMix {
	b.Helper()
	m := &benchMix{ids: newIDs(b, driver), customers: benchCustomers, nextOrder: 1_000_000, p: p}
	var setup []outbox.Message
	for n := range int64(benchProducts) {
		s := product(m.ids.id(n), 1, fmt.Sprint("Product ", n), m.ids.id(900_000+n%8), fmt.Sprint("Category ", n%8), 1000+n, "active")
		m.products = append(m.products, s)
		setup = append(setup, m.ids.message(b, events.ProductCreated{ProductState: s}))
	}
	deliverAll(b, p, setup...)
	return m
}

func (m *benchMix) next(b testing.TB, size int) []outbox.Message {
	batch := make([]outbox.Message, 0, size)
	for range size {
		m.k++
		switch {
		case m.k%5 == 3:
			s := &m.products[m.k%len(m.products)]
			s.Version++
			s.PriceCents++
			batch = append(batch, m.ids.message(b, events.ProductPriceChanged{ProductState: *s}))
		case m.k%5 == 4 && len(m.placed) > 0:
			o := m.placed[0]
			m.placed = m.placed[1:]
			o.Version, o.Status, o.ConfirmedAt = 2, events.OrderStatusConfirmed, at(1)
			batch = append(batch, m.ids.message(b, events.OrderConfirmed{OrderState: o}))
		default:
			m.nextOrder++
			id := m.ids.id(m.nextOrder)
			first, second := m.products[m.k%len(m.products)], m.products[(m.k*7+1)%len(m.products)]
			ev := orderPlaced(id, m.ids.id(500_000+int64(m.k)%m.customers),
				events.OrderLine{LineNo: 1, ProductID: first.ID, Quantity: 1, UnitPriceCents: first.PriceCents},
				events.OrderLine{LineNo: 2, ProductID: second.ID, Quantity: 2, UnitPriceCents: second.PriceCents})
			m.placed = append(m.placed, ev.OrderState)
			batch = append(batch, m.ids.message(b, ev))
		}
	}
	return batch
}

// plainStatements writes the batch's nodes and relationships the naive way:
// MERGE and SET every row, no guard, no lookup. Translation happens here,
// outside the timed part.
func (m *benchMix) plainStatements(b *testing.B, batch []outbox.Message) []plainStatement {
	rows := map[string][]any{}
	var order []string
	add := func(text string, row map[string]any) {
		if _, seen := rows[text]; !seen {
			order = append(order, text)
		}
		rows[text] = append(rows[text], row)
	}
	var rels []graphmodel.RelUpsert
	for _, msg := range batch {
		it, err := m.p.prepare(msg)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range it.mut.Nodes {
			add(fmt.Sprintf("UNWIND $rows AS row MERGE (n:%s {tenant_id: row.tenant_id, id: row.id}) SET n += row.props", n.Label),
				map[string]any{"tenant_id": n.TenantID, "id": n.ID, "props": nonNilProps(n.Props)})
		}
		rels = append(rels, it.mut.Rels...)
	}
	for _, r := range rels {
		rel, _ := graphmodel.Default.Relationship(r.Type)
		if r.ToID == 0 {
			continue
		}
		key := "tenant_id: row.tenant_id"
		for _, k := range rel.Key {
			key += fmt.Sprintf(", %[1]s: row.props.%[1]s", k.Key)
		}
		add(fmt.Sprintf("UNWIND $rows AS row MATCH (a:%s {tenant_id: row.tenant_id, id: row.from_id}) MATCH (b:%s {tenant_id: row.tenant_id, id: row.to_id}) MERGE (a)-[r:%s {%s}]->(b) SET r += row.props",
			rel.From, rel.To, rel.Type, key), map[string]any{"tenant_id": r.TenantID, "from_id": r.FromID, "to_id": r.ToID, "props": nonNilProps(r.Props)})
	}
	stmts := make([]plainStatement, 0, len(order))
	// Node statements were added before relationship statements.
	for _, text := range order {
		stmts = append(stmts, plainStatement{text: text, rows: rows[text]})
	}
	return stmts
}

type plainStatement struct {
	text string
	rows []any
}

func nonNilProps(props map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range props {
		if v != nil {
			out[k] = v
		}
	}
	return out
}

func runPlain(b *testing.B, driver neo4j.DriverWithContext, stmts []plainStatement) {
	ctx := context.Background()
	session := driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite})
	defer session.Close(ctx)
	_, err := session.ExecuteWrite(ctx, func(tx neo4j.ManagedTransaction) (any, error) {
		for _, s := range stmts {
			result, err := tx.Run(ctx, s.text, map[string]any{"rows": s.rows})
			if err != nil {
				return nil, err
			}
			if _, err := result.Consume(ctx); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	if err != nil {
		b.Fatalf("plain MERGE: %v", err)
	}
}

// BenchmarkPrepare measures the projector's CPU work before Neo4j sees a
// batch (decode, validate, translate, build statement rows), on batches of
// the mix above at the relay's backlog size.
//
//	go test -run '^$' -bench BenchmarkPrepare -benchmem ./projector
func BenchmarkPrepare(b *testing.B) {
	const size = 2000
	p, driver := liveProjector(b)
	mix := newBenchMix(b, p, driver)
	batch := mix.next(b, size)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if prep := p.Prepare(batch); len(prep.rejected) > 0 {
			b.Fatalf("Prepare rejected %v", prep.rejected)
		}
	}
	b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "events/s")
}
