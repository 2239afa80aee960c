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
	// Letters (with their combining marks: a decomposed "é", a Devanagari
	// vowel sign) and digits of any script: an address may be
	// internationalised.
	emailLike = regexp.MustCompile(`[\p{L}\p{M}\p{N}._%+\-]+@[\p{L}\p{M}\p{N}\-]+(\.[\p{L}\p{M}\p{N}\-]+)*\.\p{L}[\p{L}\p{M}]+`)
	// International (+...), a bracketed area code (three digits, or a
	// trunk 0: "(2024)" is a year), or 3-3/4-4 groups. Bare digit runs
	// stay: in a catalogue they are more often part numbers. Groups may be
	// apart by any space (a pasted no-break space too), a dot or a dash.
	phoneLike = regexp.MustCompile(strings.ReplaceAll(
		`\+\d{1,3}SEP?\(?\d{1,4}\)?(SEP?\d{2,4}){2,4}|\((0\d{1,4}|\d{3})\)SEP?\d{3,4}SEP?\d{3,4}\b|\b\d{3}SEP\d{3,4}SEP\d{4}\b`,
		"SEP", phoneSep))
	// National numbers, with a trunk 0 or the 00 of an international call,
	// are nationalShapes.
)

// phoneSep is what may stand between the groups of phoneLike: any space (a
// pasted no-break space too), a dot or a dash.
const phoneSep = `[\s\v\p{Z}.\-]`

// nationalSeps are the separators of a national number, one kind per match.
var nationalSeps = []string{`[\s\v\p{Z}]`, `\.`, `-`}

// nationalShape is one way of writing a national number.
type nationalShape struct {
	re                   *regexp.Regexp
	minDigits, maxDigits int
	// trim: a match with more digits than maxDigits (a year or a postcode
	// after the number) loses trailing groups until it fits, and ends
	// before a group that starts another 00 number.
	trim bool
	// groups: a list shape of this many groups. When its groups are all of
	// one width and more groups of that width follow or precede it with the
	// same separator, it is masked only if the whole run splits into
	// numbers of the shape, each starting with a trunk 0 (two numbers side
	// by side); any other run is sizes or codes ("DN 050 065 080 100",
	// "sizes 04 06 08 10 12 14", the months 01 to 12).
	groups int
	// barcodeGuard: passed over when its two groups have six digits each
	// and a lone digit and a separator stand before it, as an EAN-13 is
	// printed ("5 012345 678900").
	barcodeGuard bool
	// yearGuard: passed over when its second group is a year (19xx, 20xx):
	// a month and a year, then a quantity ("MHD 06 2025 5000").
	yearGuard bool
	// inContext: masked only after a word that announces a phone number
	// (phoneContext): the shape is as often a size list or an article
	// number ("Maße 045 120 60 80", "Art.-Nr. 012 345 67 89").
	inContext bool
}

// phoneContext is a word that announces a phone number (a whole word: not
// "Mobiliar" or "Kontaktlinsen"), then up to 24 characters on the same line
// before the number: opening hours, "24/7", the number before it in a list.
var phoneContext = regexp.MustCompile(`(?i)(\b(tel|tél|telefon|telefonnummer|telephone|téléphone|phone|fon|fax|mobil|mobile|handy|handynummer|natel|hotline|ruf|rufnummer|call|appel|anruf|kontakt|contact|whatsapp)\b|☎|📞).{0,24}$`)

