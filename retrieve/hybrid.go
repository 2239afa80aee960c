package retrieve

import (
	"context"
	"fmt"
	"strings"

	"graphsync/graphmodel"
)

// Retrieval is how seeds are found.
type Retrieval string

// Retrieval modes.
const (
	// RetrievalLexical: the fulltext indexes alone (words in common).
	RetrievalLexical Retrieval = "lexical"
	// RetrievalVector: the question's vector against the products'
	// embeddings alone (meaning).
	RetrievalVector Retrieval = "vector"
	// RetrievalHybrid: both rankings, their scores normalised per question and
	// combined (fuse: 0.8 vector, 0.2 fulltext).
	RetrievalHybrid Retrieval = "hybrid"
)

// ParseRetrieval accepts lexical, vector and hybrid.
func ParseRetrieval(s string) (Retrieval, error) {
	switch r := Retrieval(strings.ToLower(s)); r {
	case RetrievalLexical, RetrievalVector, RetrievalHybrid:
		return r, nil
	}
	return "", fmt.Errorf("unknown retrieval %q: want lexical, vector or hybrid", s)
}

// vectorWeight is the share of the vector ranking in the fused score; the
// fulltext ranking has the rest. Measured on the labelled set
// (TestRetrievalQuality, ADR 0024): 0.5 to 0.9 in steps of 0.1, and
// reciprocal rank fusion; 0.8 had the best recall@5 and nearly the best MRR.
const vectorWeight = 0.8

// candidatesPerList is how many seeds each list contributes to the fusion
// for a top-k of topK: more than k, so that a seed ranked k+1 by both lists
// can still beat one ranked first by one list only.
func candidatesPerList(topK int) int { return min(MaxTopK, 2*topK) }

// fuse merges a fulltext and a vector ranking by a convex combination of
// their min-max normalised scores, and keeps the best topK: each list's
// scores are scaled to [0, 1] over the question's candidates (BM25 has no
// fixed scale, and cosine scores of one model crowd into a narrow band), then
// weighted vectorWeight and 1 - vectorWeight and summed; a seed missing from
// a list adds 0 for it. Unlike reciprocal rank fusion it keeps the gaps
// between scores: a vector seed far ahead of the next one stays ahead of a
// weak fulltext match (Bruch et al., "An Analysis of Fusion Functions for
// Hybrid Retrieval", 2023). A seed both lists found keeps the properties of
// its fulltext finding and names both indexes.
func fuse(topK int, lexical, semantic []Seed) []Seed {
	byKey := map[string]int{}
	var fused []Seed
	add := func(list []Seed, weight float64) {
		if len(list) == 0 {
			return
		}
		lo, hi := list[0].Score, list[0].Score
		for _, s := range list {
			lo, hi = min(lo, s.Score), max(hi, s.Score)
		}
		for _, s := range list {
			score := weight
			if hi > lo {
				score = weight * (s.Score - lo) / (hi - lo)
			}
			key := NodeKey(s.Label, s.ID)
			if i, ok := byKey[key]; ok {
				fused[i].Score += score
				fused[i].Index += "+" + s.Index
				continue
			}
			byKey[key] = len(fused)
			s.Score = score
			fused = append(fused, s)
		}
	}
	add(lexical, 1-vectorWeight)
	add(semantic, vectorWeight)
	sortSeeds(fused)
	if len(fused) > topK {
		fused = fused[:topK]
	}
	return fused
}

// maxEmbeddedQuestionRunes bounds the question text given to the embedder:
// the model reads at most a few hundred tokens anyway, and a megabyte of
// question must not cost a megabyte of tokenising.
const maxEmbeddedQuestionRunes = 4096

// embeddableQuestion is the question as the embedder receives it: valid
// UTF-8, personal data masked (the graph's texts were embedded masked, and
// an embedding server must not receive an e-mail address), cut to
// maxEmbeddedQuestionRunes.
func embeddableQuestion(question string) string {
	q := strings.ToValidUTF8(question, " ")
	if runes := []rune(q); len(runes) > maxEmbeddedQuestionRunes {
		q = string(runes[:maxEmbeddedQuestionRunes])
	}
	return graphmodel.MaskPersonalData(strings.Join(strings.Fields(q), " "))
}

// questionVector embeds the question.
func (r *Retriever) questionVector(ctx context.Context, question string) ([]float32, error) {
	vectors, err := r.cfg.Embedder.Embed(ctx, []string{embeddableQuestion(question)})
	if err != nil {
		return nil, fmt.Errorf("embed the question: %w", err)
	}
	if len(vectors) != 1 || len(vectors[0]) != r.cfg.Embedder.Dimension() {
		return nil, fmt.Errorf("embed the question: the embedder returned %d vectors, want 1 of %d floats", len(vectors), r.cfg.Embedder.Dimension())
	}
	return vectors[0], nil
}
