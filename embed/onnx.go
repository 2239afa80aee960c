//go:build cgo

package embed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
)

// Files of a model directory, as scripts/model.sh lays them out.
const (
	modelFileName     = "model.onnx"
	tokenizerFileName = "tokenizer.json"
)

// The ONNX Runtime environment is one per process (onnxruntime_go keeps it
// in package state): the first ONNX embedder loads the library, the last
// Close releases it.
var runtimeState struct {
	mu      sync.Mutex
	users   int
	libPath string
}

func acquireRuntime(libPath string) error {
	runtimeState.mu.Lock()
	defer runtimeState.mu.Unlock()
	if runtimeState.users > 0 {
		if runtimeState.libPath != libPath {
			return fmt.Errorf("ONNX Runtime already loaded from %s, cannot load %s too", runtimeState.libPath, libPath)
		}
		runtimeState.users++
		return nil
	}
	if _, err := os.Stat(libPath); err != nil {
		return missingFileError(libPath, err)
	}
	ort.SetSharedLibraryPath(libPath)
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		return corruptFileError(libPath, err)
	}
	runtimeState.users, runtimeState.libPath = 1, libPath
	return nil
}

func releaseRuntime() error {
	runtimeState.mu.Lock()
	defer runtimeState.mu.Unlock()
	runtimeState.users--
	if runtimeState.users > 0 {
		return nil
	}
	if err := ort.DestroyEnvironment(); err != nil {
		return fmt.Errorf("release ONNX Runtime: %w", err)
	}
	return nil
}

// onnxEmbedder runs a BERT-family sentence-embedding model (input_ids,
// attention_mask, token_type_ids in; last_hidden_state out) with ONNX
// Runtime: mean pooling over the attention mask, then L2 normalisation, as
// sentence-transformers' all-MiniLM-L6-v2 pipeline does.
type onnxEmbedder struct {
	model     string
	dimension int
	batchSize int
	words     *wordPiece
	session   *ort.DynamicAdvancedSession
	withTypes bool     // the model takes token_type_ids
	inputs    []string // the model's input names, in its order
	// closeMu: Close waits for the batches in flight (read lock each) and
	// later Embed calls fail instead of touching a released session.
	closeMu sync.RWMutex
	closed  bool
}

// checkModelFiles checks every file before anything is loaded, so that the
// first line names the first missing file, whichever it is.
func checkModelFiles(cfg Config) error {
	for _, path := range []string{filepath.Join(cfg.ModelDir, modelFileName), filepath.Join(cfg.ModelDir, tokenizerFileName), cfg.RuntimeLib} {
		if _, err := os.Stat(path); err != nil {
			return missingFileError(path, err)
		}
	}
	return nil
}

func openONNX(cfg Config) (_ Embedder, err error) {
	if err := checkModelFiles(cfg); err != nil {
		return nil, err
	}
	modelPath := filepath.Join(cfg.ModelDir, modelFileName)
	tokenizerPath := filepath.Join(cfg.ModelDir, tokenizerFileName)
	words, err := newWordPiece(tokenizerPath, cfg.MaxTokens)
	if err != nil {
		return nil, err
	}
	if err := acquireRuntime(cfg.RuntimeLib); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = releaseRuntime()
		}
	}()
	inputs, outputs, err := ort.GetInputOutputInfo(modelPath)
	if err != nil {
		return nil, corruptFileError(modelPath, err)
	}
	inputNames := make([]string, 0, len(inputs))
	withTypes := false
	for _, in := range inputs {
		switch in.Name {
		case "input_ids", "attention_mask":
		case "token_type_ids":
			withTypes = true
		default:
			return nil, corruptFileError(modelPath, fmt.Errorf("unexpected input %q", in.Name))
		}
		inputNames = append(inputNames, in.Name)
	}
	if len(outputs) == 0 || len(outputs[0].Dimensions) != 3 || outputs[0].Dimensions[2] <= 0 {
		return nil, corruptFileError(modelPath, fmt.Errorf("want an output [batch, tokens, dimension], model has %v", outputs))
	}
	options, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("ONNX Runtime session options: %w", err)
	}
	defer options.Destroy()
	// ONNX Runtime's threads spin after each run, waiting for the next, by
	// default: CPU that sync's projector, PostgreSQL and Neo4j on the same
	// cores need (ADR 0028). They sleep instead.
	for _, key := range []string{"session.intra_op.allow_spinning", "session.inter_op.allow_spinning"} {
		if err := options.AddSessionConfigEntry(key, "0"); err != nil {
			return nil, fmt.Errorf("ONNX Runtime %s: %w", key, err)
		}
	}
	if cfg.Threads > 0 {
		if err := options.SetIntraOpNumThreads(cfg.Threads); err != nil {
			return nil, fmt.Errorf("ONNX Runtime threads: %w", err)
		}
	}
	session, err := ort.NewDynamicAdvancedSession(modelPath, inputNames, []string{outputs[0].Name}, options)
	if err != nil {
		return nil, corruptFileError(modelPath, err)
	}
	return &onnxEmbedder{
		model:     filepath.Base(filepath.Clean(cfg.ModelDir)),
		dimension: int(outputs[0].Dimensions[2]),
		batchSize: cfg.BatchSize,
		words:     words,
		session:   session,
		withTypes: withTypes,
		inputs:    inputNames,
	}, nil
}

