package projector

import (
	"context"
	"fmt"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
)

// lookAhead is a batch's owner lookup read before its write transaction,
// while the batch before it was being written, and what that batch may have
// changed of it.
type lookAhead struct {
	graph owners
	// touched are the nodes, by label and id, that the batch in flight
	// during the read upserts or deletes (tombstones included): the only
	// ones whose owners or existence the read may have missed a change of.
	// The write transaction reads them again.
	touched map[labelID]bool
}

// LookAhead does the owner lookup of prep's next delivery now, in a read
// transaction of its own, so that a caller writing batches one after
// another (the rebuild's replay) overlaps it with the write of the batch
// before, inFlight. The write transaction then reads again only what
// inFlight may have changed: the ids it upserts or deletes. Call it after
// every batch delivered before inFlight has returned, and deliver prep right
// after inFlight; other writers' changes are then as visible as they are to
// a lookup inside the transaction (which, under read committed, sees no more
// than the writes committed before it). inFlight nil means no write runs
// meanwhile. The reading is used by prep's next delivery only; a failed
// look-ahead leaves the lookup to the transaction.
func (p *Projector) LookAhead(ctx context.Context, prep, inFlight *Prepared) error {
	prep.ahead = nil
	if len(prep.items) == 0 {
		return nil
	}
	model := p.builder.Model()
	session := p.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeRead, DatabaseName: p.cfg.Database, FetchSize: neo4j.FetchAll})
	defer closeSession(ctx, session)
	graph, err := neo4j.ExecuteRead(ctx, session, func(tx neo4j.ManagedTransaction) (owners, error) {
		return readOwners(ctx, tx, p.builder.OwnersQuery(), ownersParams(model, prep.items, nil))
	}, neo4j.WithTxTimeout(p.cfg.TxTimeout))
	if err != nil {
		return fmt.Errorf("projector: look ahead: %w", err)
	}
	ahead := &lookAhead{graph: graph, touched: map[labelID]bool{}}
	if inFlight != nil {
		tombstones := map[string]string{}
		for _, l := range model.Labels {
			tombstones[l.Name] = l.Tombstone
		}
		for _, it := range inFlight.items {
			for _, n := range it.mut.Nodes {
				ahead.touched[labelID{n.Label, n.ID}] = true
			}
			for _, d := range it.mut.Deletes {
				ahead.touched[labelID{d.Label, d.ID}] = true
				ahead.touched[labelID{tombstones[d.Label], d.ID}] = true
			}
		}
	}
	prep.ahead = ahead
	return nil
}

// stale reports whether the batch in flight during the read touched node.
func (a *lookAhead) stale(node labelID) bool { return a.touched[node] }

// merge is the read ahead with the touched nodes' entries replaced by the
// transaction's reading of them.
func (a *lookAhead) merge(graph owners) owners {
	for key, tenants := range a.graph {
		if !a.touched[key] {
			graph[key] = tenants
		}
	}
	return graph
}
