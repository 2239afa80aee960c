//go:build cgo && !linux

package embed

import "errors"

// lowerPriority cannot lower one thread's priority outside Linux (nice is
// per thread only there), so the model runs at the process's priority and
// sync says so at start.
func lowerPriority() error {
	return errors.New("embed: a thread of its own at nice 19 needs Linux; the model runs at the process's priority")
}

// onMainThread is false: outside Linux the lane's thread keeps the
// process's priority, so the main thread has nothing to lose.
func onMainThread() bool { return false }
