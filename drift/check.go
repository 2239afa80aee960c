package drift

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap"

	"graphsync/graphmodel"
	"graphsync/outbox"
	"graphsync/projector"
	"graphsync/redact"
	gsql "graphsync/sql"
)

// ErrUnknownTenant is returned for a --tenant PostgreSQL does not have.
var ErrUnknownTenant = errors.New("no such tenant in PostgreSQL")

// Checker compares PostgreSQL with the graph.
type Checker struct {
	pool   *pgxpool.Pool
	driver neo4j.DriverWithContext
	cfg    Config
	log    *zap.Logger
	// beforeRepair, when set (by tests only), runs between the second
	// look and the repair: where sync's writes race the repair.
	beforeRepair func()
}

// MinPoolConns is how many connections a check holds at once: its
// snapshot and a read beside it.
const MinPoolConns = 2

// New returns a Checker, or an error naming the setting that is wrong.
func New(pool *pgxpool.Pool, driver neo4j.DriverWithContext, cfg Config, log *zap.Logger) (*Checker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("drift config: %w", err)
	}
	if pool == nil || driver == nil {
		return nil, errors.New("drift: a PostgreSQL pool and a Neo4j driver are required")
	}
	// The first pass holds a snapshot on one connection and reads the
	// pending events beside it on another: a smaller pool would wait for
	// itself for ever.
	if n := pool.Config().MaxConns; n < MinPoolConns {
		return nil, fmt.Errorf("drift: the PostgreSQL pool allows %d connections; a check needs at least %d at once (a snapshot and a read beside it)", n, MinPoolConns)
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Checker{pool: pool, driver: driver, cfg: cfg, log: log}, nil
}

// suspect is a key that differed in the first pass.
type suspect struct {
	tenant int64
	label  string
	id     int64
}

// run is the state of one Run.
type run struct {
	c        *Checker
	model    graphmodel.Model
	sample   sample
	report   *Report
	suspects []suspect
	capped   int
	// final findings, after the second look.
	findings []Finding
	// Past MaxSuspects, the first MaxExamples findings of a kind are kept as
	// examples and the rest only counted (cappedMore), so that memory does
	// not grow with the drift found (a graph that lost its data: a finding
	// per row).
	cappedKept map[Kind]int
	cappedMore map[cappedKey]int
	// outboxLastDrawn is the outbox id sequence's value read last
	// (aboveOutboxSequence).
	outboxLastDrawn int64
}

// cappedKey is where a counted-only finding is counted.
type cappedKey struct {
	tenant int64
	label  string
	kind   Kind
}

// Run checks once. With repair, it then fixes what it found and can fix. A
// repair that stops part way returns the report beside the error: Repaired
// lists what was applied, RepairStopped why nothing after it was.
func (c *Checker) Run(ctx context.Context, repair bool) (*Report, error) {
	start := time.Now()
	r := &run{c: c, model: *c.cfg.Model, report: newReport(c.cfg)}
	share := int64(math.Round(c.cfg.Sample * 1000))
	r.sample = sample{offset: rand.Int64N(1000), share: max(1, share)}
	if c.cfg.Sample >= 1 {
		r.sample = sample{offset: 0, share: 1000}
	}
	tenants, err := c.Tenants(ctx)
	if err != nil {
		return nil, err
	}
	// One consistent snapshot of the business tables, as the relay role
	// reads them.
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("open a snapshot of PostgreSQL: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	for _, tenant := range tenants {
		if err := r.firstPass(ctx, tx, tenant); err != nil {
			return nil, err
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		return nil, fmt.Errorf("close the snapshot: %w", err)
	}
	if err := r.scanForeign(ctx, tenants); err != nil {
		return nil, err
	}
	if len(r.suspects) > 0 && c.cfg.RecheckAfter > 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(c.cfg.RecheckAfter):
		}
	}
	if err := r.secondLook(ctx); err != nil {
		return nil, err
	}
	r.report.SuspectsCapped = r.capped
	r.report.finish(append(r.findings, r.countedOnly()...), time.Since(start))
	if repair {
		if c.beforeRepair != nil {
			c.beforeRepair()
		}
		changes, err := r.repair(ctx)
		// With --repair the list is there, [] when nothing needed it.
		r.report.Repaired = append([]string{}, changes...)
		if err != nil {
			r.report.RepairStopped = redact.Text(err.Error())
			return r.report, err
		}
	}
	return r.report, nil
}

