package drift

import "testing"

// Past MaxSuspects a run keeps MaxExamples findings of a kind and only
// counts the rest: a graph that lost its data has a finding per row, and
// keeping them all would grow memory with the drift found.
func TestCappedFindingsAreCountedNotKept(t *testing.T) {
	r := &run{c: &Checker{cfg: Config{MaxSuspects: 1, MaxExamples: 2}}}
	const differences = 100_000
	for i := range differences {
		r.suspect(suspect{tenant: 1, label: "Product", id: int64(i + 1)},
			[]Finding{{Kind: OrphanNode, TenantID: 1, Label: "Product", ID: int64(i + 1), Count: 1}})
	}
	if len(r.suspects) != 1 || len(r.findings) != 2 {
		t.Fatalf("kept %d suspects and %d findings, want 1 and 2", len(r.suspects), len(r.findings))
	}
	counted := r.countedOnly()
	if len(counted) != 1 || counted[0].Count != differences-3 || counted[0].Kind != OrphanNode || counted[0].ID != 0 {
		t.Fatalf("counted only: %+v, want one orphan_node count of %d", counted, differences-3)
	}
	for _, f := range r.findings {
		if f.repair != nil {
			t.Errorf("a finding past the bound carries a repair: %+v", f)
		}
	}
}
