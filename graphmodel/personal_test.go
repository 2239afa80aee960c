package graphmodel

import (
	"strings"
	"testing"
)

func TestPersonalData(t *testing.T) {
	for text, want := range map[string]string{
		"write to ada.planted@example.org for a quote":    "an e-mail address",
		"call +44 20 7946 0958 after six":                 "a phone number",
		"or +1 (555) 123-4567":                            "a phone number",
		"US office 555-123-4567":                          "a phone number",
		"ring (555) 123-4567 today":                       "a phone number",
		"Berlin (030) 1234 5678":                          "a phone number",
		"pasted +44\u00a020\u00a07946\u00a00958":          "a phone number",
		"tabbed 555\v123\v4567 or 555\u2009123\u20094567": "a phone number",
		"schreib an jörg@exämple.de":                      "an e-mail address",
		"part no. 5551234567, 2 pack":                     "",
		"model (2024) 1500-2000 rpm":                      "",
		"A mug, 350 ml, SKU-1":                            "",
		"placed 2026-05-01T12:00:00Z, total 19.99 EUR":    "",
		"order 1000042 of customer 500017":                "",
	} {
		if got := PersonalData(text); got != want {
			t.Errorf("PersonalData(%q) = %q, want %q", text, got, want)
		}
		masked := MaskPersonalData(text)
		if want == "" && masked != text {
			t.Errorf("MaskPersonalData changed %q to %q", text, masked)
		}
		if want != "" && (PersonalData(masked) != "" || !strings.Contains(masked, "removed]")) {
			t.Errorf("MaskPersonalData(%q) = %q: personal data left", text, masked)
		}
	}
}
