//go:build cgo

package embed

import "runtime"

// lane runs functions one at a time on an operating-system thread of its
// own at the lowest CPU priority (nice 19). The model runs there when
// Config.Background is set: sync's stage embeds beside the relay and the
// projector, whose threads then go first in the process's share of the
// CPU, and the model's backlog waits (ADR 0029).
type lane struct {
	calls chan func()
	done  chan struct{}
}

// startLane starts the lane's thread and lowers its priority. A priority
// that cannot be lowered (a sandbox that forbids setpriority) leaves the
// lane at the process's priority: the model still runs, and err says why
// it runs there (BackgroundError).
func startLane() (l *lane, err error) {
	l = &lane{calls: make(chan func()), done: make(chan struct{})}
	started := make(chan error, 1)
	go l.serve(started, nil)
	return l, <-started
}

// serve locks the goroutine to its thread for good (the thread, with its
// priority, ends with the goroutine instead of going back to Go's pool),
// lowers its priority and runs the calls. Go never ends the main thread
// (it parks it), so a lane there would leave nice 19 on it, the thread
// ps and renice show for the process: a serve that finds itself on the
// main thread starts the lane again while it holds that thread, so the
// new one lands elsewhere, then gives the main thread back. moved, when
// set, is closed once this serve holds a thread that is not the main one.
func (l *lane) serve(started chan<- error, moved chan<- struct{}) {
	runtime.LockOSThread()
	if onMainThread() {
		elsewhere := make(chan struct{})
		go l.serve(started, elsewhere)
		<-elsewhere
		runtime.UnlockOSThread()
		return
	}
	if moved != nil {
		close(moved)
	}
	defer close(l.done)
	started <- lowerPriority()
	for call := range l.calls {
		call()
	}
}

// do runs f on the lane's thread and returns when it has.
func (l *lane) do(f func()) {
	finished := make(chan struct{})
	l.calls <- func() {
		defer close(finished)
		f()
	}
	<-finished
}

// stop ends the lane's thread once the call in flight returns.
func (l *lane) stop() {
	close(l.calls)
	<-l.done
}
