package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is where README.md lives; go test runs in docs/.
const repoRoot = ".."

var (
	// inlineLink matches [text](target) and ![alt](target); the target
	// ends at the first space (a title may follow) or closing parenthesis.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// referenceLink matches a definition line: [label]: target
	referenceLink = regexp.MustCompile(`(?m)^\s{0,3}\[[^\]]+\]:\s+(\S+)`)
	inlineCode    = regexp.MustCompile("`+[^`]*`+")
	heading       = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// TestRelativeLinksResolve reads every Markdown file of the repository
// (README.md, docs/**, scripts/README.md, ...) and fails for each relative
// link whose file does not exist, and for each #anchor into a Markdown file
// that names no heading of it (GitHub's heading ids).
func TestRelativeLinksResolve(t *testing.T) {
	files, err := markdownFiles(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found %d Markdown files under %s; expected README.md and the docs pages", len(files), repoRoot)
	}
	for _, file := range files {
		for _, problem := range brokenLinks(file) {
			t.Errorf("%s", problem)
		}
	}
}

// TestBrokenLinkIsFound proves the check can fail: a link to a missing
// file, one to a missing heading and one whose text wraps onto the next
// line are found, with their line numbers; links in code are not read.
func TestBrokenLinkIsFound(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "page.md")
	other := filepath.Join(dir, "other.md")
	writeFile(t, other, "# Other page\n\n## Wake modes\n")
	writeFile(t, page, "# Page\n\nSee [missing](missing.md), [there](other.md#wake-modes), "+
		"[nowhere](other.md#no-such-heading), [here](#page) and [web](https://example.com/x.md).\n\n"+
		"```\n[in a fence](not-checked.md)\n```\n\nAnd `[in code](not-checked.md)`, and a [link that\nwraps](wrapped-missing.md).\n")
	problems := brokenLinks(page)
	want := []string{`:3: link "missing.md"`, `:3: link "other.md#no-such-heading"`, `:10: link "wrapped-missing.md"`}
	if len(problems) != len(want) {
		t.Fatalf("want %d problems, got %d: %q", len(want), len(problems), problems)
	}
	for i, w := range want {
		if !strings.Contains(problems[i], w) {
			t.Errorf("problem %d: want %s in %q", i, w, problems[i])
		}
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// markdownFiles lists *.md under root, leaving out hidden folders (.git,
// .local) and build output.
func markdownFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "target" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	return files, err
}

// brokenLinks returns one line per link of file that does not resolve.
func brokenLinks(file string) []string {
	text, err := os.ReadFile(file)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", file, err)}
	}
	// A link's text may wrap onto the next line, so the patterns run over
	// the whole prose, not line by line.
	prose := proseText(string(text))
	type found struct {
		offset  int
		problem string
	}
	var all []found
	for _, pattern := range []*regexp.Regexp{inlineLink, referenceLink} {
		for _, m := range pattern.FindAllStringSubmatchIndex(prose, -1) {
			target := prose[m[2]:m[3]]
			if problem := checkTarget(file, target); problem != "" {
				line := 1 + strings.Count(prose[:m[2]], "\n")
				all = append(all, found{m[2], fmt.Sprintf("%s:%d: link %q: %s", file, line, target, problem)})
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].offset < all[j].offset })
	problems := make([]string, len(all))
	for i, f := range all {
		problems[i] = f.problem
	}
	return problems
}

// proseText returns the file with fenced code blocks and inline code
// blanked (a link shown as code is not a link), keeping every line break so
// that offsets still give line numbers.
func proseText(text string) string {
	lines := strings.Split(text, "\n")
	inFence := false
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			inFence = !inFence
			lines[i] = ""
			continue
		}
		if inFence {
			lines[i] = ""
		}
	}
	return inlineCode.ReplaceAllStringFunc(strings.Join(lines, "\n"), func(code string) string {
		return strings.Repeat("\n", strings.Count(code, "\n"))
	})
}

// checkTarget says what is wrong with one link target of file, or "".
func checkTarget(file, target string) string {
	if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	path, anchor, _ := strings.Cut(target, "#")
	resolved := file
	if path != "" {
		if strings.HasPrefix(path, "/") {
			resolved = filepath.Join(repoRoot, filepath.FromSlash(path))
		} else {
			resolved = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
		}
		if _, err := os.Stat(resolved); err != nil {
			return "no such file " + resolved
		}
	}
	if anchor == "" || !strings.HasSuffix(resolved, ".md") {
		return ""
	}
	ids, err := headingIDs(resolved)
	if err != nil {
		return err.Error()
	}
	if !ids[anchor] {
		return "no heading with id #" + anchor + " in " + resolved
	}
	return ""
}

// headingIDs returns the ids GitHub gives the headings of a Markdown file:
// lower case, punctuation dropped, spaces as dashes, -1, -2 ... for repeats.
func headingIDs(file string) (map[string]bool, error) {
	text, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(string(text), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		id := slug(m[1])
		if n := seen[id]; n > 0 {
			ids[fmt.Sprintf("%s-%d", id, n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids, nil
}

func slug(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
