package main

import (
	"bytes"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SIGTERM while sync is still connecting is a stop, as README says of a
// stop: exit 0 and a line saying it stopped before it started relaying,
// not exit 1 with "cannot reach PostgreSQL: context canceled". The
// "PostgreSQL" here accepts connections and never answers, so start-up is
// held at the connection for as long as the test needs.
func TestStopDuringStartUpExitsZero(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			accepted <- conn
		}
	}()
	defer func() {
		for {
			select {
			case conn := <-accepted:
				conn.Close()
			default:
				return
			}
		}
	}()
	child := startMain(t, []string{"sync", "--pg-url", "postgres://graphsync@" + listener.Addr().String() + "/x?sslmode=disable",
		"--neo4j-uri", "bolt://127.0.0.1:1", "--http-addr", ""})
	select {
	case conn := <-accepted: // connecting: the signal handler is in place
		defer conn.Close()
	case <-time.After(30 * time.Second):
		t.Fatal("sync did not connect to PostgreSQL within 30s")
	}
	if err := child.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = child.Wait()
	stderr := child.Stderr.(*bytes.Buffer).String()
	if code := child.ProcessState.ExitCode(); code != 0 || !strings.Contains(stderr, "stopped before it started relaying") {
		t.Errorf("SIGTERM during start-up: exit %d (%v), want 0 and a line saying it stopped before relaying:\n%s", code, err, stderr)
	}
}
