package drift

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"graphsync/graphmodel"
)

// compareNode compares what the rows imply for one key (exp, nil when no row
// backs it) with what the graph holds (got, nil when absent).
func compareNode(model graphmodel.Model, vectors *VectorCheck, tenant int64, label graphmodel.Label, exp, got *node) []Finding {
	switch {
	case exp == nil && got == nil:
		return nil
	case got == nil:
		if !exp.required {
			return nil
		}
		upsert := exp
		if label.Role == graphmodel.RoleReference {
			// No version to guard by: created while still missing, and
			// written only while no event has written it (outbox id 0),
			// so an event sync applies between the read and the repair (an
			// OrderPlaced with the customer's newer segment) stays.
			up := *exp
			up.outboxSeen = new(int64)
			upsert = &up
		}
		return []Finding{{Kind: MissingNode, TenantID: tenant, Label: label.Name, ID: exp.id, Count: 1,
			Detail: "no node; the rows imply one", repair: &repairAction{upsert: upsert}}}
	case exp == nil:
		return []Finding{{Kind: OrphanNode, TenantID: tenant, Label: label.Name, ID: got.id, Count: 1,
			Detail: "no row backs this node", repair: &repairAction{deleteNode: true}}}
	}
	var findings []Finding
	add := func(kind Kind, detail string, repair *repairAction) {
		findings = append(findings, Finding{Kind: kind, TenantID: tenant, Label: label.Name, ID: got.id, Count: 1, Detail: detail, repair: repair})
	}
	// The repair of every finding of this node re-projects its rows. When
	// the graph is ahead of them, no event wrote that state: the rows the
	// verdict rests on were read after the graph (the second look), and sync
	// applies an event only after its row committed (PostgreSQL restored
	// from a backup, say). The repair then overwrites exactly the version
	// seen, so a state sync writes meanwhile is never regressed, and the
	// node's relationships follow it (their repair is guarded by the
	// owner's version, which the node's repair has lowered by then).
	upsert := exp
	ahead := label.Role == graphmodel.RoleAggregate && got.version > exp.version
	switch {
	case ahead:
		up := *exp
		up.seen = got.version
		upsert = &up
	case label.Role == graphmodel.RoleReference:
		// No version to guard by: the repair writes the node only while it
		// holds the outbox id read, so a later event's state stays.
		up := *exp
		outboxID, _ := got.props[graphmodel.PropOutboxID].(int64)
		up.outboxSeen = &outboxID
		upsert = &up
	}
	var stale []string
	if label.Role == graphmodel.RoleAggregate && got.version != exp.version {
		stale = append(stale, fmt.Sprintf("version: graph %d, rows %d", got.version, exp.version))
	}
	for _, p := range label.Properties {
		want, have := exp.props[p.Key], canonicalValue(got.props[p.Key])
		if !equalValues(want, have) {
			stale = append(stale, fmt.Sprintf("%s: graph %s, rows %s", p.Key, show(have), show(want)))
		}
	}
	if model.TenantKeyed(label.Name) {
		// Without its tenant key a node drops out of its tenant's fulltext
		// seeds: retrieval requires the key inside the index query.
		if want, have := graphmodel.TenantKey(tenant), got.props[graphmodel.KeyTenantKey]; have != want {
			stale = append(stale, fmt.Sprintf("%s: graph %s, rows %s", graphmodel.KeyTenantKey, show(have), show(want)))
		}
	}
	if len(stale) > 0 {
		if ahead {
			stale = append(stale, "the graph is ahead of the rows (was PostgreSQL restored?)")
		}
		add(StaleNode, strings.Join(stale, "; "), &repairAction{upsert: upsert})
	}
	propertyFindings(model, label, got.props, add)
	vectorFindings(model, vectors, label, exp, got, add)
	findings = append(findings, compareRels(model, tenant, label, exp, got, upsert)...)
	return findings
}

// propertyFindings checks a node's properties against its label's
// allowlist and for personal data, and adds what it finds.
func propertyFindings(model graphmodel.Model, label graphmodel.Label, props map[string]any, add func(Kind, string, *repairAction)) {
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		prop, allowed := label.Property(k)
		code := allowed && !prop.FreeText
		allowed = allowed || graphmodel.IsReserved(k) || embeddingKey(model, label, k)
		if owner := personalField(model, label, k); !allowed && owner != "" {
			// A field the model names personal (of this label or another:
			// a customer's full_name copied onto an order): whatever it
			// holds, its value is never shown.
			add(PersonalData, fmt.Sprintf("property %s is a personal field of %s", k, owner), &repairAction{removeProp: k})
			continue
		}
		// A code (a SKU, a currency) is written as it is and compared as a
		// property: a part number shaped like a phone number is not
		// personal data, and reporting it would be drift for good.
		if what := personalData(props[k]); what != "" && !code {
			// In free text: sync masks it at write, so another writer left
			// it, and the node also reads as stale, whose repair
			// re-projects it masked. Any other property is removed.
			var repair *repairAction
			if !allowed {
				repair = &repairAction{removeProp: k}
			}
			add(PersonalData, fmt.Sprintf("property %s holds %s", k, what), repair)
			if !allowed {
				continue // one finding per property is enough
			}
		}
		if !allowed {
			add(PropertyNotAllowed, fmt.Sprintf("property %s (%s) is outside the allowlist", k, valueKind(props[k])), &repairAction{removeProp: k})
		}
	}
}