// nationalShapes, in the order they claim text:
//   - 00, a country code and a number ("0049 30 1234567", "0044 20 7946
//     0958", "0033 6 12 34 56 78"): 11 to 17 digits;
//   - an area code and a subscriber number of five digits or more ("030
//     1234567", "0171 1234567", "06-12345678", "07700 900123", and with a
//     slash, "030/1234567"), wherever it stands (beside a year, a postcode,
//     another number);
//   - five pairs ("01 23 45 67 89", "06.12.34.56.78") and three groups
//     ("0800 123 4567", "020 7946 0958"), unless part of a list; a
//     two-digit area code with 4-4 ("02 9876 5432") unless its first group
//     is a year; an area code with 3-2-2 ("044 123 45 67", "02 123 45 67")
//     only after a word such as "Tel" (phoneContext).
//
// A shape written with a slash is passed over inside a path or a link
// ("https://shop.example/p/0123/456789").
//
// A date (01.02.2024, or with a time or a range after it) mixes separators
// or has too few digits, and stays.
var nationalShapes = []nationalShape{
	{re: nationalPattern(`00[1-9]\d{0,2}(SEP\d{1,8}){2,5}`), minDigits: 11, maxDigits: 17, trim: true},
	{re: nationalPattern(`0[1-9]\d{0,4}SEP\d{5,8}`, `/`), minDigits: 9, maxDigits: 13, barcodeGuard: true},
	{re: nationalPattern(`0[1-9](SEP\d{2}){4}`), minDigits: 10, maxDigits: 10, groups: 5},
	{re: nationalPattern(`0[1-9]\d{1,3}SEP\d{3,4}SEP\d{3,4}`), minDigits: 9, maxDigits: 13, groups: 3},
	{re: nationalPattern(`0[1-9]SEP\d{4}SEP\d{4}`), minDigits: 10, maxDigits: 10, yearGuard: true},
	{re: nationalPattern(`0[1-9]\d{0,3}SEP\d{3}SEP\d{2}SEP\d{2}`), minDigits: 9, maxDigits: 11, inContext: true},
}

// nationalPattern is one regexp of a shape, written once per kind of
// separator (SEP, and the shape's own extra separators), between word
// boundaries.
func nationalPattern(shape string, extraSeps ...string) *regexp.Regexp {
	var alts []string
	for _, sep := range slices.Concat(nationalSeps, extraSeps) {
		alts = append(alts, `\b`+strings.ReplaceAll(shape, "SEP", sep)+`\b`)
	}
	return regexp.MustCompile(strings.Join(alts, "|"))
}

// phoneMask stands where a phone number was, emailMask where an e-mail
// address was.
const (
	phoneMask = "[phone number removed]"
	emailMask = "[e-mail removed]"
)

// group is a run of digits in a text: [start, end).
type group struct{ start, end int }

func (g group) width() int { return g.end - g.start }

// groupsOf splits the span [start, end) of text into its runs of digits.
func groupsOf(text string, start, end int) []group {
	var gs []group
	for i := start; i < end; {
		if !isDigit(text[i]) {
			i++
			continue
		}
		j := i
		for j < end && isDigit(text[j]) {
			j++
		}
		gs = append(gs, group{i, j})
		i = j
	}
	return gs
}

// nationalNumbers returns the [start, end) spans of the national numbers in
// text, in order.
func nationalNumbers(text string) [][]int {
	var spans [][]int
	for i := range nationalShapes {
		shape := &nationalShapes[i]
		for _, m := range shape.re.FindAllStringIndex(text, -1) {
			gs := groupsOf(text, m[0], m[1])
			if shape.trim {
				gs = trimGroups(text, gs, shape.maxDigits)
			}
			n := 0
			for _, g := range gs {
				n += g.width()
			}
			if n < shape.minDigits || n > shape.maxDigits {
				continue
			}
			span := []int{gs[0].start, gs[len(gs)-1].end}
			if shape.barcodeGuard && len(gs) == 2 && gs[0].width() == 6 && gs[1].width() == 6 && singleDigitBefore(text[:span[0]]) {
				continue
			}
			if shape.groups > 0 && inList(text, gs, shape.groups, sepKindOf(text[span[0]:span[1]])) {
				continue
			}
			// Read only for the shapes whose rule asks for it: masking runs
			// over every free text an event carries.
			announced := func() bool { return phoneContext.MatchString(text[max(0, span[0]-64):span[0]]) }
			if shape.yearGuard && len(gs) > 1 && gs[1].width() == 4 &&
				(strings.HasPrefix(text[gs[1].start:], "19") || strings.HasPrefix(text[gs[1].start:], "20")) && !announced() {
				continue
			}
			if shape.inContext && !announced() {
				continue
			}
			if strings.Contains(text[span[0]:span[1]], "/") && inLink(text, span) {
				continue
			}
			if !overlaps(spans, span) {
				spans = append(spans, span)
			}
		}
	}
	slices.SortFunc(spans, func(a, b []int) int { return a[0] - b[0] })
	return spans
}

