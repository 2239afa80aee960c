// Command neo4jready waits until a Neo4j server answers over Bolt: it calls
// the Go driver's VerifyConnectivity and runs `RETURN 1`, retrying until the
// deadline. scripts/neo4j.sh runs it after starting the embedded launcher.
//
// Usage: neo4jready -uri bolt://127.0.0.1:7687 [-user u -password p] [-timeout 120s]
// It exits 0 when Neo4j answered, 1 when the deadline passed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
)

func main() {
	uri := flag.String("uri", "", "Bolt URI of the server")
	user := flag.String("user", "", "user name; empty means no authentication")
	password := flag.String("password", "", "password")
	timeout := flag.Duration("timeout", 120*time.Second, "how long to keep trying")
	flag.Parse()
	if *uri == "" {
		fmt.Fprintln(os.Stderr, "neo4jready: -uri is required")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var lastErr error
	for {
		if lastErr = check(ctx, *uri, *user, *password); lastErr == nil {
			return
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(os.Stderr, "neo4jready: %s did not answer within %s: %v\n", *uri, *timeout, lastErr)
			os.Exit(1)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func check(ctx context.Context, uri, user, password string) error {
	auth := neo4j.NoAuth()
	if user != "" {
		auth = neo4j.BasicAuth(user, password, "")
	}
	driver, err := neo4j.NewDriverWithContext(uri, auth, func(c *neo4j.Config) {
		c.SocketConnectTimeout = 2 * time.Second
	})
	if err != nil {
		return fmt.Errorf("create driver: %w", err)
	}
	defer driver.Close(context.WithoutCancel(ctx))
	attemptCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := driver.VerifyConnectivity(attemptCtx); err != nil {
		return fmt.Errorf("verify connectivity: %w", err)
	}
	result, err := neo4j.ExecuteQuery(attemptCtx, driver, "RETURN 1 AS one", nil, neo4j.EagerResultTransformer)
	if err != nil {
		return fmt.Errorf("warm-up query: %w", err)
	}
	if len(result.Records) != 1 {
		return errors.New("warm-up query: RETURN 1 gave no record")
	}
	return nil
}
