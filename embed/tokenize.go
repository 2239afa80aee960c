package embed

import (
	"fmt"
	"os"
	"strings"
	"unicode"

	"github.com/sugarme/tokenizer"
	"github.com/sugarme/tokenizer/pretrained"
	"golang.org/x/text/unicode/norm"
)

// wordPiece wraps the tokenizer.json of a BERT-family model (read by
// github.com/sugarme/tokenizer) with the two steps that library's
// BertNormalizer leaves out, so that its ids equal those of Hugging Face's
// tokenizers on the same file:
//   - accents: the model's normaliser (strip_accents null, lowercase true)
//     decomposes the text (NFD) and drops the combining marks; sugarme reads
//     the null as false and turns "café" into [UNK].
//   - whitespace: Hugging Face counts every space separator (Zs: no-break
//     space, ideographic space) as whitespace; sugarme only ' ', \t, \n, \r.
//
// It truncates at maxTokens ids, [CLS] and [SEP] included.
type wordPiece struct {
	tk        *tokenizer.Tokenizer
	maxTokens int
	clsID     int64
	sepID     int64
}

func newWordPiece(path string, maxTokens int) (wp *wordPiece, err error) {
	if _, err := os.Stat(path); err != nil {
		return nil, missingFileError(path, err)
	}
	// The library asserts on the JSON's shape and panics on a file that is
	// valid JSON of another shape; a corrupt file is an error, not a crash.
	defer func() {
		if r := recover(); r != nil {
			wp, err = nil, corruptFileError(path, fmt.Errorf("%v", r))
		}
	}()
	tk, err := pretrained.FromFile(path)
	if err != nil {
		return nil, corruptFileError(path, err)
	}
	// Padding is per batch (to its longest text), not to tokenizer.json's
	// fixed 128; truncation is ours.
	tk.WithPadding(nil)
	tk.WithTruncation(nil)
	cls, okCLS := tk.TokenToId("[CLS]")
	sep, okSEP := tk.TokenToId("[SEP]")
	if !okCLS || !okSEP {
		return nil, corruptFileError(path, fmt.Errorf("no [CLS] or [SEP] token"))
	}
	return &wordPiece{tk: tk, maxTokens: maxTokens, clsID: int64(cls), sepID: int64(sep)}, nil
}

// normalizeText does what the model's BertNormalizer does and sugarme's
// does not (see wordPiece).
func normalizeText(text string) string {
	decomposed := norm.NFD.String(text)
	var b strings.Builder
	b.Grow(len(decomposed))
	for _, r := range decomposed {
		switch {
		case unicode.Is(unicode.Mn, r):
			continue
		case unicode.Is(unicode.Zs, r):
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// encode returns the ids of one text: [CLS], at most maxTokens-2 word
// pieces, [SEP]. Text past the limit is dropped (docs/embeddings.md).
func (w *wordPiece) encode(text string) (ids []int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			ids, err = nil, fmt.Errorf("tokenize text of %d bytes: %v", len(text), r)
		}
	}()
	limit := w.maxTokens - 2
	normalized := normalizeText(text)
	// Tokenizing a 100 kB text whole to keep its first 254 pieces costs
	// milliseconds; a prefix cut at whitespace tokenizes to exactly the
	// first pieces of the whole (words are split on whitespace and
	// punctuation, each alone), so a prefix is grown until it yields enough
	// pieces or is the whole text.
	for prefixBytes := 8 * w.maxTokens; ; prefixBytes *= 4 {
		prefix, whole := cutAtSpace(normalized, prefixBytes)
		enc, err := w.tk.EncodeSingle(prefix, false)
		if err != nil {
			return nil, fmt.Errorf("tokenize text of %d bytes: %w", len(text), err)
		}
		if whole || len(enc.Ids) >= limit {
			pieces := enc.Ids
			if len(pieces) > limit {
				pieces = pieces[:limit]
			}
			ids = make([]int64, 0, len(pieces)+2)
			ids = append(ids, w.clsID)
			for _, id := range pieces {
				ids = append(ids, int64(id))
			}
			return append(ids, w.sepID), nil
		}
	}
}

// cutAtSpace returns text cut at the last space at or before maxBytes, and
// whether that is the whole text. A text with no space there is not cut.
func cutAtSpace(text string, maxBytes int) (string, bool) {
	if len(text) <= maxBytes {
		return text, true
	}
	cut := strings.LastIndexAny(text[:maxBytes], " \t\n\r")
	if cut <= 0 {
		return text, true
	}
	return text[:cut], false
}
