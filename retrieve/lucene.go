package retrieve

import (
	"errors"
	"strings"
	"unicode"
)

// MaxQuestionTerms bounds the index terms a question makes: a question is a
// handful of words, and Lucene refuses a query of more than 1024 clauses.
// Later words are ignored. The index's tokenizer makes each Han ideograph
// and each Hiragana character a term of its own (Unicode word breaks), so a
// word of Chinese counts one term per character.
const MaxQuestionTerms = 64

// maxTermRunes bounds one word; longer runs of letters are no word a product
// text holds and would only make the query large.
const maxTermRunes = 64

// ErrNoSearchTerms is returned for a question Askable refuses: one with no
// letter or digit for lexical retrieval, one with no letter, digit or
// symbol such as an emoji for vector and hybrid retrieval (punctuation,
// white space or personal data alone).
var ErrNoSearchTerms = errors.New("the question has nothing to search for: no letters or digits (vector and hybrid retrieval also take symbols such as emoji)")

// luceneSpecial are the characters Lucene's classic query parser gives a
// meaning; a term holding one is escaped with a backslash.
const luceneSpecial = `+-&|!(){}[]^"~*?:\/`

// QuestionTerms splits a question into its distinct lower-case words: runs of
// Unicode letters, combining marks and digits (a Devanagari vowel sign or a
// decomposed accent belongs to its word). Everything else (quotes,
// operators, wildcards, Cypher fragments) only separates words, so any input
// is a search and never Lucene or Cypher syntax.
func QuestionTerms(question string) []string {
	var terms []string
	seen := map[string]bool{}
	budget := MaxQuestionTerms
	for _, word := range strings.FieldsFunc(question, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsMark(r) && !unicode.IsDigit(r)
	}) {
		if strings.IndexFunc(word, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) < 0 {
			continue // marks alone (an emoji's variation selector) are no word
		}
		word = strings.ToLower(word)
		if runes := []rune(word); len(runes) > maxTermRunes {
			word = string(runes[:maxTermRunes])
		}
		word, used := withinTerms(word, budget)
		if seen[word] {
			continue
		}
		seen[word] = true
		terms = append(terms, word)
		if budget -= used; budget == 0 {
			break
		}
	}
	return terms
}

// withinTerms cuts word to the index terms it makes that fit in budget (at
// least one) and says how many it makes: one per Han or Hiragana character,
// and one per run of other letters and digits, which the tokenizer (Unicode
// word breaks) also ends where Katakana meets another script, and where a
// Southeast Asian script (Thai, Lao, Khmer, Myanmar) meets another one
// ("bアbア" is four terms). A combining mark stays in its letter's run.
func withinTerms(word string, budget int) (string, int) {
	used := 0
	run := runNone
	for i, r := range word {
		class := run
		if !unicode.IsMark(r) || run == runNone {
			class = runClassOf(r)
		}
		if class == runApart || class != run {
			if used == budget {
				return word[:i], used
			}
			used++
		}
		run = class
	}
	return word, used
}

// runClass is which run of the tokenizer a character belongs to.
type runClass int

const (
	runNone  runClass = iota
	runApart          // a term of its own: Han, Hiragana
	runKatakana
	runSoutheastAsian
	runOther // letters and digits of any other script
)

func runClassOf(r rune) runClass {
	switch {
	case unicode.In(r, unicode.Han, unicode.Hiragana):
		return runApart
	case unicode.Is(unicode.Katakana, r) || strings.ContainsRune("\u30fc\uff70\u3031\u3032\u3033\u3034\u3035\u309b\u309c\u30a0", r):
		// With the marks Unicode's word breaks count as Katakana: the
		// prolonged sound mark (ー, ｰ), the kana repeat marks, the voicing
		// marks.
		return runKatakana
	case unicode.In(r, unicode.Thai, unicode.Lao, unicode.Khmer, unicode.Myanmar):
		return runSoutheastAsian
	}
	return runOther
}

// LuceneQuery turns a question into a fulltext query: its words, each
// escaped, any of which may match (Lucene's default OR). Lower-casing turns
// AND, OR and NOT into plain words.
func LuceneQuery(question string) (string, error) {
	terms := QuestionTerms(question)
	if len(terms) == 0 {
		return "", ErrNoSearchTerms
	}
	for i, term := range terms {
		terms[i] = escapeLucene(term)
	}
	return strings.Join(terms, " "), nil
}

// escapeLucene backslash-escapes Lucene's special characters. QuestionTerms
// leaves none in a word; escaping anyway keeps the query safe if the word
// rule ever widens.
func escapeLucene(term string) string {
	var b strings.Builder
	for _, r := range term {
		if strings.ContainsRune(luceneSpecial, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
