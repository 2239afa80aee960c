//go:build cgo && !linux

package embed

// lowerPriority does nothing outside Linux, where a thread's priority is
// not its own: the model runs at the process's priority.
func lowerPriority() error { return nil }
