package projector

import (
	"errors"
	"fmt"
	"strings"

	"graphsync/cypher"
	"graphsync/graphmodel"
	"graphsync/outbox"
)

// Sentinel errors in the rejected map of Deliver (wrapped with detail).
var (
	// ErrInvalidEvent: the event does not decode, is unknown or fails
	// validation (see events.ErrUnknownEvent, events.ErrInvalidPayload).
	ErrInvalidEvent = errors.New("invalid event")
	// ErrCrossTenant: the event names an id the graph holds under another tenant.
	ErrCrossTenant = errors.New("id belongs to another tenant")
	// ErrNotProjected: the event needs a node that is not in the graph (it
	// was deleted). When the node is only not projected yet, the rejection
	// also wraps outbox.ErrDeferred: the event is valid and waits, uncounted.
	ErrNotProjected = errors.New("referenced node not in the graph")
	// ErrRefusedByNeo4j: Neo4j refused the event's own writes; other events
	// of the batch were applied without it.
	ErrRefusedByNeo4j = errors.New("refused by neo4j")
)

// rejection is an event's error: text naming the event and the problem,
// errors.Is matching a sentinel (and the cause, when there is one).
type rejection struct {
	kind  error
	msg   string
	cause error
	// awaits, on a deferred event, is the aggregate whose events write
	// the node it waits for, when the node is an aggregate's.
	awaits *outbox.Awaited
}

func (r *rejection) Error() string { return r.msg }

// Awaits names the aggregate a deferred event waits for (outbox.AwaitedBy).
func (r *rejection) Awaits() (outbox.Awaited, bool) {
	if r.awaits == nil {
		return outbox.Awaited{}, false
	}
	return *r.awaits, true
}
func (r *rejection) Unwrap() []error {
	if r.cause == nil {
		return []error{r.kind}
	}
	return []error{r.kind, r.cause}
}

func reject(it *item, kind error, format string, args ...any) error {
	return &rejection{kind: kind, msg: it.name + ": " + fmt.Sprintf(format, args...)}
}

// labelID is a node's label and business id, whatever its tenant.
type labelID struct {
	label string
	id    int64
}

// owners records which tenants the graph holds each looked-up id under.
type owners map[labelID][]int64

func (o owners) heldBy(label string, id, tenantID int64) bool {
	for _, t := range o[labelID{label, id}] {
		if t == tenantID {
			return true
		}
	}
	return false
}

// admission decides, in batch order, which items may be applied, given who
// owns the ids they name in the graph and what earlier items of the batch
// create, claim or delete. It is pure.
type admission struct {
	graph      owners
	tombstones map[string]string // label -> tombstone label
	aggregates map[string]string // label -> aggregate type writing its nodes
	claimed    map[labelID]int64 // ids claimed by an admitted item, by tenant
	exists     map[nodeID]bool   // nodes created (true) or deleted (false) by admitted items
}

func newAdmission(model graphmodel.Model, graph owners) *admission {
	a := &admission{graph: graph, tombstones: map[string]string{}, aggregates: map[string]string{}, claimed: map[labelID]int64{}, exists: map[nodeID]bool{}}
	for _, l := range model.Labels {
		if l.Tombstone != "" {
			a.tombstones[l.Name] = l.Tombstone
		}
		if l.Role == graphmodel.RoleAggregate {
			a.aggregates[l.Name] = l.AggregateType
		}
	}
	return a
}

// admit returns the items to apply, in order, and the rejected ones' errors.
func (a *admission) admit(items []*item) (accepted []*item, rejected map[int64]error) {
	rejected = map[int64]error{}
	failing := &failedAggregates{}
	for _, it := range items {
		if failing.holdsBack(it.msg, rejected) {
			continue
		}
		if err := a.check(it); err != nil {
			failing.fail(it.msg, rejected, err)
			continue
		}
		accepted = append(accepted, it)
		tenantID := it.msg.TenantID
		for _, r := range it.refs {
			a.claimed[labelID{r.label, r.id}] = tenantID
		}
		for _, n := range it.creates {
			// A tombstoned node stays deleted: its upsert is a no-op.
			if !a.graph.heldBy(a.tombstones[n.label], n.id, n.tenantID) {
				a.exists[n] = true
			}
		}
		for _, n := range it.deletes {
			a.exists[n] = false
		}
	}
	return accepted, rejected
}

