package layout

import (
	"os/exec"
	"path"
	"strings"
	"testing"
)

// isScaffolding: test scaffolding packages are named *test (stacktest,
// benchdatatest, pipelinetest, sinktest); only tests may import them.
func isScaffolding(importPath string) bool {
	return strings.HasSuffix(path.Base(importPath), "test")
}

// TestNoProductionPackageImportsTestScaffolding: no non-test package of the
// module (a library or a binary) imports a *test package, so no binary links
// test scaffolding. Checking direct imports suffices: a chain from a
// production package into scaffolding starts with one such import.
func TestNoProductionPackageImportsTestScaffolding(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "graphsync/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 10 {
		t.Fatalf("go list found only %d packages: %q", len(lines), out)
	}
	scaffolding := 0
	for _, line := range lines {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		if isScaffolding(pkg) {
			scaffolding++
			continue
		}
		for _, imp := range imports {
			if strings.HasPrefix(imp, "graphsync/") && isScaffolding(imp) {
				t.Errorf("%s (not test scaffolding) imports %s: move what it needs into a non-test package", pkg, imp)
			}
		}
	}
	if scaffolding == 0 {
		t.Fatal("go list found no *test package: the rule checks nothing")
	}
}
