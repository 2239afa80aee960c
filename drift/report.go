package drift

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Report is the outcome of one check.
type Report struct {
	// DriftTotal counts every unexplained difference; foreign labels and
	// types and explained differences are not drift.
	DriftTotal int              `json:"drift_total"`
	Sample     float64          `json:"sample"`
	StartedAt  time.Time        `json:"started_at"`
	Seconds    float64          `json:"seconds"`
	Tenants    []*TenantSummary `json:"tenants"`
	// Counts has one entry per tenant, label and kind with drift.
	Counts []Count `json:"counts"`
	// Examples lists the first findings of each kind.
	Examples map[Kind][]Finding `json:"examples"`
	// Explained lists the first differences explained by outbox rows not
	// applied yet; ExplainedTotal counts them all.
	Explained      []Explained `json:"explained"`
	ExplainedTotal int         `json:"explained_total"`
	// Foreign lists labels and relationship types no projection owns.
	Foreign []Foreign `json:"foreign"`
	// SuspectsCapped counts differences past MaxSuspects, reported from the
	// first pass without a second look.
	SuspectsCapped int `json:"suspects_capped,omitempty"`
	// Repaired lists what --repair changed: nil (left out of the JSON)
	// without --repair, empty when it changed nothing.
	Repaired []string `json:"repaired,omitzero"`
	// RepairStopped says why --repair stopped before its last statement:
	// what Repaired lists was applied, nothing after it.
	RepairStopped string `json:"repair_stopped,omitempty"`

	maxExamples int
	byTenant    map[int64]*TenantSummary
}

// TenantSummary is one tenant's side-by-side counts and projection lag.
type TenantSummary struct {
	TenantID             int64         `json:"tenant_id"`
	Labels               []*LabelCount `json:"labels"`
	Pending              int64         `json:"pending"`
	OldestPendingSeconds float64       `json:"oldest_pending_seconds"`
	DLQ                  int64         `json:"dlq"`
	Drift                int           `json:"drift"`
}

// LabelCount is how many rows imply a label's nodes and how many the graph holds.
type LabelCount struct {
	Label string `json:"label"`
	Rows  int    `json:"rows"`
	Nodes int    `json:"nodes"`
	Drift int    `json:"drift"`
}

// Count is the drift of one kind in one tenant and label.
type Count struct {
	TenantID int64  `json:"tenant_id"`
	Label    string `json:"label"`
	Kind     Kind   `json:"kind"`
	Count    int    `json:"count"`
}

// Foreign is a label or relationship type no projection owns.
type Foreign struct {
	Kind     Kind   `json:"kind"`
	Name     string `json:"name"`
	TenantID *int64 `json:"tenant_id"`
	Count    int64  `json:"count"`
}

func newReport(cfg Config) *Report {
	// Lists are empty, never null, in JSON: a clean report still has
	// counts, explained and foreign to iterate over.
	return &Report{Sample: cfg.Sample, StartedAt: time.Now().UTC(), Tenants: []*TenantSummary{}, Counts: []Count{},
		Examples: map[Kind][]Finding{}, Explained: []Explained{}, Foreign: []Foreign{},
		maxExamples: cfg.MaxExamples, byTenant: map[int64]*TenantSummary{}}
}

func (r *Report) tenant(id int64) *TenantSummary {
	if t, ok := r.byTenant[id]; ok {
		return t
	}
	t := &TenantSummary{TenantID: id}
	r.byTenant[id] = t
	r.Tenants = append(r.Tenants, t)
	return t
}

func (t *TenantSummary) label(name string) *LabelCount {
	for _, l := range t.Labels {
		if l.Label == name {
			return l
		}
	}
	l := &LabelCount{Label: name}
	t.Labels = append(t.Labels, l)
	return l
}

func (r *Report) explain(tenant int64, label string, id int64, p pendingCount, findings []Finding) {
	r.ExplainedTotal++
	if len(r.Explained) >= r.maxExamples*5 {
		return
	}
	kinds := map[Kind]bool{}
	for _, f := range findings {
		kinds[f.Kind] = true
	}
	var names []string
	for k := range kinds {
		names = append(names, string(k))
	}
	sort.Strings(names)
	r.Explained = append(r.Explained, Explained{TenantID: tenant, Label: label, ID: id, Pending: p.pending, DLQ: p.dlq,
		Detail: strings.Join(names, ", ")})
}

func (r *Report) foreign(kind Kind, name string, tenant int64, noTenant bool, count int64) {
	f := Foreign{Kind: kind, Name: name, Count: count}
	if !noTenant {
		f.TenantID = &tenant
	}
	r.Foreign = append(r.Foreign, f)
}

// finish counts the findings and keeps the first examples of each kind.
func (r *Report) finish(findings []Finding, took time.Duration) {
	r.Seconds = took.Seconds()
	type key struct {
		tenant int64
		label  string
		kind   Kind
	}
	counts := map[key]int{}
	for _, f := range findings {
		counts[key{f.TenantID, f.Label, f.Kind}] += f.Count
		r.DriftTotal += f.Count
		if t, ok := r.byTenant[f.TenantID]; ok {
			t.Drift += f.Count
			t.label(f.Label).Drift += f.Count
		}
		if len(r.Examples[f.Kind]) < r.maxExamples {
			r.Examples[f.Kind] = append(r.Examples[f.Kind], f)
		}
	}
	for k, n := range counts {
		r.Counts = append(r.Counts, Count{TenantID: k.tenant, Label: k.label, Kind: k.kind, Count: n})
	}
	sort.Slice(r.Counts, func(i, j int) bool {
		a, b := r.Counts[i], r.Counts[j]
		if a.TenantID != b.TenantID {
			return a.TenantID < b.TenantID
		}
		if a.Label != b.Label {
			return a.Label < b.Label
		}
		return a.Kind < b.Kind
	})
	sort.Slice(r.Foreign, func(i, j int) bool {
		if r.Foreign[i].Name != r.Foreign[j].Name {
			return r.Foreign[i].Name < r.Foreign[j].Name
		}
		return fmt.Sprint(r.Foreign[i].TenantID) < fmt.Sprint(r.Foreign[j].TenantID)
	})
	for _, t := range r.Tenants {
		sort.Slice(t.Labels, func(i, j int) bool { return t.Labels[i].Label < t.Labels[j].Label })
	}
	sort.Slice(r.Tenants, func(i, j int) bool { return r.Tenants[i].TenantID < r.Tenants[j].TenantID })
}

