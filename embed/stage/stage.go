package stage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"graphsync/cypher"
	"graphsync/embed"
	"graphsync/graphmodel"
	"graphsync/redact"
)

// Config tunes a Stage. The zero value is ready to use.
type Config struct {
	// Database is the Neo4j database. Default: "" (the server's default).
	Database string
	// Model is the graph model; its Embedding says what is embedded.
	// Default: graphmodel.Default.
	Model *graphmodel.Model
	// BatchSize is how many pending nodes one round reads, embeds and
	// writes (in one Embed call and one Neo4j transaction). Default: 64.
	BatchSize int
	// Idle is how long the stage waits, with nothing pending (and Run,
	// after a round that read less than a batch), before it looks again.
	// Default: 500ms.
	Idle time.Duration
	// Backoff is the first wait after the embedder or Neo4j failed; it
	// doubles up to BackoffMax. Defaults: 500ms and 30s.
	Backoff, BackoffMax time.Duration
	// Tenants, when set, limits the stage to these tenants' nodes (a
	// rebuild or repair of some tenants, a test). Default: every tenant.
	Tenants []int64
	// MetricsNamespace prefixes the metric names. Default: "graphsync".
	MetricsNamespace string
}

func (c Config) withDefaults() Config {
	if c.Model == nil {
		c.Model = &graphmodel.Default
	}
	if c.BatchSize == 0 {
		c.BatchSize = 64
	}
	if c.Idle == 0 {
		c.Idle = 500 * time.Millisecond
	}
	if c.Backoff == 0 {
		c.Backoff = 500 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 30 * time.Second
	}
	if c.MetricsNamespace == "" {
		c.MetricsNamespace = "graphsync"
	}
	return c
}

func (c Config) validate() error {
	if c.Model.Embedding == nil {
		return errors.New("embedding stage: the graph model embeds nothing")
	}
	if c.BatchSize < 0 || c.Idle < 0 || c.Backoff < 0 || c.BackoffMax < c.Backoff {
		return errors.New("embedding stage: negative batch size or wait, or backoff max below backoff")
	}
	return nil
}

// Stage embeds pending nodes. It is safe for one Run (or Beside) at a time;
// RunOnce and Drain may be called when neither is running.
type Stage struct {
	driver   neo4j.DriverWithContext
	cache    *Cache // nil: no cache
	embedder embed.Embedder
	cfg      Config
	emb      graphmodel.Embedding
	log      *zap.Logger
	metrics  *metrics
	texts    struct{ pending, backlog, write, mark, requeue string }
	// refusals holds, by node, the hash of the text the embedder refused
	// for it. Such a node stays pending (drift reports it) and is not sent
	// again until its text changes or the process restarts: a refused text
	// is refused again, and asking costs every later round.
	refusals struct {
		sync.Mutex
		byNode map[nodeKey]string
	}
}

// nodeKey names a node of the embedded label.
type nodeKey struct{ tenantID, id int64 }

// New returns a stage writing through driver with embedder's vectors;
// cache may be nil (every text is embedded).
func New(driver neo4j.DriverWithContext, cache *Cache, embedder embed.Embedder, cfg Config, log *zap.Logger) (*Stage, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := cfg.Model.Validate(); err != nil {
		return nil, fmt.Errorf("embedding stage: graph model: %w", err)
	}
	if embedder == nil {
		return nil, errors.New("embedding stage: no embedder")
	}
	if log == nil {
		log = zap.NewNop()
	}
	s := &Stage{driver: driver, cache: cache, embedder: embedder, cfg: cfg, emb: *cfg.Model.Embedding, log: log, metrics: newMetrics(cfg.MetricsNamespace)}
	s.texts.pending = cypher.EmbeddingPendingText(s.emb)
	s.texts.backlog = cypher.EmbeddingBacklogText(s.emb)
	s.texts.write = cypher.EmbeddingWriteText(s.emb)
	s.texts.mark = cypher.EmbeddingMarkText(s.emb)
	s.texts.requeue = cypher.EmbeddingRequeueText(s.emb)
	return s, nil
}

// Collectors returns the stage's Prometheus collectors.
func (s *Stage) Collectors() []prometheus.Collector { return s.metrics.collectors() }

// Embedder is the stage's embedder: its model and dimension are what
// drift checks vectors against.
func (s *Stage) Embedder() embed.Embedder { return s.embedder }

// SetModelLoad records how long opening the embedder took.
func (s *Stage) SetModelLoad(d time.Duration) { s.metrics.modelLoad.Set(d.Seconds()) }

