package main

import (
	"time"

	"graphsync/embed"
)

// openEmbedder opens the embedder the flags name: nil for --embedder none.
// Missing or corrupt model files and configuration mistakes are a usage
// error (exit 2) of one line naming the file and the make target.
func openEmbedder(cfg embed.Config) (embed.Embedder, time.Duration, error) {
	start := time.Now()
	e, err := embed.Open(cfg)
	if err != nil {
		if embed.IsStartError(err) {
			return nil, 0, usageError{err.Error()}
		}
		return nil, 0, err
	}
	return e, time.Since(start), nil
}
