package graphmodel

import (
	"regexp"
	"strings"
)

// Personal data the graph must not hold. The allowlist keeps personal
// columns (customers' e-mail, name, phone) out of it; these patterns catch
// what a producer typed into free text anyway (a product description with a
// contact address, say): drift reports it, the retrieval context masks it.
var (
	// Letters and digits of any script: an address may be internationalised.
	emailLike = regexp.MustCompile(`[\p{L}\p{N}._%+\-]+@[\p{L}\p{N}\-]+(\.[\p{L}\p{N}\-]+)*\.\p{L}{2,}`)
	// International (+...), a bracketed area code (three digits, or a
	// trunk 0: "(2024)" is a year), or 3-3/4-4 groups. Bare digit runs
	// stay: in a catalogue they are more often part numbers. Groups may be
	// apart by any space (a pasted no-break space too), a dot or a dash.
	phoneLike = regexp.MustCompile(strings.ReplaceAll(
		`\+\d{1,3}SEP?\(?\d{1,4}\)?(SEP?\d{2,4}){2,4}|\((0\d{1,4}|\d{3})\)SEP?\d{3,4}SEP?\d{3,4}\b|\b\d{3}SEP\d{3,4}SEP\d{4}\b`,
		"SEP", `[\s\v\p{Z}.\-]`))
)

// PersonalData names the personal data text holds ("an e-mail address", "a
// phone number"), or returns "" for none.
func PersonalData(text string) string {
	switch {
	case emailLike.MatchString(text):
		return "an e-mail address"
	case phoneLike.MatchString(text):
		return "a phone number"
	}
	return ""
}

// MaskPersonalData replaces every e-mail address and phone number in text.
func MaskPersonalData(text string) string {
	text = emailLike.ReplaceAllString(text, "[e-mail removed]")
	return phoneLike.ReplaceAllString(text, "[phone number removed]")
}
