package retrieve

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// A word keeps its combining marks: a Devanagari vowel sign or a
// decomposed accent does not cut it in two.
func TestQuestionTermsKeepCombiningMarks(t *testing.T) {
	for question, want := range map[string][]string{
		"केतली":                      {"केतली"},
		"Cafe\u0301 crème":           {"cafe\u0301", "crème"},
		"kettle, (speaker)!":         {"kettle", "speaker"},
		"கெட்டில் kettle":            {"கெட்டில்", "kettle"},
		"kettle \u2615\ufe0f \u0301": {"kettle"}, // marks alone are no word
	} {
		if got := QuestionTerms(question); !slices.Equal(got, want) {
			t.Errorf("QuestionTerms(%q) = %q, want %q", question, got, want)
		}
	}
}

// However the question is written, the terms it makes in the index stay
// within MaxQuestionTerms: a Chinese paragraph counts one term per
// character, as the index's tokenizer splits it.
func TestQuestionTermsStayWithinTheBudget(t *testing.T) {
	var han strings.Builder
	for i := range 20 * 64 {
		han.WriteRune(rune(0x4E00 + i))
		if i%64 == 63 {
			han.WriteString("，")
		}
	}
	var latin, hiragana strings.Builder
	for i := range 200 {
		fmt.Fprintf(&latin, "kettle%d ", i)
		fmt.Fprintf(&hiragana, "やかん%d ", i)
	}
	for name, c := range map[string]struct {
		question    string
		words, made int // how many words, and how many index terms they make
	}{
		"han":      {han.String(), 1, 64},            // the first run alone fills the budget
		"latin":    {latin.String(), 64, 64},         // one term a word
		"mixed":    {"型号123 " + han.String(), 2, 64}, // 型, 号 and 123, then 61 ideographs
		"hiragana": {hiragana.String(), 16, 64},      // や, か, ん and the number: four a word
		"short":    {"型号 kettle 型号", 2, 3},           // a repeated word counts once
	} {
		words := QuestionTerms(c.question)
		// Ideographs and Hiragana make a term each, every other run one.
		apart := func(r rune) bool { return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) }
		made := 0
		for _, word := range words {
			for _, r := range word {
				if apart(r) {
					made++
				}
			}
			made += len(strings.FieldsFunc(word, apart))
		}
		if len(words) != c.words || made != c.made {
			t.Errorf("%s: %d words making %d index terms, want %d and %d: %q", name, len(words), made, c.words, c.made, words)
		}
	}
}

// One rule says which questions each mode can search for: words for all,
// symbols with a meaning (emoji) for vector and hybrid, and punctuation,
// white space or personal data alone for none.
func TestAskable(t *testing.T) {
	for _, c := range []struct {
		question              string
		lexical, vectorHybrid bool
	}{
		{"kettle", true, true},
		{"电水壶", true, true},
		{"☕ ⚡ 🔥 💧 ?", false, true},
		{"?!*", false, false},
		{`"*~ ?`, false, false},
		{" \t\n", false, false},
		{"", false, false},
		{"ada@example.org", false, false},
		{"ada@example.org ☕", false, true},
	} {
		for mode, want := range map[Retrieval]bool{RetrievalLexical: c.lexical, RetrievalVector: c.vectorHybrid, RetrievalHybrid: c.vectorHybrid} {
			if got := Askable(c.question, mode); got != want {
				t.Errorf("Askable(%q, %s) = %t, want %t", c.question, mode, got, want)
			}
		}
	}
}
