package projector

import (
	"errors"
	"fmt"
	"time"

	"graphsync/events"
	"graphsync/graphmodel"
)

// Config tunes a Projector. The zero value is ready to use.
type Config struct {
	// Database is the Neo4j database written to. Default: "" (the server's
	// default database; Community edition has only one).
	Database string
	// Model is the graph model. Default: graphmodel.Default.
	Model *graphmodel.Model
	// MetricsNamespace prefixes the metric names. Default: "graphsync".
	MetricsNamespace string
	// TxTimeout bounds each Neo4j write transaction on the server, so a
	// transaction stuck behind someone else's lock is given up instead of
	// holding its rows' lease forever. A timeout is suspect (docs/adr/0006):
	// the relay retries the batch in halves, uncounted, and a single event
	// that still times out counts an attempt, so one that always times out
	// reaches the DLQ instead of stalling the relay. Default: 60s.
	TxTimeout time.Duration
	// Limits bound one event (payload size, order lines); an event over a
	// limit is rejected with the limit named. Defaults: events.Limits'.
	Limits events.Limits
	// EmbeddingModel is the embedder's model id when embeddings are on:
	// upserts of the model's embedded label then write the hash of their
	// text and mark the node pending for the embedding stage (ADR 0023);
	// nothing is embedded in the projector's transaction. Default: "",
	// embeddings off, the statements of before.
	EmbeddingModel string
}

func (c Config) withDefaults() Config {
	if c.Model == nil {
		c.Model = &graphmodel.Default
	}
	if c.MetricsNamespace == "" {
		c.MetricsNamespace = "graphsync"
	}
	if c.TxTimeout == 0 {
		c.TxTimeout = time.Minute
	}
	c.Limits = c.Limits.WithDefaults()
	return c
}

func (c Config) validate() error {
	if c.Model == nil {
		return errors.New("projector config: no graph model")
	}
	if c.TxTimeout < 0 {
		return errors.New("projector config: negative transaction timeout")
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("projector config: %w", err)
	}
	return nil
}
