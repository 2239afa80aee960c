package stage_test

import (
	"context"
	"crypto/sha256"
	"math"

	"graphsync/embed"
)

// openTestEmbedder: TEMPORARY until package embed's ONNX model lands on
// this branch; replaced by embed.Open with the real model.
func openTestEmbedder() (embed.Embedder, error) { return hashEmbedder{}, nil }

type hashEmbedder struct{}

func (hashEmbedder) Model() string  { return "hash-test" }
func (hashEmbedder) Dimension() int { return 8 }
func (hashEmbedder) Close() error   { return nil }
func (hashEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		sum := sha256.Sum256([]byte(t))
		v := make([]float32, 8)
		var norm float64
		for j := range v {
			v[j] = float32(sum[j]) - 127.5
			norm += float64(v[j]) * float64(v[j])
		}
		for j := range v {
			v[j] /= float32(math.Sqrt(norm))
		}
		out[i] = v
	}
	return out, nil
}
