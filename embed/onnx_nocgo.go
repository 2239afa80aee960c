//go:build !cgo

package embed

import "fmt"

// openONNX without cgo: onnxruntime_go needs it, so a binary built with
// CGO_ENABLED=0 (the Docker image) has no local model; the openai and
// none embedders work as usual.
func openONNX(Config) (Embedder, error) {
	return nil, fmt.Errorf("%w: this graphsync was built without cgo, so the local ONNX embedder is not in it: use --embedder openai or none, or build with CGO_ENABLED=1", ErrConfig)
}
