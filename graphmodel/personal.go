package graphmodel

import (
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Personal data the graph must not hold. The allowlist keeps personal
// columns (customers' e-mail, name, phone) out of it; these patterns catch
// what a producer typed into free text anyway (a product description with a
// contact address, say): every projection masks it in free text before it
// is written (Model.WithoutPersonalData), drift reports it where another
// writer left it (in free text, or in a property outside the allowlist),
// and the retrieval context masks it again.
var (
	// Letters and digits of any script: an address may be internationalised.
	emailLike = regexp.MustCompile(`[\p{L}\p{N}._%+\-]+@[\p{L}\p{N}\-]+(\.[\p{L}\p{N}\-]+)*\.\p{L}{2,}`)
	// International (+...), a bracketed area code (three digits, or a
	// trunk 0: "(2024)" is a year), or 3-3/4-4 groups. Bare digit runs
	// stay: in a catalogue they are more often part numbers. Groups may be
	// apart by any space (a pasted no-break space too), a dot or a dash.
	phoneLike = regexp.MustCompile(strings.ReplaceAll(
		`\+\d{1,3}SEP?\(?\d{1,4}\)?(SEP?\d{2,4}){2,4}|\((0\d{1,4}|\d{3})\)SEP?\d{3,4}SEP?\d{3,4}\b|\b\d{3}SEP\d{3,4}SEP\d{4}\b`,
		"SEP", phoneSep))
	// National numbers (a trunk 0, or the 00 of an international call, and
	// groups apart by one kind of separator all through, as Europe writes
	// them) come in two sets of shapes, each with 9 to 13 digits in all:
	//   - strong, masked wherever they stand: an area code and a subscriber
	//     number of five digits or more ("030 1234567", "0171 1234567",
	//     "06-12345678", "07700 900123"), and 00, a country and a number
	//     ("0049 30 1234567");
	//   - weak, masked only when no further group of digits stands right
	//     before or after them: five pairs ("01 23 45 67 89",
	//     "06.12.34.56.78") and three groups ("0800 123 4567", "020 7946
	//     0958"). A longer list of the same shape ("DN 050 065 080 100") is
	//     sizes or codes, not a number.
	// A date (01.02.2024, or with a time or a range after it) has mixed
	// separators or too few digits, and stays.
	nationalStrong = nationalPattern(`0[1-9]\d{0,4}SEP\d{5,8}`, `00[1-9]\d{0,2}SEP\d{1,4}SEP\d{4,8}`)
	nationalWeak   = nationalPattern(`0[1-9](SEP\d{2}){4}`, `0[1-9]\d{1,3}SEP\d{3,4}SEP\d{3,4}`)
)

// phoneSep is what may stand between the groups of phoneLike: any space (a
// pasted no-break space too), a dot or a dash.
const phoneSep = `[\s\v\p{Z}.\-]`

// nationalSeps are the separators of a national number, one kind per match.
var nationalSeps = []string{`[\s\v\p{Z}]`, `\.`, `-`}

// nationalPattern is one regexp of the shapes, each written once per kind
// of separator (SEP), between word boundaries.
func nationalPattern(shapes ...string) *regexp.Regexp {
	var alts []string
	for _, shape := range shapes {
		for _, sep := range nationalSeps {
			alts = append(alts, `\b`+strings.ReplaceAll(shape, "SEP", sep)+`\b`)
		}
	}
	return regexp.MustCompile(strings.Join(alts, "|"))
}

// phoneMask stands where a phone number was.
const phoneMask = "[phone number removed]"

// nationalNumbers returns the [start, end) spans of the national numbers in
// text, in order.
func nationalNumbers(text string) [][]int {
	var spans [][]int
	for _, m := range nationalStrong.FindAllStringIndex(text, -1) {
		if n := digitCount(text[m[0]:m[1]]); n >= 9 && n <= 13 {
			spans = append(spans, m)
		}
	}
	for _, m := range nationalWeak.FindAllStringIndex(text, -1) {
		n := digitCount(text[m[0]:m[1]])
		if n >= 9 && n <= 13 && !groupBefore(text[:m[0]]) && !groupAfter(text[m[1]:]) && !overlaps(spans, m) {
			spans = append(spans, m)
		}
	}
	slices.SortFunc(spans, func(a, b []int) int { return a[0] - b[0] })
	return spans
}

func digitCount(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			n++
		}
	}
	return n
}

// groupBefore reports whether text ends in a digit and a separator;
// groupAfter whether it starts with a separator and a digit.
func groupBefore(text string) bool {
	r, size := utf8.DecodeLastRuneInString(text)
	if size == 0 || !isNationalSep(r) {
		return false
	}
	r, _ = utf8.DecodeLastRuneInString(text[:len(text)-size])
	return r >= '0' && r <= '9'
}

