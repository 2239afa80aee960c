package projector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/cypher"
	"graphsync/graphmodel"
	"graphsync/outbox"
)

// This file is the only one that talks to Neo4j.

// dataError is a failure caused by the batch's own data rather than by
// Neo4j's availability: bisecting the batch isolates the event behind it.
type dataError struct{ err error }

func (e *dataError) Error() string { return e.err.Error() }
func (e *dataError) Unwrap() error { return e.err }

// tooLarge is Neo4j running out of memory for a transaction. Neo4j calls it
// transient, but a large batch fails the same way however often it is
// retried: it is suspect (the relay retries it in smaller batches), and it
// does not unwrap, so that the driver does not retry it as it stands. A
// single event that fails so is Neo4j short of memory (other load holds
// the server's pool or heap): unavailable, never counted against the event
// (DeliverPrepared).
type tooLarge struct{ err error }

func (e *tooLarge) Error() string {
	return "neo4j ran out of memory for the transaction (the relay retries in smaller batches): " + e.err.Error()
}

// outOfMemory reports whether err is Neo4j's answer to a transaction that
// needs more memory than it may have (the heap, or the transaction memory
// pools: Neo.TransientError.General.MemoryPoolOutOfMemoryError and kin).
func outOfMemory(err error) bool {
	var neoErr *neo4j.Neo4jError
	return errors.As(err, &neoErr) && strings.HasPrefix(neoErr.Code, "Neo.TransientError.General.") &&
		(strings.Contains(neoErr.Code, "OutOfMemory") || strings.Contains(neoErr.Code, "MemoryLimit"))
}

// failureClass is what a failed write transaction says about the batch.
type failureClass int

const (
	// classUnavailable: Neo4j cannot be reached or is overloaded; nothing is
	// wrong with the batch. Retried later, uncounted.
	classUnavailable failureClass = iota
	// classBroken: nothing can be applied until someone acts: the server
	// rejects our statements as text (syntax, a missing parameter, an
	// unknown procedure), refuses the credentials, or lacks the schema.
	classBroken
	// classData: Neo4j refused the data of some event (a constraint, a
	// value it cannot store): bisecting the batch finds it.
	classData
	// classSuspect: the batch failed and nothing says why (a transaction
	// timeout, a server error). The relay retries it in smaller batches.
	classSuspect
)

// classify sorts a failed write transaction into the failure policy's
// classes (see outbox.Sink). Codes not listed are suspect: split down, they
// end up counted against a single event rather than stall the relay or
// dead-letter a stream.
func classify(err error) failureClass {
	var dataErr *dataError
	if errors.As(err, &dataErr) {
		return classData
	}
	if memoryShort(err) {
		return classSuspect
	}
	var authErr *neo4j.InvalidAuthenticationError
	if errors.As(err, &authErr) {
		return classBroken
	}
	var neoErr *neo4j.Neo4jError
	if errors.As(err, &neoErr) {
		code := neoErr.Code
		switch {
		case neoErr.IsRetriable() || strings.HasPrefix(code, "Neo.TransientError."):
			return classUnavailable
		case code == "Neo.ClientError.Statement.SyntaxError", code == "Neo.ClientError.Statement.ParameterMissing",
			code == "Neo.ClientError.Statement.SemanticError", code == "Neo.ClientError.Statement.NotSystemDatabaseError",
			strings.HasPrefix(code, "Neo.ClientError.Security."), strings.HasPrefix(code, "Neo.ClientError.Procedure."),
			strings.HasPrefix(code, "Neo.ClientError.Database."),
			code == "Neo.ClientError.Schema.IndexNotFound", code == "Neo.ClientError.Schema.ConstraintNotFound":
			return classBroken
		case code == "Neo.ClientError.Schema.ConstraintValidationFailed", code == "Neo.ClientError.Statement.TypeError",
			code == "Neo.ClientError.Statement.ArgumentError", code == "Neo.ClientError.Statement.ArithmeticError",
			code == "Neo.ClientError.Statement.EntityNotFound", code == "Neo.ClientError.Statement.PropertyNotFound",
			code == "Neo.ClientError.Statement.ConstraintVerificationFailed":
			return classData
		}
		return classSuspect
	}
	var limitErr *neo4j.TransactionExecutionLimit
	var connErr *neo4j.ConnectivityError
	if errors.As(err, &limitErr) || errors.As(err, &connErr) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded) || neo4j.IsRetryable(err) {
		return classUnavailable
	}
	return classSuspect
}