// compareRels compares the relationships a node owns; upsert is the node's
// repair (compareNode), which re-projects them.
func compareRels(model graphmodel.Model, tenant int64, label graphmodel.Label, exp, got, upsert *node) []Finding {
	var findings []Finding
	add := func(kind Kind, detail string, repair *repairAction) {
		findings = append(findings, Finding{Kind: kind, TenantID: tenant, Label: label.Name, ID: got.id, Count: 1, Detail: detail, repair: repair})
	}
	about := func(r relation) { findings[len(findings)-1].rel = &r }
	want := map[string]relation{}
	for _, r := range exp.rels {
		want[r.key(model)] = r
	}
	seen := map[string]bool{}
	for _, r := range got.rels {
		if r.tenant != tenant || r.otherTenant != tenant {
			add(CrossTenant, fmt.Sprintf("%s links tenant %d to tenant %d (relationship tenant_id %d)", relText(r, got.id), tenant, r.otherTenant, r.tenant),
				&repairAction{deleteRel: refOf(r, tenant, got.id)})
			continue
		}
		rt, _ := model.Relationship(r.typ)
		// The other end must carry the label the model gives it: an edge to
		// a node of another label that happens to have the expected id is
		// not the edge the rows imply.
		if end := otherEndLabel(rt, r.out); !slices.Contains(r.otherLabels, end) {
			add(ExtraRelationship, fmt.Sprintf("%s ends at a node labelled %s, not %s", relText(r, got.id), labelsText(r.otherLabels), end),
				&repairAction{deleteRel: refOf(r, tenant, got.id)})
			about(r)
			continue
		}
		k := r.key(model)
		w, ok := want[k]
		if !ok || seen[k] {
			add(ExtraRelationship, relText(r, got.id)+" is not implied by the rows",
				&repairAction{deleteRel: refOf(r, tenant, got.id).guardedBy(r.out, got)})
			about(r)
			continue
		}
		seen[k] = true
		allowed := relAllowed(rt)
		var diffs []string
		names := make([]string, 0, len(w.props))
		for name := range w.props {
			names = append(names, name)
		}
		var outside []string
		for name := range r.props {
			switch {
			case !allowed[name]:
				outside = append(outside, name)
			case !hasKey(w.props, name):
				names = append(names, name)
			}
		}
		sort.Strings(names)
		for _, name := range names {
			if !equalValues(w.props[name], canonicalValue(r.props[name])) {
				diffs = append(diffs, fmt.Sprintf("%s: graph %s, rows %s", name, show(r.props[name]), show(w.props[name])))
			}
		}
		if len(diffs) > 0 {
			add(ChangedRelationship, relText(r, got.id)+": "+strings.Join(diffs, "; "), &repairAction{upsert: upsert})
			about(r)
		}
		// A relationship property outside the allowlist: what the row
		// projection's MERGE ... SET never touches, so it is removed by key.
		sort.Strings(outside)
		for _, name := range outside {
			remove := &repairAction{removeRelProp: &relProp{rel: refOf(r, tenant, got.id), key: name}}
			if owner := personalField(model, graphmodel.Label{}, name); owner != "" {
				add(PersonalData, fmt.Sprintf("%s: property %s is a personal field of %s", relText(r, got.id), name, owner), remove)
				continue
			}
			if what := personalData(r.props[name]); what != "" {
				add(PersonalData, fmt.Sprintf("%s: property %s holds %s", relText(r, got.id), name, what), remove)
				continue
			}
			add(PropertyNotAllowed, fmt.Sprintf("%s: property %s (%s) is outside the allowlist", relText(r, got.id), name, valueKind(r.props[name])), remove)
		}
	}
	for _, r := range exp.rels {
		if !seen[r.key(model)] {
			add(MissingRelationship, relText(r, exp.id)+" is missing", &repairAction{upsert: upsert})
			about(r)
		}
	}
	return findings
}

// otherEndLabel is the label the model gives the end of rt that is not its
// owner: the To end of a relationship its From end owns, else the From end.
func otherEndLabel(rt graphmodel.Relationship, out bool) string {
	if out {
		return rt.To
	}
	return rt.From
}

