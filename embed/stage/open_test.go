package stage_test

import "graphsync/embed"

// openTestEmbedder opens the real local model (make model fetches it).
func openTestEmbedder() (embed.Embedder, error) { return embed.Open(embed.Config{}) }
