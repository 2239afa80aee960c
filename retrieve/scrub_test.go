package retrieve

import (
	"strings"
	"testing"

	"graphsync/graphmodel"
)

// A producer's free text that carries a contact reaches no model: the
// entity's text masks e-mail addresses and phone numbers, in the name and
// in the description, and keeps the rest.
func TestEntityTextMasksPersonalData(t *testing.T) {
	s := &Seed{Label: graphmodel.LabelProduct, ID: 7, Props: map[string]any{
		"name":        "Mug (ask sales@example.org)",
		"sku":         "SKU-1",
		"price_cents": int64(1999),
		"currency":    "EUR",
		"description": "Call +44 20 7946 0958 or 555-123-4567 for bulk orders.",
	}}
	text := entityText(s)
	for _, personal := range []string{"sales@example.org", "+44 20 7946 0958", "555-123-4567", "@"} {
		if strings.Contains(text, personal) {
			t.Errorf("the context holds %q:\n%s", personal, text)
		}
	}
	for _, kept := range []string{"SKU-1", "19.99 EUR", "for bulk orders", "[phone number removed]", "[e-mail removed]"} {
		if !strings.Contains(text, kept) {
			t.Errorf("the context lost %q:\n%s", kept, text)
		}
	}
}
