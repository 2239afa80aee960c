package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap"

	"graphsync/graphmodel"
	"graphsync/outbox"
	"graphsync/projector"
)

// The ceiling's statements: the real graph's shape (labels, keys, properties,
// relationship types, one transaction per batch, nodes before
// relationships), as cypher builds it, minus everything that makes
// graphsync correct rather than fast: no version or outbox-id guards, no
// tombstone check before a product upsert, no ownership reads, no
// collapsing, no per-row accounting.
const (
	ceilingTenant = `UNWIND $rows AS row
MERGE (n:Tenant {tenant_id: row.tenant_id, id: row.tenant_id})`
	ceilingCategory = `UNWIND $rows AS row
MERGE (n:Category {tenant_id: row.tenant_id, id: row.id})
SET n += row.props`
	ceilingCustomer = `UNWIND $rows AS row
MERGE (n:Customer {tenant_id: row.tenant_id, id: row.id})
SET n += row.props`
	ceilingProduct = `UNWIND $rows AS row
MERGE (n:Product {tenant_id: row.tenant_id, id: row.id})
SET n += row.props`
	// Upserts run before deletes within a batch: a product created and
	// deleted in one batch ends deleted, as in the real graph.
	ceilingProductDelete = `UNWIND $rows AS row
MERGE (t:DeletedProduct {tenant_id: row.tenant_id, id: row.id})
WITH row
OPTIONAL MATCH (n:Product {tenant_id: row.tenant_id, id: row.id})
DETACH DELETE n`
	ceilingOrder = `UNWIND $rows AS row
MERGE (n:Order {tenant_id: row.tenant_id, id: row.id})
SET n += row.props`
	ceilingInCategory = `UNWIND $rows AS row
MATCH (a:Product {tenant_id: row.tenant_id, id: row.from_id})
MATCH (b:Category {tenant_id: row.tenant_id, id: row.to_id})
MERGE (a)-[r:IN_CATEGORY {tenant_id: row.tenant_id}]->(b)`
	ceilingPlaced = `UNWIND $rows AS row
MATCH (a:Customer {tenant_id: row.tenant_id, id: row.from_id})
MATCH (b:Order {tenant_id: row.tenant_id, id: row.to_id})
MERGE (a)-[r:PLACED {tenant_id: row.tenant_id}]->(b)`
	ceilingContains = `UNWIND $rows AS row
MATCH (a:Order {tenant_id: row.tenant_id, id: row.from_id})
MATCH (b:Product {tenant_id: row.tenant_id, id: row.to_id})
MERGE (a)-[r:CONTAINS {tenant_id: row.tenant_id, line_no: row.line_no}]->(b)
SET r.quantity = row.quantity, r.unit_price_cents = row.unit_price_cents`
)

// ceilingOrderOfStatements is the order statements run in each transaction.
var ceilingOrderOfStatements = []string{
	ceilingTenant, ceilingCategory, ceilingCustomer, ceilingProduct, ceilingProductDelete, ceilingOrder,
	ceilingInCategory, ceilingPlaced, ceilingContains,
}

// ceilingStatementNames name the statements in the results.
var ceilingStatementNames = map[string]string{
	ceilingTenant: "Tenant", ceilingCategory: "Category", ceilingCustomer: "Customer", ceilingProduct: "Product",
	ceilingProductDelete: "DeletedProduct", ceilingOrder: "Order",
	ceilingInCategory: "IN_CATEGORY", ceilingPlaced: "PLACED", ceilingContains: "CONTAINS",
}

