package embed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

// ErrBadAnswer is wrapped by errors about an embedding server's answer that
// cannot be used (not JSON, too few or too many vectors, a vector of
// another dimension). Such an answer is retried like a timeout; when the
// last try is one too, the error wraps ErrBadAnswer, not ErrUnavailable:
// the same texts may well get the same answer again.
var ErrBadAnswer = errors.New("embedding server answer unusable")

// maxAnswerBytes bounds the body read from the server: 64 texts of 4096
// floats printed at 25 bytes take 6.5 MB.
const maxAnswerBytes = 64 << 20

// probeText is embedded at Open to learn the server's dimension.
const probeText = "graphsync dimension probe"

// openAIEmbedder calls an OpenAI-compatible POST {URL}/embeddings (OpenAI,
// Azure OpenAI's compatible endpoint, vLLM, llama.cpp's server, Ollama's
// /v1, text-embeddings-inference, LiteLLM...).
type openAIEmbedder struct {
	client     *http.Client
	endpoint   string // the request URL: the base URL's user info and query kept
	shown      string // the endpoint as errors name it: no user info, no query
	model      string
	modelID    string
	apiKey     Secret
	batchSize  int
	timeout    time.Duration
	retries    int
	retryDelay time.Duration
	onRetry    func(error)
	dimension  int
}

func openOpenAI(cfg Config) (Embedder, error) {
	e := &openAIEmbedder{
		client:     &http.Client{},
		model:      cfg.Model,
		apiKey:     cfg.APIKey,
		batchSize:  cfg.BatchSize,
		timeout:    cfg.Timeout,
		retries:    cfg.Retries,
		retryDelay: cfg.RetryDelay,
		onRetry:    cfg.OnRetry,
	}
	base, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("--embed-url: not a URL (%s)", oneLine(strings.ReplaceAll(err.Error(), cfg.URL, "…")))
	}
	// Without empty and dot segments or a trailing slash: the same server
	// however the URL spells it (serverID).
	base.Path = strings.TrimRight(path.Clean("/"+base.Path), "/")
	base.RawPath = ""
	e.modelID = "openai:" + e.model + "@" + serverID(base)
	base.Path += "/embeddings"
	e.endpoint = base.String()
	e.shown = base.Scheme + "://" + base.Host + base.EscapedPath()
	// The dimension is the model's: read from its first answer, so that a
	// vector index is made for what the server really returns.
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout*time.Duration(cfg.Retries+1)+cfg.RetryDelay<<cfg.Retries)
	defer cancel()
	vectors, err := e.request(ctx, []string{probeText})
	if err != nil {
		return nil, fmt.Errorf("embedding server %s, model %q: first request: %w", e.shown, e.model, err)
	}
	e.dimension = len(vectors[0])
	return e, nil
}

// Model names the model and the server that serves it,
// "openai:NAME@HOST/PATH": two servers may serve different weights under
// one name, and a vector (in the graph, in the cache) must say whose it
// is. The URL's user info, query and fragment (credentials, an
// api-version) stay out: the id is stored and shown.
func (e *openAIEmbedder) Model() string { return e.modelID }

// serverID is the HOST/PATH of base (its path cleaned by Open) in the
// model id, the same however the URL spells one server: the host in lower
// case and without the scheme's default port (or an empty one). Another
// spelling would be another model, and every vector would be embedded
// again.
func serverID(base *url.URL) string {
	host := strings.TrimSuffix(strings.ToLower(base.Host), ":") // an empty port
	switch {
	case base.Scheme == "http" && strings.HasSuffix(host, ":80"):
		host = strings.TrimSuffix(host, ":80")
	case base.Scheme == "https" && strings.HasSuffix(host, ":443"):
		host = strings.TrimSuffix(host, ":443")
	}
	return host + base.EscapedPath()
}

func (e *openAIEmbedder) Dimension() int { return e.dimension }
func (e *openAIEmbedder) Close() error {
	e.client.CloseIdleConnections()
	return nil
}

func (e *openAIEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += e.batchSize {
		batch := texts[start:min(start+e.batchSize, len(texts))]
		vectors, err := e.request(ctx, batch)
		if err != nil {
			return nil, fmt.Errorf("embedding server %s: texts %d to %d: %w", e.shown, start, start+len(batch)-1, err)
		}
		out = append(out, vectors...)
	}
	return out, nil
}