// Round is what one round did.
type Round struct {
	// Read is the pending nodes read.
	Read int
	// Cached and Embedded are the distinct texts whose vectors came from
	// the cache and from the embedder.
	Cached, Embedded int
	// Written is the vectors written; Dropped, those the guard refused
	// (the node's text changed meanwhile); Remarked, nodes whose text hash
	// the stage wrote first (written without an embedder or with another
	// model); Refused, nodes whose text the embedder refused (moved to the
	// back of the backlog).
	// Drain's Refused counts distinct nodes.
	Written, Dropped, Remarked, Refused int
	// KnownRefused is, of Refused, the nodes refused by an earlier round
	// for the same text: not sent to the embedder again.
	KnownRefused int
	// EmbedTook is the time spent in the embedder.
	EmbedTook    time.Duration
	refusedNodes []nodeKey
}

// idle says the round read nothing but nodes whose text the embedder
// refused before (or nothing at all).
func (r Round) idle() bool { return r.Read == r.KnownRefused }

// stuck says the round read nodes it could have embedded, yet changed none.
func (r Round) stuck() bool {
	return !r.idle() && r.Written+r.Remarked+r.Dropped+r.Refused == 0
}

func (r *Round) add(o Round) {
	r.Read += o.Read
	r.Cached += o.Cached
	r.Embedded += o.Embedded
	r.Written += o.Written
	r.Dropped += o.Dropped
	r.Remarked += o.Remarked
	r.Refused += o.Refused
	r.KnownRefused += o.KnownRefused
	r.EmbedTook += o.EmbedTook
}

// Run embeds pending nodes until ctx is done. Failures of the embedder,
// the cache or Neo4j are counted, logged and retried with backoff; they
// never end Run, and nothing in sync waits for it. After a round that read
// less than a batch it waits Idle, so that the next round gathers what
// came meanwhile: sync's rounds then cost Neo4j and PostgreSQL a few
// statements a second, not a few per text (ADR 0032).
func (s *Stage) Run(ctx context.Context) error {
	s.run(ctx, nil, true)
	return nil
}

// Beside runs rounds as Run does until ctx is done or stop is closed, and
// returns what they did (its Refused counts refusals, not distinct nodes).
// The rebuild runs it beside a replay, whose projector queues the nodes it
// writes, and calls Drain after it.
func (s *Stage) Beside(ctx context.Context, stop <-chan struct{}) Round {
	return s.run(ctx, stop, false)
}

// run is Run, ending also when stop is closed; it returns what its rounds
// did.
func (s *Stage) run(ctx context.Context, stop <-chan struct{}, gather bool) (total Round) {
	wait := time.Duration(0)
	for {
		round, err := s.RunOnce(ctx)
		total.add(round)
		if ctx.Err() != nil {
			return total
		}
		wait = s.nextWait(round, err, wait, gather)
		switch {
		case err != nil:
			s.log.Warn("embedding round failed; retrying", zap.Duration("in", wait), zap.String("error", redact.Text(err.Error())))
		case round.stuck():
			s.log.Warn("embedding round changed nothing; retrying", zap.Duration("in", wait), zap.Int("read", round.Read))
		}
		select {
		case <-stop:
			return total
		default:
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return total
			case <-stop:
				return total
			case <-time.After(wait):
			}
		}
	}
}

// nextWait is how long run waits after a round that did round and failed
// with err, when it waited last for last. With gather, a round that read
// less than a batch is followed by the idle wait: the next one gathers
// what came meanwhile.
func (s *Stage) nextWait(round Round, err error, last time.Duration, gather bool) time.Duration {
	switch {
	case err != nil,
		// Pending nodes, yet nothing changed: back off as after a failure
		// rather than ask again at once. A refused text never gets here:
		// it is remembered and passed over, so it holds up neither the
		// nodes behind it nor those marked later.
		round.stuck():
		if last == 0 {
			return s.cfg.Backoff
		}
		return min(last*2, s.cfg.BackoffMax)
	case round.idle():
		// Nothing pending but texts refused before: idle, never back off,
		// so that nodes marked meanwhile are embedded without delay.
		return s.cfg.Idle
	case gather && round.Read < s.cfg.BatchSize:
		return s.cfg.Idle
	}
	return 0
}

// Drain runs rounds until no node is pending but those whose text the
// embedder refused, and returns what they did; its Refused counts those
// nodes (they stay pending, and drift reports them). It stops with an error
// when a round changes nothing although nodes are pending, or on the first
// failure (the rebuild and drift's repair call it; sync runs Run).
func (s *Stage) Drain(ctx context.Context) (total Round, err error) {
	refused := map[nodeKey]bool{}
	defer func() { total.Refused = len(refused) }()
	for {
		var round Round
		round, err = s.RunOnce(ctx)
		total.add(round)
		for _, k := range round.refusedNodes {
			refused[k] = true
		}
		if err != nil {
			return total, err
		}
		// Refused nodes go to the back of the backlog: a round that reads
		// only nodes refused before has gone round the whole backlog.
		if round.idle() {
			return total, nil
		}
		if round.stuck() {
			return total, fmt.Errorf("embedding stage: %d pending nodes could not be embedded", round.Read)
		}
	}
}