// ceilingResult is scenario 4.
type ceilingResult struct {
	Events       int     `json:"events"`
	Batches      int     `json:"batches"`
	BatchSize    int     `json:"batch_size"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	// RoundsEventsPerSec are all rounds; EventsPerSec is their median.
	RoundsEventsPerSec []float64 `json:"rounds_events_per_sec"`
	// EventsFrom names the throughput run whose events were replayed.
	EventsFrom string      `json:"events_from"`
	Graph      graphCounts `json:"graph"`
	// GraphMatchesSync: the ceiling wrote as many nodes per label and
	// relationships per type as sync did for the same events.
	GraphMatchesSync bool   `json:"graph_matches_sync"`
	Method           string `json:"method"`
	// StatementSeconds is the time spent per statement (by what it writes),
	// from sending it to consuming its summary, over all transactions.
	StatementSeconds map[string]float64 `json:"statement_seconds,omitempty"`
	Error            string             `json:"error,omitempty"`
}

// ceilingBatch is one transaction: rows per statement.
type ceilingBatch map[string][]any

// ceilingNodes and ceilingRels are the statement writing each label and
// relationship type of the projector's mutations.
var (
	ceilingNodes = map[string]string{
		graphmodel.LabelTenant: ceilingTenant, graphmodel.LabelCategory: ceilingCategory, graphmodel.LabelCustomer: ceilingCustomer,
		graphmodel.LabelProduct: ceilingProduct, graphmodel.LabelOrder: ceilingOrder,
	}
	ceilingDeletes = map[string]string{graphmodel.LabelProduct: ceilingProductDelete}
	ceilingRels    = map[string]string{
		graphmodel.RelInCategory: ceilingInCategory, graphmodel.RelPlaced: ceilingPlaced, graphmodel.RelContains: ceilingContains,
	}
)

// ceilingBatches translates the events as the projector does (outside the
// timed part) and groups their rows into transactions of batchSize events.
func ceilingBatches(rows []outboxRow, batchSize int) ([]ceilingBatch, error) {
	var batches []ceilingBatch
	for start := 0; start < len(rows); start += batchSize {
		batch := ceilingBatch{}
		tenants := map[int64]bool{}
		add := func(statement string, row map[string]any) { batch[statement] = append(batch[statement], row) }
		for _, r := range rows[start:min(start+batchSize, len(rows))] {
			mut, err := projector.Translate(outbox.Message{ID: r.id, TenantID: r.tenantID, AggregateType: r.aggregateType,
				AggregateID: r.aggregateID, EventType: r.eventType, EventVersion: r.eventVersion, Payload: r.payload})
			if err != nil {
				return nil, fmt.Errorf("ceiling: %w", err)
			}
			for _, n := range mut.Nodes {
				statement, ok := ceilingNodes[n.Label]
				if !ok {
					return nil, fmt.Errorf("ceiling: no statement for label %s", n.Label)
				}
				if n.Label == graphmodel.LabelTenant {
					if tenants[n.TenantID] {
						continue
					}
					tenants[n.TenantID] = true
					add(statement, map[string]any{"tenant_id": n.TenantID})
					continue
				}
				add(statement, map[string]any{"tenant_id": n.TenantID, "id": n.ID, "props": n.Props})
			}
			for _, d := range mut.Deletes {
				statement, ok := ceilingDeletes[d.Label]
				if !ok {
					return nil, fmt.Errorf("ceiling: no delete statement for label %s", d.Label)
				}
				add(statement, map[string]any{"tenant_id": d.TenantID, "id": d.ID})
			}
			for _, rel := range mut.Rels {
				statement, ok := ceilingRels[rel.Type]
				if !ok {
					return nil, fmt.Errorf("ceiling: no statement for relationship %s", rel.Type)
				}
				if rel.ToID == 0 {
					continue // the projector's "remove the old edge": nothing to remove in an empty graph
				}
				row := map[string]any{"tenant_id": rel.TenantID, "from_id": rel.FromID, "to_id": rel.ToID}
				for k, v := range rel.Props {
					row[k] = v
				}
				add(statement, row)
			}
		}
		batches = append(batches, batch)
	}
	return batches, nil
}

// ceilingRounds: the ceiling is replayed this many times and the median
// kept, since one round takes seconds and the machine is noisy.
const ceilingRounds = 3

// runCeiling replays a throughput run's events as plain UNWIND ... MERGE
// transactions into an empty graph of the same tenants (the throughput
// scenario has cleaned its own), compares the graph with sync's, and cleans
// it, ceilingRounds times.
func runCeiling(ctx context.Context, st *stack, batchSize int, from throughputRun, log *zap.Logger) (result ceilingResult, err error) {
	result = ceilingResult{BatchSize: batchSize, EventsFrom: "throughput/" + from.result.Mode,
		Method: fmt.Sprintf("events decoded before timing; one write transaction per batch of events, one UNWIND ... MERGE statement per label and relationship type "+
			"(nodes, then product deletes, then relationships), no guards; timed from the first transaction's start to the last commit, one session; "+
			"median of %d rounds, each into an empty graph", ceilingRounds)}
	log = log.With(zap.String("scenario", "ceiling"), zap.Int("batch_size", batchSize))
	if len(from.events) == 0 {
		return result, fmt.Errorf("no events to replay")
	}
	batches, err := ceilingBatches(from.events, batchSize)
	if err != nil {
		return result, err
	}
	defer func() {
		cleanCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if cleanErr := st.cleanGraph(cleanCtx, from.tenants); cleanErr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cleanErr))
		}
	}()
	log.Info("replaying", zap.Int("events", len(from.events)), zap.Int("batches", len(batches)), zap.Int("rounds", ceilingRounds))
	type round struct {
		elapsed time.Duration
		spent   map[string]time.Duration
	}
	var rounds []round
	for i := range ceilingRounds {
		// The throughput scenario, or the last round, cleaned up; a
		// leftover would make MERGE match instead of create.
		if existing, err := st.countGraph(ctx, from.tenants); err != nil {
			return result, err
		} else if len(existing.Nodes) > 0 {
			return result, fmt.Errorf("the graph of tenants %v is not empty before ceiling round %d: %v", from.tenants, i+1, existing)
		}
		elapsed, spent, err := replay(ctx, st, batches, len(from.events))
		if err != nil {
			return result, fmt.Errorf("ceiling round %d: %w", i+1, err)
		}
		rounds = append(rounds, round{elapsed, spent})
		result.RoundsEventsPerSec = append(result.RoundsEventsPerSec, float64(len(from.events))/elapsed.Seconds())
		if i == 0 {
			if result.Graph, err = st.countGraph(ctx, from.tenants); err != nil {
				return result, err
			}
			result.GraphMatchesSync = result.Graph.equal(from.result.Graph)
			if !result.GraphMatchesSync {
				log.Warn("the ceiling's graph differs from sync's", zap.Stringer("ceiling", result.Graph), zap.Stringer("sync", from.result.Graph))
			}
		}
		if err := st.cleanGraph(ctx, from.tenants); err != nil {
			return result, err
		}
	}
	slices.SortFunc(rounds, func(a, b round) int { return cmp.Compare(a.elapsed, b.elapsed) })
	median := rounds[len(rounds)/2]
	result.Events = len(from.events)
	result.Batches = len(batches)
	result.Seconds = median.elapsed.Seconds()
	result.EventsPerSec = float64(len(from.events)) / median.elapsed.Seconds()
	result.StatementSeconds = map[string]float64{}
	for name, d := range median.spent {
		result.StatementSeconds[name] = d.Seconds()
	}
	log.Info("measured", zap.Float64("events_per_sec", result.EventsPerSec), zap.Float64s("rounds_events_per_sec", result.RoundsEventsPerSec),
		zap.Stringer("graph", result.Graph))
	return result, nil
}

// replay runs the batches, one write transaction each, and returns the
// elapsed time and the time spent per statement.
func replay(ctx context.Context, st *stack, batches []ceilingBatch, events int) (time.Duration, map[string]time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, phaseTimeout(int64(events), 100))
	defer cancel()
	session := st.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite})
	defer session.Close(context.WithoutCancel(ctx))
	spent := map[string]time.Duration{}
	started := time.Now()
	for i, batch := range batches {
		_, err := session.ExecuteWrite(ctx, func(tx neo4j.ManagedTransaction) (any, error) {
			for _, statement := range ceilingOrderOfStatements {
				rows := batch[statement]
				if len(rows) == 0 {
					continue
				}
				statementStarted := time.Now()
				result, err := tx.Run(ctx, statement, map[string]any{"rows": rows})
				if err != nil {
					return nil, err
				}
				if _, err := result.Consume(ctx); err != nil {
					return nil, err
				}
				spent[ceilingStatementNames[statement]] += time.Since(statementStarted)
			}
			return nil, nil
		})
		if err != nil {
			return 0, nil, fmt.Errorf("batch %d: %w", i, err)
		}
	}
	return time.Since(started), spent, nil
}