// sinkError turns a failure of a whole batch into the error Deliver returns,
// wrapping the relay's class for it.
func sinkError(class failureClass, err error) error {
	switch class {
	case classUnavailable:
		return fmt.Errorf("%w: %w", outbox.ErrSinkUnavailable, err)
	case classBroken:
		return fmt.Errorf("%w: %w", outbox.ErrSinkBroken, err)
	}
	return err
}

// apply runs one write transaction: look up who owns the ids the items name
// (only those ahead says may have changed, when ahead is not nil), admit or
// reject each item, write the admitted ones. ExecuteWrite retries the whole
// function on transient errors, so admission is redone each time.
func (p *Projector) apply(ctx context.Context, items []*item, ahead *lookAhead) (map[int64]error, error) {
	model := p.builder.Model()
	var reread func(labelID) bool
	if ahead != nil {
		reread = ahead.stale
	}
	params := ownersParams(model, items, reread)
	ownersQuery := p.builder.OwnersQuery()
	p.checkPlansWhenDue()

	session := p.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite, DatabaseName: p.cfg.Database, FetchSize: neo4j.FetchAll})
	defer closeSession(ctx, session)
	var rejected map[int64]error
	_, err := session.ExecuteWrite(ctx, func(tx neo4j.ManagedTransaction) (any, error) {
		graph, err := readOwners(ctx, tx, withCachedPlan(ownersQuery), params)
		if err != nil {
			return nil, notRetriedIfTooLarge(err)
		}
		if ahead != nil {
			graph = ahead.merge(graph)
		}
		accepted, refused := newAdmission(model, graph).admit(items)
		// Every Single relationship a row writes has its stale edges removed
		// under the lock its From node's upsert takes (cypher.StatementsOf):
		// a lookup of the targets before that lock could be out of date, as
		// another writer may have moved the edge since (a relay whose lease
		// ran out mid-delivery, a repair or rebuild beside sync), and
		// skipping the removal on it left a product in two categories
		// (TestSingleRelationshipFollowsAWriteCommittedDuringTheBatch).
		if stmts := p.builder.StatementsOf(statementRows(accepted)); len(stmts) > 0 {
			// A large event (an order of thousands of lines) is sent as
			// several queries of bounded rows, in this one transaction.
			batches, err := p.builder.Batches(stmts)
			if err != nil {
				return nil, err
			}
			for _, batch := range batches {
				if err := runBatch(ctx, tx, batch); err != nil {
					return nil, notRetriedIfTooLarge(err)
				}
			}
		}
		rejected = refused
		return nil, nil
	}, neo4j.WithTxTimeout(p.cfg.TxTimeout))
	if err != nil {
		return nil, err
	}
	return rejected, nil
}

// memoryShort reports whether a failed transaction ran out of Neo4j's
// memory: in the transaction (tooLarge), at commit, or on every try until
// the driver's retry time ran out.
func memoryShort(err error) bool {
	var large *tooLarge
	if errors.As(err, &large) || outOfMemory(err) {
		return true
	}
	var limitErr *neo4j.TransactionExecutionLimit
	return errors.As(err, &limitErr) && len(limitErr.Errors) > 0 && outOfMemory(limitErr.Errors[len(limitErr.Errors)-1])
}

// notRetriedIfTooLarge turns Neo4j's out-of-memory answer into tooLarge,
// which the driver does not retry: retried as it stands, the batch would
// fail the same way until the driver's retry time ran out.
func notRetriedIfTooLarge(err error) error {
	if outOfMemory(err) {
		return &tooLarge{err}
	}
	return err
}

// closeSession returns a session's connection to the pool even when the
// request's context is done already, within a bound of its own.
func closeSession(ctx context.Context, session neo4j.SessionWithContext) {
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = session.Close(closeCtx)
}

