package graphmodel

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// Embedding declares, once, which text of which label is embedded and where
// its vector lives. The text is the node's own (masked) property values, as
// the graph holds them after WithoutPersonalData: a vector of personal data
// could be inverted back into it, so only what the graph may hold is ever
// embedded.
//
// A node of Label carries, beside its allowlisted properties:
//   - VectorProperty: the vector (a list of floats);
//   - HashProperty: EmbeddingHash of the model and the text the vector was
//     computed from;
//   - ModelProperty: the model's id;
//   - TextHashProperty: EmbeddingHash of the model and the text the node
//     holds now, written by the projector with the text itself;
//   - PendingProperty: when the node's text stopped matching its vector
//     (milliseconds since the epoch), absent while it matches; the
//     embedding stage's backlog (ADR 0023);
//   - RefusedProperty: the TextHashProperty the embedder refused to embed,
//     absent once a vector is written; the node stays pending, and drift
//     reports it (a pending node is otherwise backlog, not drift).
//
// These are sync properties: none may be allowlisted.
type Embedding struct {
	Label string
	// Properties are joined in this order with "\n", empty or absent ones
	// skipped (EmbeddedText).
	Properties       []string
	VectorProperty   string
	HashProperty     string
	ModelProperty    string
	TextHashProperty string
	PendingProperty  string
	RefusedProperty  string
	// Index is the vector index on (Label).VectorProperty, cosine, of the
	// embedder's dimension (created by graphsync migrate).
	Index string
}

// Names of the default model's embedding.
const (
	PropEmbedding         = "embedding"
	PropEmbeddingHash     = "embedding_hash"
	PropEmbeddingModel    = "embedding_model"
	PropEmbeddingTextHash = "embedding_text_hash"
	PropEmbeddingPending  = "embedding_pending_since"
	PropEmbeddingRefused  = "embedding_refused_hash"
	VectorProductEmbed    = "product_embedding"
)

// DefaultEmbedding is what graphsync embeds: a product's name and
// description, the text a shopper's question is about.
var DefaultEmbedding = Embedding{
	Label:            LabelProduct,
	Properties:       []string{"name", "description"},
	VectorProperty:   PropEmbedding,
	HashProperty:     PropEmbeddingHash,
	ModelProperty:    PropEmbeddingModel,
	TextHashProperty: PropEmbeddingTextHash,
	PendingProperty:  PropEmbeddingPending,
	RefusedProperty:  PropEmbeddingRefused,
	Index:            VectorProductEmbed,
}

// SyncProperties are the property keys the embedding adds to its label's
// nodes.
func (e Embedding) SyncProperties() []string {
	return []string{e.VectorProperty, e.HashProperty, e.ModelProperty, e.TextHashProperty, e.PendingProperty, e.RefusedProperty}
}

// Text is the embedded text of a node of e.Label with props: e.Properties'
// string values in order, joined with "\n", empty or absent ones skipped.
func (e Embedding) Text(props map[string]any) string {
	parts := make([]string, 0, len(e.Properties))
	for _, key := range e.Properties {
		if s, ok := props[key].(string); ok && s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "\n")
}

// EmbeddingOf returns the model's embedding of label, if it has one.
func (m *Model) EmbeddingOf(label string) (Embedding, bool) {
	if m.Embedding != nil && m.Embedding.Label == label {
		return *m.Embedding, true
	}
	return Embedding{}, false
}

// EmbeddedText is the text the default model embeds for a node of label
// with props (masked, as the graph holds them), and "" for a label it does
// not embed.
func EmbeddedText(label string, props map[string]any) string {
	e, ok := Default.EmbeddingOf(label)
	if !ok {
		return ""
	}
	return e.Text(props)
}

// EmbeddingHash is the hex SHA-256 of modelID, a NUL and text: what a
// node's HashProperty and TextHashProperty hold, and the key of the
// embedding cache.
func EmbeddingHash(modelID, text string) string {
	h := sha256.New()
	h.Write([]byte(modelID))
	h.Write([]byte{0})
	h.Write([]byte(text))
	return hex.EncodeToString(h.Sum(nil))
}

// validateEmbedding checks e against the model: a label the model has,
// allowlisted string properties of it, plain names that no allowlisted
// property uses.
func (m *Model) validateEmbedding(e Embedding) error {
	l, ok := m.Label(e.Label)
	if !ok || l.Role == RoleTenant || len(l.Personal) > 0 {
		return fmt.Errorf("embedding: label %q is unknown, a tenant label or has personal data", e.Label)
	}
	if len(e.Properties) == 0 {
		return fmt.Errorf("embedding of %s: no properties", e.Label)
	}
	for _, key := range e.Properties {
		if p, ok := l.Property(key); !ok || p.Type != String {
			return fmt.Errorf("embedding of %s: %s is not an allowlisted string property", e.Label, key)
		}
	}
	names := slices.Concat(e.SyncProperties(), []string{e.Index})
	for i, name := range names {
		if !identifier.MatchString(name) || slices.Contains(names[:i], name) {
			return fmt.Errorf("embedding of %s: name %q is not a plain identifier or repeats", e.Label, name)
		}
		if _, allowed := l.Property(name); allowed || slices.Contains(reservedKeys, name) {
			return fmt.Errorf("embedding of %s: %s is an allowlisted or reserved property", e.Label, name)
		}
	}
	for _, f := range m.Fulltext {
		if f.Name == e.Index {
			return fmt.Errorf("embedding of %s: index %s is also a fulltext index", e.Label, e.Index)
		}
	}
	return nil
}
