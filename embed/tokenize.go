package embed

import (
	"fmt"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sugarme/tokenizer"
	"github.com/sugarme/tokenizer/normalizer"
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
//   - cleaning: Hugging Face drops every "other" character and counts every
//     white space as a space; sugarme drops fewer and keeps no-break and
//     ideographic spaces (normalizeText).
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

// maxWordRunes is tokenizer.json's max_input_chars_per_word: WordPiece
// turns a longer word into one [UNK], whatever its length.
const maxWordRunes = 100

// normalizeText does what the model's BertNormalizer does and sugarme's
// does not, the rest (lowercase, spaces around CJK ideographs) being left
// to sugarme:
//   - NFD, then combining marks (Mn) dropped (strip_accents);
//   - NUL, U+FFFD and the "other" characters Cc, Cf, Co, Cs but \t \n \r
//     dropped, every other white space turned into ' ' (clean_text);
//     sugarme drops only Cc and Cf and keeps Zs, Zl, Zp as they are.
//     Hugging Face's tables differ from Go's on unassigned code points and
//     private use outside the BMP (it keeps U+0378 and U+10FFFD): a text
//     with those may get other word pieces, still a vector.
//
// It also cuts every word longer than maxWordRunes to maxWordRunes+1
// runes: the word is [UNK] either way, and the tokenizer's cost no longer
// grows with it (a 100 kB text of one word took 1.3 s).
func normalizeText(text string) string {
	decomposed := norm.NFD.String(text)
	var b strings.Builder
	b.Grow(len(decomposed))
	wordRunes := 0
	for _, r := range decomposed {
		switch {
		case r == '\t' || r == '\n' || r == '\r' || (unicode.IsSpace(r) && !unicode.Is(unicode.Cc, r)):
			b.WriteByte(' ')
			wordRunes = 0
		case r == 0 || r == utf8.RuneError || unicode.In(r, unicode.Mn, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs):
			continue
		case isWordBoundary(r):
			b.WriteRune(r)
			wordRunes = 0
		default:
			wordRunes++
			if wordRunes <= maxWordRunes+1 {
				b.WriteRune(r)
			}
		}
	}
	return b.String()
}

// isWordBoundary: a character the pre-tokenizer makes a word of its own
// (punctuation, a CJK ideograph); white space is handled apart.
func isWordBoundary(r rune) bool {
	return isBertPunctuation(r) || normalizer.IsChinese(r)
}

// isBertPunctuation is BERT's punctuation: every ASCII non-letter,
// non-digit printable character, and Unicode's P categories.
func isBertPunctuation(r rune) bool {
	if (r >= 33 && r <= 47) || (r >= 58 && r <= 64) || (r >= 91 && r <= 96) || (r >= 123 && r <= 126) {
		return true
	}
	return unicode.In(r, unicode.P)
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
	// seconds; a prefix cut between two words tokenizes to exactly the
	// first pieces of the whole, so a prefix is grown until it yields
	// enough pieces or is the whole text.
	for prefixBytes := 8 * w.maxTokens; ; prefixBytes *= 4 {
		prefix, whole := cutBetweenWords(normalized, prefixBytes)
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

// cutBetweenWords returns text cut before the last white space,
// punctuation or CJK ideograph that starts at or before maxBytes, and
// whether that is the whole text. normalizeText keeps words short, so a
// normalised text of more than 4*(maxWordRunes+1) bytes always has one.
func cutBetweenWords(text string, maxBytes int) (string, bool) {
	if len(text) <= maxBytes {
		return text, true
	}
	for end := maxBytes; end > 0; {
		r, size := utf8.DecodeLastRuneInString(text[:end])
		start := end - size
		if r == ' ' || isWordBoundary(r) {
			if start == 0 {
				break
			}
			return text[:start], false
		}
		end = start
	}
	return text, true
}
