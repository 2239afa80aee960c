package drift

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
)

// Drift's graph reads go to the cluster's leader, which has applied every
// write sync committed: a follower may lag, and sync's bookmarks (another
// process) cannot travel with drift's reads, so a read there could report
// false drift. Every read of the package takes graphRead's options.
func TestGraphReadsGoToTheLeader(t *testing.T) {
	var cfg neo4j.ExecuteQueryConfiguration
	cfg.Routing = neo4j.Read
	for _, opt := range graphRead("shop") {
		opt(&cfg)
	}
	if cfg.Routing != neo4j.Write || cfg.Database != "shop" {
		t.Errorf("graph reads route %v to database %q, want the writers (the leader) of \"shop\"", cfg.Routing, cfg.Database)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, reader := range []string{"ExecuteQueryWithReadersRouting", "AccessModeRead"} {
			if strings.Contains(string(src), reader) {
				t.Errorf("%s reads the graph with %s: a follower may not hold what sync committed", file, reader)
			}
		}
	}
}
