// Package embed owns the embedder seam of graphsync: texts in, vectors out.
// It holds the interface, its implementations (the local ONNX model by
// default, an OpenAI-compatible /v1/embeddings client) and the choice between
// them. It knows nothing of PostgreSQL, Neo4j or which graph properties are
// embedded: graphmodel declares the embedded text, and the embedding stage
// decides when to embed.
package embed

import (
	"context"
	"errors"
)

// Embedder turns texts into vectors. Implementations are safe for concurrent
// use.
type Embedder interface {
	// Embed returns one vector per text, in the order given, each of
	// Dimension() floats and L2-normalised. An empty slice gives an empty
	// result. A text the model cannot take whole is cut at the model's token
	// limit; an empty text still gets a vector.
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	// Model names the model and its variant so that a vector stored with it
	// can be told apart from one of another model ("all-minilm-l6-v2-q").
	Model() string
	// Dimension is the length of every vector Embed returns.
	Dimension() int
	// Close releases the model.
	Close() error
}

// ErrUnavailable is wrapped by errors of an embedder that cannot answer now
// (a server that times out or is down); the caller retries later. Any other
// error means the input or the answer was bad.
var ErrUnavailable = errors.New("embedder unavailable")

// BackgroundError says why an embedder opened with Config.Background runs
// its model at the usual priority instead of the lowest: the operating
// system refused to lower the model process's (or its latest one's), or,
// outside Linux, the model runs in this process. nil when it runs as
// asked, or for an embedder without a local model.
func BackgroundError(e Embedder) error {
	if b, ok := e.(interface{ backgroundError() error }); ok {
		return b.backgroundError()
	}
	return nil
}