// inLink reports whether span stands in a link or a path: the run of text
// without spaces around it holds "://", or starts with "/" or "www.", or a
// slash touches the span.
func inLink(text string, span []int) bool {
	from := strings.LastIndexFunc(text[:span[0]], unicode.IsSpace) + 1
	to := len(text)
	if k := strings.IndexFunc(text[span[1]:], unicode.IsSpace); k >= 0 {
		to = span[1] + k
	}
	token := text[from:to]
	return strings.Contains(token, "://") || strings.HasPrefix(token, "/") || strings.HasPrefix(strings.ToLower(token), "www.") ||
		span[0] > 0 && text[span[0]-1] == '/' || span[1] < len(text) && text[span[1]] == '/'
}

// trimGroups drops the groups from the first that starts another 00 number,
// then trailing groups while there are more than maxDigits digits.
func trimGroups(text string, gs []group, maxDigits int) []group {
	for i := 1; i < len(gs); i++ {
		if strings.HasPrefix(text[gs[i].start:gs[i].end], "00") {
			gs = gs[:i]
			break
		}
	}
	n := 0
	for _, g := range gs {
		n += g.width()
	}
	for len(gs) > 1 && n > maxDigits {
		n -= gs[len(gs)-1].width()
		gs = gs[:len(gs)-1]
	}
	return gs
}

// inList reports whether a match of a list shape (its groups gs, its
// separator kind) is part of a list: its groups all have one width, the run
// of whole groups of that width with that separator around it is longer
// than the match, and the run does not split into numbers of the shape.
func inList(text string, gs []group, groups, kind int) bool {
	w := gs[0].width()
	for _, g := range gs {
		if g.width() != w {
			return false
		}
	}
	run := slices.Clone(gs)
	for {
		g, ok := wholeGroupBefore(text, run[0].start, kind)
		if !ok || g.width() != w {
			break
		}
		run = append([]group{g}, run...)
	}
	for {
		g, ok := wholeGroupAfter(text, run[len(run)-1].end, kind)
		if !ok || g.width() != w {
			break
		}
		run = append(run, g)
	}
	if len(run) == len(gs) {
		return false
	}
	if len(run)%groups != 0 {
		return true
	}
	for i := 0; i < len(run); i += groups {
		if d := text[run[i].start:run[i].end]; d[0] != '0' || d[1] == '0' {
			return true
		}
	}
	return false
}

// wholeGroupAfter returns the run of digits after a separator of kind at
// text[at:], when it is a whole group: followed by the end, a separator or
// punctuation, not by a letter or a "/" or ":" ("24h", "24/7", "10:00").
func wholeGroupAfter(text string, at, kind int) (group, bool) {
	r, size := utf8.DecodeRuneInString(text[at:])
	if size == 0 || sepKind(r) != kind {
		return group{}, false
	}
	g := group{at + size, at + size}
	for g.end < len(text) && isDigit(text[g.end]) {
		g.end++
	}
	if g.width() == 0 {
		return group{}, false
	}
	next, _ := utf8.DecodeRuneInString(text[g.end:])
	if g.end < len(text) && (unicode.IsLetter(next) || next == '/' || next == ':') {
		return group{}, false
	}
	return g, true
}