// check admits an item or says why not. Every reference is checked for
// another tenant's id before any is checked for existence, and a reference
// that can never be met (deleted) before one that is only not there yet: a
// wait for one line's product must not hide that another line names another
// tenant's product or a deleted one, which no wait can mend (the event
// would otherwise be deferred for ever, uncounted, instead of failing).
func (a *admission) check(it *item) error {
	tenantID := it.msg.TenantID
	for _, r := range it.refs {
		key := labelID{r.label, r.id}
		holders := append([]int64(nil), a.graph[key]...)
		if tombstone := a.tombstones[r.label]; tombstone != "" {
			holders = append(holders, a.graph[labelID{tombstone, r.id}]...)
		}
		if claimant, ok := a.claimed[key]; ok {
			holders = append(holders, claimant)
		}
		for _, holder := range holders {
			if holder != tenantID {
				return reject(it, ErrCrossTenant, "%s: %s %d belongs to another tenant; cross-tenant references are refused",
					r.field, strings.ToLower(r.label), r.id)
			}
		}
	}
	var wait error
	for _, r := range it.refs {
		if !r.mustExist {
			continue
		}
		n := nodeID{r.label, tenantID, r.id}
		if created, decided := a.exists[n]; decided {
			if !created {
				return reject(it, ErrNotProjected, "%s: %s %d was deleted earlier in this batch", r.field, strings.ToLower(r.label), r.id)
			}
			continue
		}
		if a.graph.heldBy(r.label, r.id, tenantID) {
			continue
		}
		if a.graph.heldBy(a.tombstones[r.label], r.id, tenantID) {
			return reject(it, ErrNotProjected, "%s: %s %d was deleted", r.field, strings.ToLower(r.label), r.id)
		}
		if wait == nil {
			w := &rejection{kind: ErrNotProjected, cause: outbox.ErrDeferred, msg: it.name + ": " + fmt.Sprintf(
				"%s: %s %d is not in the graph yet (its events are not projected yet); waiting for them",
				r.field, strings.ToLower(r.label), r.id)}
			if aggregateType, ok := a.aggregates[r.label]; ok {
				w.awaits = &outbox.Awaited{TenantID: tenantID, AggregateType: aggregateType, AggregateID: r.id}
			}
			wait = w
		}
	}
	return wait
}

// ownersParams is the OwnersQuery's parameters for items: per label, the
// ids they name (each label's tombstone label is asked for the same ids).
// keep, when not nil, narrows it to the nodes it returns true for.
func ownersParams(model graphmodel.Model, items []*item, keep func(labelID) bool) map[string]any {
	tombstones := map[string]string{}
	for _, l := range model.Labels {
		tombstones[l.Name] = l.Tombstone
	}
	type entry struct {
		param string
		id    int64
	}
	seen := map[entry]bool{}
	params := map[string]any{}
	add := func(param string, node labelID) {
		id := node.id
		if keep != nil && !keep(node) {
			return
		}
		if !seen[entry{param, id}] {
			seen[entry{param, id}] = true
			params[param] = append(params[param].([]any), id)
		}
	}
	for _, label := range cypher.Labels(model) {
		params[cypher.OwnersParam(label)] = []any{}
	}
	for _, it := range items {
		for _, r := range it.refs {
			add(cypher.OwnersParam(r.label), labelID{r.label, r.id})
			if tombstone := tombstones[r.label]; tombstone != "" {
				add(cypher.OwnersParam(tombstone), labelID{tombstone, r.id})
			}
		}
	}
	return params
}

// statementRows lists the items' statement rows in batch order.
func statementRows(items []*item) []*cypher.Rows {
	rows := make([]*cypher.Rows, len(items))
	for i, it := range items {
		rows[i] = it.rows
	}
	return rows
}