// Tenants lists the tenants in the checker's scope, in id order; an unknown
// --tenant is ErrUnknownTenant. A role that row-level security keeps from
// reading every tenant is refused first: what it cannot see would look
// orphaned.
func (c *Checker) Tenants(ctx context.Context) ([]int64, error) {
	if err := gsql.CheckRoleSeesEveryTenant(ctx, c.pool); err != nil {
		var roleErr *gsql.RoleError
		if errors.As(err, &roleErr) {
			return nil, fmt.Errorf("%w; everything it cannot see would count as drift", err)
		}
		return nil, err
	}
	var filter *int64
	if c.cfg.TenantID != 0 {
		filter = &c.cfg.TenantID
	}
	rows, err := c.pool.Query(ctx, gsql.Query("DriftTenants"), filter)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	if c.cfg.TenantID != 0 && len(tenants) == 0 {
		return nil, fmt.Errorf("tenant %d: %w", c.cfg.TenantID, ErrUnknownTenant)
	}
	return tenants, nil
}

// comparedLabels are the labels whose nodes the rows imply, in model order.
func (r *run) comparedLabels() []graphmodel.Label {
	var labels []graphmodel.Label
	for _, l := range r.model.Labels {
		if _, ok := chunkQuery[l.Name]; ok {
			labels = append(labels, l)
		}
	}
	return labels
}

// firstPass merges both sides of every label of one tenant, in key order.
func (r *run) firstPass(ctx context.Context, tx pgx.Tx, tenant int64) error {
	summary := r.report.tenant(tenant)
	if err := r.c.pool.QueryRow(ctx, gsql.Query("DriftLag"), tenant).Scan(&summary.Pending, &summary.OldestPendingSeconds, &summary.DLQ); err != nil {
		return fmt.Errorf("read projection lag of tenant %d: %w", tenant, err)
	}
	pending, err := loadPending(ctx, r.c.pool, r.model, tenant)
	if err != nil {
		return err
	}
	cfg := r.c.cfg
	anyRows := false
	for _, label := range r.comparedLabels() {
		counts := summary.label(label.Name)
		rowsIt := &iter{next: func(after int64) ([]node, error) {
			return rowsChunk(ctx, tx, r.model, label.Name, tenant, after, cfg.ChunkSize, r.sample)
		}}
		graphIt := &iter{next: func(after int64) ([]node, error) {
			return graphChunk(ctx, r.c.driver, cfg.Database, r.model, label.Name, tenant, after, cfg.ChunkSize, r.sample)
		}}
		for {
			exp, err := rowsIt.peek()
			if err != nil {
				return err
			}
			got, err := graphIt.peek()
			if err != nil {
				return err
			}
			if exp == nil && got == nil {
				break
			}
			switch {
			case got == nil || (exp != nil && exp.id < got.id):
				rowsIt.take()
				got = nil
			case exp == nil || got.id < exp.id:
				graphIt.take()
				exp = nil
			default:
				rowsIt.take()
				graphIt.take()
			}
			if exp != nil {
				counts.Rows++
				anyRows = anyRows || exp.required
			}
			if got != nil {
				counts.Nodes++
			}
			id := idOf(exp, got)
			findings, err := r.withStamps(ctx, tenant, label, exp, got, compareNode(r.model, r.c.cfg.Vectors, tenant, label, exp, got))
			if err != nil {
				return err
			}
			if len(findings) > 0 {
				if p, ok := pending.explains(label.Name, id); ok && pending.explainsAll(r.model, findings) {
					r.report.explain(tenant, label.Name, id, p, findings)
					continue
				}
				r.suspect(suspect{tenant, label.Name, id}, findings)
			}
		}
	}
	return r.checkTombstonesAndTenant(ctx, tx, tenant, anyRows, pending)
}

// standing reports whether a finding stands whatever the outbox holds: no
// event writes personal data, a property outside the allowlist or an edge
// between tenants, so pending events of the aggregate cannot explain it
// (only differences an event would change can be).
func standing(f Finding) bool {
	switch f.Kind {
	case MissingNode, OrphanNode, StaleNode, MissingRelationship, ExtraRelationship, ChangedRelationship:
		return false
	}
	return true
}