// request sends one batch, trying again after a timeout, a refused
// connection, a 429 or 5xx status or an unusable answer, with doubling
// delays; other statuses (400, 401, 404...) are not retried.
func (e *openAIEmbedder) request(ctx context.Context, texts []string) ([][]float32, error) {
	body, err := json.Marshal(map[string]any{"model": e.model, "input": texts, "encoding_format": "float"})
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	delay := e.retryDelay
	for attempt := 0; ; attempt++ {
		vectors, err := e.attempt(ctx, body, len(texts))
		if err == nil {
			return vectors, nil
		}
		retryable := errors.Is(err, ErrUnavailable) || errors.Is(err, ErrBadAnswer)
		if !retryable || attempt >= e.retries || ctx.Err() != nil {
			if attempt > 0 {
				return nil, fmt.Errorf("after %d tries: %w", attempt+1, err)
			}
			return nil, err
		}
		if e.onRetry != nil {
			e.onRetry(err)
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-timer.C:
		}
		delay *= 2
	}
}

// attempt is one POST. Its errors never hold the API key, nor the texts,
// nor the server's error text (which may quote them).
func (e *openAIEmbedder) attempt(ctx context.Context, body []byte, count int) ([][]float32, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if e.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+string(e.apiKey))
	}
	resp, err := e.client.Do(req)
	if err != nil {
		// A timeout, a refused or reset connection: the server may answer
		// later. The URL error names only the endpoint.
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, transportProblem(err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read answer: %s", ErrUnavailable, transportProblem(err))
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return nil, fmt.Errorf("%w: status %d%s", ErrUnavailable, resp.StatusCode, errorCode(raw))
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("embedding request refused: status %d%s", resp.StatusCode, errorCode(raw))
	case len(raw) > maxAnswerBytes:
		return nil, fmt.Errorf("%w: answer larger than %d bytes", ErrBadAnswer, maxAnswerBytes)
	}
	return decodeAnswer(raw, count, e.dimension)
}

// decodeAnswer checks an answer: count vectors, indexes 0..count-1 once
// each, every vector of dimension floats (of one length when dimension is
// still 0), finite and not all zero. Vectors come back L2-normalised.
func decodeAnswer(raw []byte, count, dimension int) ([][]float32, error) {
	var answer struct {
		Data []struct {
			Index     *int      `json:"index"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		return nil, fmt.Errorf("%w: not the JSON of an embeddings answer (%d bytes)", ErrBadAnswer, len(raw))
	}
	if len(answer.Data) != count {
		return nil, fmt.Errorf("%w: %d vectors for %d texts", ErrBadAnswer, len(answer.Data), count)
	}
	if dimension == 0 {
		dimension = len(answer.Data[0].Embedding)
	}
	vectors := make([][]float32, count)
	for i, item := range answer.Data {
		index := i
		if item.Index != nil {
			index = *item.Index
		}
		if index < 0 || index >= count || vectors[index] != nil {
			return nil, fmt.Errorf("%w: vector index %d out of place for %d texts", ErrBadAnswer, index, count)
		}
		if len(item.Embedding) == 0 || len(item.Embedding) != dimension {
			return nil, fmt.Errorf("%w: vector %d has %d floats, want %d", ErrBadAnswer, index, len(item.Embedding), dimension)
		}
		var norm float64
		for _, x := range item.Embedding {
			norm += x * x
		}
		norm = math.Sqrt(norm)
		if norm == 0 || math.IsInf(norm, 0) || math.IsNaN(norm) {
			return nil, fmt.Errorf("%w: vector %d has length %v", ErrBadAnswer, index, norm)
		}
		vector := make([]float32, len(item.Embedding))
		for d, x := range item.Embedding {
			vector[d] = float32(x / norm)
		}
		vectors[index] = vector
	}
	return vectors, nil
}

// transportProblem says what went wrong with the connection without the
// URL's query or user info: a timeout or the network error's last part.
func transportProblem(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	if errors.Is(err, context.Canceled) {
		return "cancelled"
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return oneLine(msg)
}

// errorCode is the machine-readable part of an OpenAI-style error body
// ({"error": {"type": ..., "code": ...}}), never its message, which may
// quote the input.
func errorCode(raw []byte) string {
	var body struct {
		Error struct {
			Type string `json:"type"`
			Code any    `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &body) != nil {
		return ""
	}
	var parts []string
	if body.Error.Type != "" {
		parts = append(parts, "type "+oneLine(body.Error.Type))
	}
	if code, ok := body.Error.Code.(string); ok && code != "" {
		parts = append(parts, "code "+oneLine(code))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
