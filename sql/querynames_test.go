package sql

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// queryCall is a call of Query with a constant name, in this package or
// another (gsql.Query).
var queryCall = regexp.MustCompile(`\bQuery\("([A-Za-z0-9]+)"\)`)

// TestEveryQueryNameExists: each Query("Name") in the module's Go code
// names a statement of sql/queries/*.sql, so an unknown name fails here and
// not at run time; and each named statement is named by some Go code.
func TestEveryQueryNameExists(t *testing.T) {
	used := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || d.Name() == "querynames_test.go" {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for name := range queries {
			if strings.Contains(string(src), `"`+name+`"`) {
				used[name] = true // also a name handed to a helper that calls Query
			}
		}
		for _, m := range queryCall.FindAllStringSubmatch(string(src), -1) {
			if _, ok := queries[m[1]]; !ok {
				t.Errorf("%s: Query(%q) names no statement in sql/queries", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var unused []string
	for name := range queries {
		if !used[name] {
			unused = append(unused, name)
		}
	}
	slices.Sort(unused)
	if len(unused) > 0 {
		t.Errorf("statements no Go code names: %v", unused)
	}
}
