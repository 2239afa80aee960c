//go:build cgo

package embed

import (
	"fmt"
	"syscall"
)

// backgroundNice is the nice value of the lane's thread: the lowest
// priority, so that the CPU goes first to every other thread of its
// scheduling group that wants it.
const backgroundNice = 19

// lowerPriority sets the calling thread's nice value (Linux keeps one per
// thread; PRIO_PROCESS with a thread id changes only that thread).
func lowerPriority() error {
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), backgroundNice); err != nil {
		return fmt.Errorf("embed: lower the model thread's priority to nice %d: %w", backgroundNice, err)
	}
	return nil
}

// onMainThread reports whether the calling thread is the process's main
// thread (its thread id is the process id).
func onMainThread() bool { return syscall.Gettid() == syscall.Getpid() }
