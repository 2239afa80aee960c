package stage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap"

	"graphsync/embed"
	"graphsync/graphmodel"
	"graphsync/redact"
)

// readBacklog sets the pending and oldest-pending gauges.
func (s *Stage) readBacklog(ctx context.Context) error {
	res, err := neo4j.ExecuteQuery(ctx, s.driver, s.texts.backlog, s.scope(nil), neo4j.EagerResultTransformer,
		neo4j.ExecuteQueryWithDatabase(s.cfg.Database), neo4j.ExecuteQueryWithReadersRouting())
	if err != nil {
		s.metrics.errors.WithLabelValues(errNeo4j).Inc()
		return fmt.Errorf("read the embedding backlog: %w", err)
	}
	if len(res.Records) != 1 {
		return nil
	}
	pending, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "pending")
	s.metrics.pending.Set(float64(pending))
	oldest, isNil, _ := neo4j.GetRecordValue[int64](res.Records[0], "oldest")
	if isNil || pending == 0 {
		s.metrics.oldestPending.Set(0)
	} else {
		s.metrics.oldestPending.Set(max(0, time.Since(time.UnixMilli(oldest)).Seconds()))
	}
	return nil
}

// readPending reads one batch of pending nodes, oldest first.
func (s *Stage) readPending(ctx context.Context) ([]pendingNode, error) {
	res, err := neo4j.ExecuteQuery(ctx, s.driver, s.texts.pending, s.scope(map[string]any{"limit": int64(s.cfg.BatchSize)}),
		neo4j.EagerResultTransformer, neo4j.ExecuteQueryWithDatabase(s.cfg.Database), neo4j.ExecuteQueryWithReadersRouting())
	if err != nil {
		s.metrics.errors.WithLabelValues(errNeo4j).Inc()
		return nil, fmt.Errorf("read pending nodes: %w", err)
	}
	model := s.embedder.Model()
	nodes := make([]pendingNode, 0, len(res.Records))
	for _, rec := range res.Records {
		var n pendingNode
		n.tenantID, _, _ = neo4j.GetRecordValue[int64](rec, graphmodel.KeyTenantID)
		n.id, _, _ = neo4j.GetRecordValue[int64](rec, graphmodel.KeyID)
		n.outboxID, _, _ = neo4j.GetRecordValue[int64](rec, "outbox_id")
		n.textHash, _, _ = neo4j.GetRecordValue[string](rec, "text_hash")
		props, _, _ := neo4j.GetRecordValue[map[string]any](rec, "props")
		n.text = s.emb.Text(props)
		n.hash = graphmodel.EmbeddingHash(model, n.text)
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// vectors returns a vector per distinct text hash of nodes: from the
// cache, else from the embedder (and then cached). refused holds the hashes
// whose text the embedder refused. An unavailable embedder is an error
// (the caller backs off); the cache failing is counted and passed over.
func (s *Stage) vectors(ctx context.Context, nodes []pendingNode, round *Round) (vectors map[string][]float32, refused map[string]bool, err error) {
	texts := map[string]string{}
	var hashes []string
	for _, n := range nodes {
		if _, seen := texts[n.hash]; !seen {
			texts[n.hash] = n.text
			hashes = append(hashes, n.hash)
		}
	}
	model, dimension := s.embedder.Model(), s.embedder.Dimension()
	vectors = map[string][]float32{}
	if s.cache != nil {
		cached, err := s.cache.Get(ctx, model, hashes)
		if err != nil {
			s.metrics.errors.WithLabelValues(errCache).Inc()
			s.log.Warn("embedding cache unreadable; embedding without it", zap.String("error", redact.Text(err.Error())))
		}
		for h, v := range cached {
			if len(v) == dimension {
				vectors[h] = v
			}
		}
	}
	round.Cached = len(vectors)
	s.metrics.embeddings.WithLabelValues("cache").Add(float64(round.Cached))
	var missing []string
	for _, h := range hashes {
		if _, ok := vectors[h]; !ok {
			missing = append(missing, h)
		}
	}
	if len(missing) == 0 {
		return vectors, nil, nil
	}
	fresh := map[string][]float32{}
	refused = map[string]bool{}
	embedStart := time.Now()
	err = s.embed(ctx, missing, texts, fresh, refused)
	round.EmbedTook = time.Since(embedStart)
	if err != nil {
		return nil, nil, err
	}
	round.Embedded = len(fresh)
	s.metrics.embeddings.WithLabelValues("model").Add(float64(len(fresh)))
	if s.cache != nil {
		if err := s.cache.Put(ctx, model, dimension, fresh); err != nil {
			s.metrics.errors.WithLabelValues(errCache).Inc()
			s.log.Warn("embedding cache not written", zap.String("error", redact.Text(err.Error())))
		}
	}
	for h, v := range fresh {
		vectors[h] = v
	}
	return vectors, refused, nil
}

// embed embeds the texts of hashes into fresh. When the embedder refuses
// the batch (not as unavailable), it is halved down to the text it refuses,
// which goes into refused: one bad text costs only itself.
func (s *Stage) embed(ctx context.Context, hashes []string, texts map[string]string, fresh map[string][]float32, refused map[string]bool) error {
	batch := make([]string, len(hashes))
	for i, h := range hashes {
		batch[i] = texts[h]
	}
	out, err := s.embedder.Embed(ctx, batch)
	if err == nil && len(out) != len(batch) {
		err = fmt.Errorf("embedder answered %d vectors for %d texts", len(out), len(batch))
	}
	if err == nil {
		for _, v := range out {
			if len(v) != s.embedder.Dimension() {
				err = fmt.Errorf("embedder answered a vector of %d floats, want %d", len(v), s.embedder.Dimension())
				break
			}
		}
	}
	switch {
	case err == nil:
		for i, h := range hashes {
			fresh[h] = out[i]
		}
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, embed.ErrUnavailable):
		s.metrics.errors.WithLabelValues(errUnavailable).Inc()
		return fmt.Errorf("embed %d texts: %w", len(batch), err)
	case len(hashes) == 1:
		s.metrics.errors.WithLabelValues(errText).Inc()
		s.log.Warn("the embedder refused a text; it goes to the back of the backlog",
			zap.Int("text_bytes", len(batch[0])), zap.String("error", redact.Text(err.Error())))
		refused[hashes[0]] = true
		return nil
	}
	half := len(hashes) / 2
	if err := s.embed(ctx, hashes[:half], texts, fresh, refused); err != nil {
		return err
	}
	return s.embed(ctx, hashes[half:], texts, fresh, refused)
}

// write runs text with params in one write transaction and returns its
// applied count.
func (s *Stage) write(ctx context.Context, text string, params map[string]any) (int64, error) {
	session := s.driver.NewSession(ctx, neo4j.SessionConfig{DatabaseName: s.cfg.Database, AccessMode: neo4j.AccessModeWrite})
	defer session.Close(ctx)
	applied, err := neo4j.ExecuteWrite(ctx, session, func(tx neo4j.ManagedTransaction) (int64, error) {
		res, err := tx.Run(ctx, text, params)
		if err != nil {
			return 0, err
		}
		rec, err := res.Single(ctx)
		if err != nil {
			return 0, err
		}
		n, _, err := neo4j.GetRecordValue[int64](rec, "applied")
		return n, err
	})
	if err != nil {
		s.metrics.errors.WithLabelValues(errNeo4j).Inc()
	}
	return applied, err
}

// scope adds the stage's tenants to params ($tenants: null for all).
func (s *Stage) scope(params map[string]any) map[string]any {
	if params == nil {
		params = map[string]any{}
	}
	params["tenants"] = nil
	if s.cfg.Tenants != nil {
		params["tenants"] = s.cfg.Tenants
	}
	return params
}
