package sql

import (
	"embed"
	"fmt"
	"io/fs"
	"strings"
)

//go:embed queries/*.sql
var queryFiles embed.FS

// queries maps a query's name (from its `-- name: X` line) to its text.
var queries = mustLoadQueries()

// Query returns the runtime statement called name in sql/queries/*.sql.
// It panics on an unknown name: the names are compile-time constants of the
// calling package, and a test of each package exercises them.
func Query(name string) string {
	q, ok := queries[name]
	if !ok {
		panic(fmt.Sprintf("sql: no query named %q in sql/queries", name))
	}
	return q
}

func mustLoadQueries() map[string]string {
	loaded, err := loadQueries(queryFiles)
	if err != nil {
		panic(err)
	}
	return loaded
}

func loadQueries(fsys fs.FS) (map[string]string, error) {
	files, err := fs.Glob(fsys, "queries/*.sql")
	if err != nil {
		return nil, err
	}
	loaded := map[string]string{}
	for _, file := range files {
		body, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, err
		}
		var name string
		var text strings.Builder
		flush := func() error {
			if name == "" {
				return nil
			}
			if _, dup := loaded[name]; dup {
				return fmt.Errorf("sql: query %q defined twice (%s)", name, file)
			}
			loaded[name] = strings.TrimSpace(text.String())
			text.Reset()
			return nil
		}
		for _, line := range strings.Split(string(body), "\n") {
			if after, ok := strings.CutPrefix(strings.TrimSpace(line), "-- name:"); ok {
				if err := flush(); err != nil {
					return nil, err
				}
				name = strings.TrimSpace(after)
				continue
			}
			if name != "" {
				text.WriteString(line)
				text.WriteByte('\n')
			}
		}
		if err := flush(); err != nil {
			return nil, err
		}
	}
	return loaded, nil
}