// relAllowed is the allowlist of rt's properties: its key, its properties
// and tenant_id.
func relAllowed(rt graphmodel.Relationship) map[string]bool {
	allowed := map[string]bool{graphmodel.KeyTenantID: true}
	for _, p := range rt.Key {
		allowed[p.Key] = true
	}
	for _, p := range rt.Properties {
		allowed[p.Key] = true
	}
	return allowed
}

func hasKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}

func labelsText(labels []string) string {
	if len(labels) == 0 {
		return "(none)"
	}
	return strings.Join(labels, ":")
}

func relText(r relation, owner int64) string {
	line := ""
	if n, ok := r.props["line_no"]; ok {
		line = fmt.Sprintf(" line %v", n)
	}
	if r.out {
		return fmt.Sprintf("(%d)-[:%s%s]->(%d)", owner, r.typ, line, r.other)
	}
	return fmt.Sprintf("(%d)-[:%s%s]->(%d)", r.other, r.typ, line, owner)
}

func canonicalValue(v any) any {
	switch x := v.(type) {
	case time.Time:
		return x.UTC()
	case int:
		return int64(x)
	}
	return v
}

// equalValues compares a graph value with a row's. Times are equal to
// PostgreSQL's precision: a row keeps microseconds, and PostgreSQL rounds a
// finer time a producer sent as text where the projection truncates it, so
// the two may differ by one microsecond.
func equalValues(a, b any) bool {
	if ta, ok := a.(time.Time); ok {
		tb, ok := b.(time.Time)
		return ok && ta.Sub(tb).Abs() <= time.Microsecond
	}
	return a == b
}

// personalField names the label whose personal fields (graphmodel's
// Label.Personal) include key, label itself first, or returns "". A value
// under such a key is never shown, on whatever node or relationship it
// turns up.
func personalField(model graphmodel.Model, label graphmodel.Label, key string) string {
	if slices.Contains(label.Personal, key) {
		return label.Name
	}
	for _, l := range model.Labels {
		if slices.Contains(l.Personal, key) {
			return l.Name
		}
	}
	return ""
}

// embeddingKey reports whether k is a property the embedding keeps on
// label's nodes (the vector, its hashes, model and pending mark).
func embeddingKey(model graphmodel.Model, label graphmodel.Label, k string) bool {
	e, ok := model.EmbeddingOf(label.Name)
	return ok && slices.Contains(e.SyncProperties(), k)
}

// vectorFindings checks a node's vector against the text its rows imply
// (masked, as the projector writes it) and the embedder's model and
// dimension. A node the embedding stage has queued for exactly that text
// is not drift: the stage's backlog (and its metrics) say how far behind
// it is; unless the embedder refused that text (a missing embedding). The
// repair marks the node pending with the text's hash, where it
// still holds the outbox id read.
func vectorFindings(model graphmodel.Model, vectors *VectorCheck, label graphmodel.Label, exp, got *node, add func(Kind, string, *repairAction)) {
	e, ok := model.EmbeddingOf(label.Name)
	if vectors == nil || !ok {
		return
	}
	want := graphmodel.EmbeddingHash(vectors.Model, e.Text(exp.props))
	refused := got.props[e.RefusedProperty] == want
	if got.props[e.PendingProperty] != nil && got.props[e.TextHashProperty] == want && !refused {
		return
	}
	outboxID, _ := got.props[graphmodel.PropOutboxID].(int64)
	repair := &repairAction{markEmbedding: &embeddingMark{outboxID: outboxID, hash: want}}
	modelOf, _ := got.props[e.ModelProperty].(string)
	hash, _ := got.props[e.HashProperty].(string)
	switch {
	case refused:
		add(MissingEmbedding, "the embedder refused its text", repair)
	case !got.hasVector:
		add(MissingEmbedding, "no vector", repair)
	case modelOf != vectors.Model:
		add(WrongEmbeddingModel, fmt.Sprintf("vector of model %s, want %s", show(modelOf), show(vectors.Model)), repair)
	case got.vectorLen < 0:
		add(WrongEmbeddingDimension, "a vector that is not a list of floats", repair)
	case got.vectorLen != int64(vectors.Dimension):
		add(WrongEmbeddingDimension, fmt.Sprintf("vector of %d floats, want %d", got.vectorLen, vectors.Dimension), repair)
	case hash != want:
		add(StaleEmbedding, "vector of another text than the rows imply", repair)
	case got.props[e.TextHashProperty] != want:
		// The text changed and changed back while sync ran without an
		// embedder (which clears the text hash): the vector is of the
		// text, but retrieval passes it over until the hash is written.
		add(StaleEmbedding, "text hash of another text than the rows imply", repair)
	}
}
