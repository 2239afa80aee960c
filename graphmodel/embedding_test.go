package graphmodel

import (
	"strings"
	"testing"
)

// The contract the embedding stage and hybrid retrieval share: Product's
// name then description, joined with "\n", empty ones skipped, of the
// masked text.
func TestEmbeddedTextOfDefault(t *testing.T) {
	tests := []struct {
		name  string
		label string
		props map[string]any
		want  string
	}{
		{"both", LabelProduct, map[string]any{"name": "Kettle", "description": "Boils water", "price_cents": int64(999)}, "Kettle\nBoils water"},
		{"name only", LabelProduct, map[string]any{"name": "Kettle", "description": nil}, "Kettle"},
		{"empty name", LabelProduct, map[string]any{"name": "", "description": "Boils"}, "Boils"},
		{"nothing", LabelProduct, map[string]any{}, ""},
		{"not embedded", LabelCategory, map[string]any{"name": "Kitchen"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EmbeddedText(tt.label, tt.props); got != tt.want {
				t.Fatalf("EmbeddedText = %q, want %q", got, tt.want)
			}
		})
	}
}

// The embedded text is what the graph holds: masked, never the raw value.
func TestEmbeddedTextIsTheMaskedText(t *testing.T) {
	u := Default.NodeWithoutPersonalData(NodeUpsert{Label: LabelProduct, TenantID: 1, ID: 1,
		Props: map[string]any{"name": "Kettle", "description": "Call +44 20 7946 0958 or mail jane.doe@example.com"}})
	text := EmbeddedText(LabelProduct, u.Props)
	if strings.Contains(text, "7946") || strings.Contains(text, "jane.doe") {
		t.Fatalf("embedded text holds personal data: %q", text)
	}
}

func TestEmbeddingHash(t *testing.T) {
	// printf 'm\0t' | sha256sum
	if got, want := EmbeddingHash("m", "t"), "8481c8582a73b3ba64d6506da480d877324f34bae0fb970c71b5d24bc57c06c7"; got != want {
		t.Fatalf("EmbeddingHash = %s, want %s", got, want)
	}
	if EmbeddingHash("a", "bc") == EmbeddingHash("ab", "c") {
		t.Fatal("the model id and the text are not separated")
	}
	if EmbeddingHash("m", "t") != EmbeddingHash("m", "t") || EmbeddingHash("m", "t") == EmbeddingHash("n", "t") {
		t.Fatal("hash does not follow the model id")
	}
}

// The declaration names only allowlisted string properties of its label,
// and its own property names collide with nothing.
func TestValidateRejectsBadEmbedding(t *testing.T) {
	tests := map[string]func(*Embedding){
		"outside allowlist":   func(e *Embedding) { e.Properties = []string{"name", "supplier_email"} },
		"non string":          func(e *Embedding) { e.Properties = []string{"price_cents"} },
		"unknown label":       func(e *Embedding) { e.Label = "Nope" },
		"personal label":      func(e *Embedding) { e.Label = LabelCustomer; e.Properties = []string{"segment"} },
		"no properties":       func(e *Embedding) { e.Properties = nil },
		"vector allowlisted":  func(e *Embedding) { e.VectorProperty = "sku" },
		"hash reserved":       func(e *Embedding) { e.HashProperty = PropVersion },
		"names repeat":        func(e *Embedding) { e.ModelProperty = e.HashProperty },
		"index not plain":     func(e *Embedding) { e.Index = "product embedding" },
		"index is a fulltext": func(e *Embedding) { e.Index = FulltextProductText },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			m := Default
			e := DefaultEmbedding
			e.Properties = append([]string(nil), e.Properties...)
			mutate(&e)
			m.Embedding = &e
			if err := m.Validate(); err == nil {
				t.Fatal("Validate accepted the embedding")
			}
		})
	}
}
