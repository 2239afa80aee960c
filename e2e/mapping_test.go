package e2e

import (
	"slices"
	"sort"
	"testing"

	"graphsync/graphmodel"
)

// TestExpectedMappingMatchesGraphModel keeps the tests' own statement of the
// graph (expectedNodeProps, expectedRels, and the SQL that fills them) in
// step with graphmodel.Default: same labels and tombstones, same property
// allowlists, same relationship types, ends and keys. It needs no services.
func TestExpectedMappingMatchesGraphModel(t *testing.T) {
	model := graphmodel.Default
	modelLabels := map[string][]string{}
	for _, l := range model.Labels {
		var keys []string
		for _, p := range l.Properties {
			keys = append(keys, p.Key)
		}
		modelLabels[l.Name] = keys
		if l.Tombstone != "" {
			modelLabels[l.Tombstone] = nil
		}
	}
	if got, want := sortedNames(expectedNodeProps), sortedNames(modelLabels); !slices.Equal(got, want) {
		t.Errorf("the tests expect labels %v, the model has %v", got, want)
	}
	for label, want := range modelLabels {
		got := slices.Clone(expectedNodeProps[label])
		want = slices.Clone(want)
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("label %s: the tests expect properties %v, the model allowlists %v", label, got, want)
		}
		if _, ok := expectedNodeQueries[label]; !ok {
			t.Errorf("label %s: no query derives its expected nodes", label)
		}
	}
	for _, l := range model.Labels {
		if got := slices.Contains(referenceLabels, l.Name); got != (l.Role == graphmodel.RoleReference) {
			t.Errorf("label %s: listed as a reference label %v, model role %d", l.Name, got, l.Role)
		}
	}
	if len(expectedRels) != len(model.Relationships) {
		t.Errorf("the tests expect %d relationship types, the model has %d", len(expectedRels), len(model.Relationships))
	}
	for _, r := range model.Relationships {
		want, ok := expectedRels[r.Type]
		if !ok {
			t.Errorf("relationship %s of the model is not expected by the tests", r.Type)
			continue
		}
		var key, props []string
		for _, p := range r.Key {
			key = append(key, p.Key)
		}
		for _, p := range r.Properties {
			props = append(props, p.Key)
		}
		if want.from != r.From || want.to != r.To || !slices.Equal(want.key, key) || !slices.Equal(want.props, props) {
			t.Errorf("relationship %s: tests expect (%s)-[key %v, props %v]->(%s), the model says (%s)-[key %v, props %v]->(%s)",
				r.Type, want.from, want.key, want.props, want.to, r.From, key, props, r.To)
		}
		if _, ok := expectedRelQueries[r.Type]; !ok {
			t.Errorf("relationship %s: no query derives its expected relationships", r.Type)
		}
	}
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