// readOwners runs the builder's OwnersQuery: who holds each id.
func readOwners(ctx context.Context, tx neo4j.ManagedTransaction, query string, params map[string]any) (owners, error) {
	result, err := tx.Run(ctx, query, cypher.OwnersParams(params))
	if err != nil {
		return nil, fmt.Errorf("look up id owners: %w", err)
	}
	graph := owners{}
	for result.Next(ctx) {
		record := result.Record()
		kind, _, err1 := neo4j.GetRecordValue[string](record, "kind")
		ids, _, err2 := neo4j.GetRecordValue[[]any](record, "ids")
		tenantIDs, _, err3 := neo4j.GetRecordValue[[]any](record, "tenant_ids")
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("look up id owners: %w", err)
		}
		if len(tenantIDs) != len(ids) {
			return nil, fmt.Errorf("look up id owners: %s: %d ids, %d tenants", kind, len(ids), len(tenantIDs))
		}
		for i := range ids {
			id, ok1 := ids[i].(int64)
			tenantID, ok2 := tenantIDs[i].(int64)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("look up id owners: %s: a node without an integer id or tenant id", kind)
			}
			key := labelID{kind, id}
			graph[key] = append(graph[key], tenantID)
		}
	}
	if err := result.Err(); err != nil {
		return nil, fmt.Errorf("look up id owners: %w", err)
	}
	return graph, nil
}

// runBatch runs a batch's statements in one round trip (cypher.Batch) and
// checks what each counted statement reports.
func runBatch(ctx context.Context, tx neo4j.ManagedTransaction, batch cypher.Batch) error {
	result, err := tx.Run(ctx, withCachedPlan(batch.Text), batch.Params)
	if err != nil {
		return err
	}
	record, err := result.Single(ctx)
	if err != nil {
		return err
	}
	applied, _, err := neo4j.GetRecordValue[[]any](record, "applied")
	if err != nil {
		return err
	}
	if len(applied) != len(batch.Expect) {
		return fmt.Errorf("the batch reported %d counts, want %d", len(applied), len(batch.Expect))
	}
	for i, want := range batch.Expect {
		if got, ok := applied[i].(int64); !ok || got != int64(want) {
			// A node admission saw was gone when the relationship was written.
			return &dataError{fmt.Errorf("merged %v of %d relationships: an endpoint node is missing", applied[i], want)}
		}
	}
	return nil
}

// EnsureSchema creates graphmodel.Default's constraints and indexes in the
// default database if they are missing, then waits until they are online.
// It is what `graphsync migrate` runs; running it again changes nothing.
func EnsureSchema(ctx context.Context, driver neo4j.DriverWithContext) error {
	return EnsureModelSchema(ctx, driver, graphmodel.Default, "")
}

// EnsureModelSchema is EnsureSchema for any model and database.
func EnsureModelSchema(ctx context.Context, driver neo4j.DriverWithContext, model graphmodel.Model, database string) error {
	if err := model.Validate(); err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	opts := []neo4j.ExecuteQueryConfigurationOption{neo4j.ExecuteQueryWithDatabase(database)}
	if err := dropChangedFulltext(ctx, driver, model, opts); err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	for _, stmt := range cypher.SchemaStatements(model) {
		_, err := neo4j.ExecuteQuery(ctx, driver, stmt, nil, neo4j.EagerResultTransformer, opts...)
		if err != nil && !alreadyExists(err) {
			return fmt.Errorf("ensure schema: %s: %w", stmt, err)
		}
	}
	if _, err := neo4j.ExecuteQuery(ctx, driver, "CALL db.awaitIndexes(300)", nil, neo4j.EagerResultTransformer, opts...); err != nil {
		return fmt.Errorf("ensure schema: wait for indexes: %w", err)
	}
	return nil
}

