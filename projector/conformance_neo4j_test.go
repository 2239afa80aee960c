package projector

import (
	"context"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j/config"
	"go.uber.org/zap/zaptest"

	"graphsync/events"
	"graphsync/outbox"
	"graphsync/outbox/sinktest"
)

// The Sink conformance suite against the projector on real Neo4j. Neo4j
// cannot be made to refuse one event's data on demand, so a "refused" event
// is refused by a wrapper around the real write transaction, as Neo4j would
// (a Statement.TypeError); every other write goes to Neo4j. The outage is a
// projector whose driver points at a port nothing listens on.
func TestSinkConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Subject{NewScope: newProjectorScope})
}

type projectorScope struct {
	t       *testing.T
	p, down *Projector
	sink    *Projector
	ids     *ids
	foreign int64 // a category id another tenant holds
	driver  neo4j.DriverWithContext
	refused map[int64]bool
}

func newProjectorScope(t *testing.T) sinktest.Scope {
	p, driver := liveProjector(t)
	s := &projectorScope{t: t, p: p, sink: p, ids: newIDs(t, driver), driver: driver, refused: map[int64]bool{}}
	other := newIDs(t, driver)
	s.foreign = other.id(900)
	deliverAll(t, p, other.message(t, events.ProductCreated{ProductState: product(other.id(1), 1, "Other", s.foreign, "Theirs", 100, "active")}))
	p.applyBatch = func(ctx context.Context, items []*item, _ *lookAhead) (map[int64]error, error) {
		for _, it := range items {
			if s.refused[it.msg.ID] {
				return nil, &neo4j.Neo4jError{Code: "Neo.ClientError.Statement.TypeError", Msg: "refused by the test"}
			}
		}
		return p.apply(ctx, items, nil)
	}
	dead, err := neo4j.NewDriverWithContext("bolt://127.0.0.1:1", neo4j.NoAuth(), func(c *config.Config) {
		c.MaxTransactionRetryTime = 200 * time.Millisecond
		c.SocketConnectTimeout = time.Second
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dead.Close(context.Background()) })
	if s.down, err = New(dead, Config{}, zaptest.NewLogger(t)); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *projectorScope) Sink() outbox.Sink { return s.sink }

func (s *projectorScope) state(agg int64, seq int) events.ProductState {
	return product(s.ids.id(agg), int64(seq), "P", 0, "", int64(100+seq), "active")
}

func (s *projectorScope) Valid(agg int64, seq int) outbox.Message {
	if seq == 1 {
		return s.ids.message(s.t, events.ProductCreated{ProductState: s.state(agg, seq)})
	}
	return s.ids.message(s.t, events.ProductUpdated{ProductState: s.state(agg, seq)})
}

func (s *projectorScope) Undecodable(agg int64, seq int) outbox.Message {
	return s.ids.raw("Product", s.ids.id(agg), "ProductUpdated", 1, `{"version": `)
}

func (s *projectorScope) Inadmissible(agg int64, seq int) outbox.Message {
	st := s.state(agg, seq)
	st.Category = &events.CategoryRef{ID: s.foreign, Name: "Not ours"}
	return s.ids.message(s.t, events.ProductUpdated{ProductState: st})
}

func (s *projectorScope) Refused(agg int64, seq int) outbox.Message {
	m := s.Valid(agg, seq)
	s.refused[m.ID] = true
	return m
}

func (s *projectorScope) Applied(t *testing.T) map[int64]int {
	result, err := neo4j.ExecuteQuery(context.Background(), s.driver,
		"MATCH (p:Product {tenant_id: $tenant}) RETURN p.id AS id, p.sync_version AS version",
		map[string]any{"tenant": s.ids.tenant}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	applied := map[int64]int{}
	for _, rec := range result.Records {
		id, _, _ := neo4j.GetRecordValue[int64](rec, "id")
		version, _, _ := neo4j.GetRecordValue[int64](rec, "version")
		applied[id-s.ids.base] = int(version)
	}
	return applied
}

func (s *projectorScope) Outage(*testing.T) (restore func()) {
	s.sink = s.down
	return func() { s.sink = s.p }
}
