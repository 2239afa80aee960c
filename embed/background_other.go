//go:build !cgo || !linux

package embed

import "errors"

// ServeWorkerIfAsked returns at once: the model process needs Linux (and
// cgo, for the local model).
func ServeWorkerIfAsked() {}

// openBackground opens the local model in this process, at its priority:
// outside Linux no model process is started (ADR 0032).
func openBackground(cfg Config) (Embedder, error) {
	e, err := openONNX(cfg)
	if err != nil {
		return nil, err
	}
	return inProcess{e}, nil
}

// inProcess is the local model in this process, said to BackgroundError.
type inProcess struct{ Embedder }

func (inProcess) backgroundError() error {
	return errors.New("embed: a model process at the lowest priority needs Linux; the model runs in this process, at its priority")
}