// splitExplained separates the findings a pending event explains (by)
// from those that stand.
func splitExplained(findings []Finding, by func(Finding) bool) (explained, stands []Finding) {
	for _, f := range findings {
		if by(f) {
			explained = append(explained, f)
		} else {
			stands = append(stands, f)
		}
	}
	return explained, stands
}

func idOf(exp, got *node) int64 {
	if exp != nil {
		return exp.id
	}
	return got.id
}

// suspect records a first-pass difference for the second look.
func (r *run) suspect(s suspect, findings []Finding) {
	if len(r.suspects) < r.c.cfg.MaxSuspects {
		r.suspects = append(r.suspects, s)
		return
	}
	// Past the bound: counted from the first pass, not looked at again, and
	// so not repaired either: under live sync a first-pass verdict may be
	// false (a node sync wrote after the snapshot looks like an orphan, one
	// it moved on looks ahead), and a repair acts on it for good. A run
	// repairs what its second look confirmed; the next run goes on.
	r.capped++
	for _, f := range findings {
		if r.cappedKept[f.Kind] < r.c.cfg.MaxExamples {
			if r.cappedKept == nil {
				r.cappedKept = map[Kind]int{}
			}
			r.cappedKept[f.Kind]++
			f.repair = nil
			r.findings = append(r.findings, f)
			continue
		}
		if r.cappedMore == nil {
			r.cappedMore = map[cappedKey]int{}
		}
		r.cappedMore[cappedKey{f.TenantID, f.Label, f.Kind}] += f.Count
	}
}

// countedOnly is one finding per tenant, label and kind for the findings
// past MaxSuspects that were counted but not kept, in a fixed order; they
// come after every kept finding, so they are never shown as examples.
func (r *run) countedOnly() []Finding {
	keys := slices.Collect(maps.Keys(r.cappedMore))
	slices.SortFunc(keys, func(a, b cappedKey) int {
		return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.label, b.label), cmp.Compare(a.kind, b.kind))
	})
	out := make([]Finding, 0, len(keys))
	for _, k := range keys {
		out = append(out, Finding{Kind: k.kind, TenantID: k.tenant, Label: k.label, Count: r.cappedMore[k],
			Detail: "past the second-look bound (MaxSuspects): counted, not kept"})
	}
	return out
}

// secondLook re-reads each suspect key in the order that makes a verdict
// sound while sync keeps writing: the rows (R1), the pending outbox rows
// (P1), the graph (G), the rows again (R2), the pending rows again (P2).
// Sync marks a row processed only after Neo4j committed it, so every event
// committed before R1 is either pending in P1 or visible in G. A node that
// matches R1 or R2 is in step (it may be between the two); one that matches
// neither is drift unless P1 or P2 holds rows of its aggregate.
func (r *run) secondLook(ctx context.Context) error {
	// Suspects are looked at in batches of one tenant, so P1 and P2 are read
	// once per batch, still between the batch's reads.
	const batchSize = 200
	for start := 0; start < len(r.suspects); {
		end := start + 1
		for end < len(r.suspects) && end-start < batchSize && r.suspects[end].tenant == r.suspects[start].tenant {
			end++
		}
		if err := r.secondLookBatch(ctx, r.suspects[start:end]); err != nil {
			return err
		}
		start = end
	}
	return nil
}

