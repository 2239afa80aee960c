// Package neo4jinfo reads what a Neo4j server was given (heap, page cache),
// for the logs of benchmarks and the bench command. Production code: the
// bench binary links it; test scaffolding lives in the *test packages.
package neo4jinfo

import (
	"context"
	"fmt"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
)

// Heap returns the initial and the largest heap of the Neo4j under test, in
// bytes, for a benchmark's log: Neo4j's garbage collections stop every
// transaction, and how often and how long depends on the heap (docs/adr/0013,
// stop 37: started at 256m, G1 kept it near 300 MiB, with a concurrent cycle
// and its Remark pause every 8 to 15 s).
func Heap(ctx context.Context, driver neo4j.DriverWithContext) (initial, largest int64, err error) {
	res, err := neo4j.ExecuteQuery(ctx, driver,
		"CALL dbms.queryJmx('java.lang:type=Memory') YIELD attributes "+
			"RETURN attributes.HeapMemoryUsage.value.properties.init AS initial, attributes.HeapMemoryUsage.value.properties.max AS largest",
		nil, neo4j.EagerResultTransformer)
	if err != nil {
		return 0, 0, fmt.Errorf("neo4jinfo: read Neo4j's heap size: %w", err)
	}
	if len(res.Records) != 1 {
		return 0, 0, fmt.Errorf("neo4jinfo: Neo4j reports no heap size")
	}
	initial, initialNil, err := neo4j.GetRecordValue[int64](res.Records[0], "initial")
	if err != nil {
		return 0, 0, fmt.Errorf("neo4jinfo: Neo4j's initial heap size: %w", err)
	}
	largest, largestNil, err := neo4j.GetRecordValue[int64](res.Records[0], "largest")
	if err != nil {
		return 0, 0, fmt.Errorf("neo4jinfo: Neo4j's largest heap size: %w", err)
	}
	if initialNil || largestNil {
		return 0, 0, fmt.Errorf("neo4jinfo: Neo4j reports no heap size")
	}
	return initial, largest, nil
}

// PageCache returns the page cache size the Neo4j under test was given, for
// a benchmark's log: a page cache smaller than the store makes every write
// path read pages back from the file system, the guarded ones most (the
// rebuild benchmark at 1M moved from 112-138 s to 97 s for the snapshot when
// 128m became 2g; scripts/neo4j.sh sizes it).
func PageCache(ctx context.Context, driver neo4j.DriverWithContext) (string, error) {
	res, err := neo4j.ExecuteQuery(ctx, driver, "SHOW SETTINGS YIELD name, value WHERE name = 'server.memory.pagecache.size' RETURN value",
		nil, neo4j.EagerResultTransformer)
	if err != nil {
		return "", fmt.Errorf("neo4jinfo: read Neo4j's page cache size: %w", err)
	}
	if len(res.Records) != 1 {
		return "", fmt.Errorf("neo4jinfo: Neo4j reports no page cache size")
	}
	value, _, err := neo4j.GetRecordValue[string](res.Records[0], "value")
	return value, err
}
