package retrieve

import (
	"fmt"
	"sort"
	"strings"
	"unicode"

	"graphsync/graphmodel"
)

// Section is where a line of context belongs in the Markdown rendering.
type Section int

// Sections, in the order they are rendered.
const (
	SectionEntities Section = iota
	SectionRelationships
	SectionFacts
)

// Line is one statement of context and the keys of the nodes it came from,
// so that an answer built on it can cite them.
type Line struct {
	Section Section
	Text    string
	Keys    []string
}

// Item is the context of one seed: the lines that fit in the budget, most
// important first.
type Item struct {
	Rank  int
	Seed  *Seed
	Lines []Line
}

// Content is the item's text as an LLM reads it: its lines, one per line.
func (it Item) Content() string {
	texts := make([]string, len(it.Lines))
	for i, l := range it.Lines {
		texts[i] = l.Text
	}
	return strings.Join(texts, "\n")
}

// Keys lists the node keys the item cites, each once, in order.
func (it Item) Keys() []string {
	var keys []string
	seen := map[string]bool{}
	for _, l := range it.Lines {
		for _, k := range l.Keys {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// NodeKey is how context cites a node: "Label:id" (the tenant is the request's).
func NodeKey(label string, id int64) string { return fmt.Sprintf("%s:%d", label, id) }

// rank turns seeds (best first) into items within maxChars: each seed's
// lines in order of importance, seeds in order of score. A line that does
// not fit ends the context there, so what is kept is always a prefix of the
// ranking; the first line of the best seed is shortened rather than dropped.
func rank(seeds []Seed, hops, maxChars int) (items []Item, chars int, truncated bool) {
	for i := range seeds {
		lines := seedLines(&seeds[i], hops)
		item := Item{Rank: i + 1, Seed: &seeds[i]}
		for _, l := range lines {
			l.Text = lineText(l.Text)
			n := len([]rune(l.Text))
			if i > 0 || len(item.Lines) > 0 {
				n++ // the line break before it
			}
			if chars+n > maxChars {
				truncated = true
				if chars == 0 {
					l.Text = shorten(l.Text, maxChars)
					item.Lines = append(item.Lines, l)
					chars = len([]rune(l.Text))
				}
				break
			}
			chars += n
			item.Lines = append(item.Lines, l)
		}
		if len(item.Lines) > 0 {
			items = append(items, item)
		}
		if truncated {
			break
		}
	}
	return items, chars, truncated
}

func shorten(text string, maxChars int) string {
	runes := []rune(text)
	if len(runes) <= maxChars {
		return text
	}
	return string(runes[:maxChars-1]) + "…"
}

// seedLines says what the graph knows about a seed, most important first.
func seedLines(s *Seed, hops int) []Line {
	key := NodeKey(s.Label, s.ID)
	lines := []Line{{Section: SectionEntities, Text: entityText(s), Keys: []string{key}}}
	if hops < 1 || !s.Expanded {
		return lines
	}
	name := refText(Ref{Label: s.Label, ID: s.ID, Name: propString(s.Props, "name")})
	if s.Category != nil {
		lines = append(lines, Line{Section: SectionRelationships,
			Text: fmt.Sprintf("%s -[%s]-> %s", name, graphmodel.RelInCategory, refText(*s.Category)),
			Keys: []string{key, NodeKey(s.Category.Label, s.Category.ID)}})
	}
	if s.Orders == 0 {
		lines = append(lines, Line{Section: SectionFacts, Text: fmt.Sprintf("%s is in no order yet.", name), Keys: []string{key}})
	} else {
		lines = append(lines, Line{Section: SectionFacts,
			Text: fmt.Sprintf("%s is in %s (%s), %s ordered.", name, plural(s.Orders, "order"), countsText(s.OrderStatus), plural(s.Units, "unit")),
			Keys: []string{key}})
	}
	if hops < 2 {
		return lines
	}
	if len(s.Together) > 0 {
		parts := make([]string, len(s.Together))
		keys := []string{key}
		for i, r := range s.Together {
			parts[i] = fmt.Sprintf("%s (%s)", refText(r.Ref), plural(r.Orders, "order"))
			keys = append(keys, NodeKey(r.Label, r.ID))
		}
		lines = append(lines, Line{Section: SectionRelationships,
			Text: fmt.Sprintf("%s was bought together with %s.", name, strings.Join(parts, ", ")), Keys: keys})
	}
	if len(s.Segments) > 0 {
		lines = append(lines, Line{Section: SectionFacts,
			Text: fmt.Sprintf("Customers who ordered %s, each counted once: by segment %s; by country %s.", name, countsText(s.Segments), countsText(s.Countries)),
			Keys: []string{key}})
	}
	return lines
}

// entityText describes a seed node from its allowlisted properties.
func entityText(s *Seed) string {
	var b strings.Builder
	b.WriteString(refText(Ref{Label: s.Label, ID: s.ID, Name: propString(s.Props, "name")}))
	var facts []string
	if s.Label == graphmodel.LabelProduct {
		if sku := propString(s.Props, "sku"); sku != "" {
			facts = append(facts, "sku "+sku)
		}
		if cents, ok := s.Props["price_cents"].(int64); ok {
			facts = append(facts, fmt.Sprintf("price %s %s", money(cents), propString(s.Props, "currency")))
		}
		if status := propString(s.Props, "status"); status != "" {
			facts = append(facts, "status "+status)
		}
		if len(facts) > 0 {
			b.WriteString(": " + strings.Join(facts, ", ") + ".")
		}
		if d := propString(s.Props, "description"); d != "" {
			b.WriteString(" " + d)
		}
		return b.String()
	}
	keys := make([]string, 0, len(s.Props))
	for k := range s.Props {
		if k != "name" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		facts = append(facts, fmt.Sprintf("%s %v", k, s.Props[k]))
	}
	if len(facts) > 0 {
		b.WriteString(": " + strings.Join(facts, ", ") + ".")
	}
	return b.String()
}

// quoteEscaper escapes what would end a quoted name early, or look as if
// it did.
var quoteEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

func refText(r Ref) string {
	if r.Name == "" {
		return fmt.Sprintf("%s %d", r.Label, r.ID)
	}
	// Masked before it is quoted: %q would write a no-break space between a
	// number's groups as the six characters \u00a0, and the number would
	// no longer look like one to the line's own masking.
	return fmt.Sprintf(`%s %d "%s"`, r.Label, r.ID, quoteEscaper.Replace(lineText(r.Name)))
}

func propString(props map[string]any, key string) string {
	s, _ := props[key].(string)
	return s
}

func money(cents int64) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	return fmt.Sprintf("%s%d.%02d", sign, cents/100, cents%100)
}

func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func countsText(c []Count) string {
	parts := make([]string, len(c))
	for i, x := range c {
		parts[i] = fmt.Sprintf("%s %d", x.Value, x.N)
	}
	return strings.Join(parts, ", ")
}

// lineText is how text of the graph, or a question, stands in a context:
// personal data masked (the graph holds none: graphmodel's allowlist keeps
// personal columns out and the projection masks free text; should an e-mail
// address or a phone number reach a product text anyway, through a code
// such as a SKU or another writer, the context masks it rather than hand it
// to a model), and on one
// line: control characters, bidi controls and line or paragraph separators
// become spaces and runs of spaces one, so that a product's text cannot open
// a section or a line of its own: the keys that end each line are the
// context's, whatever brackets the text holds before them. Spaces are
// flattened before the mask, which then sees a pasted no-break space as one.
func lineText(text string) string {
	text = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.In(r, unicode.Bidi_Control, unicode.Zl, unicode.Zp) {
			return ' '
		}
		return r
	}, text)
	return graphmodel.MaskPersonalData(strings.Join(strings.Fields(text), " "))
}
