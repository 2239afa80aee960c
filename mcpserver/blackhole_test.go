package mcpserver_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
)

// blackHole listens, accepts connections and never answers: a Neo4j that
// has stopped responding. It returns its address.
func blackHole(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

func hangingDriver(t testing.TB, addr string) neo4j.DriverWithContext {
	t.Helper()
	driver, err := neo4j.NewDriverWithContext("bolt://"+addr, neo4j.NoAuth())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = driver.Close(t.Context()) })
	// The driver sets up its connector lazily, on the first connection, and
	// two first connections at once race on it (neo4j-go-driver v5.28.4,
	// connector.go: SupplyConnection). graphsync's commands verify
	// connectivity before serving, so their first connection is alone; do
	// the same here. Against the black hole it can only time out.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := driver.VerifyConnectivity(ctx); err == nil {
		t.Fatal("a black hole verified as a Neo4j server")
	}
	return driver
}
