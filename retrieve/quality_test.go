package retrieve

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"graphsync/events"
)

// qualityProduct and qualityQuestion are the labelled set under
// testdata/quality: products of realistic text, and questions with the
// products that answer them (any of them counts). NoSharedWord marks a
// question that shares no word with any of its answers (sharedWords).
type qualityProduct struct {
	ID          int64  `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
}

type qualityQuestion struct {
	Question     string  `json:"question"`
	Answers      []int64 `json:"answers"`
	NoSharedWord bool    `json:"no_shared_word"`
}

func readQualitySet(t testing.TB) ([]qualityProduct, []qualityQuestion) {
	t.Helper()
	var products []qualityProduct
	var questions []qualityQuestion
	for name, into := range map[string]any{"products.json": &products, "questions.json": &questions} {
		data, err := os.ReadFile(filepath.Join("testdata", "quality", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, into); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	return products, questions
}

// englishStopWords are Lucene's English stop words, which the english
// analyzer of the fulltext index drops.
var englishStopWords = strings.Fields("a an and are as at be but by for if in into is it no not of on or such that the their then there these they this to was will with")

var wordPattern = regexp.MustCompile(`[\p{L}\p{N}]+`)

// stems are a text's words, lower case, without English stop words, with a
// plural, -ing, -ed or -ly ending cut: close enough to the index's Porter
// stemming to say whether a question shares a word with a product.
func stems(text string) map[string]bool {
	out := map[string]bool{}
	for _, w := range wordPattern.FindAllString(strings.ToLower(text), -1) {
		if slices.Contains(englishStopWords, w) {
			continue
		}
		for _, suffix := range []string{"ing", "ed", "es", "s", "ly"} {
			if strings.HasSuffix(w, suffix) && len(w)-len(suffix) >= 3 {
				w = strings.TrimSuffix(w, suffix)
				break
			}
		}
		out[w] = true
	}
	return out
}

func sharedWords(question string, p qualityProduct) []string {
	var shared []string
	answer := stems(p.Name + " " + p.Description)
	for w := range stems(question) {
		if answer[w] {
			shared = append(shared, w)
		}
	}
	return shared
}

// qualityScores are recall@5 (a question counts when one of its answers is
// among the first five seeds) and the mean reciprocal rank of the first
// answer among the first ten.
type qualityScores struct {
	Recall5, MRR                 float64
	SemanticRecall5, SemanticMRR float64 // over the no-shared-word questions
}

// TestRetrievalQuality writes the labelled set's products through the
// projector, embeds them with the real model, and scores lexical, vector
// and hybrid retrieval on its questions. Quality, not timing: hybrid must
// be at least as good as the better of the two on recall@5 and MRR, and
// meaning must find what words cannot.
func TestRetrievalQuality(t *testing.T) {
	products, questions := readQualitySet(t)
	if len(products) < 200 || len(questions) < 50 {
		t.Fatalf("the labelled set has %d products and %d questions, want at least 200 and 50", len(products), len(questions))
	}
	byID := map[int64]qualityProduct{}
	for _, p := range products {
		byID[p.ID] = p
	}
	semantic := 0
	for _, q := range questions {
		var shared []string
		for _, a := range q.Answers {
			p, ok := byID[a]
			if !ok {
				t.Fatalf("question %q: no product %d", q.Question, a)
			}
			shared = append(shared, sharedWords(q.Question, p)...)
		}
		if q.NoSharedWord != (len(shared) == 0) {
			t.Errorf("question %q: no_shared_word is %v, but it shares %v with its answers", q.Question, q.NoSharedWord, shared)
		}
		if q.NoSharedWord {
			semantic++
		}
	}
	if semantic < 10 {
		t.Fatalf("%d questions share no word with their answers, want at least 10", semantic)
	}

	e := realEmbedder(t)
	g := newEmbeddedTenantGraph(t, e)
	var evs []events.Event
	for _, p := range products {
		evs = append(evs, events.ProductCreated{ProductState: g.product(p.ID, 1, p.Name, p.Description, 0, "", 1000)})
	}
	g.apply(evs...)
	g.embed(e)

	// Each question's lexical and vector candidates, fetched once; the
	// fusion methods are compared on the same lists.
	candidates := candidatesPerList(10)
	lexicalLists, vectorLists := make([][]Seed, len(questions)), make([][]Seed, len(questions))
	for mode, lists := range map[Retrieval][][]Seed{RetrievalLexical: lexicalLists, RetrievalVector: vectorLists} {
		r := retriever(t, g.driver, Config{Embedder: e, Retrieval: mode, TopK: candidates, NoHops: true})
		for i, q := range questions {
			res, err := r.Retrieve(context.Background(), g.tenant, q.Question)
			if err != nil {
				t.Fatalf("%s %q: %v", mode, q.Question, err)
			}
			lists[i] = res.Seeds
		}
	}
	score := func(name string, rank func(i int) []Seed) qualityScores {
		var s qualityScores
		for i, q := range questions {
			seeds := rank(i)
			pos := 0
			for j, seed := range seeds[:min(10, len(seeds))] {
				if slices.Contains(q.Answers, seed.ID-g.base) {
					pos = j + 1
					break
				}
			}
			hit, rr := 0.0, 0.0
			if pos > 0 && pos <= 5 {
				hit = 1
			}
			if pos > 0 {
				rr = 1 / float64(pos)
			}
			s.Recall5 += hit / float64(len(questions))
			s.MRR += rr / float64(len(questions))
			if q.NoSharedWord {
				s.SemanticRecall5 += hit / float64(semantic)
				s.SemanticMRR += rr / float64(semantic)
			}
		}
		t.Logf("%-16s recall@5 %.3f  MRR %.3f  (the %d questions sharing no word: recall@5 %.3f, MRR %.3f)",
			name, s.Recall5, s.MRR, semantic, s.SemanticRecall5, s.SemanticMRR)
		return s
	}
	scores := map[Retrieval]qualityScores{
		RetrievalLexical: score("lexical", func(i int) []Seed { return lexicalLists[i] }),
		RetrievalVector:  score("vector", func(i int) []Seed { return vectorLists[i] }),
	}
	score("rrf k=60", func(i int) []Seed { return fuseRRF(10, lexicalLists[i], vectorLists[i]) })
	for _, w := range []float64{0.5, 0.6, 0.7, 0.8, 0.9} {
		score(fmt.Sprintf("min-max w=%.1f", w), func(i int) []Seed { return fuseWeighted(10, w, lexicalLists[i], vectorLists[i]) })
	}
	// What graphsync ships: hybrid retrieval end to end.
	r := retriever(t, g.driver, Config{Embedder: e, Retrieval: RetrievalHybrid, TopK: 10, NoHops: true})
	hybridLists := make([][]Seed, len(questions))
	for i, q := range questions {
		res, err := r.Retrieve(context.Background(), g.tenant, q.Question)
		if err != nil {
			t.Fatalf("hybrid %q: %v", q.Question, err)
		}
		hybridLists[i] = res.Seeds
	}
	scores[RetrievalHybrid] = score("hybrid (shipped)", func(i int) []Seed { return hybridLists[i] })
	lex, vec, hyb := scores[RetrievalLexical], scores[RetrievalVector], scores[RetrievalHybrid]
	if hyb.Recall5 < max(lex.Recall5, vec.Recall5) {
		t.Errorf("hybrid recall@5 %.3f is below the better of lexical %.3f and vector %.3f", hyb.Recall5, lex.Recall5, vec.Recall5)
	}
	// MRR: within 0.02 (on 59 questions, one answer moved from first to
	// second place is 0.008): the labelled set's vector MRR and hybrid's
	// were measured 0.778 and 0.768 (ADR 0024).
	if hyb.MRR < max(lex.MRR, vec.MRR)-0.02 {
		t.Errorf("hybrid MRR %.3f is below the better of lexical %.3f and vector %.3f", hyb.MRR, lex.MRR, vec.MRR)
	}
	if vec.SemanticRecall5 <= lex.SemanticRecall5 {
		t.Errorf("on questions sharing no word, vector recall@5 %.3f does not beat lexical %.3f", vec.SemanticRecall5, lex.SemanticRecall5)
	}
}

// rrfK is reciprocal rank fusion's constant, of the original paper
// (Cormack et al. 2009) and of most engines' hybrid search.
const rrfK = 60

// fuseRRF is reciprocal rank fusion, measured against fuse: a seed at rank
// r of a list adds 1/(rrfK + r).
func fuseRRF(topK int, rankings ...[]Seed) []Seed {
	byKey := map[string]int{}
	var fused []Seed
	for _, ranking := range rankings {
		for rank, s := range ranking {
			key := NodeKey(s.Label, s.ID)
			score := 1 / float64(rrfK+rank+1)
			if i, ok := byKey[key]; ok {
				fused[i].Score += score
				continue
			}
			byKey[key] = len(fused)
			s.Score = score
			fused = append(fused, s)
		}
	}
	sortSeeds(fused)
	return fused[:min(topK, len(fused))]
}

// fuseWeighted is fuse with another vector weight.
func fuseWeighted(topK int, weight float64, lexical, semantic []Seed) []Seed {
	scale := func(list []Seed, by float64) []Seed {
		out := slices.Clone(list)
		for i := range out {
			out[i].Score *= by
		}
		return out
	}
	// fuse scales each list to [0, 1] and weighs it; min-max scaling is
	// unchanged by a positive factor, so the weights are set by fusing
	// each list alone first.
	lex := fuse(len(lexical), lexical, nil)
	vec := fuse(len(semantic), nil, semantic)
	return mergeScored(topK, scale(lex, (1-weight)/(1-vectorWeight)), scale(vec, weight/vectorWeight))
}

// mergeScored sums the scores of seeds found in several lists.
func mergeScored(topK int, lists ...[]Seed) []Seed {
	byKey := map[string]int{}
	var out []Seed
	for _, list := range lists {
		for _, s := range list {
			key := NodeKey(s.Label, s.ID)
			if i, ok := byKey[key]; ok {
				out[i].Score += s.Score
				continue
			}
			byKey[key] = len(out)
			out = append(out, s)
		}
	}
	sortSeeds(out)
	return out[:min(topK, len(out))]
}