func (r *run) secondLookBatch(ctx context.Context, batch []suspect) error {
	tenant := batch[0].tenant
	isSpecial := func(s suspect) bool { return s.label == tombstoneLabel(r.model) || s.label == tenantLabel(r.model) }
	// The batch's keys per label, read at once on each side.
	keys := map[string][]int64{}
	for _, s := range batch {
		if !isSpecial(s) {
			keys[s.label] = append(keys[s.label], s.id)
		}
	}
	type key struct {
		label string
		id    int64
	}
	read := func(side func(label string, after int64, limit int, only sample) ([]node, error)) (map[key]*node, error) {
		out := map[key]*node{}
		for label, ids := range keys {
			lowest := slices.Min(ids)
			nodes, err := side(label, lowest-1, len(ids), sample{offset: 0, share: 1000, ids: ids})
			if err != nil {
				return nil, err
			}
			for i := range nodes {
				out[key{label, nodes[i].id}] = &nodes[i]
			}
		}
		return out, nil
	}
	readRows := func() (map[key]*node, error) {
		return read(func(label string, after int64, limit int, only sample) ([]node, error) {
			return rowsChunk(ctx, r.c.pool, r.model, label, tenant, after, limit, only)
		})
	}
	r1, err := readRows()
	if err != nil {
		return err
	}
	p1, err := loadPending(ctx, r.c.pool, r.model, tenant)
	if err != nil {
		return err
	}
	graph, err := read(func(label string, after int64, limit int, only sample) ([]node, error) {
		return graphChunk(ctx, r.c.driver, r.c.cfg.Database, r.model, label, tenant, after, limit, only)
	})
	if err != nil {
		return err
	}
	r2, err := readRows()
	if err != nil {
		return err
	}
	found := make([][]Finding, len(batch))
	for i, s := range batch {
		if isSpecial(s) {
			if found[i], err = r.recheckSpecial(ctx, s); err != nil {
				return err
			}
			continue
		}
		label, _ := r.model.Label(s.label)
		k := key{s.label, s.id}
		first, got, second := r1[k], graph[k], r2[k]
		findings := compareNode(r.model, r.c.cfg.Vectors, s.tenant, label, second, got)
		switch {
		case len(findings) == 0:
		case len(compareNode(r.model, r.c.cfg.Vectors, s.tenant, label, first, got)) == 0:
			findings = nil // the graph holds R1's state: in step, R2 is on its way
		case label.Role == graphmodel.RoleAggregate && first != nil && second != nil && got != nil &&
			first.version < got.version && got.version < second.version:
			findings = nil // a version between R1's and R2's: in step, mid-way
		}
		if found[i], err = r.withStamps(ctx, s.tenant, label, second, got, findings); err != nil {
			return err
		}
	}
	p2, err := loadPending(ctx, r.c.pool, r.model, tenant)
	if err != nil {
		return err
	}
	for i, s := range batch {
		if len(found[i]) == 0 {
			continue
		}
		c1, ok1 := p1.explains(s.label, s.id)
		c2, ok2 := p2.explains(s.label, s.id)
		if ok1 || ok2 {
			explained, standing := splitExplained(found[i], func(f Finding) bool {
				return (ok1 && p1.explainsFinding(r.model, f)) || (ok2 && p2.explainsFinding(r.model, f))
			})
			if len(explained) > 0 {
				r.report.explain(s.tenant, s.label, s.id, pendingCount{max(c1.pending, c2.pending), max(c1.dlq, c2.dlq)}, explained)
			}
			r.findings = append(r.findings, standing...)
			continue
		}
		r.findings = append(r.findings, found[i]...)
	}
	return nil
}

// iter walks one side of a label in key order, a chunk at a time.
type iter struct {
	next  func(after int64) ([]node, error)
	buf   []node
	pos   int
	after int64
	done  bool
}

func (it *iter) peek() (*node, error) {
	if it.pos < len(it.buf) {
		return &it.buf[it.pos], nil
	}
	if it.done {
		return nil, nil
	}
	chunk, err := it.next(it.after)
	if err != nil {
		return nil, err
	}
	it.buf, it.pos = chunk, 0
	if len(chunk) == 0 {
		it.done = true
		return nil, nil
	}
	it.after = chunk[len(chunk)-1].id
	return &it.buf[0], nil
}

func (it *iter) take() { it.pos++ }

// pendingIndex is a tenant's aggregates with outbox rows not applied yet.
type pendingIndex struct {
	byAggregate map[string]map[int64]pendingCount
	byType      map[string]pendingCount
	// byReference counts, per reference label and id, the pending events
	// that will write that node; nil when the tenant had more than
	// referenceDecodeLimit pending events (a backlog), which are then not
	// decoded.
	byReference map[string]map[int64]int64
	// writes is what the decoded pending events will write (nil with
	// byReference): a difference is explained only by an event that writes
	// that very node or relationship.
	writes *pendingWrites
}

