package graphmodel

import (
	"regexp"
	"strings"
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
	// A national number: the trunk 0 (or the 00 of an international call)
	// and groups apart by a space, a dot or a dash, as Europe writes them
	// ("01 23 45 67 89", "030 1234567", "06-12345678", "0800 123 4567",
	// "0049 30 1234567"). Only 9 to 13 digits in all count (nationalNumber):
	// a date such as 01.02.2024 has 8.
	nationalLike = regexp.MustCompile(strings.ReplaceAll(`\b0\d{1,4}(SEP\d{2,8}){1,4}\b`, "SEP", phoneSep))
)

// phoneMask stands where a phone number was.
const phoneMask = "[phone number removed]"

// phoneSep is what may stand between a phone number's groups: any space (a
// pasted no-break space too), a dot or a dash.
const phoneSep = `[\s\v\p{Z}.\-]`

// nationalNumber reports whether a match of nationalLike has the digits of
// a phone number.
func nationalNumber(match string) bool {
	digits := 0
	for i := 0; i < len(match); i++ {
		if match[i] >= '0' && match[i] <= '9' {
			digits++
		}
	}
	return digits >= 9 && digits <= 13
}

// hasNationalNumber reports whether text holds a national phone number.
func hasNationalNumber(text string) bool {
	for _, m := range nationalLike.FindAllString(text, -1) {
		if nationalNumber(m) {
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
	case phoneLike.MatchString(text), hasNationalNumber(text):
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
		masked = nationalLike.ReplaceAllStringFunc(masked, func(m string) string {
			if nationalNumber(m) {
				return phoneMask
			}
			return m
		})
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
