package drift

import (
	"testing"
	"time"

	"graphsync/graphmodel"
)

// A graph time equals its row's to PostgreSQL's precision: a row keeps
// microseconds (PostgreSQL rounds what a producer sent finer), the graph
// what the projection truncated; a time a microsecond apart is the same
// time, one further apart is drift.
func TestTimesCompareToTheMicrosecond(t *testing.T) {
	model := graphmodel.Default
	label, ok := model.Label(graphmodel.LabelOrder)
	if !ok {
		t.Fatal("no Order label")
	}
	row := time.Date(2026, 5, 1, 10, 0, 0, 123_457_000, time.UTC) // PostgreSQL rounded ...456789 up
	order := func(placed time.Time) *node {
		return &node{label: graphmodel.LabelOrder, id: 9, version: 2, required: true,
			props: map[string]any{"status": "placed", "placed_at": placed}}
	}
	for name, c := range map[string]struct {
		graph time.Time
		drift bool
	}{
		"the same":                          {row, false},
		"truncated by the projection":       {row.Add(-time.Microsecond), false},
		"in another zone":                   {row.In(time.FixedZone("CEST", 2*3600)), false},
		"two microseconds apart":            {row.Add(-2 * time.Microsecond), true},
		"a second apart (a different time)": {row.Add(time.Second), true},
	} {
		findings := compareNode(model, nil, 1, label, order(row), order(c.graph))
		if got := len(findings) > 0; got != c.drift {
			t.Errorf("%s: findings %+v, want drift %v", name, findings, c.drift)
		}
	}
}