// pendingWrites counts the writes of a tenant's pending events.
type pendingWrites struct {
	// nodes are upserted or deleted nodes (a deleted one's tombstone too);
	// deleted the deleted ones alone (an edge goes with its end).
	nodes, deleted map[writtenNode]int64
	// rels are merged relationships; a Single relationship's write also
	// counts with to = anyTarget (it removes the From node's other edges
	// of its type).
	rels map[writtenRel]int64
}

type writtenNode struct {
	label string
	id    int64
}

type writtenRel struct {
	typ      string
	from, to int64
}

// anyTarget stands for every To end in a writtenRel.
const anyTarget = -1

func (w *pendingWrites) add(model graphmodel.Model, mut graphmodel.Mutations) {
	for _, n := range mut.Nodes {
		w.nodes[writtenNode{n.Label, n.ID}]++
	}
	for _, d := range mut.Deletes {
		w.nodes[writtenNode{d.Label, d.ID}]++
		w.deleted[writtenNode{d.Label, d.ID}]++
		if l, ok := model.Label(d.Label); ok && l.Tombstone != "" {
			w.nodes[writtenNode{l.Tombstone, d.ID}]++
		}
	}
	for _, r := range mut.Rels {
		w.rels[writtenRel{r.Type, r.FromID, r.ToID}]++
		if rt, ok := model.Relationship(r.Type); ok && rt.Single {
			w.rels[writtenRel{r.Type, r.FromID, anyTarget}]++
		}
	}
}

// explainsAll reports whether pending events explain every finding of a
// node.
func (p pendingIndex) explainsAll(model graphmodel.Model, findings []Finding) bool {
	for _, f := range findings {
		if !p.explainsFinding(model, f) {
			return false
		}
	}
	return true
}

// explainsFinding reports whether a pending event will write what f is
// about: the node of a node finding (upserted or deleted), the very
// relationship of a relationship finding (or, for a Single relationship,
// any of its type from the same node, which removes the others; or the
// deletion of an end, which takes an extra edge with it). An OrderConfirmed
// writes the Order node alone, so it explains a stale order but not its
// missing PLACED or CONTAINS edges. Findings no event changes (personal
// data, properties outside the allowlist, edges between tenants) are never
// explained. During a backlog (events not decoded) any pending event of
// the node's aggregate explains a node's differences (explains).
func (p pendingIndex) explainsFinding(model graphmodel.Model, f Finding) bool {
	if standing(f) {
		return false
	}
	if p.writes == nil {
		_, ok := p.explains(f.Label, f.ID)
		return ok
	}
	w := p.writes
	switch f.Kind {
	case MissingNode, OrphanNode, StaleNode:
		return w.nodes[writtenNode{f.Label, f.ID}] > 0
	}
	if f.rel == nil {
		return false
	}
	rt, ok := model.Relationship(f.rel.typ)
	if !ok {
		return false
	}
	from, to := f.ID, f.rel.other
	if !f.rel.out {
		from, to = to, from
	}
	if w.rels[writtenRel{rt.Type, from, to}] > 0 || w.rels[writtenRel{rt.Type, from, anyTarget}] > 0 {
		return true
	}
	return f.Kind == ExtraRelationship && (w.deleted[writtenNode{rt.From, from}] > 0 || w.deleted[writtenNode{rt.To, to}] > 0)
}

// referenceDecodeLimit is how many pending events of a tenant drift decodes
// to learn which reference nodes they will write. Past it (a backlog after
// an outage), any pending event of the aggregate type that writes a
// reference label explains a difference on every node of that label.
const referenceDecodeLimit = 10_000

type pendingCount struct{ pending, dlq int64 }