// pendingNode is one node of the backlog.
type pendingNode struct {
	tenantID, id, outboxID int64
	textHash               string // what the projector wrote
	hash                   string // of this stage's model and the node's text
	text                   string
}

// RunOnce reads one batch of pending nodes, oldest first, and writes their
// vectors.
func (s *Stage) RunOnce(ctx context.Context) (Round, error) {
	var round Round
	if err := s.readBacklog(ctx); err != nil {
		return round, err
	}
	nodes, err := s.readPending(ctx)
	if err != nil {
		return round, err
	}
	round.Read = len(nodes)
	if len(nodes) == 0 {
		return round, nil
	}
	model := s.embedder.Model()
	// A node whose text hash is not this model's hash of its text (written
	// by a projector without an embedder, with another model, or by another
	// writer) gets this model's first, where it still holds that text: the
	// guard below compares against it.
	var remark []any
	for _, n := range nodes {
		if n.textHash != n.hash {
			remark = append(remark, map[string]any{graphmodel.KeyTenantID: n.tenantID, graphmodel.KeyID: n.id, "outbox_id": n.outboxID, "hash": n.hash})
		}
	}
	if len(remark) > 0 {
		applied, err := s.write(ctx, s.texts.mark, map[string]any{"rows": remark, "model": model, "dimension": int64(s.embedder.Dimension())})
		if err != nil {
			return round, fmt.Errorf("mark text hashes: %w", err)
		}
		round.Remarked = int(applied)
	}

	var back []any
	requeue := func(n pendingNode) {
		back = append(back, map[string]any{graphmodel.KeyTenantID: n.tenantID, graphmodel.KeyID: n.id, "outbox_id": n.outboxID, "hash": n.hash})
		round.refusedNodes = append(round.refusedNodes, nodeKey{n.tenantID, n.id})
	}
	fresh := nodes[:0:0]
	for _, n := range nodes {
		if s.refusedBefore(n) {
			requeue(n)
			round.KnownRefused++
			continue
		}
		fresh = append(fresh, n)
	}
	vectors, refused, err := s.vectors(ctx, fresh, &round)
	if err != nil {
		return round, err
	}
	rows := make([]any, 0, len(fresh))
	for _, n := range fresh {
		v, ok := vectors[n.hash]
		if !ok {
			if refused[n.hash] {
				s.remember(n, true)
				requeue(n)
			}
			continue
		}
		s.remember(n, false)
		vector := make([]float64, len(v))
		for i, f := range v {
			vector[i] = float64(f)
		}
		rows = append(rows, map[string]any{graphmodel.KeyTenantID: n.tenantID, graphmodel.KeyID: n.id, "hash": n.hash, "vector": vector})
	}
	if len(rows) > 0 {
		applied, err := s.write(ctx, s.texts.write, map[string]any{"rows": rows, "model": model})
		if err != nil {
			return round, fmt.Errorf("write vectors: %w", err)
		}
		round.Written = int(applied)
		round.Dropped = len(rows) - int(applied)
		s.metrics.written.Add(float64(round.Written))
		s.metrics.dropped.Add(float64(round.Dropped))
	}
	if len(back) > 0 {
		// A refused text goes to the back of the backlog (a fresh mark), so
		// it never holds up the nodes behind it.
		if _, err := s.write(ctx, s.texts.requeue, map[string]any{"rows": back}); err != nil {
			return round, fmt.Errorf("requeue refused texts: %w", err)
		}
		round.Refused = len(back)
	}
	return round, nil
}

// refusedBefore says whether the embedder refused n's present text before.
func (s *Stage) refusedBefore(n pendingNode) bool {
	s.refusals.Lock()
	defer s.refusals.Unlock()
	hash, ok := s.refusals.byNode[nodeKey{n.tenantID, n.id}]
	return ok && hash == n.hash
}

// remember records that the embedder refused n's text, or forgets that it
// did once n has a vector, and sets the refused-nodes gauge.
func (s *Stage) remember(n pendingNode, refused bool) {
	s.refusals.Lock()
	defer s.refusals.Unlock()
	key := nodeKey{n.tenantID, n.id}
	if refused {
		if s.refusals.byNode == nil {
			s.refusals.byNode = map[nodeKey]string{}
		}
		s.refusals.byNode[key] = n.hash
	} else {
		delete(s.refusals.byNode, key)
	}
	s.metrics.refused.Set(float64(len(s.refusals.byNode)))
}
