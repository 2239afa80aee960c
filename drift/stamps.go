package drift

import (
	"context"
	"fmt"

	"graphsync/graphmodel"
	gsql "graphsync/sql"
)

// Reference nodes (a Category, a Customer) have no version of their own:
// sync writes them at version 0 and orders their writes by outbox id alone
// (cypher's guard: a write applies when its outbox id is above the node's).
// A stamp no event can pass therefore freezes the node for good: an outbox
// id above every id the outbox sequence has drawn (PostgreSQL restored from
// a backup taken before the events that stamped it, so the sequence starts
// again below them), a version other than 0, or a stamp that is not an
// integer (both set by hand). Sync drops every later segment, country or
// category name, and the properties may still match the rows, so the
// comparison of properties sees nothing until the first dropped change.
// Drift reports such stamps as a finding of their own, which pending events
// never explain (they would be dropped too), and its repair writes the rows
// with the outbox id back at 0.
//
// "Above the sequence" is decided soundly while sync writes: an event's id
// is drawn before its row commits, and sync applies it after that, so a
// stamp an event wrote is at most the sequence's last value read after the
// node. The sequence is read again only when a stamp is above the value
// read last (cheap: most runs read it once).

// withStamps adds to findings, what compareNode found for (exp, got), the
// finding of a reference node whose stamps no event can pass; every repair
// of the node then resets them. got must have been read before the call.
func (r *run) withStamps(ctx context.Context, tenant int64, label graphmodel.Label, exp, got *node, findings []Finding) ([]Finding, error) {
	if label.Role != graphmodel.RoleReference || exp == nil || got == nil {
		return findings, nil // no node, or no row: nothing to reset
	}
	detail, err := r.stampsNoEventPasses(ctx, got)
	if err != nil || detail == "" {
		return findings, err
	}
	reset := *exp
	reset.outboxSeen = nil
	reset.stampsSeen = &stampsSeen{version: got.props[graphmodel.PropVersion], outboxID: got.props[graphmodel.PropOutboxID]}
	if reset.stampsSeen.outboxID == nil {
		reset.stampsSeen.outboxID = int64(0) // the repair compares coalesce(outbox id, 0)
	}
	for i := range findings {
		if findings[i].repair != nil && findings[i].repair.upsert != nil {
			findings[i].repair = &repairAction{upsert: &reset}
		}
	}
	return append(findings, Finding{Kind: ReferenceStampAhead, TenantID: tenant, Label: label.Name, ID: got.id, Count: 1,
		Detail: detail, repair: &repairAction{upsert: &reset}}), nil
}

// stampsNoEventPasses says why no event can pass got's stamps, or "".
func (r *run) stampsNoEventPasses(ctx context.Context, got *node) (string, error) {
	const dropped = "sync drops every event that writes this node"
	switch v := got.props[graphmodel.PropVersion].(type) {
	case nil:
	case int64:
		if v != 0 {
			return fmt.Sprintf("%s %d on a reference node, which sync writes at 0 (set by hand?): %s", graphmodel.PropVersion, v, dropped), nil
		}
	default:
		return fmt.Sprintf("%s is %s, not an integer: %s", graphmodel.PropVersion, valueKind(v), dropped), nil
	}
	switch stamp := got.props[graphmodel.PropOutboxID].(type) {
	case nil:
	case int64:
		ahead, lastDrawn, err := r.aboveOutboxSequence(ctx, stamp)
		if err != nil || !ahead {
			return "", err
		}
		return fmt.Sprintf("%s %d is above every outbox id drawn (the sequence is at %d; was PostgreSQL restored from a backup?): %s until the sequence passes it",
			graphmodel.PropOutboxID, stamp, lastDrawn, dropped), nil
	default:
		return fmt.Sprintf("%s is %s, not an integer: %s", graphmodel.PropOutboxID, valueKind(stamp), dropped), nil
	}
	return "", nil
}

// aboveOutboxSequence tells whether stamp is above the outbox id
// sequence's last value, read after the node; it returns that value.
func (r *run) aboveOutboxSequence(ctx context.Context, stamp int64) (bool, int64, error) {
	if stamp <= r.outboxLastDrawn {
		return false, r.outboxLastDrawn, nil
	}
	if err := r.c.pool.QueryRow(ctx, gsql.Query("RebuildOutboxLastID")).Scan(&r.outboxLastDrawn); err != nil {
		return false, 0, fmt.Errorf("read the outbox id sequence: %w", err)
	}
	return stamp > r.outboxLastDrawn, r.outboxLastDrawn, nil
}