// wholeGroupBefore is wholeGroupAfter's mirror: the run of digits before a
// separator of kind that ends at text[:at].
func wholeGroupBefore(text string, at, kind int) (group, bool) {
	r, size := utf8.DecodeLastRuneInString(text[:at])
	if size == 0 || sepKind(r) != kind {
		return group{}, false
	}
	g := group{at - size, at - size}
	for g.start > 0 && isDigit(text[g.start-1]) {
		g.start--
	}
	if g.width() == 0 {
		return group{}, false
	}
	prev, _ := utf8.DecodeLastRuneInString(text[:g.start])
	if g.start > 0 && (unicode.IsLetter(prev) || prev == '/' || prev == ':') {
		return group{}, false
	}
	return g, true
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

// sepKind sorts a separator: 1 a space, 2 a dot, 3 a dash, 0 none.
func sepKind(r rune) int {
	switch {
	case r == '.':
		return 2
	case r == '-':
		return 3
	case unicode.IsSpace(r) || unicode.In(r, unicode.Z):
		return 1
	}
	return 0
}

// sepKindOf is the kind of the first separator in a match.
func sepKindOf(match string) int {
	for _, r := range match {
		if k := sepKind(r); k != 0 {
			return k
		}
	}
	return 0
}

// singleDigitBefore reports whether text ends in a separator after a lone
// digit.
func singleDigitBefore(text string) bool {
	r, size := utf8.DecodeLastRuneInString(text)
	if size == 0 || sepKind(r) == 0 {
		return false
	}
	g, ok := wholeGroupBefore(text, len(text), sepKind(r))
	return ok && g.width() == 1
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
	if !mayHoldPersonalData(text) {
		return ""
	}
	return matchPersonalData(text)
}

// matchPersonalData is PersonalData by the patterns alone.
func matchPersonalData(text string) string {
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
	return replacePersonalData(text, emailMask, phoneMask)
}

// StripPersonalData is text with every e-mail address and phone number
// taken out, a space standing where each was: for text that is searched
// rather than read (a question's fulltext query), where a mask's own words
// would be searched for.
func StripPersonalData(text string) string {
	return replacePersonalData(text, " ", " ")
}

// replacePersonalData is MaskPersonalData with the given replacements.
func replacePersonalData(text, emailWith, phoneWith string) string {
	for {
		// National numbers before phoneLike, whose 3-3/4-4 groups could
		// otherwise take the end of one number and the start of the next.
		masked := emailLike.ReplaceAllLiteralString(text, emailWith)
		if spans := nationalNumbers(masked); len(spans) > 0 {
			var sb strings.Builder
			last := 0
			for _, m := range spans {
				sb.WriteString(masked[last:m[0]])
				sb.WriteString(phoneWith)
				last = m[1]
			}
			sb.WriteString(masked[last:])
			masked = sb.String()
		}
		masked = phoneLike.ReplaceAllLiteralString(masked, phoneWith)
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
// an address needs an @; every phone number the patterns match has six
// digits or more (\d is ASCII in Go's regexp) and, besides digits and
// letters, a +, a bracket, a slash or a separator (phoneSep) between its
// groups. A hex digest, a word, or a SKU with fewer than six digits skips
// the patterns.
func mayHoldPersonalData(text string) bool {
	if strings.IndexByte(text, '@') >= 0 {
		return true
	}
	digits, joined := 0, false
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '+', c == '(', c == '/', c == '.', c == '-', c == ' ', c >= '\t' && c <= '\r':
			joined = true
		case c >= utf8.RuneSelf && !joined:
			r, size := utf8.DecodeRuneInString(text[i:])
			joined = unicode.IsSpace(r) || unicode.Is(unicode.Z, r)
			i += size - 1
		}
		if digits >= minPhoneDigits && joined {
			return true
		}
	}
	return false
}

// minPhoneDigits is the fewest digits phoneLike matches: "+1 2 34 56".
const minPhoneDigits = 6
