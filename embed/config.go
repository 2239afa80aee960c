package embed

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Kinds of embedder Open can make.
const (
	KindONNX   = "onnx"   // the local model (default)
	KindOpenAI = "openai" // an OpenAI-compatible /v1/embeddings server
	KindNone   = "none"   // no embeddings: Open returns a nil Embedder
)

// Defaults. The ONNX files are where scripts/model.sh (make model) puts
// them; the environment variables are the ones it writes to
// .local/models.env and the commands read for the flags below.
const (
	DefaultModel      = "all-minilm-l6-v2"
	DefaultMaxTokens  = 256
	DefaultBatchSize  = 32
	DefaultTimeout    = 30 * time.Second
	DefaultRetries    = 4
	DefaultRetryDelay = 250 * time.Millisecond
	onnxRuntimeDir    = "onnxruntime-1.29.0"

	EnvCache      = "GRAPHSYNC_CACHE"
	EnvModelDir   = "GRAPHSYNC_EMBED_MODEL_DIR"
	EnvRuntimeLib = "GRAPHSYNC_ONNXRUNTIME_LIB"
	EnvAPIKey     = "GRAPHSYNC_EMBED_API_KEY"
)

// Secret is a string that prints as [redacted] with every fmt verb, so that
// a Config logged whole shows no API key.
type Secret string

func (Secret) String() string   { return "[redacted]" }
func (Secret) GoString() string { return "[redacted]" }

// Config chooses and sets up an embedder. Every zero field takes its
// default (withDefaults).
type Config struct {
	// Kind is onnx, openai or none. Default onnx.
	Kind string

	// ModelDir holds model.onnx and tokenizer.json (onnx). Default
	// $GRAPHSYNC_EMBED_MODEL_DIR, else <cache>/embed/all-minilm-l6-v2 where
	// <cache> is $GRAPHSYNC_CACHE, else $XDG_CACHE_HOME/graphsync, else
	// ~/.cache/graphsync. Its base name is the model id (Model()).
	ModelDir string
	// RuntimeLib is ONNX Runtime's shared library (onnx). Default
	// $GRAPHSYNC_ONNXRUNTIME_LIB, else <cache>/onnxruntime-1.29.0/libonnxruntime.so.
	RuntimeLib string
	// MaxTokens cuts each text at this many word pieces, [CLS] and [SEP]
	// included (onnx). Default 256, sentence-transformers' limit for
	// all-MiniLM-L6-v2; the model takes at most 512.
	MaxTokens int
	// BatchSize is the number of texts per model run (onnx) or per request
	// (openai). Default 32.
	BatchSize int
	// Threads is ONNX Runtime's intra-op thread count (onnx). Default 0:
	// ONNX Runtime's own choice, one per core (sync passes half the cores:
	// SyncThreads).
	Threads int
	// Background runs the model (onnx) in a process of its own: this
	// binary started again in a session of its own at the lowest CPU
	// priority (nice 19, and its autogroup's where Linux has them), so
	// that every other process goes first. Linux shares the CPU between
	// scheduling groups (a cgroup, an autogroup) and then by nice value
	// within one. Sync sets it: its stage embeds beside the relay,
	// PostgreSQL and Neo4j (ADR 0032). The binary calls
	// ServeWorkerIfAsked first in main. Commands whose work waits for the
	// model leave it unset. Outside Linux the model runs in the process.
	Background bool
	// OnProcessLog, when set, is called with each line the model process
	// (Background) writes to its standard error: a crash, ONNX Runtime's
	// warnings. Sync logs them as its own. It is called from a goroutine
	// of each model process, so possibly from two at once while an ended
	// one's last lines are read: it must be safe for concurrent use.
	// Default: the lines go to this process's standard error as they are.
	OnProcessLog func(line string)

	// URL is the server's base URL, up to and including /v1 (openai):
	// requests go to URL + "/embeddings".
	URL string
	// Model is the model name sent to the server (openai); the embedder's
	// Model() is "openai:" + Model + "@" + the URL's host and path.
	Model string
	// APIKey is sent as a bearer token when set (openai). Default
	// $GRAPHSYNC_EMBED_API_KEY. It is never logged nor put in an error.
	APIKey Secret
	// Timeout bounds one request (openai). Default 30s.
	Timeout time.Duration
	// Retries is how many times a request that timed out or got a 5xx or
	// 429 is sent again, with doubling delays from RetryDelay (openai).
	// Default 4; negative means none.
	Retries int
	// RetryDelay is the first delay between retries (openai). Default 250ms.
	RetryDelay time.Duration
	// OnRetry, when set, is called with the error of each try that will be
	// tried again (openai), for a metric of retries. Default none.
	OnRetry func(error)
}

// CacheDir is where make model puts the model and runtime files.
func CacheDir() string {
	if dir := os.Getenv(EnvCache); dir != "" {
		return dir
	}
	if dir := os.Getenv("XDG_CACHE_HOME"); dir != "" {
		return filepath.Join(dir, "graphsync")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "graphsync-cache")
	}
	return filepath.Join(home, ".cache", "graphsync")
}

