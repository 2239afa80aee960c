package retrieve

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Format is an output format of a Result.
type Format string

// Formats.
const (
	FormatMarkdown Format = "markdown"
	FormatJSON     Format = "json"
)

// ParseFormat accepts "markdown" (or "md") and "json".
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "markdown", "md":
		return FormatMarkdown, nil
	case "json":
		return FormatJSON, nil
	}
	return "", fmt.Errorf("unknown format %q: want markdown or json", s)
}

// Write renders res in format f.
func (res *Result) Write(w io.Writer, f Format) error {
	if f == FormatJSON {
		return res.WriteJSON(w)
	}
	return res.WriteMarkdown(w)
}

var sectionTitles = []string{SectionEntities: "Entities", SectionRelationships: "Relationships", SectionFacts: "Facts"}

// WriteMarkdown renders the context as Markdown sections (entities,
// relationships, facts), each line ending with the keys of the nodes it came
// from, for a person or an LLM to read.
func (res *Result) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Graph context\n\n")
	fmt.Fprintf(&b, "Question: %q  \n", res.Question)
	fmt.Fprintf(&b, "Tenant %d · %d of %s shown · top-k %d · hops %d · index %s · %d of %d characters",
		res.TenantID, len(res.Items), plural(int64(len(res.Seeds)), "matching node"), res.TopK, res.Hops, strings.Join(res.Indexes, ", "), res.Chars, res.MaxChars)
	if res.Truncated {
		b.WriteString(" (trimmed to the budget)")
	}
	b.WriteString("\n")
	if len(res.Items) == 0 {
		fmt.Fprintf(&b, "\nNothing in tenant %d's graph matches the question.\n", res.TenantID)
		_, err := io.WriteString(w, b.String())
		return err
	}
	for section, title := range sectionTitles {
		var lines []string
		seen := map[string]bool{}
		for _, it := range res.Items {
			for _, l := range it.Lines {
				if int(l.Section) != section {
					continue
				}
				line := fmt.Sprintf("- %s [%s]", l.Text, strings.Join(l.Keys, ", "))
				if section == int(SectionEntities) && l.Keys[0] == NodeKey(it.Seed.Label, it.Seed.ID) {
					line = fmt.Sprintf("%d. %s (score %.3f) [%s]", it.Rank, l.Text, it.Seed.Score, strings.Join(l.Keys, ", "))
				}
				if !seen[line] {
					seen[line] = true
					lines = append(lines, line)
				}
			}
		}
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n\n%s\n", title, strings.Join(lines, "\n"))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// The JSON shape follows neo4j-graphrag's RetrieverResult: items with
// content and metadata, and metadata for the whole retrieval.
type jsonResult struct {
	Items    []jsonItem   `json:"items"`
	Metadata jsonMetadata `json:"metadata"`
}

type jsonItem struct {
	Content  string           `json:"content"`
	Metadata jsonItemMetadata `json:"metadata"`
}

type jsonItemMetadata struct {
	Score    float64  `json:"score"`
	Rank     int      `json:"rank"`
	Labels   []string `json:"labels"`
	TenantID int64    `json:"tenant_id"`
	ID       int64    `json:"id"`
	Index    string   `json:"index"`
	NodeKeys []string `json:"node_keys"`
}

type jsonMetadata struct {
	Retriever   string   `json:"retriever"`
	Question    string   `json:"question"`
	TenantID    int64    `json:"tenant_id"`
	Indexes     []string `json:"indexes"`
	LuceneQuery string   `json:"query_text"`
	TopK        int      `json:"top_k"`
	Hops        int      `json:"hops"`
	MaxChars    int      `json:"max_chars"`
	Chars       int      `json:"chars"`
	Truncated   bool     `json:"truncated"`
}

// WriteJSON renders the context as JSON shaped like neo4j-graphrag's
// RetrieverResult.
func (res *Result) WriteJSON(w io.Writer) error {
	out := jsonResult{Items: []jsonItem{}, Metadata: jsonMetadata{
		Retriever: "graphsync.retrieve", Question: res.Question, TenantID: res.TenantID, Indexes: res.Indexes,
		LuceneQuery: res.LuceneQuery, TopK: res.TopK, Hops: res.Hops, MaxChars: res.MaxChars, Chars: res.Chars,
		Truncated: res.Truncated}}
	if out.Metadata.Indexes == nil {
		out.Metadata.Indexes = []string{}
	}
	for _, it := range res.Items {
		out.Items = append(out.Items, jsonItem{Content: it.Content(), Metadata: jsonItemMetadata{
			Score: it.Seed.Score, Rank: it.Rank, Labels: []string{it.Seed.Label}, TenantID: res.TenantID,
			ID: it.Seed.ID, Index: it.Seed.Index, NodeKeys: it.Keys()}})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}