// WriteJSON writes the report as JSON; drift_total is its top-level count.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteMarkdown writes the report for a person (a boundary review).
func (r *Report) WriteMarkdown(w io.Writer, threshold int) error {
	var b strings.Builder
	scope := "every key"
	if r.Sample < 1 {
		scope = fmt.Sprintf("a random %.1f%% of keys", r.Sample*100)
	}
	verdict := "within"
	if r.DriftTotal > threshold {
		verdict = "over"
	}
	fmt.Fprintf(&b, "# graphsync drift report\n\n")
	tenants := fmt.Sprintf("%d tenants", len(r.Tenants))
	if len(r.Tenants) == 1 {
		tenants = "1 tenant"
	}
	fmt.Fprintf(&b, "Checked %s, %s, in %.1fs (started %s).  \n", tenants, scope, r.Seconds, r.StartedAt.Format(time.RFC3339))
	fmt.Fprintf(&b, "**Drift: %d** (%s the threshold of %d). Explained by outbox rows not applied yet: %d.\n",
		r.DriftTotal, verdict, threshold, r.ExplainedTotal)
	if r.SuspectsCapped > 0 {
		fmt.Fprintf(&b, "\n%d differences were past the second-look bound and are counted from the first pass only; --repair leaves them to the next run.\n", r.SuspectsCapped)
	}
	fmt.Fprintf(&b, "\n## Summary\n\n| tenant | label | rows | nodes | drift |\n| ---: | --- | ---: | ---: | ---: |\n")
	for _, t := range r.Tenants {
		for _, l := range t.Labels {
			fmt.Fprintf(&b, "| %d | %s | %d | %d | %d |\n", t.TenantID, l.Label, l.Rows, l.Nodes, l.Drift)
		}
	}
	fmt.Fprintf(&b, "\n| tenant | pending events | oldest pending | DLQ | drift |\n| ---: | ---: | ---: | ---: | ---: |\n")
	for _, t := range r.Tenants {
		fmt.Fprintf(&b, "| %d | %d | %.1fs | %d | %d |\n", t.TenantID, t.Pending, t.OldestPendingSeconds, t.DLQ, t.Drift)
	}
	fmt.Fprintf(&b, "\n## Drift by kind\n\n")
	switch {
	case r.DriftTotal == 0 && r.ExplainedTotal == 0:
		b.WriteString("None: the graph says what PostgreSQL says.\n")
	case r.DriftTotal == 0:
		b.WriteString("None that stands: the other differences are explained by outbox rows not applied yet (below).\n")
	}
	for _, kind := range Kinds {
		examples := r.Examples[kind]
		if len(examples) == 0 {
			continue
		}
		total := 0
		for _, c := range r.Counts {
			if c.Kind == kind {
				total += c.Count
			}
		}
		fmt.Fprintf(&b, "### %s: %d\n\n| tenant | label | id | detail |\n| ---: | --- | ---: | --- |\n", kind, total)
		for _, f := range examples {
			fmt.Fprintf(&b, "| %d | %s | %d | %s |\n", f.TenantID, f.Label, f.ID, strings.ReplaceAll(f.Detail, "|", "\\|"))
		}
		b.WriteString("\n")
	}
	if len(r.Explained) > 0 {
		fmt.Fprintf(&b, "\n## Explained (%d): outbox rows not applied yet\n\n| tenant | label | id | pending | DLQ | differences |\n| ---: | --- | ---: | ---: | ---: | --- |\n", r.ExplainedTotal)
		for _, e := range r.Explained {
			fmt.Fprintf(&b, "| %d | %s | %d | %d | %d | %s |\n", e.TenantID, e.Label, e.ID, e.Pending, e.DLQ, e.Detail)
		}
	}
	if len(r.Foreign) > 0 {
		fmt.Fprintf(&b, "\n## Not owned by the projection (reported, never repaired)\n\n| kind | name | tenant | count |\n| --- | --- | ---: | ---: |\n")
		for _, f := range r.Foreign {
			tenant := "none"
			if f.TenantID != nil {
				tenant = fmt.Sprint(*f.TenantID)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %d |\n", f.Kind, show(f.Name), tenant, f.Count)
		}
	}
	if len(r.Repaired) > 0 || r.RepairStopped != "" {
		fmt.Fprintf(&b, "\n## Repaired\n\n")
		for _, line := range r.Repaired {
			fmt.Fprintf(&b, "- %s\n", line)
		}
		if r.RepairStopped != "" {
			fmt.Fprintf(&b, "- **stopped here**, nothing after this line was applied: %s. Run graphsync drift again to see what is left.\n", strings.Join(strings.Fields(r.RepairStopped), " "))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
