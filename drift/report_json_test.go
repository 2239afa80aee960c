package drift

import (
	"bytes"
	"strings"
	"testing"
)

// With --repair the JSON has its repaired list, [] when nothing needed a
// repair (README: a list with nothing in it is [], never null); without
// --repair the key is left out.
func TestRepairedListInJSON(t *testing.T) {
	for _, c := range []struct {
		repaired []string
		want     string
	}{
		{nil, ""},
		{[]string{}, `"repaired": []`},
		{[]string{"deleted 1 orphan Product node"}, `"repaired": [`},
	} {
		var out bytes.Buffer
		r := newReport(Config{MaxExamples: 1})
		r.finish(nil, 0)
		r.Repaired = c.repaired
		if err := r.WriteJSON(&out); err != nil {
			t.Fatal(err)
		}
		has := strings.Contains(out.String(), `"repaired"`)
		if c.want == "" && has || c.want != "" && !strings.Contains(out.String(), c.want) {
			t.Errorf("Repaired %#v: JSON %s, want %q", c.repaired, out.String(), c.want)
		}
	}
}