func loadPending(ctx context.Context, pool *pgxpool.Pool, model graphmodel.Model, tenant int64) (pendingIndex, error) {
	idx := pendingIndex{byAggregate: map[string]map[int64]pendingCount{}, byType: map[string]pendingCount{}}
	rows, err := pool.Query(ctx, gsql.Query("DriftOutboxPending"), tenant)
	if err != nil {
		return idx, fmt.Errorf("read pending outbox rows of tenant %d: %w", tenant, err)
	}
	defer rows.Close()
	for rows.Next() {
		var typ string
		var id, pending, dead int64
		if err := rows.Scan(&typ, &id, &pending, &dead); err != nil {
			return idx, fmt.Errorf("read pending outbox rows of tenant %d: %w", tenant, err)
		}
		if idx.byAggregate[typ] == nil {
			idx.byAggregate[typ] = map[int64]pendingCount{}
		}
		c := idx.byAggregate[typ][id]
		c.pending, c.dlq = c.pending+pending, c.dlq+dead
		idx.byAggregate[typ][id] = c
		t := idx.byType[typ]
		t.pending, t.dlq = t.pending+pending, t.dlq+dead
		idx.byType[typ] = t
	}
	if err := rows.Err(); err != nil {
		return idx, fmt.Errorf("read pending outbox rows of tenant %d: %w", tenant, err)
	}
	var total int64
	for _, t := range idx.byType {
		total += t.pending
	}
	if total > referenceDecodeLimit {
		return idx, nil
	}
	idx.byReference = map[string]map[int64]int64{}
	idx.writes = &pendingWrites{nodes: map[writtenNode]int64{}, deleted: map[writtenNode]int64{}, rels: map[writtenRel]int64{}}
	rows, err = pool.Query(ctx, gsql.Query("DriftOutboxPendingEvents"), tenant, referenceDecodeLimit)
	if err != nil {
		return idx, fmt.Errorf("read pending events of tenant %d: %w", tenant, err)
	}
	defer rows.Close()
	for rows.Next() {
		m := outbox.Message{TenantID: tenant}
		var payload string
		if err := rows.Scan(&m.ID, &m.AggregateType, &m.AggregateID, &m.EventType, &m.EventVersion, &payload); err != nil {
			return idx, fmt.Errorf("read pending events of tenant %d: %w", tenant, err)
		}
		m.Payload = []byte(payload)
		mut, err := projector.Written(m)
		if err != nil {
			continue // it will write nothing: sync will reject it
		}
		idx.writes.add(model, mut)
		for _, n := range mut.Nodes {
			if n.Label == graphmodel.LabelCategory || n.Label == graphmodel.LabelCustomer {
				if idx.byReference[n.Label] == nil {
					idx.byReference[n.Label] = map[int64]int64{}
				}
				idx.byReference[n.Label][n.ID]++
			}
		}
	}
	if err := rows.Err(); err != nil {
		return idx, fmt.Errorf("read pending events of tenant %d: %w", tenant, err)
	}
	return idx, nil
}

// explains tells whether outbox rows not applied yet explain a difference
// on a node: its own aggregate's pending rows, or, for a reference node
// (whose properties ride on other aggregates' events), the pending events
// that will write it (during a backlog too many to decode: any pending row
// of the aggregate type that writes it). A busy tenant always has some
// event pending: counting those would hide every category and customer
// difference for as long as it is busy. Dead-lettered rows explain nothing: no
// one is applying them, so the graph stays different until an operator
// retries them or a repair writes the rows (a dead-lettered Order event
// used to hide every Customer difference of its tenant for as long as it
// stayed in the DLQ). Their count is still shown beside a pending one.
func (p pendingIndex) explains(label string, id int64) (pendingCount, bool) {
	var c pendingCount
	switch label {
	case graphmodel.LabelProduct, graphmodel.LabelDeletedProduct:
		c = p.byAggregate["Product"][id]
	case graphmodel.LabelOrder:
		c = p.byAggregate["Order"][id]
	case graphmodel.LabelCategory:
		c = p.reference(label, id, "Product")
	case graphmodel.LabelCustomer:
		c = p.reference(label, id, "Order")
	default:
		for _, t := range p.byType {
			c.pending, c.dlq = c.pending+t.pending, c.dlq+t.dlq
		}
	}
	return c, c.pending > 0
}

// reference counts the pending events that will write reference node (label,
// id), which events of aggregate type writer carry; the dead-lettered ones
// of that type are shown beside them.
func (p pendingIndex) reference(label string, id int64, writer string) pendingCount {
	c := p.byType[writer]
	if p.byReference != nil {
		c.pending = p.byReference[label][id]
	}
	return c
}

func tombstoneLabel(m graphmodel.Model) string {
	for _, l := range m.Labels {
		if l.Tombstone != "" {
			return l.Tombstone
		}
	}
	return ""
}

func tenantLabel(m graphmodel.Model) string {
	for _, l := range m.Labels {
		if l.Role == graphmodel.RoleTenant {
			return l.Name
		}
	}
	return ""
}