// dropChangedFulltext drops each fulltext index of the model whose label,
// properties or analyzer differ from what the model declares, so that the
// IF NOT EXISTS statements that follow create it anew: an index with an
// older analyzer would otherwise be kept silently and queries analysed with
// one analyzer would search text indexed with another.
func dropChangedFulltext(ctx context.Context, driver neo4j.DriverWithContext, model graphmodel.Model, opts []neo4j.ExecuteQueryConfigurationOption) error {
	if len(model.Fulltext) == 0 {
		return nil
	}
	res, err := neo4j.ExecuteQuery(ctx, driver, cypher.FulltextIndexesQuery, nil, neo4j.EagerResultTransformer, opts...)
	if err != nil {
		return fmt.Errorf("list fulltext indexes: %w", err)
	}
	existing := map[string]*neo4j.Record{}
	for _, rec := range res.Records {
		name, _, _ := neo4j.GetRecordValue[string](rec, "name")
		existing[name] = rec
	}
	for _, f := range model.Fulltext {
		rec, ok := existing[f.Name]
		if !ok || fulltextMatches(rec, f) {
			continue
		}
		// f.Name passed graphmodel.Validate: a plain identifier.
		if _, err := neo4j.ExecuteQuery(ctx, driver, "DROP INDEX "+f.Name+" IF EXISTS", nil, neo4j.EagerResultTransformer, opts...); err != nil {
			return fmt.Errorf("drop changed fulltext index %s: %w", f.Name, err)
		}
	}
	return nil
}

// fulltextMatches reports whether a SHOW FULLTEXT INDEXES record is the index f declares.
func fulltextMatches(rec *neo4j.Record, f graphmodel.Fulltext) bool {
	labels, _, _ := neo4j.GetRecordValue[[]any](rec, "labels")
	props, _, _ := neo4j.GetRecordValue[[]any](rec, "properties")
	analyzer, _, _ := neo4j.GetRecordValue[string](rec, "analyzer")
	want := f.Analyzer
	if want == "" {
		want = cypher.DefaultFulltextAnalyzer
	}
	indexed := f.IndexedProperties()
	if analyzer != want || len(labels) != 1 || labels[0] != f.Label || len(props) != len(indexed) {
		return false
	}
	for i, p := range indexed {
		if props[i] != p {
			return false
		}
	}
	return true
}

// alreadyExists: two processes ran the same IF NOT EXISTS statement at once
// and the other one won; the schema is as wanted.
func alreadyExists(err error) bool {
	var neoErr *neo4j.Neo4jError
	return errors.As(err, &neoErr) && (strings.HasSuffix(neoErr.Code, "EquivalentSchemaRuleAlreadyExists") ||
		strings.HasSuffix(neoErr.Code, "ConstraintAlreadyExists") || strings.HasSuffix(neoErr.Code, "IndexAlreadyExists"))
}

// BackfillTenantKeys writes graphmodel.KeyTenantKey on the nodes of every
// tenant-keyed label that lack it (a graph synced before the key existed:
// the fulltext seed query requires it, so such a node would not be found),
// in transactions of 10,000 nodes, and returns how many it wrote. graphsync
// migrate runs it; on a current graph it reads the label's nodes and writes
// nothing.
func BackfillTenantKeys(ctx context.Context, driver neo4j.DriverWithContext, model graphmodel.Model, database string) (int64, error) {
	session := driver.NewSession(ctx, neo4j.SessionConfig{DatabaseName: database})
	defer session.Close(ctx)
	var written int64
	for _, l := range model.Labels {
		if !model.TenantKeyed(l.Name) {
			continue
		}
		// CALL ... IN TRANSACTIONS runs only in an auto-commit transaction.
		// l.Name passed graphmodel.Validate: a plain identifier.
		result, err := session.Run(ctx, "MATCH (n:"+l.Name+") WHERE n."+graphmodel.KeyTenantKey+" IS NULL AND n."+graphmodel.KeyTenantID+" IS NOT NULL\n"+
			"CALL (n) { SET n."+graphmodel.KeyTenantKey+" = "+cypher.TenantKeyExpr("n."+graphmodel.KeyTenantID)+" } IN TRANSACTIONS OF 10000 ROWS\n"+
			"RETURN count(n) AS written", nil)
		if err != nil {
			return written, fmt.Errorf("backfill %s tenant keys: %w", l.Name, err)
		}
		rec, err := result.Single(ctx)
		if err != nil {
			return written, fmt.Errorf("backfill %s tenant keys: %w", l.Name, err)
		}
		n, _, _ := neo4j.GetRecordValue[int64](rec, "written")
		written += n
	}
	return written, nil
}
