package embed

import "errors"

func openOpenAI(cfg Config) (Embedder, error) {
	return nil, errors.New("embed: openai embedder not built yet")
}