func (c Config) withDefaults() Config {
	if c.Kind == "" {
		c.Kind = KindONNX
	}
	if c.ModelDir == "" {
		c.ModelDir = os.Getenv(EnvModelDir)
	}
	if c.ModelDir == "" {
		c.ModelDir = filepath.Join(CacheDir(), "embed", DefaultModel)
	}
	if c.RuntimeLib == "" {
		c.RuntimeLib = os.Getenv(EnvRuntimeLib)
	}
	if c.RuntimeLib == "" {
		c.RuntimeLib = filepath.Join(CacheDir(), onnxRuntimeDir, "libonnxruntime.so")
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = DefaultMaxTokens
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.APIKey == "" {
		c.APIKey = Secret(os.Getenv(EnvAPIKey))
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Retries == 0 {
		c.Retries = DefaultRetries
	}
	if c.Retries < 0 {
		c.Retries = 0
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = DefaultRetryDelay
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	switch c.Kind {
	case KindONNX:
		if c.MaxTokens < 3 || c.MaxTokens > 512 {
			errs = append(errs, fmt.Errorf("embed max tokens %d: want 3 to 512 (the model's positions)", c.MaxTokens))
		}
		if c.Threads < 0 {
			errs = append(errs, fmt.Errorf("embed threads %d (--embed-threads): must not be negative", c.Threads))
		}
	case KindOpenAI:
		if c.URL == "" {
			errs = append(errs, errors.New("--embedder openai needs --embed-url (the server's base URL, e.g. http://127.0.0.1:8080/v1)"))
		} else if !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://") {
			// The value itself is not echoed: a URL written without its
			// scheme can still carry a user and password.
			errs = append(errs, errors.New("--embed-url: want an http:// or https:// URL"))
		}
		if c.Model == "" {
			errs = append(errs, errors.New("--embedder openai needs --embed-model (the model name the server serves)"))
		}
		if c.Timeout < 0 || c.RetryDelay < 0 {
			errs = append(errs, errors.New("embed timeout and retry delay must not be negative"))
		}
	case KindNone:
	default:
		errs = append(errs, fmt.Errorf("--embedder %q: want onnx, openai or none", c.Kind))
	}
	if c.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("embed batch size %d: must be positive", c.BatchSize))
	}
	return errors.Join(errs...)
}

// ErrConfig is wrapped by Open's errors about the Config itself (a usage
// mistake: the commands exit 2 on it, as on ErrModelFiles).
var ErrConfig = errors.New("embedder configuration")

// Open makes the embedder cfg names. For --embedder none it returns a nil
// Embedder and a nil error: callers check for nil and skip embedding.
// Missing or corrupt model files give an error of one line, wrapping
// ErrModelFiles, that names the file and the make target that fetches it.
func Open(cfg Config) (Embedder, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	switch cfg.Kind {
	case KindNone:
		return nil, nil
	case KindOpenAI:
		return openOpenAI(cfg)
	default:
		if cfg.Background {
			return openBackground(cfg)
		}
		return openONNX(cfg)
	}
}

// IsStartError reports whether err from Open means the command should stop
// at start with exit code 2: a configuration mistake or model files that
// are missing or corrupt. An unreachable embedding server is not one of
// them for a long-running command (ErrUnavailable: it retries), but Open
// returns it when the server does not answer its probe at all.
func IsStartError(err error) bool {
	return errors.Is(err, ErrConfig) || errors.Is(err, ErrModelFiles)
}

// RegisterFlags binds the embedder's flags to c, for sync, context,
// rebuild and drift alike. The commands fill a flag not given from
// GRAPHSYNC_<NAME> (GRAPHSYNC_EMBEDDER, GRAPHSYNC_EMBED_MODEL_DIR, ...);
// the API key is read from GRAPHSYNC_EMBED_API_KEY only, never a flag, so
// that it does not show in the process list.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Kind, "embedder", KindONNX, "onnx (local model, make model fetches it), openai (an OpenAI-compatible /v1/embeddings server) or none (env GRAPHSYNC_EMBEDDER)")
	fs.StringVar(&c.ModelDir, "embed-model-dir", "", "directory of model.onnx and tokenizer.json for --embedder onnx; default the make model cache (env GRAPHSYNC_EMBED_MODEL_DIR)")
	fs.StringVar(&c.RuntimeLib, "onnxruntime-lib", "", "path of libonnxruntime.so for --embedder onnx; default the make model cache (env GRAPHSYNC_ONNXRUNTIME_LIB)")
	fs.StringVar(&c.URL, "embed-url", "", "base URL of the embedding server up to /v1 for --embedder openai (env GRAPHSYNC_EMBED_URL); its key: env GRAPHSYNC_EMBED_API_KEY")
	fs.StringVar(&c.Model, "embed-model", "", "model name the embedding server serves, for --embedder openai (env GRAPHSYNC_EMBED_MODEL)")
	fs.IntVar(&c.BatchSize, "embed-batch-size", DefaultBatchSize, "texts per model run or server request (env GRAPHSYNC_EMBED_BATCH_SIZE)")
	fs.IntVar(&c.Threads, "embed-threads", 0, "ONNX Runtime threads for --embedder onnx; 0: one per core, but sync takes half the cores, leaving the rest to the relay (env GRAPHSYNC_EMBED_THREADS)")
}

// SyncThreads is the ONNX Runtime thread count sync uses when none is
// given (threads 0): half the cores the process may use (cores, from
// runtime.GOMAXPROCS, which follows a container's CPU limit), at least
// one; with two-way SMT that is at most the physical cores ONNX Runtime
// itself would take. Any other value is kept (a negative one for Open to
// refuse). The stage runs beside the relay, the projector, PostgreSQL and
// Neo4j; a model run on every core stalled their work, and sync's
// commit-to-graph p99 with it (ADR 0028). Rebuild, drift and context,
// whose work waits for the model, keep ONNX Runtime's choice.
func SyncThreads(threads, cores int) int {
	if threads != 0 {
		return threads
	}
	return max(1, cores/2)
}