func (e *onnxEmbedder) Model() string  { return e.model }
func (e *onnxEmbedder) Dimension() int { return e.dimension }

func (e *onnxEmbedder) Close() error {
	e.closeMu.Lock()
	defer e.closeMu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	err := e.session.Destroy()
	return errors.Join(err, releaseRuntime())
}

// Embed tokenizes every text, sorts them by length so that a batch pads
// little, and runs the model batchSize texts at a time.
func (e *onnxEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	if len(texts) == 0 {
		return out, nil
	}
	ids := make([][]int64, len(texts))
	for i, text := range texts {
		encoded, err := e.words.encode(text)
		if err != nil {
			return nil, fmt.Errorf("embed text %d: %w", i, err)
		}
		ids[i] = encoded
	}
	order := make([]int, len(texts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(ids[a]) - len(ids[b]) })
	for start := 0; start < len(order); start += e.batchSize {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		batch := order[start:min(start+e.batchSize, len(order))]
		batchIDs := make([][]int64, len(batch))
		for j, i := range batch {
			batchIDs[j] = ids[i]
		}
		vectors, err := e.run(batchIDs)
		if err != nil {
			return nil, err
		}
		for j, i := range batch {
			out[i] = vectors[j]
		}
	}
	return out, nil
}

// run embeds one batch, padded to its longest text.
func (e *onnxEmbedder) run(batch [][]int64) ([][]float32, error) {
	e.closeMu.RLock()
	defer e.closeMu.RUnlock()
	if e.closed {
		return nil, errors.New("embed: embedder is closed")
	}
	rows, cols := len(batch), 0
	for _, ids := range batch {
		cols = max(cols, len(ids))
	}
	inputIDs := make([]int64, rows*cols)
	mask := make([]int64, rows*cols)
	for r, ids := range batch {
		copy(inputIDs[r*cols:], ids)
		for c := range ids {
			mask[r*cols+c] = 1
		}
	}
	shape := ort.NewShape(int64(rows), int64(cols))
	idsTensor, err := ort.NewTensor(shape, inputIDs)
	if err != nil {
		return nil, fmt.Errorf("embed: input tensor: %w", err)
	}
	defer idsTensor.Destroy()
	maskTensor, err := ort.NewTensor(shape, mask)
	if err != nil {
		return nil, fmt.Errorf("embed: mask tensor: %w", err)
	}
	defer maskTensor.Destroy()
	inputs := []ort.Value{idsTensor, maskTensor}
	if e.withTypes {
		typesTensor, err := ort.NewTensor(shape, make([]int64, rows*cols))
		if err != nil {
			return nil, fmt.Errorf("embed: token type tensor: %w", err)
		}
		defer typesTensor.Destroy()
		inputs = append(inputs, typesTensor)
	}
	outputs := []ort.Value{nil}
	if err := e.session.Run(e.ordered(inputs), outputs); err != nil {
		return nil, fmt.Errorf("embed: run model: %w", err)
	}
	defer outputs[0].Destroy()
	hidden, ok := outputs[0].(*ort.Tensor[float32])
	if !ok {
		return nil, fmt.Errorf("embed: model output is %T, want float32 tensor", outputs[0])
	}
	outShape := hidden.GetShape()
	if len(outShape) != 3 || outShape[0] != int64(rows) || outShape[1] != int64(cols) || outShape[2] != int64(e.dimension) {
		return nil, fmt.Errorf("embed: model output shape %v, want [%d %d %d]", outShape, rows, cols, e.dimension)
	}
	return meanPoolNormalize(hidden.GetData(), batch, cols, e.dimension), nil
}

// ordered puts the input tensors in the order of the session's input names
// (ids, mask, types as built by run).
func (e *onnxEmbedder) ordered(built []ort.Value) []ort.Value {
	byName := map[string]ort.Value{"input_ids": built[0], "attention_mask": built[1]}
	if len(built) > 2 {
		byName["token_type_ids"] = built[2]
	}
	ordered := make([]ort.Value, len(e.inputs))
	for i, name := range e.inputs {
		ordered[i] = byName[name]
	}
	return ordered
}

// meanPoolNormalize averages each text's token vectors over its real
// tokens (the attention mask) and scales the mean to unit length.
func meanPoolNormalize(hidden []float32, batch [][]int64, cols, dimension int) [][]float32 {
	vectors := make([][]float32, len(batch))
	sum := make([]float64, dimension)
	for r, ids := range batch {
		clear(sum)
		for c := range ids {
			token := hidden[(r*cols+c)*dimension : (r*cols+c+1)*dimension]
			for d, v := range token {
				sum[d] += float64(v)
			}
		}
		var norm float64
		for d := range sum {
			sum[d] /= float64(len(ids))
			norm += sum[d] * sum[d]
		}
		norm = math.Sqrt(norm)
		// sentence-transformers' Normalize divides by max(norm, 1e-12).
		norm = max(norm, 1e-12)
		vector := make([]float32, dimension)
		for d := range sum {
			vector[d] = float32(sum[d] / norm)
		}
		vectors[r] = vector
	}
	return vectors
}
