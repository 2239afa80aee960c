package stacktest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
)

// cleanGraphBatchSize bounds one DETACH DELETE transaction so a large test
// graph does not need a large Neo4j heap to clean.
const cleanGraphBatchSize = 5000

// Neo4jURI returns the Bolt URI of the shared Neo4j.
func Neo4jURI(t testing.TB) string {
	t.Helper()
	return requireEnv(t, EnvNeo4jURI)
}

// neo4jAuth is no authentication when GRAPHSYNC_NEO4J_USER is empty (the
// local stack runs with auth off), else basic auth.
func neo4jAuth(t testing.TB) neo4j.AuthToken {
	t.Helper()
	user, _, err := lookupEnv(EnvNeo4jUser)
	if err != nil {
		t.Fatalf("stacktest: %v", err)
	}
	if user == "" {
		return neo4j.NoAuth()
	}
	password, _, err := lookupEnv(EnvNeo4jPassword)
	if err != nil {
		t.Fatalf("stacktest: %v", err)
	}
	return neo4j.BasicAuth(user, password, "")
}

// Neo4j returns a driver to the shared Neo4j whose connectivity was
// verified; it is closed when the test ends.
func Neo4j(t testing.TB) neo4j.DriverWithContext {
	t.Helper()
	uri := Neo4jURI(t)
	driver, err := neo4j.NewDriverWithContext(uri, neo4jAuth(t))
	if err != nil {
		t.Fatalf("stacktest: Neo4j driver for %s: %v", Redact(uri), err)
	}
	t.Cleanup(func() { driver.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if err := driver.VerifyConnectivity(ctx); err != nil {
		t.Fatalf("stacktest: Neo4j at %s is not reachable: %v; %s", Redact(uri), err, startHint)
	}
	return driver
}

// CleanGraph deletes every node (and its relationships) whose tenant_id is
// one of tenantIDs, in batches.
func CleanGraph(t testing.TB, driver neo4j.DriverWithContext, tenantIDs ...int64) {
	t.Helper()
	if len(tenantIDs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	for {
		result, err := neo4j.ExecuteQuery(ctx, driver, `
			MATCH (n) WHERE n.tenant_id IN $tenantIDs
			WITH n LIMIT $batchSize
			DETACH DELETE n
			RETURN count(*) AS deleted`,
			map[string]any{"tenantIDs": tenantIDs, "batchSize": cleanGraphBatchSize},
			neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatalf("stacktest: clean graph of tenants %v: %v", tenantIDs, err)
		}
		deleted, _, err := neo4j.GetRecordValue[int64](result.Records[0], "deleted")
		if err != nil {
			t.Fatalf("stacktest: clean graph of tenants %v: %v", tenantIDs, err)
		}
		if deleted < cleanGraphBatchSize {
			return
		}
	}
}

// neo4jAnswers reports whether Neo4j at uri answers RETURN 1 now.
func neo4jAnswers(ctx context.Context, uri string, auth neo4j.AuthToken) error {
	driver, err := neo4j.NewDriverWithContext(uri, auth, func(c *neo4j.Config) {
		c.SocketConnectTimeout = 2 * time.Second
	})
	if err != nil {
		return err
	}
	defer driver.Close(context.WithoutCancel(ctx))
	if err := driver.VerifyConnectivity(ctx); err != nil {
		return err
	}
	_, err = neo4j.ExecuteQuery(ctx, driver, "RETURN 1", nil, neo4j.EagerResultTransformer)
	if err != nil {
		return fmt.Errorf("RETURN 1: %w", err)
	}
	return nil
}