func groupAfter(text string) bool {
	r, size := utf8.DecodeRuneInString(text)
	if size == 0 || !isNationalSep(r) {
		return false
	}
	r, _ = utf8.DecodeRuneInString(text[size:])
	return r >= '0' && r <= '9'
}

func isNationalSep(r rune) bool {
	return r == '.' || r == '-' || unicode.IsSpace(r) || unicode.In(r, unicode.Z)
}

// overlaps reports whether span m shares a byte with one of spans.
func overlaps(spans [][]int, m []int) bool {
	for _, s := range spans {
		if m[0] < s[1] && s[0] < m[1] {
			return true
		}
	}
	return false
}

// PersonalData names the personal data text holds ("an e-mail address", "a
// phone number"), or returns "" for none.
func PersonalData(text string) string {
	switch {
	case emailLike.MatchString(text):
		return "an e-mail address"
	case phoneLike.MatchString(text), len(nationalNumbers(text)) > 0:
		return "a phone number"
	}
	return ""
}

// MaskPersonalData replaces every e-mail address and phone number in text.
// One pass can leave a number behind (digits right after a masked one form
// a number of their own once the mask stands before them), so it passes
// again until nothing matches; each pass takes digits or an @ away and adds
// none, so it ends.
func MaskPersonalData(text string) string {
	for {
		masked := phoneLike.ReplaceAllString(emailLike.ReplaceAllString(text, "[e-mail removed]"), phoneMask)
		if spans := nationalNumbers(masked); len(spans) > 0 {
			var sb strings.Builder
			last := 0
			for _, m := range spans {
				sb.WriteString(masked[last:m[0]])
				sb.WriteString(phoneMask)
				last = m[1]
			}
			sb.WriteString(masked[last:])
			masked = sb.String()
		}
		if masked == text {
			return text
		}
		text = masked
	}
}

// WithoutPersonalData is ms with every e-mail address and phone number in
// the properties m marks FreeText, of nodes and of relationships, masked
// (MaskPersonalData). Every projection (sync's events, and the row
// projection that rebuild and drift use) passes its mutations through it,
// so the graph holds none in free text and both sides of a drift check
// mask alike. ms is not changed: a property map that needs masking is
// copied.
func (m *Model) WithoutPersonalData(ms Mutations) Mutations {
	out := ms
	out.Nodes = make([]NodeUpsert, len(ms.Nodes))
	for i, n := range ms.Nodes {
		out.Nodes[i] = m.NodeWithoutPersonalData(n)
	}
	out.Rels = make([]RelUpsert, len(ms.Rels))
	for i, r := range ms.Rels {
		if rt, ok := m.Relationship(r.Type); ok {
			r.Props = maskedProps(r.Props, rt.Properties)
		}
		out.Rels[i] = r
	}
	return out
}

// NodeWithoutPersonalData is u with personal data in the properties m marks
// FreeText masked (WithoutPersonalData).
func (m *Model) NodeWithoutPersonalData(u NodeUpsert) NodeUpsert {
	if l, ok := m.Label(u.Label); ok {
		u.Props = maskedProps(u.Props, l.Properties)
	}
	return u
}

// maskedProps is props, or a copy of it with the values of its FreeText
// properties (of allowlist) masked when one of them holds personal data.
func maskedProps(props map[string]any, allowlist []Property) map[string]any {
	var out map[string]any
	for _, p := range allowlist {
		if !p.FreeText {
			continue
		}
		k := p.Key
		text, ok := props[k].(string)
		if !ok || !mayHoldPersonalData(text) {
			continue
		}
		masked := MaskPersonalData(text)
		if masked == text {
			continue
		}
		if out == nil {
			out = make(map[string]any, len(props))
			for k2, v2 := range props {
				out[k2] = v2
			}
		}
		out[k] = masked
	}
	if out == nil {
		return props
	}
	return out
}

// mayHoldPersonalData is a cheap test that lets most text skip the patterns:
// an address needs an @, and the shortest phone number the patterns match
// has six digits (\d is ASCII in Go's regexp).
func mayHoldPersonalData(text string) bool {
	if strings.IndexByte(text, '@') >= 0 {
		return true
	}
	digits := 0
	for i := 0; i < len(text); i++ {
		if text[i] >= '0' && text[i] <= '9' {
			digits++
			if digits >= minPhoneDigits {
				return true
			}
		}
	}
	return false
}

// minPhoneDigits is the fewest digits phoneLike matches: "+1 2 34 56".
const minPhoneDigits = 6
