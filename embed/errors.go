package embed

import (
	"errors"
	"fmt"
	"os"
)

// FetchTarget is the make target that downloads the model and the runtime
// library; every error about a missing or corrupt model file names it.
const FetchTarget = "make model"

// ErrModelFiles is wrapped by Open's errors about a model, tokenizer or
// runtime library file that is missing or cannot be loaded. The commands
// exit 2 on it (a start error: nothing was read or written).
var ErrModelFiles = errors.New("embedding model files")

// modelFileError is one line: the file, what is wrong with it, and the make
// target that fetches it.
type modelFileError struct {
	path    string
	problem string
	cause   error
}

func (e *modelFileError) Error() string {
	return fmt.Sprintf("embedding %s %s: run `%s` to fetch it, or use --embedder none", e.path, e.problem, FetchTarget)
}

func (e *modelFileError) Unwrap() []error { return []error{ErrModelFiles, e.cause} }

func missingFileError(path string, cause error) error {
	if errors.Is(cause, os.ErrNotExist) {
		return &modelFileError{path: path, problem: "is missing", cause: cause}
	}
	return &modelFileError{path: path, problem: "cannot be read (" + oneLine(cause.Error()) + ")", cause: cause}
}

func corruptFileError(path string, cause error) error {
	return &modelFileError{path: path, problem: "is corrupt (" + oneLine(cause.Error()) + ")", cause: cause}
}

// oneLine keeps an error of a native library on one line and short.
func oneLine(s string) string {
	const maxLen = 200
	out := make([]rune, 0, len(s))
	for _, r := range s {
		if r == '\n' || r == '\r' || r == '\t' {
			r = ' '
		}
		out = append(out, r)
		if len(out) >= maxLen {
			out = append(out, '…')
			break
		}
	}
	return string(out)
}
