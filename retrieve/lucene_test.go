package retrieve

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// A word keeps its combining marks: a Devanagari vowel sign or a
// decomposed accent does not cut it in two.
func TestQuestionTermsKeepCombiningMarks(t *testing.T) {
	for question, want := range map[string][]string{
		"केतली":              {"केतली"},
		"Cafe\u0301 crème":   {"cafe\u0301", "crème"},
		"kettle, (speaker)!": {"kettle", "speaker"},
		"கெட்டில் kettle":    {"கெட்டில்", "kettle"},
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
	var latin strings.Builder
	for i := range 200 {
		fmt.Fprintf(&latin, "kettle%d ", i)
	}
	for name, question := range map[string]string{
		"han":      han.String(),
		"latin":    latin.String(),
		"mixed":    strings.Repeat("型号123 ", 5) + han.String(),
		"hiragana": strings.Repeat("やかんとポット ", 40),
	} {
		terms := QuestionTerms(question)
		total := 0
		for _, term := range terms {
			_, n := withinTerms(term, MaxQuestionTerms)
			total += n
		}
		if total == 0 || total > MaxQuestionTerms {
			t.Errorf("%s: %d terms making %d index terms, want 1 to %d", name, len(terms), total, MaxQuestionTerms)
		}
	}
	if _, n := withinTerms("型号123", MaxQuestionTerms); n != 3 {
		t.Errorf("型号123 makes %d index terms, want 3 (型, 号, 123)", n)
	}
}
